/**
 * Tokenization off the event loop: one long prompt must not freeze every tenant's requests (DESIGN I11). Nor may one
 * request's output grammar, built here as its check too (checkGrammars). A text of
 * up to INLINE_CHARS is encoded inline (about a millisecond); a longer one goes to a worker thread holding its own
 * copy of the tokenizer, read from the same GGUF file, so the event loop keeps serving while it runs. So does a chat
 * prompt that is more than a few short messages: its chat template renders there too (thousands of one-character
 * messages held the event loop 25–50 ms a request).
 *
 * Three threads, by how long a call can take, since a thread runs one call at a time:
 * - short prompts: texts and chat prompts of up to QUICK_CHARS characters (a chat's as rendered: the thread renders
 *   it and sends it on to the next thread, untokenized, when it is longer), ~40 ms a call at most (a 65,536-letter
 *   word of CJK on Llama 3's vocabulary; a chat sent on costs its rendering, ~60 ms for 16.5 million characters);
 * - long prompts: the rest. A prompt of millions of characters is legal at a long context and can take the thread its
 *   whole time limit (16 million spaces at a 131,072 context: ~10 s of merging); on one thread for all, every
 *   tenant's next prompt waited behind it. This thread tokenizes up to LONG_ON_THREAD_MAX tenants' prompts at once in
 *   turns of a few milliseconds (tokenizer.ts encodeSteps, util/thread-calls.ts), so a long prompt does not wait for
 *   another tenant's either: beside 16 million spaces, a 70,000-character prompt took 65–84 ms (26–28 alone);
 * - grammar checks, bounded by LIMITS.grammarWorkMax (~0.1–0.27 s a call).
 * So a short prompt waits behind short work only. The second holds a second copy of the tokenizer (~110 MB for a 128k
 * vocabulary); the grammar thread holds none.
 *
 * Bounded (util/thread-calls.ts), each thread on its own: at most QUEUE_MAX calls wait for it (more: 503 at once),
 * each is answered within `timeoutMs` or rejected with 503; tenants take turns. Callers bound each text first
 * (served-model.ts: no text longer than the context can need), and pass the context as `max`, so a thread never
 * works on more than one context's worth of a prompt, nor merges a word sure to pass it (tokenizer.ts encodeUpTo).
 * Prompts are tokenized before a request meets its tenant's limits (how many pages it needs depends on its length), so
 * each thread bounds each tenant itself: at most PER_TENANT_MAX of one tenant's calls at a time (more: 429), and a
 * tenant sending long prompts in a loop cannot fill the queue and turn other tenants' prompts into 503s.
 */
import type { ChatCall } from '../gateway/prompt-length.js';
import { pieceTextSteps } from '../gateway/text-stream.js';
import { constraintGrammar, type GrammarCheck } from '../structured/grammar-cache.js';
import { assert } from '../util/assert.js';
import { finish } from '../util/steps.js';
import { textWithin } from '../util/text-within.js';
import { ThreadCalls, type ThreadCallWords } from '../util/thread-calls.js';
import type { EncodeOptions, Tokenizer } from './tokenizer.js';

/** a text this long or shorter is tokenized inline (about a millisecond) */
export const INLINE_CHARS = 2048;
/** a text or a rendered chat prompt of at most this many characters: ~40 ms at most; a longer one can take seconds */
export const QUICK_CHARS = 65_536;
/** ids this few are decoded inline (~1–3 ms); up to QUICK_IDS on the short prompts' thread (~40 ms) */
export const INLINE_IDS = 2048;
const QUICK_IDS = 16_384;
/** a grammar this cheap to build (steps of its construction) is checked inline (a millisecond or two) */
const INLINE_GRAMMAR_WORK = 50_000;
const QUEUE_MAX = 64;
/**
 * Long prompts of this many tenants are tokenized at once, taking turns of a few milliseconds (util/thread-calls.ts).
 * Each holds memory while it merges: the longest, 16 million spaces at a 131,072 context (one word), ~0.5 GB; three
 * of them raised the process's peak by 1.6 GB. A victim's long prompt waits for a place only while two other tenants'
 * are on the thread
 */
const LONG_ON_THREAD_MAX = 3;
const PER_TENANT_MAX = 4;

/**
 * One text for a tokenizer thread, or a chat prompt to render through the chat template and tokenize there; or ids to
 * decode into one text, or into each one's piece.
 */
export type EncodeCall =
  | { kind: 'text'; text: string; max: number; options: EncodeOptions }
  | ({
      kind: 'chat';
      /** the thread answers undefined, untokenized, when the prompt renders to more characters than this */
      renderedMax?: number;
    } & ChatCall)
  | { kind: 'decode'; ids: readonly number[] }
  | { kind: 'pieces'; ids: readonly number[] };

/** a text's or a chat's ids (undefined: past `max`, or rendered past `renderedMax`), a decoded text, or the pieces */
export type EncodeAnswer = number[] | undefined | string | string[];

function isIds(answer: EncodeAnswer): answer is number[] {
  return Array.isArray(answer) && (answer.length === 0 || typeof answer[0] === 'number');
}

