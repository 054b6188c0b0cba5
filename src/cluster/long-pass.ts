/**
 * A worker runs its forward passes on its own thread (prefill-worker.ts, decode-worker.ts: one step per event-loop
 * turn), so while one runs it answers nothing, not even the gateway's heartbeat (worker-link.ts). A pass can
 * legitimately last longer than the gateway's silence bound: a first step of 512 prompt tokens, unmeasured yet, takes
 * ~30 s on a 7B model on two cores; `--prompt-step-ms` allows 4 × 60 s steps; a big batch on a big model. Taken for a
 * frozen worker, it lost every request it held, every tenant's, with 503.
 *
 * So before a pass that may last LONG_PASS_MS or more the worker tells each gateway how long it may be silent
 * (`stats` with `busyMs`, which the gateway adds to its silence bound). The bound comes from the passes it has run:
 * the longest recent pass of about as many tokens or more, or one of fewer tokens scaled up linearly, doubled for the
 * attention a deeper context adds (recent: of a size class's last WINDOW to 2 × WINDOW passes, so one slow outlier,
 * the first pass paging the weights in or a burst of load, does not double that size's bound for good). So that even
 * its first pass is foreseen, the worker times one pass of PROBE_TOKENS synthetic tokens over a pool of its own before
 * it serves (probePassMs); without that, a first pass would be announced as LIMITS.workerBusyMsMax, and a worker frozen
 * in it found only an hour later, its gateways sending it requests meanwhile. An announced pass that ends says so at
 * once (`stats` id 0 without `busyMs`), so the silence bound holds again from there: a worker frozen right after a long
 * pass was otherwise taken as busy for the time announced, until its next message (a heartbeat answer, a quarter of the
 * bound later, or none if it froze first). A frozen worker between passes is found within the gateway's bound; one
 * frozen during a pass, once the time announced is over.
 */
import type { Backend } from '../compute/backend.js';
import { type ForwardInput, type ForwardModel, type ForwardOutput, ForwardPass } from '../compute/forward.js';
import { generate } from '../engine/generate.js';
import { GREEDY } from '../engine/sampler.js';
import { type KvLayout, pagesForTokens } from '../kv/kv-layout.js';
import { PagePool } from '../kv/page-pool.js';
import { LIMITS } from '../util/limits.js';
import type { ControlConnection } from './control-channel.js';

/** A pass predicted shorter than this is not announced (the gateway's silence bound is 10 s) */
export const LONG_PASS_MS = 1_000;
/** Margin over what the passes seen predict (a deeper context, a busier machine) */
const SLACK = 2;
/** Passes are kept by size class: class k holds the longest pass of 2^k to 2^(k+1) - 1 tokens */
const CLASSES = 32;
/** The pass a worker times before it serves: a prompt chunk's worth, its cost per token no lower than a larger pass's */
const PROBE_TOKENS = 16;
/** A size class forgets its longest pass after WINDOW to 2 × WINDOW passes of its size */
export const WINDOW = 32;

export class LongPassNotice {
  /** per size class, the longest pass (ms) of its current window and of the one before; NaN: none */
  private readonly currentMs = new Float64Array(CLASSES).fill(Number.NaN);
  private readonly previousMs = new Float64Array(CLASSES).fill(Number.NaN);
  /** passes in each class's current window */
  private readonly counts = new Uint32Array(CLASSES);

  /** a pass is announced and has not ended */
  private announced = false;

  /** `announce(busyMs)` before a long pass, `announce(undefined)` once an announced one has ended */
  constructor(private readonly announce: (busyMs: number | undefined) => void) {}

