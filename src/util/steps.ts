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
