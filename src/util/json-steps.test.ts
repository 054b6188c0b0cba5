import assert from 'node:assert/strict';
import { test } from 'node:test';
import fc from 'fast-check';
import { jsonSteps } from './json-steps.js';
import { finish, finishInTurns, mapSteps } from './steps.js';

test("jsonSteps writes JSON.stringify's text, pausing through long arrays", () => {
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
  const logprobs = Array.from({ length: 2000 }, (_, i) => ({ token: `t${i}`, logprob: -i / 7, bytes: [116] }));
  const answer = { choices: [{ index: 0, logprobs: { content: logprobs, refusal: null } }], usage: undefined };
  const steps = jsonSteps(answer);
  let pauses = 0;
  let next = steps.next();
  for (; !next.done; next = steps.next()) pauses++;
  assert.equal(next.value, JSON.stringify(answer));
  assert.ok(pauses >= 7, `${pauses} pauses for 2,000 items`);
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
