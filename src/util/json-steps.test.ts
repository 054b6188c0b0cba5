import assert from 'node:assert/strict';
import { test } from 'node:test';
import fc from 'fast-check';
import { jsonSteps } from './json-steps.js';
import { finish, finishInTurns, mapSteps } from './steps.js';

test("jsonSteps writes JSON.stringify's text, pausing through long arrays and long strings", () => {
  // answers' data: objects (some without a prototype, some properties undefined), arrays short and long, strings
  // that need escapes, numbers that are not finite
  const leaf = fc.oneof(fc.string(), fc.double(), fc.boolean(), fc.constant(null), fc.constant(undefined));
  const { value } = fc.letrec((tie) => ({
    value: fc.oneof({ depthSize: 'small' }, leaf, tie('array'), tie('object'), tie('bare')),
    array: fc.array(tie('value'), { maxLength: 300 }),
    object: fc.dictionary(fc.string(), tie('value'), { maxKeys: 5 }),
    bare: fc
      .dictionary(fc.constantFrom('__proto__', 'toString', 'a'), tie('value'), { maxKeys: 3 })
      .map((entries) => Object.assign(Object.create(null), entries) as Record<string, unknown>),
  }));
  fc.assert(
    fc.property(fc.oneof(value.filter((v) => typeof v === 'object' && v !== null)), (v) => {
      assert.equal(finish(jsonSteps(v)), JSON.stringify(v));
    }),
    { numRuns: 300 },
  );
  // a long array of logprobs, and choices echoing a long text whose slices fall inside surrogate pairs
  const logprobs = Array.from({ length: 2000 }, (_, i) => ({ token: `t${i}`, logprob: -i / 7, bytes: [116] }));
  const text = (shift: number) => `${'a'.repeat(shift)}${'😀\n"\\'.repeat(300_000)}\ud800`;
  const answer = {
    choices: [
      { index: 0, logprobs: { content: logprobs, refusal: null } },
      { index: 1, text: text(0) },
      { index: 2, text: text(1) },
    ],
    usage: undefined,
  };
  const expected = JSON.stringify(answer);
  const steps = jsonSteps(answer);
  let pauses = 0;
  let next = steps.next();
  for (; !next.done; next = steps.next()) pauses++;
  assert.equal(next.value, expected);
  // a pause at least every 65,536 characters of source text (escapes can make a slice's JSON up to 6 times longer)
  assert.ok(pauses >= expected.length / (6 * 65_536), `${pauses} pauses for ${expected.length} characters`);
});

test('finishInTurns gives the event loop back between slices; mapSteps pauses every so many items', async () => {
  let ticks = 0;
  const timer = setInterval(() => ticks++, 1);
  const spin = (ms: number) => {
    const until = performance.now() + ms;
    while (performance.now() < until);
  };
  const items = Array.from({ length: 40 }, (_, i) => i);
  const doubled = await finishInTurns(
    mapSteps(
      items,
      (i) => {
        spin(2);
        return 2 * i;
      },
      1,
    ),
    5,
  );
  clearInterval(timer);
  assert.deepEqual(
    doubled,
    items.map((i) => 2 * i),
  );
  assert.ok(ticks >= 5, `${ticks} ticks in ~80 ms of work`);
});
