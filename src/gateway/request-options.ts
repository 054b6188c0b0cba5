/**
 * The sampling options of a request body beyond temperature and top_p — OpenAI's penalties and logit_bias, and vLLM's
 * extras (top_k, repetition_penalty, min_tokens, ignore_eos, stop_token_ids) — checked here, where the client hears
 * a 400 naming the field; workers check the same bounds again (SequenceSampler) on what reaches them.
 */
import { clientText, KvfenceError } from '../util/errors.js';
import { LIMITS } from '../util/limits.js';

export interface SamplingOptions {
  topK: number;
  frequencyPenalty: number;
  presencePenalty: number;
  repetitionPenalty: number;
  logitBias: [number, number][];
  minTokens: number;
  ignoreEos: boolean;
  stopTokenIds: number[];
}

export const SAMPLING_FIELDS = [
  'frequency_penalty',
  'presence_penalty',
  'logit_bias',
  'top_k',
  'repetition_penalty',
  'min_tokens',
  'ignore_eos',
  'stop_token_ids',
] as const;

type Body = Record<string, unknown>;

function bad(message: string, param: string): KvfenceError {
  return new KvfenceError('invalid_request_error', message, param);
}

function present(body: Body, field: string): unknown {
  const v = body[field];
  return v === null ? undefined : v;
}

function numberIn(body: Body, field: string, min: number, max: number, fallback: number): number {
  const v = present(body, field);
  if (v === undefined) return fallback;
  if (typeof v !== 'number' || !Number.isFinite(v) || v < min || v > max)
    throw bad(`${field} must be a number from ${min} to ${max}`, field);
  return v;
}

function integerIn(body: Body, field: string, min: number, max: number, fallback: number): number {
  const v = numberIn(body, field, min, max, fallback);
  if (!Number.isInteger(v)) throw bad(`${field} must be an integer from ${min} to ${max}`, field);
  return v;
}

export function parseSamplingOptions(body: Body, vocabSize: number): SamplingOptions {
  const repetitionPenalty = numberIn(body, 'repetition_penalty', 0, 10, 1);
  if (repetitionPenalty === 0) throw bad('repetition_penalty must be above 0', 'repetition_penalty');
  const ignoreEos = present(body, 'ignore_eos') ?? false;
  if (typeof ignoreEos !== 'boolean') throw bad('ignore_eos must be a boolean', 'ignore_eos');
  return {
    // vLLM: -1 (or 0) means no limit
    topK: Math.max(0, integerIn(body, 'top_k', -1, vocabSize, 0)),
    frequencyPenalty: numberIn(body, 'frequency_penalty', -2, 2, 0),
    presencePenalty: numberIn(body, 'presence_penalty', -2, 2, 0),
    repetitionPenalty,
    logitBias: parseLogitBias(present(body, 'logit_bias'), vocabSize),
    minTokens: integerIn(body, 'min_tokens', 0, LIMITS.generateTokensMax, 0),
    ignoreEos,
    stopTokenIds: parseTokenIds(present(body, 'stop_token_ids'), vocabSize),
  };
}

/** OpenAI's shape: {"token id": bias from -100 to 100}. */
function parseLogitBias(value: unknown, vocabSize: number): [number, number][] {
  if (value === undefined) return [];
  if (typeof value !== 'object' || value === null || Array.isArray(value))
    throw bad('logit_bias must be an object mapping token ids to numbers', 'logit_bias');
  const entries = Object.entries(value);
  if (entries.length > LIMITS.logitBiasEntriesMax)
    throw bad(`logit_bias may name at most ${LIMITS.logitBiasEntriesMax} tokens`, 'logit_bias');
  return entries.map(([key, bias]): [number, number] => {
    const id = /^(0|[1-9][0-9]{0,9})$/.test(key) ? Number(key) : Number.NaN;
    if (!(id < vocabSize))
      throw bad(`logit_bias: ${clientText(key)} is not a token id of the vocabulary`, 'logit_bias');
    if (typeof bias !== 'number' || !(bias >= -100 && bias <= 100))
      throw bad(`logit_bias: the bias of token ${key} must be a number from -100 to 100`, 'logit_bias');
    return [id, bias];
  });
}

function parseTokenIds(value: unknown, vocabSize: number): number[] {
  if (value === undefined) return [];
  if (
    !Array.isArray(value) ||
    value.length > LIMITS.stopTokenIdsMax ||
    !value.every((id) => Number.isInteger(id) && id >= 0 && id < vocabSize)
  ) {
    throw bad(`stop_token_ids must be at most ${LIMITS.stopTokenIdsMax} token ids of the vocabulary`, 'stop_token_ids');
  }
  return [...new Set(value as number[])];
}
