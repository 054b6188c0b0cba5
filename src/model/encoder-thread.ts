/**
 * Tokenization off the event loop: one long prompt must not freeze every tenant's requests (DESIGN I11). Nor may one
 * request's output grammar, built here as its check too (checkGrammars). A text of
 * up to INLINE_CHARS is encoded inline (about a millisecond); a longer one goes to a worker thread holding its own
 * copy of the tokenizer, read from the same GGUF file, so the event loop keeps serving while it runs. So does a chat
 * prompt that is more than a few short messages: its chat template renders there too (thousands of one-character
 * messages held the event loop 25–50 ms a request).
 *
 * Bounded (util/thread-calls.ts): at most QUEUE_MAX texts wait for the thread (more: 503 at once), each is answered
 * within `timeoutMs` or rejected with 503; tenants take turns. Callers bound each text first (served-model.ts: no text
 * longer than the context can need), and pass the context as `max`, so the thread never works on more than one
 * context's worth of a prompt, nor merges a word sure to pass it (tokenizer.ts encodeUpTo).
 * Prompts are tokenized before a request meets its tenant's limits (how many pages it needs depends on its length), so
 * the thread bounds each tenant itself: at most PER_TENANT_MAX of one tenant's texts at a time (more: 429), and a
 * tenant sending long prompts in a loop cannot fill the queue and turn other tenants' prompts into 503s.
 */
import type { ChatCall } from '../gateway/prompt-length.js';
import { constraintGrammar, type GrammarCheck } from '../structured/grammar-cache.js';
import { assert } from '../util/assert.js';
import { ThreadCalls } from '../util/thread-calls.js';
import type { EncodeOptions, Tokenizer } from './tokenizer.js';

/** a text this long or shorter is tokenized inline (about a millisecond) */
export const INLINE_CHARS = 2048;
/** a grammar this cheap to build (steps of its construction) is checked inline (a millisecond or two) */
const INLINE_GRAMMAR_WORK = 50_000;
const QUEUE_MAX = 64;
const PER_TENANT_MAX = 4;

/**
 * One text for the thread, a chat prompt to render through the chat template and tokenize there, or a request's
 * output grammars to build as its check (checkGrammars: no ids come back).
 */
export type EncodeCall =
  | { kind: 'text'; text: string; max: number; options: EncodeOptions }
  | ({ kind: 'chat' } & ChatCall)
  | { kind: 'grammar'; checks: readonly GrammarCheck[] };

export class EncoderThread {
  private readonly calls: ThreadCalls<EncodeCall, number[] | undefined>;

  constructor(
    private readonly tokenizer: Tokenizer,
    modelPath: string,
    timeoutMs: number,
  ) {
    this.calls = new ThreadCalls(
      new URL('./encoder-thread-main.js', import.meta.url),
      { modelPath },
      {
        thread: 'the tokenizer thread',
        busy: (n) => `${n} long prompts are already being tokenized`,
        callerBusy: (n) => `${n} of your long prompts are already being tokenized; send the next when one is answered`,
        slow: (ms) => `tokenizing the prompt took longer than ${ms} ms`,
      },
      timeoutMs,
      QUEUE_MAX,
      PER_TENANT_MAX,
    );
  }

  /** `tenant`'s text's ids, as `tokenizer.encodeUpTo` gives them; long texts are encoded on the thread. */
  async encodeUpTo(text: string, max: number, options: EncodeOptions, tenant: string): Promise<number[] | undefined> {
    if (text.length <= INLINE_CHARS) return this.tokenizer.encodeUpTo(text, max, options);
    return this.calls.call({ kind: 'text', text, max, options }, tenant);
  }

  /** `tenant`'s chat prompt's ids (prompt-length.ts chatPromptTokens), rendered and tokenized on the thread. */
  async encodeChat(call: ChatCall, tenant: string): Promise<number[]> {
    const ids = await this.calls.call({ kind: 'chat', ...call }, tenant);
    assert(ids !== undefined, "a chat prompt's ids, or its 400");
    return ids;
  }

  /**
   * `tenant`'s request's output grammars built as its check (grammar-cache.ts checkGrammars). The first, which covers
   * the rest, is tried inline within INLINE_GRAMMAR_WORK steps (a real schema: about a millisecond); one that needs
   * more, or fails, goes to the thread, where it may take up to LIMITS.grammarWorkMax (~0.1–0.2 s) and the rest
   * name the field at fault: a large schema or many forced tools held every tenant's streams for seconds when all of
   * it ran on the event loop. Rejects with the check's 400, or the thread's 429 and 503 bounds.
   */
  async checkGrammars(checks: readonly GrammarCheck[], tenant: string): Promise<void> {
    const first = checks[0];
    if (first === undefined) return;
    try {
      constraintGrammar(first.constraint, first.param, INLINE_GRAMMAR_WORK);
      return;
    } catch {
      // the thread says why, with the whole budget, naming the field
    }
    await this.calls.call({ kind: 'grammar', checks }, tenant);
  }

  close(): Promise<void> {
    return this.calls.close();
  }
}
