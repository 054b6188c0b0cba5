import { constraintGrammar, type OutputConstraint } from '../../src/structured/grammar-cache.js';

/**
 * How often the event loop ran a 1 ms timer while `work` was awaited, and the longest it went without: work done
 * inline would let it run not once.
 */
export async function whileTicking<T>(
  work: () => Promise<T>,
): Promise<{ value: T; ticks: number; ms: number; longestGapMs: number }> {
  let ticks = 0;
  const started = performance.now();
  let last = started;
  let longestGapMs = 0;
  const ticker = setInterval(() => {
    const now = performance.now();
    longestGapMs = Math.max(longestGapMs, now - last);
    last = now;
    ticks++;
  }, 1);
  try {
    const value = await work();
    const ms = performance.now() - started;
    return { value, ticks, ms, longestGapMs: Math.max(longestGapMs, performance.now() - last) };
  } finally {
    clearInterval(ticker);
  }
}

/**
 * A response format whose grammar takes ~0.1–0.2 s to build (50 alternatives of 20 optional properties; `tag` makes it
 * new to any cache), and how long its build takes inline here and now: a loop that stalls for half of that built it
 * inline.
 */
export function costlyConstraint(tag: string): { constraint: OutputConstraint; inlineMs: number } {
  const object = (i: number) => ({
    type: 'object',
    properties: Object.fromEntries(Array.from({ length: 20 }, (_, p) => [`${tag}${i}_${p}`, { type: 'string' }])),
  });
  const constraint = {
    kind: 'json_schema' as const,
    schema: { anyOf: Array.from({ length: 50 }, (_, i) => object(i)) },
  };
  const started = performance.now();
  constraintGrammar(constraint);
  return { constraint, inlineMs: performance.now() - started };
}
