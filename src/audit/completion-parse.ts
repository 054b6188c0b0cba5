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
  // the first choice: the one with index 0, or the first with no index (a stream's event may carry another alone)
  const choices: unknown[] = Array.isArray(body['choices']) ? body['choices'] : [];
  const indexOf = (c: unknown) => obj(c)?.['index'];
  const choice = obj(choices.find((c) => indexOf(c) === 0) ?? choices.find((c) => indexOf(c) === undefined)) ?? {};
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

const FIELD_DEPTH_MAX = 64;

/**
 * Appends every string in `json` (values and keys) to `into` under its path, so that the canary scan reads the whole
 * body, not only the fields the auditor parses: other choices, logprob tokens, any extra field a server adds. An array
 * element with a numeric `index` (a choice, a tool call) is named by it, so a stream's deltas of one choice join up.
 */
export function collectStrings(json: unknown, into: Map<string, string>, path = '', depth = 0): void {
  const add = (at: string, text: string) => into.set(at, (into.get(at) ?? '') + text);
  if (typeof json === 'string') add(path, json);
  if (typeof json !== 'object' || json === null || depth >= FIELD_DEPTH_MAX) return;
  if (Array.isArray(json)) {
    json.forEach((element: unknown, i) => {
      const index = obj(element)?.['index'];
      collectStrings(element, into, `${path}[${typeof index === 'number' ? index : i}]`, depth + 1);
    });
    return;
  }
  for (const [key, value] of Object.entries(json)) {
    add(`${path}{}`, `${key} `);
    collectStrings(value, into, path === '' ? key : `${path}.${key}`, depth + 1);
  }
}

export function parseJsonText(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}
