/** Time and timers, passed in so tests can drive deadlines by hand (no module-global clock). */
export interface Clock {
  nowMs(): number;
  /** calls `fn` once after `delayMs` unless the returned cancel function runs first */
  after(delayMs: number, fn: () => void): () => void;
}

export const systemClock: Clock = {
  nowMs: () => performance.now(),
  after(delayMs, fn) {
    const timer = setTimeout(fn, delayMs);
    return () => clearTimeout(timer);
  },
};
