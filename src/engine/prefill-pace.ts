/**
 * What a step's prompt tokens may cost, so that they take about `targetMs` of it (I11), and what each prompt's next
 * tokens cost. Beside decoders a step is every decoder's inter-token time: other tenants' long prompts add at most about
 * `targetMs` to it, however long they are. Prompts alone may take ALONE_FACTOR × `targetMs` (no token is waiting then,
 * but the step still holds the thread that reads new requests and writes streams).
 *
 * Learned from the steps the engine ran: a step costs about `decodeMs + promptTokens × msPerToken + keys × msPerKey`.
 * `keys` are what attention read (attended-keys.ts); the forward pass times attention apart from the rest, so
 * `msPerKey` is measured, not fitted. `decodeMs` comes from steps that only decode, `msPerToken` from steps with prompt
 * tokens. A token's keys grow with its position: on the 15m test shape at two cores, a token 13,000 positions into its
 * prompt took ~7.5 ms, one at its start ~0.4 ms, so a step shared by token count gave a long prompt's tenant most of
 * the step's time and a short prompt beside it a few tokens a step. Priced, each tenant gets an equal share of the
 * step's time (scheduler.ts). The price is linear in keys; attention reads a key once for up to 16 rows of a prompt,
 * so a deep prompt's few tokens a step cost somewhat more per key than priced (the step runs a little over its target).
 * A fixed chunk cannot do this either: 512 prompt tokens take ~0.7 s on a 135M model on two cores and ~30 s on a 7B one.
 */

import type { KeyCount } from '../compute/attended-keys.js';
import type { AttentionWork } from '../compute/forward.js';
import type { EngineConfig } from './engine-config.js';
import { type PromptCost, type StepPace, TOKEN_COST } from './scheduler.js';

/** The prompt tokens of a step beside decoders before anything was measured */
const FIRST_TOKENS = 64;
/**
 * The step's budget buys at least a page of tokens at a prompt's start: tiny chunks waste the products' weight reads
 * (deep into a long prompt, where attention's keys set the price, a step may buy fewer)
 */
const MIN_TOKENS = 16;
/** A step of prompts alone may last this many times the target: larger chunks read the weights fewer times */
export const ALONE_FACTOR = 4;
/** Steps with fewer prompt tokens say more about their decoders than about prefill: not sampled */
const SAMPLE_MIN_TOKENS = 8;
/** Weight of the newest step in the running means: about the last five steps count */
const NEWEST = 0.2;
/** A floor on the cost of a prompt token (ms), so a step timed at zero cannot divide by zero */
const MS_PER_TOKEN_MIN = 1e-4;

/** One step's run: how many of its tokens were prompt, whether it decoded too, its forward pass's time and attention. */
export interface StepTime {
  promptTokens: number;
  decoded: boolean;
  ms: number;
  attention: AttentionWork;
}

export class PrefillPace implements StepPace {
  /** a decode-only step's time besides attention */
  private decodeMs: number | undefined;
  /** a prompt token's time besides attention */
  private msPerToken: number | undefined;
  /** running means of attention's time and keys: their ratio is a key's time */
  private attentionMs = 0;
  private keys = 0;

  /** `chunk`: the step of prompts alone before anything was measured; `keysOf`: the model's keys (attended-keys.ts) */
  constructor(
    private readonly targetMs: number,
    private readonly chunk: number,
    private readonly keysOf: KeyCount,
  ) {}

  /** The next step's prompt budget and prices: one that also decodes or one of prompts alone. */
  promptCost(decoding: boolean): PromptCost {
    const msPerToken = this.msPerToken;
    if (msPerToken === undefined) return { budget: decoding ? FIRST_TOKENS : this.chunk, cost: TOKEN_COST.cost };
    const msPerKey = this.keys > 0 ? this.attentionMs / this.keys : 0;
    const { keysOf } = this;
    const cost = (start: number, n: number) => n * msPerToken + msPerKey * keysOf(start, n);
    return { budget: Math.max(decoding ? this.targetMs : ALONE_FACTOR * this.targetMs, cost(0, MIN_TOKENS)), cost };
  }

  record({ promptTokens, decoded, ms, attention }: StepTime): void {
    if (attention.keys > 0) {
      this.attentionMs = mean(this.attentionMs, attention.ms);
      this.keys = mean(this.keys, attention.keys);
    }
    const rest = Math.max(ms - attention.ms, 0);
    if (promptTokens === 0) {
      if (decoded) this.decodeMs = mean(this.decodeMs, rest);
      return;
    }
    if (promptTokens < SAMPLE_MIN_TOKENS) return;
    const fixed = decoded ? (this.decodeMs ?? 0) : 0;
    this.msPerToken = mean(this.msPerToken, Math.max((rest - fixed) / promptTokens, MS_PER_TOKEN_MIN));
  }
}

/** An engine's pace, when its configuration asks for one (`promptStepMs`). */
export function paceOf(config: EngineConfig, keysOf: KeyCount): PrefillPace | undefined {
  const { promptStepMs, prefillChunkTokens } = config;
  return promptStepMs !== undefined ? new PrefillPace(promptStepMs, prefillChunkTokens, keysOf) : undefined;
}

function mean(old: number | undefined, sample: number): number {
  return old === undefined ? sample : old + NEWEST * (sample - old);
}
