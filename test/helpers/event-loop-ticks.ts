/** How often the event loop ran a 1 ms timer while `work` was awaited: work done inline would let it run not once. */
export async function whileTicking<T>(work: () => Promise<T>): Promise<{ value: T; ticks: number; ms: number }> {
  let ticks = 0;
  const ticker = setInterval(() => ticks++, 1);
  const started = performance.now();
  try {
    const value = await work();
    return { value, ticks, ms: performance.now() - started };
  } finally {
    clearInterval(ticker);
  }
}
