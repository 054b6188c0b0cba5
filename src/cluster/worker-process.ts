/**
 * Starting a prefill or decode worker process: load the model, prove I1 for this worker's own pool (or refuse to
 * start, both numbers in the message), open the control listener (and, for decode, the transfer listener), and serve
 * control connections: each begins with this worker's hello; its requests are cancelled when it closes.
 */

import { ColocatedWorker } from '../colocated/colocated-worker.js';
import type { Backend } from '../compute/backend.js';
import { ForwardPass } from '../compute/forward.js';
import { type DecodeRequestLink, DecodeWorker } from '../decode/decode-worker.js';
import type { LogSink } from '../engine/inference-worker.js';
import { PrefillEngine } from '../engine/prefill-engine.js';
import type { IncidentStore } from '../incidents/incident-store.js';
import { type CapacityProof, proveCapacity } from '../kv/capacity.js';
import { makeKvLayout } from '../kv/kv-layout.js';
import { PagePool } from '../kv/page-pool.js';
import type { LoadedModel } from '../model/load-model.js';
import {
  type PrefillRequestLink,
  PrefillWorker,
  type PrefillWorkerMutants,
  type TestTransferFaults,
} from '../prefill/prefill-worker.js';
import { parseTestFaults } from '../prefill/test-faults.js';
import { type ByteFaultPlan, withByteFaults } from '../transfer/fault-injection.js';
import { createPageChecksum } from '../transfer/page-checksum.js';
import { TransferReceiver, type TransferReceiverMutants } from '../transfer/transfer-receiver.js';
import { systemClock } from '../util/clock.js';
import type { FrameChannel } from '../wire/frame-channel.js';
import { TcpTransport } from '../wire/tcp-transport.js';
import type { TransferListener } from '../wire/transport.js';
import { ControlConnection } from './control-channel.js';
import { type ControlMessage, endToWire, type WorkerHello, type WorkerRole } from './control-protocol.js';

/** Test builds only: skips a prefill worker's capacity proof (see docs/disaggregation.md). Inert unless exactly "1". */
export const TEST_SKIP_CAPACITY_PROOF_ENV = 'KVFENCE_TEST_UNSAFE_SKIP_CAPACITY_PROOF';

export interface WorkerProcessConfig {
  role: WorkerRole;
  name: string;
  model: LoadedModel;
  modelName: string;
  backend: Backend;
  pageSize: number;
  pageCount: number;
  contextCap?: number;
  clampContext: boolean;
  runningMax: number;
  waitingMax: number;
  queueTimeoutMs: number;
  prefillChunkTokens: number;
  stepTokenBudget: number;
  tenantConcurrentMax: number;
  tenantKvPagesMax: number;
  /** host:port of the control listener (port 0: any) */
  controlListen: string;
  /** decode: host:port of the transfer listener, and the address prefill workers are told to use */
  transferListen?: string;
  transferAdvertise?: string;
  transferTimeoutMs: number;
  idleTimeoutMs: number;
  handshakeTimeoutMs: number;
  secret: Uint8Array;
  incidents: IncidentStore;
  log: LogSink;
  env: NodeJS.ProcessEnv;
  /** mutation self-test hook: see test/mutants/ (no production caller sets it) */
  mutants?: { prefill?: PrefillWorkerMutants; receiver?: TransferReceiverMutants };
}

export interface RunningWorker {
  role: WorkerRole;
  controlAddress: string;
  transferAddress: string | undefined;
  capacity: CapacityProof;
  close(): Promise<void>;
}

export async function startWorkerProcess(config: WorkerProcessConfig): Promise<RunningWorker> {
  const c = config.model.config;
  const transport = new TcpTransport({
    secret: config.secret,
    handshakeTimeoutMs: config.handshakeTimeoutMs,
    clock: systemClock,
    onRefused: (error) => config.log.warn({ err: error.message }, 'refused a connection that failed the handshake'),
  });
  const hello = (provenContext: number, transferAddress?: string): WorkerHello => ({
    role: config.role,
    name: config.name,
    modelName: config.modelName,
    vocabSize: c.vocabSize,
    layerCount: c.layerCount,
    kvDim: c.kvHeadCount * c.headDim,
    pageSize: config.pageSize,
    provenContext,
    ...(transferAddress !== undefined ? { transferAddress } : {}),
  });
  if (config.role === 'prefill') return startPrefill(config, transport, hello);
  return startDecode(config, transport, hello);
}

