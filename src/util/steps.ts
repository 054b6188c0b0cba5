/**
 * Work written as steps: a generator whose every `yield` is a pause, where a thread shared by several callers may
 * turn to another's work (thread-calls.ts serveThreadCalls), and whose return value is the work's answer.
 */
export type Steps<T> = Generator<void, T, void>;

/** Runs `steps` to their end without pausing; their answer. */
export function finish<T>(steps: Steps<T>): T {
  for (;;) {
    const next = steps.next();
    if (next.done) return next.value;
  }
}

/**
 * Runs `steps` to their end on the event loop, letting it turn to other work (other tenants' streams and requests)
 * first and then whenever `sliceMs` have passed since it last did: a large answer's formatting does not hold the loop
 * in one go, nor do several answers ending in the same engine step run their first slices back to back (three
 * answers' did: 60–90 ms).
 */
export async function finishInTurns<T>(steps: Steps<T>, sliceMs: number): Promise<T> {
  const turn = () => new Promise<void>((resolve) => setImmediate(resolve));
  await turn();
  let since = performance.now();
  for (;;) {
    const next = steps.next();
    if (next.done) return next.value;
    if (performance.now() - since >= sliceMs) {
      await turn();
      since = performance.now();
    }
  }
}

/** `items` mapped through `f`, with a pause after every `every` items. */
export function* mapSteps<T, U>(items: readonly T[], f: (item: T) => U, every = 256): Steps<U[]> {
  const out: U[] = [];
  for (let i = 0; i < items.length; i++) {
    out.push(f(items[i]!));
    if (i % every === every - 1) yield;
  }
  return out;
}
