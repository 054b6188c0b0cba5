/**
 * A decode worker process's service: its KV and engine (I1 proved for its own pool, or no start), the transfer
 * listener through which prefill workers push KV, the DecodeWorker, and the control listener through which gateways
 * reserve, cancel and read stats. Incidents are recorded here and reported to every connected gateway.
 */

import type { ControlConnection } from '../cluster/control-channel.js';
import { endToWire } from '../cluster/control-protocol.js';
import { serveControl } from '../cluster/control-server.js';
import { announcedForwardPass } from '../cluster/long-pass.js';
import { type RunningWorker, WORKER_DEFAULTS, type WorkerRuntime, workerHello } from '../cluster/worker-config.js';
import { drainControl } from '../cluster/worker-drain.js';
import { BatchRunner } from '../engine/batch-runner.js';
import { ENGINE_PARTS, type EngineParts } from '../engine/engine-parts.js';
import { engineConfigOf, setUpWorkerKv } from '../engine/worker-kv.js';
import { recordIncident } from '../incidents/record-incident.js';
import { createPageChecksum } from '../transfer/page-checksum.js';
import { TransferReceiver, type TransferReceiverOptions } from '../transfer/transfer-receiver.js';
import { systemClock } from '../util/clock.js';
import type { TransferListener } from '../wire/transport.js';
import { type DecodeRequestLink, DecodeWorker } from './decode-worker.js';

/** What a decode worker is built from; tests hand in subclasses (test/mutants/), production DECODE_PARTS. */
export interface DecodeParts extends EngineParts {
  receiver(options: TransferReceiverOptions): TransferReceiver;
}

export const DECODE_PARTS: DecodeParts = {
  ...ENGINE_PARTS,
  receiver: (options) => new TransferReceiver(options),
};

export async function startDecodeService(
  runtime: WorkerRuntime,
  parts: DecodeParts = DECODE_PARTS,
): Promise<RunningWorker> {
  const { config, model, log } = runtime;
  const settings = { ...config.settings, prefixCachePages: 0 }; // decode never learns where prompt pages came from
  const connections = new Set<ControlConnection>();
  const kv = setUpWorkerKv(
    model,
    runtime.backend,
    settings,
    parts,
    announcedForwardPass(model, runtime.backend, connections),
  );
  const engineConfig = engineConfigOf(model, settings, kv.capacity.provenContext);
  let draining = false;
  const runner = new BatchRunner({
    engine: parts.engine(engineConfig, kv.forward, {}),
    onIncident: (incident) => {
      recordIncident(runtime.incidents, log, incident);
      for (const conn of connections) conn.send({ type: 'incident', incident });
    },
    log,
    now: Date.now,
  });
  const receiver = parts.receiver({
    checksum: await createPageChecksum(),
    clock: systemClock,
    idleTimeoutMs: config.idleTimeoutMs,
  });
  const worker = new DecodeWorker({
    runner,
    pool: kv.pool,
    receiver,
    provenContext: kv.capacity.provenContext,
    vocabSize: model.config.vocabSize,
    transferDeadlineMs: config.transferTimeoutMs,
    runningMax: settings.runningMax,
    waitingMax: settings.waitingMax,
    queueTimeoutMs: settings.queueTimeoutMs,
    log,
  });
  let transferListener: TransferListener;
  try {
    transferListener = await runtime.transport.listen(
      config.transferListen ?? WORKER_DEFAULTS.decodeTransfer,
      (channel) => receiver.accept(channel),
    );
  } catch (error) {
    await worker.close();
    throw error;
  }
  const transferAddress = config.transferAdvertise ?? transferListener.address;
  const control = await serveControl({
    transport: runtime.transport,
    listen: config.controlListen,
    hello: workerHello(runtime, kv.capacity.provenContext, transferAddress),
    idleTimeoutMs: config.idleTimeoutMs,
    log,
    isDraining: () => draining,
    handlersFor: (conn) => {
      connections.add(conn);
      const link = (id: string): DecodeRequestLink => ({
        origin: conn,
        reserved: (ticket) => conn.send({ type: 'reserved', request: id, ticket }),
        token: (token, choice) => conn.send({ type: 'token', request: id, token, ...(choice > 0 ? { choice } : {}) }),
        end: (end) => conn.send({ type: 'end', request: id, end: endToWire(end) }),
      });
      return {
        message: (m) => {
          if (m.type === 'reserve') worker.reserve(m.request, link(m.request.id));
          else if (m.type === 'cancel') worker.cancel(m.request);
          else if (m.type === 'end_choice') worker.endChoice(m.request, m.choice, conn);
          else if (m.type === 'stats') conn.send({ type: 'stats', id: m.id, stats: worker.stats() });
          else if (m.type === 'page_map') conn.send({ type: 'page_map', id: m.id, report: worker.pageMapReport() });
          else conn.close(`a decode worker takes no ${m.type} message`);
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
    for (const conn of [...connections]) conn.close('the decode worker is shutting down');
    await closeControl();
    // the listener's close waits for its connections: the worker's close ends the transfers still open
    const transfersClosed = transferListener.close();
    await worker.close();
    await transfersClosed;
  };
  return {
    role: 'decode',
    name: config.name,
    controlAddress: control.address,
    transferAddress,
    capacity: kv.capacity,
    drain: async (deadlineMs) => {
      draining = true;
      await drainControl(connections, closeControl, deadlineMs, log);
      await close();
    },
    close,
  };
}
