/**
 * Pausing (admission.ts, slotDonors) against the same engine with it off, in the same run: one tenant ("fill") submits
 * twice a batch of long requests at once, filling the running batch; another ("probe") sends a short request every
 * `--every` steps while fill's run. On the embedded model with the native backend. Prints, for each engine, the probe
 * requests' wait from submission to first token (steps, deterministic, and ms) and fill's time to finish, medians of
 * `--runs`, their ratios, and checks that every answer is the same token for token either way.
 *
 *   npm run bench:share -- [--batch 8] [--fill-tokens 128] [--every 10] [--runs 3]
 */
import { ForwardPass } from '../src/compute/forward.js';
import { NativeBackend } from '../src/compute/native-backend.js';
import type { AdmissionCandidate } from '../src/engine/admission.js';
import { Engine } from '../src/engine/engine.js';
import { makeKvLayout } from '../src/kv/kv-layout.js';
import { PagePool } from '../src/kv/page-pool.js';
import { DEFAULT_MODEL, ensureGeneratedModel } from '../src/model/default-model.js';
import { loadModel } from '../src/model/load-model.js';
import { median } from '../src/util/median.js';
import { benchRequest, numberFlag } from './bench-types.js';

const PAGE_SIZE = 16;
const FILL_PROMPT = 32;
const PROBE_PROMPT = 16;
const PROBE_TOKENS = 4;

const arg = (name: string, fallback: number) => numberFlag(process.argv, name, fallback);
const batch = arg('batch', 8);
const fillTokens = arg('fill-tokens', 128);
const every = arg('every', 10);
const runs = arg('runs', 3);

/** The same engine, admitting as it did before pausing: a request that waits for a slot waits for one to free. */
class ArrivalOrderEngine extends Engine {
  override pauseFor(_waiter: AdmissionCandidate): boolean {
    return false;
  }
}

const model = loadModel(ensureGeneratedModel(DEFAULT_MODEL));
const backend = new NativeBackend({ threadCount: 2 });
const c = model.config;
const layout = makeKvLayout(c.layerCount, c.kvHeadCount * c.headDim, PAGE_SIZE);
const request = (id: string, tenant: string, prompt: number, tokens: number, salt: number) =>
  benchRequest(c.vocabSize, id, tenant, prompt, tokens, salt);
const fill = Array.from({ length: 2 * batch }, (_, i) => request(`fill${i}`, 'fill', FILL_PROMPT, fillTokens, i));

interface Run {
  probeWaitSteps: number[];
  probeWaitMs: number[];
  fillSeconds: number;
  answers: string;
}

function run(pausing: boolean): Run {
  const pageCount = (2 * batch + 4) * Math.ceil((FILL_PROMPT + fillTokens) / PAGE_SIZE);
  const forward = new ForwardPass(model, backend, new PagePool(layout, pageCount));
  const config = {
    provenContext: c.contextLength,
    vocabSize: c.vocabSize,
    runningMax: batch,
    waitingMax: 4 * batch,
    queueTimeoutMs: 600_000,
    prefillChunkTokens: 256,
    stepTokenBudget: 512,
    isStopToken: () => false,
  };
  const engine = pausing ? new Engine(config, forward) : new ArrivalOrderEngine(config, forward);
  const answers = new Map<string, number[]>();
  const probes = new Map<string, { step: number; at: number }>();
  const probeWaitSteps: number[] = [];
  const probeWaitMs: number[] = [];
  let fillLeft = fill.length;
  const started = performance.now();
  let fillSeconds = 0;
  for (const r of fill) engine.submit(r, 0);
  for (let step = 0; engine.hasWork; step++) {
    if (step % every === every - 1 && fillLeft > 0) {
      const probe = request(`probe${step}`, 'probe', PROBE_PROMPT, PROBE_TOKENS, 1000 + step);
      engine.submit(probe, 0);
      probes.set(probe.id, { step, at: performance.now() });
    }
    for (const e of engine.step(0)) {
      if (e.kind === 'token') {
        answers.set(e.request, [...(answers.get(e.request) ?? []), e.token.id]);
        const sent = probes.get(e.request);
        if (sent !== undefined) {
          probeWaitSteps.push(step - sent.step);
          probeWaitMs.push(performance.now() - sent.at);
          probes.delete(e.request);
        }
      } else if (e.kind === 'end') {
        if (e.end.kind === 'failed') throw e.end.error;
        if (e.request.startsWith('fill') && --fillLeft === 0) fillSeconds = (performance.now() - started) / 1000;
      }
    }
  }
  const order = [...answers.keys()].sort();
  return { probeWaitSteps, probeWaitMs, fillSeconds, answers: JSON.stringify(order.map((id) => answers.get(id))) };
}

const results = { on: [] as Run[], off: [] as Run[] };
for (let i = 0; i < runs; i++) for (const pausing of [false, true]) results[pausing ? 'on' : 'off'].push(run(pausing));
const fillAnswers = (r: Run) => JSON.stringify(JSON.parse(r.answers).slice(0, fill.length));
if (new Set([...results.on, ...results.off].map(fillAnswers)).size !== 1) throw new Error('pausing changed an answer');

const summary = (rs: Run[]) => ({
  waitSteps: median(rs.map((r) => median(r.probeWaitSteps))),
  waitStepsMax: Math.max(...rs.flatMap((r) => r.probeWaitSteps)),
  waitMs: median(rs.map((r) => median(r.probeWaitMs))),
  fillSeconds: median(rs.map((r) => r.fillSeconds)),
  probes: rs[0]!.probeWaitSteps.length,
});
const on = summary(results.on);
const off = summary(results.off);
console.log(
  `fill: ${fill.length} requests at once (${FILL_PROMPT} + ${fillTokens} tokens) against a batch of ${batch}; probe: ` +
    `${PROBE_PROMPT} + ${PROBE_TOKENS} tokens every ${every} steps while fill runs; ${model.config.name}, native ` +
    `backend, 2 threads, medians of ${runs} runs`,
);
for (const [name, s] of [
  ['arrival order (pausing off)', off],
  ['pausing', on],
] as const) {
  console.log(
    `${name.padEnd(28)} probe wait to first token: ${String(s.waitSteps).padStart(4)} steps (max ${s.waitStepsMax}), ` +
      `${s.waitMs.toFixed(1).padStart(7)} ms; ${s.probes} probes; fill done in ${s.fillSeconds.toFixed(2)} s`,
  );
}
console.log(
  `ratio (off / on): probe wait ${(off.waitMs / on.waitMs).toFixed(1)}x; fill's time ` +
    `${(on.fillSeconds / off.fillSeconds).toFixed(3)}x with pausing; fill's answers identical`,
);
