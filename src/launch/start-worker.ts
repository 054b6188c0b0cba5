/**
 * Starting one prefill or decode worker from its typed config: load the model, open the incident store, make the
 * authenticated transport, then the role's service (which proves I1 for its own pool before it listens). The CLI
 * (`kvfence prefill|decode`), a supervised child (worker-main.ts) and in-process test clusters all start workers here.
 */
import { pino } from 'pino';
import type { RunningWorker, WorkerConfig, WorkerRuntime } from '../cluster/worker-config.js';
import { selectBackend } from '../compute/select-backend.js';
import { DECODE_PARTS, type DecodeParts, startDecodeService } from '../decode/decode-service.js';
import { IncidentStore } from '../incidents/incident-store.js';
import type { LoadedModel } from '../model/load-model.js';
import { loadModel } from '../model/load-model.js';
import { PREFILL_PARTS, type PrefillParts, startPrefillService } from '../prefill/prefill-service.js';
import { systemClock } from '../util/clock.js';
import type { LogSink } from '../util/log.js';
import { TcpTransport } from '../wire/tcp-transport.js';
import type { TransferTransport, TransportOptions } from '../wire/transport.js';

export type WorkerParts = PrefillParts & DecodeParts;

export const WORKER_PARTS: WorkerParts = { ...PREFILL_PARTS, ...DECODE_PARTS };

/** What a worker runs on besides its config: production passes none; tests share a model, a store, faults. */
export interface WorkerDeps {
  parts?: WorkerParts;
  /** makes the transport (tests: one whose outgoing connections suffer faults) */
  transport?: (options: TransportOptions) => TransferTransport;
  model?: LoadedModel;
  incidents?: IncidentStore;
  log?: LogSink;
  announce?: (line: string) => void;
}

export async function startWorker(
  config: WorkerConfig,
  secret: Uint8Array,
  deps: WorkerDeps = {},
): Promise<RunningWorker> {
  const log = deps.log ?? pino({ level: config.logLevel }).child({ worker: config.name });
  const incidents = deps.incidents ?? new IncidentStore(config.incidentsDb);
  const transportOptions: TransportOptions = {
    secret,
    handshakeTimeoutMs: config.handshakeTimeoutMs,
    clock: systemClock,
    onRefused: (error) => log.warn({ err: error.message }, 'refused a connection that failed the handshake'),
  };
  try {
    const runtime: WorkerRuntime = {
      config,
      model: deps.model ?? loadModel(config.modelPath, { widenQ5_0: config.widenQ5_0 }),
      backend: selectBackend(config.backend, deps.announce ?? (() => {}), { q8Activations: config.q8Activations }),
      transport: (deps.transport ?? ((o) => new TcpTransport(o)))(transportOptions),
      incidents,
      log,
    };
    const parts = deps.parts ?? WORKER_PARTS;
    const worker =
      config.role === 'prefill' ? await startPrefillService(runtime, parts) : await startDecodeService(runtime, parts);
    if (deps.incidents !== undefined) return worker;
    return {
      ...worker,
      drain: async (deadlineMs) => {
        await worker.drain(deadlineMs);
        incidents.close();
      },
      close: async () => {
        await worker.close();
        incidents.close();
      },
    };
  } catch (error) {
    if (deps.incidents === undefined) incidents.close();
    throw error;
  }
}