function proveWorkerCapacity(config: WorkerProcessConfig, unsafeSkip: boolean): CapacityProof {
  const modelContext = config.model.config.contextLength;
  if (unsafeSkip) {
    const wanted = Math.min(modelContext, config.contextCap ?? modelContext);
    return {
      provenContext: wanted,
      wantedContext: wanted,
      pagesPerRequestMax: Math.ceil(wanted / config.pageSize),
      clamped: false,
      summary: `WARNING: TEST BUILD: capacity proof SKIPPED (${TEST_SKIP_CAPACITY_PROOF_ENV}=1): context ${wanted} advertised UNPROVEN for a pool of ${config.pageCount} pages of ${config.pageSize} tokens`,
    };
  }
  return proveCapacity({
    modelContext,
    ...(config.contextCap !== undefined ? { requestedContext: config.contextCap } : {}),
    pageCount: config.pageCount,
    pageSize: config.pageSize,
    tenantPagesMin: config.tenantKvPagesMax,
    clamp: config.clampContext,
  });
}

type HelloOf = (provenContext: number, transferAddress?: string) => WorkerHello;

async function startPrefill(
  config: WorkerProcessConfig,
  transport: TcpTransport,
  hello: HelloOf,
): Promise<RunningWorker> {
  const c = config.model.config;
  const capacity = proveWorkerCapacity(config, config.env[TEST_SKIP_CAPACITY_PROOF_ENV] === '1');
  const pool = new PagePool(makeKvLayout(c.layerCount, c.kvHeadCount * c.headDim, config.pageSize), config.pageCount);
  const engine = new PrefillEngine(
    {
      provenContext: capacity.provenContext,
      vocabSize: c.vocabSize,
      runningMax: config.runningMax,
      waitingMax: config.waitingMax,
      queueTimeoutMs: config.queueTimeoutMs,
      prefillChunkTokens: config.prefillChunkTokens,
      stepTokenBudget: config.stepTokenBudget,
    },
    new ForwardPass(config.model, config.backend, pool),
  );
  const faults: TestTransferFaults | undefined = parseTestFaults(config.env);
  const connections = new Set<ControlConnection>();
  const worker = new PrefillWorker({
    engine,
    pool,
    transport,
    ...(faults !== undefined
      ? {
          faults,
          faultTransport: (plan: ByteFaultPlan) =>
            new TcpTransport({
              secret: config.secret,
              handshakeTimeoutMs: config.handshakeTimeoutMs,
              clock: systemClock,
              wrapConnectStream: (stream) => withByteFaults(stream, plan),
            }),
        }
      : {}),
    checksum: await createPageChecksum(),
    clock: systemClock,
    transferDeadlineMs: config.transferTimeoutMs,
    idleTimeoutMs: config.idleTimeoutMs,
    onIncident: (incident) => {
      recordIncident(config, incident);
      for (const conn of connections) conn.send({ type: 'incident', incident });
    },
    log: config.log,
    ...(config.mutants?.prefill !== undefined ? { mutants: config.mutants.prefill } : {}), // mutation self-test hook: see test/mutants/
  });
  const helloMessage = hello(capacity.provenContext);
  const control = await transport.listen(config.controlListen, (channel) =>
    serveControl(config, channel, helloMessage, (conn) => {
      connections.add(conn);
      const link = (id: string): PrefillRequestLink => ({
        origin: conn,
        prefilled: () => conn.send({ type: 'prefilled', request: id }),
        end: (end) => conn.send({ type: 'end', request: id, end: endToWire(end) }),
      });
      return {
        message: (m) => {
          if (m.type === 'prefill') {
            worker.job(m.request, m.ticket, m.decodeAddress, link(m.request.id));
          } else if (m.type === 'cancel') {
            worker.cancel(m.request);
          } else if (m.type === 'stats') {
            conn.send({ type: 'stats', id: m.id, stats: worker.stats() });
          } else conn.close(`a prefill worker takes no ${m.type} message`);
        },
        closed: () => {
          connections.delete(conn);
          worker.cancelAll(conn);
        },
      };
    }),
  );
  return {
    role: 'prefill',
    controlAddress: control.address,
    transferAddress: undefined,
    capacity,
    close: async () => {
      await control.close();
      await worker.close();
    },
  };
}

