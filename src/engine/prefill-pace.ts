/**
 * How many prompt tokens a step may take, so that they take about `targetMs` of it (I11). Beside decoders a step is
 * every decoder's inter-token time: other tenants' long prompts add at most about `targetMs` to it, however long they
 * are. Prompts alone may take ALONE_FACTOR × `targetMs` (no token is waiting then, but the step still holds the thread
 * that reads new requests and writes streams). Learned from the steps the engine ran: a step costs about
 * `decodeMs + promptTokens × msPerToken`, where `decodeMs` comes from steps that only decode and `msPerToken` from steps
 * with prompt tokens. A fixed chunk cannot do this: 512 prompt tokens take ~0.7 s on a 135M model on two cores and
 * ~30 s on a 7B one.
 */

import type { EngineConfig } from './engine-config.js';
import type { StepPace } from './scheduler.js';

/** The chunk before anything was measured, and the smallest one (a page): tiny chunks waste the matmul's weight reads */
const FIRST_TOKENS = 64;
const MIN_TOKENS = 16;
/** A step of prompts alone may last this many times the target: larger chunks read the weights fewer times */
export const ALONE_FACTOR = 4;
/** Steps with fewer prompt tokens say more about their decoders than about prefill: not sampled */
const SAMPLE_MIN_TOKENS = 8;
/** Weight of the newest step in the running means: about the last five steps count */
const NEWEST = 0.2;
/** A floor on the cost of a prompt token (ms), so a step timed at zero cannot divide by zero */
const MS_PER_TOKEN_MIN = 1e-4;

export class PrefillPace implements StepPace {
  private decodeMs: number | undefined;
  private msPerToken: number | undefined;

  /** `chunk`: the most prompt tokens beside decoders; `stepMax`: the most of a step of prompts alone */
  constructor(
    private readonly targetMs: number,
    private readonly chunk: number,
    private readonly stepMax: number,
  ) {}

  /** Prompt tokens, in all, of the next step: one that also decodes or one of prompts alone. */
  promptTokens(decoding: boolean): number {
    const most = decoding ? this.chunk : this.stepMax;
    const least = Math.min(MIN_TOKENS, most);
    if (this.msPerToken === undefined) return Math.min(decoding ? FIRST_TOKENS : this.chunk, most);
    const ms = decoding ? this.targetMs : ALONE_FACTOR * this.targetMs;
    return Math.max(least, Math.min(most, Math.floor(ms / this.msPerToken)));
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

/** An engine's pace, when its configuration asks for one (`promptStepMs`). */
export function paceOf(config: EngineConfig): PrefillPace | undefined {
  const { promptStepMs, prefillChunkTokens, stepTokenBudget } = config;
  return promptStepMs !== undefined ? new PrefillPace(promptStepMs, prefillChunkTokens, stepTokenBudget) : undefined;
}

function mean(old: number | undefined, sample: number): number {
  return old === undefined ? sample : old + NEWEST * (sample - old);
}