export class EncoderThread {
  /** texts and chat prompts within QUICK_CHARS */
  private readonly quick: ThreadCalls<EncodeCall, EncodeAnswer>;
  /** longer prompts */
  private readonly long: ThreadCalls<EncodeCall, EncodeAnswer>;
  private readonly grammars: ThreadCalls<readonly GrammarCheck[], true>;

  constructor(
    private readonly tokenizer: Tokenizer,
    modelPath: string,
    timeoutMs: number,
  ) {
    const thread = <Request, Answer>(
      script: string,
      workerData: unknown,
      words: ThreadCallWords,
      shared?: { onThreadMax: number },
    ) =>
      new ThreadCalls<Request, Answer>(
        new URL(script, import.meta.url),
        workerData,
        words,
        timeoutMs,
        QUEUE_MAX,
        PER_TENANT_MAX,
        shared,
      );
    const tokenizerWords = (prompts: string): ThreadCallWords => ({
      thread: `the tokenizer thread for ${prompts} prompts`,
      busy: (n) => `${n} ${prompts} prompts are already waiting to be tokenized`,
      callerBusy: (n) =>
        `${n} of your ${prompts} prompts are already being tokenized; send the next when one is answered`,
      slow: (ms) => `tokenizing the prompt took longer than ${ms} ms`,
    });
    this.quick = thread('./encoder-thread-main.js', { modelPath }, tokenizerWords('short'));
    this.long = thread('./encoder-thread-main.js', { modelPath }, tokenizerWords('long'), {
      onThreadMax: LONG_ON_THREAD_MAX,
    });
    this.grammars = thread(
      '../structured/grammar-check-main.js',
      {},
      {
        thread: 'the grammar-check thread',
        busy: (n) => `${n} response formats are already waiting to be checked`,
        callerBusy: (n) =>
          `${n} of your response formats are already being checked; send the next when one is answered`,
        slow: (ms) => `checking the response format took longer than ${ms} ms`,
      },
    );
  }

  /** `tenant`'s text's ids, as `tokenizer.encodeUpTo` gives them; long texts are encoded on the thread. */
  async encodeUpTo(text: string, max: number, options: EncodeOptions, tenant: string): Promise<number[] | undefined> {
    if (text.length <= INLINE_CHARS) return this.tokenizer.encodeUpTo(text, max, options);
    const thread = text.length <= QUICK_CHARS ? this.quick : this.long;
    const ids = await thread.call({ kind: 'text', text, max, options }, tenant);
    assert(ids === undefined || isIds(ids), "a text's ids");
    return ids;
  }

  /**
   * `tenant`'s ids as one text (tokenizer.decode), on a thread past INLINE_IDS: 131,072 ids held the event loop
   * 130–200 ms (Llama 3's vocabulary).
   */
  async decode(ids: readonly number[], tenant: string): Promise<string> {
    if (ids.length <= INLINE_IDS) return this.tokenizer.decode(ids);
    const text = await this.idsThread(ids).call({ kind: 'decode', ids }, tenant);
    assert(typeof text === 'string', 'a decoded text');
    return text;
  }

  /**
   * Each of `tenant`'s ids as its piece's text (text-stream.ts tokenPiece), on a thread past INLINE_IDS: 131,072 ids
   * held the event loop 300–340 ms.
   */
  async pieceTexts(ids: readonly number[], tenant: string): Promise<string[]> {
    if (ids.length <= INLINE_IDS) return finish(pieceTextSteps(this.tokenizer, ids));
    const texts = await this.idsThread(ids).call({ kind: 'pieces', ids }, tenant);
    assert(Array.isArray(texts) && texts.every((text) => typeof text === 'string'), "the ids' pieces");
    return texts as string[];
  }

  /** the thread for a call on `ids`: the short prompts' within QUICK_IDS (~40 ms), else the long prompts' */
  private idsThread(ids: readonly number[]): ThreadCalls<EncodeCall, EncodeAnswer> {
    return ids.length <= QUICK_IDS ? this.quick : this.long;
  }

  /**
   * `tenant`'s chat prompt's ids (prompt-length.ts chatPromptTokens), rendered and tokenized on a thread. A request
   * within QUICK_CHARS goes to the short prompts' thread, which tokenizes it only if it also renders within them (a
   * chat template can print a small request at length); else it goes on to the long prompts' thread.
   */
  async encodeChat(call: ChatCall, tenant: string): Promise<number[]> {
    if (textWithin([call.messages, call.tools], QUICK_CHARS)) {
      const ids = await this.quick.call({ kind: 'chat', renderedMax: QUICK_CHARS, ...call }, tenant);
      if (ids !== undefined) {
        assert(isIds(ids), "a chat prompt's ids");
        return ids;
      }
    }
    const ids = await this.long.call({ kind: 'chat', ...call }, tenant);
    assert(ids !== undefined && isIds(ids), "a chat prompt's ids, or its 400");
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
    await this.grammars.call(checks, tenant);
  }

  async close(): Promise<void> {
    await Promise.all([this.quick.close(), this.long.close(), this.grammars.close()]);
  }
}