async function startDecode(
  config: WorkerProcessConfig,
  transport: TcpTransport,
  hello: HelloOf,
): Promise<RunningWorker> {
  const c = config.model.config;
  const loop = new ColocatedWorker({
    model: config.model,
    backend: config.backend,
    pageSize: config.pageSize,
    pageCount: config.pageCount,
    ...(config.contextCap !== undefined ? { contextCap: config.contextCap } : {}),
    clampContext: config.clampContext,
    runningMax: config.runningMax,
    waitingMax: config.waitingMax,
    queueTimeoutMs: config.queueTimeoutMs,
    prefillChunkTokens: config.prefillChunkTokens,
    stepTokenBudget: config.stepTokenBudget,
    tenantLimits: {
      defaults: { concurrentRequestsMax: config.tenantConcurrentMax, kvPagesMax: config.tenantKvPagesMax },
      overrides: new Map(),
    },
    incidents: config.incidents,
    log: config.log,
  });
  const receiver = new TransferReceiver({
    checksum: await createPageChecksum(),
    clock: systemClock,
    idleTimeoutMs: config.idleTimeoutMs,
    ...(config.mutants?.receiver !== undefined ? { mutants: config.mutants.receiver } : {}), // mutation self-test hook: see test/mutants/
  });
  const worker = new DecodeWorker({
    loop,
    receiver,
    transferDeadlineMs: config.transferTimeoutMs,
    runningMax: config.runningMax,
    waitingMax: config.waitingMax,
    queueTimeoutMs: config.queueTimeoutMs,
    tenantConcurrentMax: config.tenantConcurrentMax,
    tenantKvPagesMax: config.tenantKvPagesMax,
    isStopToken: (id) => config.model.tokenizer.isEndOfGeneration(id),
    vocabSize: c.vocabSize,
    log: config.log,
  });
  let transferListener: TransferListener;
  try {
    transferListener = await transport.listen(config.transferListen ?? '127.0.0.1:0', (channel) =>
      receiver.accept(channel),
    );
  } catch (error) {
    await loop.close();
    throw error;
  }
  const transferAddress = config.transferAdvertise ?? transferListener.address;
  const helloMessage = hello(loop.provenContext, transferAddress);
  const incidentConnections = new Set<ControlConnection>();
  loop.onIncident((incident) => {
    for (const conn of incidentConnections) conn.send({ type: 'incident', incident });
  });
  const control = await transport.listen(config.controlListen, (channel) =>
    serveControl(config, channel, helloMessage, (conn) => {
      incidentConnections.add(conn);
      const linkFor = (id: string): DecodeRequestLink => ({
        origin: conn,
        reserved: (ticket) => conn.send({ type: 'reserved', request: id, ticket }),
        token: (token) => conn.send({ type: 'token', request: id, token }),
        end: (end) => conn.send({ type: 'end', request: id, end: endToWire(end) }),
      });
      return {
        message: (m) => {
          if (m.type === 'reserve') {
            worker.reserve(m.request, linkFor(m.request.id));
          } else if (m.type === 'cancel') {
            worker.cancel(m.request);
          } else if (m.type === 'stats') {
            conn.send({ type: 'stats', id: m.id, stats: worker.stats() });
          } else conn.close(`a decode worker takes no ${m.type} message`);
        },
        closed: () => {
          incidentConnections.delete(conn);
          worker.cancelAll(conn);
        },
      };
    }),
  );
  return {
    role: 'decode',
    controlAddress: control.address,
    transferAddress,
    capacity: loop.capacity,
    close: async () => {
      await control.close();
      await transferListener.close();
      await worker.close();
    },
  };
}

interface ConnectionHandlers {
  message(message: ControlMessage): void;
  closed(): void;
}

function serveControl(
  config: WorkerProcessConfig,
  channel: FrameChannel,
  helloMessage: WorkerHello,
  handlersFor: (conn: ControlConnection) => ConnectionHandlers,
): void {
  let handlers: ConnectionHandlers | undefined;
  const conn = new ControlConnection(
    channel,
    {
      message: (m) => handlers?.message(m),
      close: (why) => {
        config.log.info({ why }, 'control connection closed; its requests are cancelled');
        handlers?.closed();
      },
    },
    config.idleTimeoutMs,
  );
  handlers = handlersFor(conn);
  conn.send({ type: 'hello', hello: helloMessage });
}

function recordIncident(config: WorkerProcessConfig, incident: Parameters<IncidentStore['record']>[0]): void {
  try {
    config.incidents.record(incident);
  } catch {
    // logged below either way
  }
  config.log.error(
    { tenant: incident.tenant, request: incident.request, reason: incident.violation.reason },
    'KV isolation check failed at prefill; request aborted',
  );
}
