/**
 * Reads OpenAI-shaped completion bodies, whole or streamed, in both dialects: /v1/completions (choices[0].text,
 * logprobs.tokens / token_logprobs) and /v1/chat/completions (message.content or delta.content, logprobs.content[]).
 * Anything missing reads as empty: the auditor judges what it got, it never trusts a shape.
 */
export interface ParsedPiece {
  text: string;
  tokens: string[];
  logprobs: number[];
  promptTokens: number | undefined;
  completionTokens: number | undefined;
  finishReason: string | undefined;
  /** an `error` object inside a 200 body or a stream event */
  errorCode: string | undefined;
  errorMessage: string | undefined;
}

type Json = Record<string, unknown>;

function obj(value: unknown): Json | undefined {
  return typeof value === 'object' && value !== null && !Array.isArray(value) ? (value as Json) : undefined;
}

function str(value: unknown): string | undefined {
  return typeof value === 'string' ? value : undefined;
}

function num(value: unknown): number | undefined {
  return typeof value === 'number' && Number.isFinite(value) ? value : undefined;
}

/** Parses one JSON body (whole response or one stream event's data). */
export function parseCompletionJson(json: unknown): ParsedPiece {
  const body = obj(json) ?? {};
  const choice = obj(Array.isArray(body['choices']) ? body['choices'][0] : undefined) ?? {};
  const message = obj(choice['message']) ?? obj(choice['delta']) ?? {};
  const text = str(choice['text']) ?? str(message['content']) ?? '';
  const tokens: string[] = [];
  const logprobs: number[] = [];
  const lp = obj(choice['logprobs']);
  if (lp !== undefined) {
    if (Array.isArray(lp['content'])) {
      for (const entry of lp['content']) {
        const e = obj(entry) ?? {};
        tokens.push(str(e['token']) ?? '');
        logprobs.push(num(e['logprob']) ?? Number.NaN);
      }
    } else if (Array.isArray(lp['tokens'])) {
      const values = Array.isArray(lp['token_logprobs']) ? lp['token_logprobs'] : [];
      lp['tokens'].forEach((t: unknown, i: number) => {
        tokens.push(str(t) ?? '');
        logprobs.push(num(values[i]) ?? Number.NaN);
      });
    }
  }
  const usage = obj(body['usage']);
  const error = obj(body['error']);
  return {
    text,
    tokens,
    logprobs,
    promptTokens: num(usage?.['prompt_tokens']),
    completionTokens: num(usage?.['completion_tokens']),
    finishReason: str(choice['finish_reason']),
    errorCode: error === undefined ? undefined : (str(error['code']) ?? str(error['type']) ?? 'error'),
    errorMessage: error === undefined ? undefined : (str(error['message']) ?? JSON.stringify(error).slice(0, 500)),
  };
}

export function parseJsonText(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}
