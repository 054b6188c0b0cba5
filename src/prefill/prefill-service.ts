/**
 * A prefill worker process's service: its KV and engine (I1 proved for its own pool, or no start), the PrefillWorker,
 * and the control listener through which gateways send jobs and cancels. Incidents are recorded here and reported
 * to every connected gateway.
 */

import type { ControlConnection } from '../cluster/control-channel.js';
import { endToWire } from '../cluster/control-protocol.js';
import { serveControl } from '../cluster/control-server.js';
import { announcedForwardPass } from '../cluster/long-pass.js';
import { type RunningWorker, type WorkerRuntime, workerHello } from '../cluster/worker-config.js';
import { drainControl } from '../cluster/worker-drain.js';
import { ENGINE_PARTS, type EngineParts } from '../engine/engine-parts.js';
import { PrefillEngine } from '../engine/prefill-engine.js';
import { engineConfigOf, setUpWorkerKv } from '../engine/worker-kv.js';
import { recordIncident } from '../incidents/record-incident.js';
import { createPageChecksum } from '../transfer/page-checksum.js';
import { systemClock } from '../util/clock.js';
import { type PrefillRequestLink, PrefillWorker, type PrefillWorkerOptions } from './prefill-worker.js';

/** What a prefill worker is built from; tests hand in subclasses (test/mutants/), production PREFILL_PARTS. */
export interface PrefillParts extends EngineParts {
  prefillWorker(options: PrefillWorkerOptions): PrefillWorker;
}

export const PREFILL_PARTS: PrefillParts = {
  ...ENGINE_PARTS,
  prefillWorker: (options) => new PrefillWorker(options),
};

export async function startPrefillService(
  runtime: WorkerRuntime,
  parts: PrefillParts = PREFILL_PARTS,
): Promise<RunningWorker> {
  const { config, model, log } = runtime;
  const connections = new Set<ControlConnection>();
  const kv = setUpWorkerKv(
    model,
    runtime.backend,
    config.settings,
    parts,
    announcedForwardPass(model, runtime.backend, connections),
  );
  const engineConfig = engineConfigOf(model, config.settings, kv.capacity.provenContext);
  let draining = false;
  const worker = parts.prefillWorker({
    engine: new PrefillEngine(engineConfig, kv.forward, kv.prefixCache),
    pool: kv.pool,
    prefixCache: kv.prefixCache,
    transport: runtime.transport,
    checksum: await createPageChecksum(),
    clock: systemClock,
    transferDeadlineMs: config.transferTimeoutMs,
    idleTimeoutMs: config.idleTimeoutMs,
    onIncident: (incident) => {
      recordIncident(runtime.incidents, log, incident);
      for (const conn of connections) conn.send({ type: 'incident', incident });
    },
    log,
  });
  const control = await serveControl({
    transport: runtime.transport,
    listen: config.controlListen,
    hello: workerHello(runtime, kv.capacity.provenContext),
    idleTimeoutMs: config.idleTimeoutMs,
    log,
    isDraining: () => draining,
    handlersFor: (conn) => {
      connections.add(conn);
      const link = (id: string): PrefillRequestLink => ({
        origin: conn,
        prefilled: () => conn.send({ type: 'prefilled', request: id }),
        end: (end) => conn.send({ type: 'end', request: id, end: endToWire(end) }),
      });
      return {
        message: (m) => {
          if (m.type === 'prefill') worker.job(m.request, m.ticket, m.decodeAddress, link(m.request.id));
          else if (m.type === 'cancel') worker.cancel(m.request);
          else if (m.type === 'stats') conn.send({ type: 'stats', id: m.id, stats: worker.stats() });
          else if (m.type === 'page_map') conn.send({ type: 'page_map', id: m.id, report: worker.pageMapReport() });
          else conn.close(`a prefill worker takes no ${m.type} message`);
        },
        closed: () => {
          connections.delete(conn);
          worker.cancelAll(conn);
        },
      };
    },
  });
  let controlClosed: Promise<void> | undefined;
  const closeControl = () => (controlClosed ??= control.close());
  const close = async () => {
    for (const conn of [...connections]) conn.close('the prefill worker is shutting down');
    await closeControl();
    await worker.close();
  };
  return {
    role: 'prefill',
    name: config.name,
    controlAddress: control.address,
    transferAddress: undefined,
    capacity: kv.capacity,
    drain: async (deadlineMs) => {
      draining = true;
      await drainControl(connections, closeControl, deadlineMs, log);
      await close();
    },
    close,
  };
}
