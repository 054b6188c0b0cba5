// Responses in OpenAI's shapes, where a token's text becomes a key.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { Tokenizer } from '../model/tokenizer.js';
import { completionLogprobs } from './openai-format.js';

test("completions' top_logprobs keep tokens spelled like an object's own properties (toString, __proto__)", () => {
  // real vocabularies hold these as single tokens (Qwen3, Llama 3): code completion draws them
  const pieces = ['toString', '__proto__', 'constructor', ' the'];
  const tokenizer = {
    decodeBytes: (ids: readonly number[]) => Buffer.from(pieces[ids[0]!]!),
  } as unknown as Tokenizer;
  const top = pieces.map((_, id) => ({ id, logprob: -id - 0.5 }));
  const generated = [0, 1].map((id) => ({ id, logprob: -id - 0.5, top }));
  const out = completionLogprobs(tokenizer, generated, [0, 8], true);
  assert.deepEqual(out.tokens, ['toString', '__proto__']);
  const keys = (i: number) => Object.keys(out.top_logprobs![i]!);
  assert.deepEqual(keys(0), pieces);
  assert.equal(out.top_logprobs![0]![out.tokens[0]!], -0.5, "the drawn token's own entry");
  assert.equal(out.top_logprobs![1]![out.tokens[1]!], -1.5);
  const wire = JSON.parse(JSON.stringify(out)) as { top_logprobs: Record<string, number>[] };
  assert.deepEqual(Object.keys(wire.top_logprobs[1]!), pieces, 'on the wire too');
});
