/** Thrown when an internal invariant does not hold: a bug, never a user error. Never compiled out. */
export class AssertionError extends Error {
  override name = 'AssertionError';
}

export function assert(condition: unknown, message: string): asserts condition {
  if (!condition) throw new AssertionError(message);
}

export function assertNever(value: never, what: string): never {
  throw new AssertionError(`unexpected ${what}: ${String(value)}`);
}
