/**
 * How many prompt tokens a step that also decodes may take, so the step (every decoder's inter-token time) lasts about
 * a target (I11: other tenants' long prompts cannot stretch a decoder's tokens). Learned from the steps the engine ran:
 * a step costs about `decodeMs + promptTokens × msPerToken`, where `decodeMs` comes from steps that only decode and
 * `msPerToken` from steps with a prompt chunk. A fixed chunk cannot do this: 512 prompt tokens take ~0.6 s on a 135M
 * model on two cores and ~30 s on a 7B one.
 */

/** The chunk before anything was measured, and the smallest one (a page): tiny chunks waste the matmul's weight reads */
const FIRST_TOKENS = 64;
const MIN_TOKENS = 16;
/** Steps with fewer prompt tokens say more about their decoders than about prefill: not sampled */
const SAMPLE_MIN_TOKENS = 8;
/** Weight of the newest step in the running means: about the last five steps count */
const NEWEST = 0.2;
/** A floor on the cost of a prompt token (ms), so a step timed at zero cannot divide by zero */
const MS_PER_TOKEN_MIN = 1e-4;

export class PrefillPace {
  private decodeMs: number | undefined;
  private msPerToken: number | undefined;

  constructor(
    private readonly targetMs: number,
    private readonly chunkMax: number,
  ) {}

  /** Prompt tokens, in all, of a step that also decodes. */
  tokensBesideDecoders(): number {
    const least = Math.min(MIN_TOKENS, this.chunkMax);
    if (this.msPerToken === undefined) return Math.min(FIRST_TOKENS, this.chunkMax);
    const left = this.targetMs - (this.decodeMs ?? 0);
    return Math.max(least, Math.min(this.chunkMax, Math.floor(left / this.msPerToken)));
  }

  /** One step's cost: how many of its tokens were prompt, whether it decoded too, and how long its forward pass took. */
  record(promptTokens: number, decoded: boolean, ms: number): void {
    if (promptTokens === 0) {
      if (decoded) this.decodeMs = mean(this.decodeMs, ms);
      return;
    }
    if (promptTokens < SAMPLE_MIN_TOKENS) return;
    const fixed = decoded ? (this.decodeMs ?? 0) : 0;
    this.msPerToken = mean(this.msPerToken, Math.max((ms - fixed) / promptTokens, MS_PER_TOKEN_MIN));
  }
}

function mean(old: number | undefined, sample: number): number {
  return old === undefined ? sample : old + NEWEST * (sample - old);
}
