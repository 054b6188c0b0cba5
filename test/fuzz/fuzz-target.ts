/** A fuzz target: what it feeds, what must hold of each input, and how a run of it is set up and torn down. */
import fc from 'fast-check';

export interface FuzzRun<T> {
  input: fc.Arbitrary<T>;
  /** throws (an assertion) when the input found a bug */
  check(input: T): void | Promise<void>;
  close(): Promise<void>;
}

export interface FuzzTarget<T> {
  name: string;
  /** inputs per CI run (the suite's budget); `npm run fuzz -- --runs N` runs more */
  ciRuns: number;
  open(): Promise<FuzzRun<T>>;
}

/** Runs `runs` inputs with a fixed seed (reproducible); throws fast-check's report of the first failing input. */
export async function runTarget<T>(target: FuzzTarget<T>, runs: number, seed: number): Promise<void> {
  const run = await target.open();
  try {
    await fc.assert(
      fc.asyncProperty(run.input, async (input) => {
        await run.check(input);
      }),
      { numRuns: runs, seed, endOnFailure: true },
    );
  } finally {
    await run.close();
  }
}
