/**
 * `kvfence gateway`: the HTTP gateway of a disaggregated deployment (DESIGN §1). It loads the model only for its
 * tokenizer and chat template, connects to every prefill and decode worker over the authenticated control channel,
 * waits for their hellos (same model, same page size), advertises the smallest context they proved (within every
 * tenant's quota), and serves the same OpenAI API as `kvfence serve` through a RemoteDispatcher.
 */
import { pino } from 'pino';
import type { WorkerRole } from '../cluster/control-protocol.js';
import { RemoteDispatcher } from '../cluster/remote-dispatcher.js';
import type { LogLevel } from '../cluster/worker-config.js';
import { staticResolver, WorkerDiscovery, type WorkerResolver } from '../cluster/worker-discovery.js';
import { servedModel } from '../gateway/served-model.js';
import type { Gateway } from '../gateway/server.js';
import type { TenantDirectory } from '../gateway/tenants.js';
import { DEFAULT_MODEL, ensureGeneratedModel } from '../model/default-model.js';
import { loadModelHead, type ModelHead } from '../model/load-model.js';
import { systemClock } from '../util/clock.js';
import { TcpTransport } from '../wire/tcp-transport.js';
import { closeHttpCutting, drainHttp } from './drain-http.js';
import { type GatewayParts, type GatewaySettings, openGateway } from './open-gateway.js';

export const GATEWAY_DEFAULTS = {
  host: '127.0.0.1',
  port: 8000,
  requestTimeoutMs: 600_000,
  connectTimeoutMs: 60_000,
  idleTimeoutMs: 10_000,
  handshakeTimeoutMs: 5_000,
  reconnectDelayMs: 250,
  statsTimeoutMs: 2_000,
  /** a worker that answers nothing (not even the heartbeat) for this long is taken as gone */
  workerSilenceMs: 10_000,
  graceMs: 2_000,
  dnsRefreshMs: 5_000,
  /** one DNS lookup longer than this is given up for its round */
  dnsLookupTimeoutMs: 5_000,
  drainTimeoutMs: 30_000,
} as const;

export interface GatewayConfig extends GatewaySettings {
  modelPath?: string;
  modelName?: string;
  /** control addresses (host:port) of the workers: fixed lists… */
  prefill?: readonly string[];
  decode?: readonly string[];
  /** …or resolvers asked again every dnsRefreshMs (DNS names of headless Services; tests: fakes) */
  resolvers?: Record<WorkerRole, WorkerResolver>;
  dnsRefreshMs?: number;
  secret: Uint8Array;
  contextCap?: number;
  /** how long startup waits for every worker's hello */
  connectTimeoutMs: number;
  /** a worker silent this long is taken as gone (default GATEWAY_DEFAULTS.workerSilenceMs) */
  workerSilenceMs?: number;
  logLevel: LogLevel;
}

export interface RunningGateway {
  url: string;
  gateway: Gateway;
  dispatcher: RemoteDispatcher;
  tenants: TenantDirectory;
  devMode: boolean;
  reloadKeys(): string;
  /**
   * SIGTERM: /health/ready turns 503 at once, the listener closes, the requests in flight run to their end (at most
   * `deadlineMs`; then what is left fails with 503 worker_unavailable), then the workers' links close.
   */
  drain(deadlineMs: number): Promise<void>;
  close(): Promise<void>;
}

export async function startGateway(
  config: GatewayConfig,
  announce: (line: string) => void = () => {},
  parts: GatewayParts & { model?: ModelHead } = {},
): Promise<RunningGateway> {
  const model = parts.model ?? loadModelHead(config.modelPath ?? ensureGeneratedModel(DEFAULT_MODEL));
  const c = model.config;
  const logger = pino({ level: config.logLevel });
  const discovery = new WorkerDiscovery({
    resolvers: config.resolvers ?? {
      prefill: staticResolver(config.prefill ?? []),
      decode: staticResolver(config.decode ?? []),
    },
    refreshMs: config.dnsRefreshMs ?? GATEWAY_DEFAULTS.dnsRefreshMs,
    resolveTimeoutMs: GATEWAY_DEFAULTS.dnsLookupTimeoutMs,
    log: logger,
  });
  const found = await discovery.initial(config.connectTimeoutMs);
  // its tokenizer thread starts here, once the workers are found: a gateway that cannot start closes it (below)
  const served = servedModel(model, config.modelName ?? c.name);
  const dispatcher = new RemoteDispatcher({
    prefill: found.prefill,
    decode: found.decode,
    transport: new TcpTransport({
      secret: config.secret,
      handshakeTimeoutMs: GATEWAY_DEFAULTS.handshakeTimeoutMs,
      clock: systemClock,
    }),
    model: { modelName: served.id, vocabSize: c.vocabSize, layerCount: c.layerCount, kvDim: c.kvHeadCount * c.headDim },
    ...(config.contextCap !== undefined ? { contextCap: config.contextCap } : {}),
    idleTimeoutMs: GATEWAY_DEFAULTS.idleTimeoutMs,
    reconnectDelayMs: GATEWAY_DEFAULTS.reconnectDelayMs,
    statsTimeoutMs: GATEWAY_DEFAULTS.statsTimeoutMs,
    workerSilenceMs: config.workerSilenceMs ?? GATEWAY_DEFAULTS.workerSilenceMs,
    graceMs: GATEWAY_DEFAULTS.graceMs,
    log: logger,
  });
  let open: Awaited<ReturnType<typeof openGateway>>;
  try {
    const dynamic = config.resolvers?.prefill.dynamic === true || config.resolvers?.decode.dynamic === true;
    await dispatcher.start(config.connectTimeoutMs, dynamic);
    open = await openGateway(dispatcher, served, config, logger, announce, parts);
  } catch (error) {
    await Promise.all([dispatcher.close(), served.encoder.close()]);
    throw error;
  }
  discovery.start(dispatcher);
  const { prefill, decode } = config.resolvers ?? {};
  announce(
    `kvfence: gateway over ${found.prefill.length} prefill and ${found.decode.length} decode workers` +
      (prefill?.dynamic || decode?.dynamic
        ? ` (found at ${prefill?.source} and ${decode?.source}; asked again every ${config.dnsRefreshMs ?? GATEWAY_DEFAULTS.dnsRefreshMs} ms)`
        : ''),
  );
  announce(`kvfence: serving model "${served.id}" (context ${open.context}) on ${open.url}`);
  return {
    url: open.url,
    gateway: open.gateway,
    dispatcher,
    tenants: open.tenants,
    devMode: open.tenants.devMode,
    reloadKeys: () => open.reloadKeys(),
    async drain(deadlineMs: number) {
      open.beginShutdown();
      discovery.stop();
      await drainHttp(
        () => open.close(),
        async () => {
          if (dispatcher.inFlight > 0)
            logger.warn({ requests: dispatcher.inFlight, deadlineMs }, 'drain deadline passed; failing what is left');
          await dispatcher.close();
        },
        () => open.cutConnections(),
        deadlineMs,
      );
    },
    async close() {
      open.beginShutdown();
      discovery.stop();
      await dispatcher.close();
      await closeHttpCutting(open.close(), () => open.cutConnections());
    },
  };
}
