/**
 * Response bodies in OpenAI's shapes: chat.completion / chat.completion.chunk and text_completion, with `usage`,
 * `finish_reason` and both logprobs formats (chat: content[] with top_logprobs; completions: the legacy parallel arrays).
 */
import type { FinishReason, GeneratedToken } from '../engine/request.js';
import type { Tokenizer } from '../model/tokenizer.js';
import { finish, type Steps } from '../util/steps.js';
import type { ChatDelta, ChatMessageOut } from './chat-output.js';
import { tokenPiece } from './text-stream.js';

/** The engine's ending, or tool_calls when the answer is tool calls. */
export type ChoiceFinish = FinishReason | 'tool_calls';

export interface Usage {
  prompt_tokens: number;
  completion_tokens: number;
  total_tokens: number;
}

export function usageOf(promptTokens: number, completionTokens: number): Usage {
  return {
    prompt_tokens: promptTokens,
    completion_tokens: completionTokens,
    total_tokens: promptTokens + completionTokens,
  };
}

export interface ChatTokenLogprob {
  token: string;
  logprob: number;
  bytes: number[];
  top_logprobs: { token: string; logprob: number; bytes: number[] }[];
}

export function chatLogprob(tokenizer: Tokenizer, token: GeneratedToken): ChatTokenLogprob {
  const piece = tokenPiece(tokenizer, token.id);
  return {
    token: piece.text,
    logprob: token.logprob,
    bytes: piece.bytes,
    top_logprobs: token.top.map((t) => {
      const p = tokenPiece(tokenizer, t.id);
      return { token: p.text, logprob: t.logprob, bytes: p.bytes };
    }),
  };
}

export interface CompletionLogprobs {
  tokens: string[];
  token_logprobs: number[];
  top_logprobs: Record<string, number>[] | null;
  text_offset: number[];
}

/** The legacy completions logprobs arrays of `tokens`. */
export function completionLogprobs(
  tokenizer: Tokenizer,
  tokens: readonly GeneratedToken[],
  /** where each token's text starts in the returned text */
  offsets: readonly number[],
  withTop: boolean,
): CompletionLogprobs {
  return finish(completionLogprobsSteps(tokenizer, tokens, offsets, withTop));
}

/**
 * Tokens of logprobs written between pauses in a whole answer's (completion-run.ts): each has up to 21 pieces
 * (~2 µs each)
 */
export const LOGPROB_TOKENS_STEP = 32;

/** completionLogprobs with a pause after every LOGPROB_TOKENS_STEP tokens, for a whole answer's */
export function* completionLogprobsSteps(
  tokenizer: Tokenizer,
  tokens: readonly GeneratedToken[],
  offsets: readonly number[],
  withTop: boolean,
): Steps<CompletionLogprobs> {
  const out: CompletionLogprobs = {
    tokens: [],
    token_logprobs: [],
    top_logprobs: withTop ? [] : null,
    text_offset: [],
  };
  for (let i = 0; i < tokens.length; i++) {
    const token = tokens[i]!;
    out.tokens.push(tokenPiece(tokenizer, token.id).text);
    out.token_logprobs.push(token.logprob);
    out.text_offset.push(offsets[i]!);
    if (out.top_logprobs !== null) {
      // no prototype: a token spelled `toString` or `__proto__` is a key like any other
      const top: Record<string, number> = Object.create(null);
      for (const t of token.top) {
        const key = tokenPiece(tokenizer, t.id).text;
        if (!Object.hasOwn(top, key)) top[key] = t.logprob;
      }
      out.top_logprobs.push(top);
    }
    if (i % LOGPROB_TOKENS_STEP === LOGPROB_TOKENS_STEP - 1) yield;
  }
  return out;
}

export interface ResponseHead {
  id: string;
  created: number;
  model: string;
}

export interface ChatChoice {
  message: ChatMessageOut;
  finish: ChoiceFinish;
  logprobs: ChatTokenLogprob[] | null;
}

/**
 * Chat logprobs as OpenAI writes them: `refusal` beside `content`, always (null: kvfence never refuses), since the
 * client's types declare both fields required.
 */
function chatLogprobs(content: ChatTokenLogprob[] | null) {
  return content === null ? null : { content, refusal: null };
}

export function chatCompletion(head: ResponseHead, choices: readonly ChatChoice[], usage: Usage) {
  return {
    ...head,
    object: 'chat.completion',
    choices: choices.map((c, index) => ({
      index,
      // `refusal` is a required field of the client's message type (null unless the model refused)
      message: { ...c.message, refusal: null },
      logprobs: chatLogprobs(c.logprobs),
      finish_reason: c.finish,
    })),
    usage,
  };
}

export function chatChunk(
  head: ResponseHead,
  index: number,
  delta: { role?: 'assistant'; content?: string } | ChatDelta,
  finish: ChoiceFinish | null,
  logprobs: ChatTokenLogprob[] | null,
) {
  return {
    ...head,
    object: 'chat.completion.chunk',
    choices: [{ index, delta, logprobs: chatLogprobs(logprobs), finish_reason: finish }],
  };
}

export interface TextChoice {
  text: string;
  finish: FinishReason | null;
  logprobs: CompletionLogprobs | null;
}

/** A text_completion body (every choice) or streamed chunk (one choice, `first` its index), usage when given. */
export function textCompletion(head: ResponseHead, choices: readonly TextChoice[], usage?: Usage, first = 0) {
  return {
    ...head,
    object: 'text_completion',
    choices: choices.map((c, i) => ({ index: first + i, text: c.text, logprobs: c.logprobs, finish_reason: c.finish })),
    ...(usage !== undefined ? { usage } : {}),
  };
}

/** The final streamed chunk carrying usage (stream_options.include_usage): no choices. */
export function usageChunk(head: ResponseHead, endpoint: 'chat' | 'completion', usage: Usage) {
  return { ...head, object: endpoint === 'chat' ? 'chat.completion.chunk' : 'text_completion', choices: [], usage };
}
