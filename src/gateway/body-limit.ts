/**
 * The largest request body the gateway reads: what the largest request that could fit the served context can need,
 * so a body that can never be served is a 413 before it is read, never a 16 MiB parse ending in a 400.
 *
 * A prompt text the server takes is at most `context × longest token` UTF-16 code units, every one counted
 * (prompt-length.ts: the whitespace a Phi-3 special token swallows too, though one token stands for any run of it), no
 * more than `context × longest token bytes`, and a JSON encoder may escape each unit as \uXXXX (6 bytes a unit): the
 * limit refuses no body whose prompt the length check would take. As token ids a prompt is at most
 * `context × (digits of the largest id + ", ")`. On top come the fields that are not prompt text: the chat messages'
 * JSON wrappers, a response-format schema, stop sequences, logit bias — the headroom below, which is also the floor (a
 * small context still takes a request with tools and a schema). The ceiling is LIMITS.requestBodyBytesMax: only a
 * prompt both near a large context and escaped byte by byte reaches it.
 */
import type { Tokenizer } from '../model/tokenizer.js';
import { LIMITS } from '../util/limits.js';

/** a JSON encoder's worst case for one byte of text: \u00XX */
const JSON_ESCAPED_BYTES_PER_BYTE = 6;
/** one chat message's JSON wrapper without its content: {"role":"assistant","name":"...","content":""}, */
const MESSAGE_WRAPPER_BYTES = 128;
/** every other field together: sampling options, 4 stop sequences, 300 logit-bias entries, tool_choice */
const OTHER_FIELDS_BYTES = 64 * 1024;

export interface BodyLimit {
  bytes: number;
  /** the longest token's UTF-8 bytes in the vocabulary (the figure the limit was derived from) */
  longestTokenBytes: number;
}

/** The body limit for `context` tokens of this vocabulary (one pass over the vocabulary, at startup). */
export function bodyLimitFor(context: number, tokenizer: Tokenizer): BodyLimit {
  let longestTokenBytes = 1;
  for (let id = 0; id < tokenizer.vocabSize; id++) {
    // the vocabulary text (special tokens parsed out of chat text) and the bytes it decodes to (byte-level BPE)
    const bytes = Math.max(Buffer.byteLength(tokenizer.tokenText(id), 'utf8'), tokenizer.decodeBytes([id]).length);
    if (bytes > longestTokenBytes) longestTokenBytes = bytes;
  }
  const asText = context * longestTokenBytes * JSON_ESCAPED_BYTES_PER_BYTE;
  const asIds = context * (String(Math.max(0, tokenizer.vocabSize - 1)).length + 2);
  const headroom = LIMITS.chatMessagesMax * MESSAGE_WRAPPER_BYTES + 2 * LIMITS.schemaBytesMax + OTHER_FIELDS_BYTES;
  const bytes = Math.min(LIMITS.requestBodyBytesMax, Math.max(asText, asIds) + headroom);
  return { bytes, longestTokenBytes };
}