  /** How long a pass of `tokens` may take (ms); LIMITS.workerBusyMsMax when nothing seen says. */
  boundMs(tokens: number): number {
    const k = sizeClass(tokens);
    let bound = Number.POSITIVE_INFINITY;
    for (let j = 0; j < CLASSES; j++) {
      const ms = longest(this.currentMs[j]!, this.previousMs[j]!);
      if (Number.isNaN(ms)) continue;
      // class j's passes had at least 2^j tokens; a class above holds passes of more tokens than this one
      const scale = j > k ? 1 : Math.max(1, tokens / 2 ** j);
      bound = Math.min(bound, ms * scale);
    }
    return Number.isFinite(bound) ? Math.min(LIMITS.workerBusyMsMax, Math.ceil(SLACK * bound)) : LIMITS.workerBusyMsMax;
  }

  before(tokens: number): void {
    const bound = this.boundMs(tokens);
    if (bound < LONG_PASS_MS) return;
    this.announced = true;
    this.announce(bound);
  }

  after(tokens: number, ms: number): void {
    const k = sizeClass(tokens);
    if (this.counts[k] === WINDOW) {
      this.previousMs[k] = this.currentMs[k]!;
      this.currentMs[k] = Number.NaN;
      this.counts[k] = 0;
    }
    this.counts[k]!++;
    this.currentMs[k] = longest(this.currentMs[k]!, ms);
    if (!this.announced) return;
    this.announced = false;
    this.announce(undefined);
  }
}

/** The larger of two times, either NaN when none */
function longest(a: number, b: number): number {
  return Number.isNaN(a) ? b : Number.isNaN(b) ? a : Math.max(a, b);
}

function sizeClass(tokens: number): number {
  return Math.min(CLASSES - 1, Math.floor(Math.log2(Math.max(1, tokens))));
}

/** A forward pass that tells a LongPassNotice before and after each run. */
export class NoticedForwardPass extends ForwardPass {
  constructor(
    model: ForwardModel,
    backend: Backend,
    pool: PagePool,
    private readonly notice: LongPassNotice,
  ) {
    super(model, backend, pool);
  }

  override run(inputs: readonly ForwardInput[]): ForwardOutput[] {
    const tokens = inputs.reduce((n, input) => n + input.tokens.length, 0);
    this.notice.before(tokens);
    const started = performance.now();
    try {
      return super.run(inputs);
    } finally {
      this.notice.after(tokens, performance.now() - started);
    }
  }
}

/**
 * The forward pass of a prefill or decode worker: a long pass is announced on every control connection open now, and
 * its end too (`stats` id 0 alone: an older gateway drops it as an answer nobody asked for).
 */
export function announcedForwardPass(
  model: ForwardModel,
  backend: Backend,
  connections: ReadonlySet<ControlConnection>,
): (pool: PagePool) => ForwardPass {
  const notice = new LongPassNotice((busyMs) => {
    for (const conn of connections) conn.send({ type: 'stats', id: 0, ...(busyMs !== undefined ? { busyMs } : {}) });
  });
  return (pool) => {
    const probe = probePassMs(model, backend, pool.layout);
    notice.after(probe.tokens, probe.ms);
    return new NoticedForwardPass(model, backend, pool, notice);
  };
}

/**
 * Times one pass of PROBE_TOKENS synthetic tokens (fewer if the context is shorter) and the token drawn from it, over a
 * pool of its own that no request ever sees. Cold (the weights' first touch), so the bound it gives is generous.
 */
function probePassMs(model: ForwardModel, backend: Backend, layout: KvLayout): { tokens: number; ms: number } {
  const { contextLength, vocabSize } = model.config;
  const tokens = Math.max(1, Math.min(PROBE_TOKENS, contextLength - 1));
  const pool = new PagePool(layout, pagesForTokens(layout, tokens + 1));
  const prompt = Array.from({ length: tokens }, (_, i) => i % vocabSize);
  const started = performance.now();
  generate(new ForwardPass(model, backend, pool), prompt, {
    maxTokens: 1,
    sampling: GREEDY,
    prefillChunkTokens: tokens,
    isStopToken: () => false,
  });
  return { tokens, ms: performance.now() - started };
}
