/**
 * `kvfence gateway`: the HTTP gateway of a disaggregated deployment (DESIGN §1). It loads the model only for its
 * tokenizer and chat template, connects to every prefill and decode worker over the authenticated control channel,
 * waits for their hellos (same model, same page size), advertises the smallest context they proved, and serves the
 * same OpenAI API as `kvfence serve` through a RemoteDispatcher.
 *
 * `startDisaggregatedServer` is `kvfence serve --disaggregated`: the same gateway over N prefill and M decode workers
 * that it starts itself as supervised child processes on loopback.
 */
import { fileURLToPath } from 'node:url';
import type { Command } from 'commander';
import { pino } from 'pino';
import { CLUSTER_SECRET_ENV, loadClusterSecret, newClusterSecretText } from '../cluster/cluster-secret.js';
import { RemoteDispatcher } from '../cluster/remote-dispatcher.js';
import { type SupervisedSpec, Supervisor } from '../cluster/supervisor.js';
import { servedModel } from '../gateway/served-model.js';
import { buildGateway, type Gateway } from '../gateway/server.js';
import { loadKeyFile, TenantDirectory } from '../gateway/tenants.js';
import { DEFAULT_MODEL, ensureGeneratedModel } from '../model/default-model.js';
import { loadModel } from '../model/load-model.js';
import { systemClock } from '../util/clock.js';
import { KvfenceError } from '../util/errors.js';
import { LIMITS } from '../util/limits.js';
import { TcpTransport } from '../wire/tcp-transport.js';
import { parseInteger } from './options.js';

export const GATEWAY_DEFAULTS = {
  host: '127.0.0.1',
  port: 8000,
  requestTimeoutMs: 600_000,
  connectTimeoutMs: 60_000,
  idleTimeoutMs: 10_000,
  handshakeTimeoutMs: 5_000,
  reconnectDelayMs: 250,
  statsTimeoutMs: 2_000,
  graceMs: 2_000,
} as const;

export interface GatewayConfig {
  modelPath?: string;
  modelName?: string;
  host: string;
  port: number;
  apiKeysPath?: string;
  /** control addresses (host:port) of the workers */
  prefill: readonly string[];
  decode: readonly string[];
  secret: Uint8Array;
  contextCap?: number;
  requestTimeoutMs: number;
  /** how long startup waits for every worker's hello */
  connectTimeoutMs: number;
  logLevel: string;
}

export interface RunningGateway {
  url: string;
  gateway: Gateway;
  dispatcher: RemoteDispatcher;
  devMode: boolean;
  close(): Promise<void>;
}

export async function startGateway(
  config: GatewayConfig,
  announce: (line: string) => void = () => {},
): Promise<RunningGateway> {
  const model = loadModel(config.modelPath ?? ensureGeneratedModel(DEFAULT_MODEL));
  const c = model.config;
  const tenants = new TenantDirectory(config.apiKeysPath === undefined ? undefined : loadKeyFile(config.apiKeysPath));
  const logger = pino({ level: config.logLevel });
  const served = servedModel(model, config.modelName ?? c.name);
  const dispatcher = new RemoteDispatcher({
    prefill: config.prefill,
    decode: config.decode,
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
    graceMs: GATEWAY_DEFAULTS.graceMs,
    log: logger,
  });
  try {
    await dispatcher.start(config.connectTimeoutMs);
  } catch (error) {
    await dispatcher.close();
    throw error;
  }
  const gateway = buildGateway({
    model: served,
    worker: dispatcher,
    tenants,
    logger,
    requestTimeoutMs: config.requestTimeoutMs,
    retryAfterS: 1,
  });
  const address = await gateway.app.listen({ host: config.host, port: config.port });
  if (tenants.devMode)
    announce(
      'kvfence: DEV MODE: no --api-keys given: single tenant "dev", no authentication. Do not expose this port.',
    );
  else announce(`kvfence: ${tenants.tenants().length} tenants from ${config.apiKeysPath}`);
  announce(`kvfence: gateway over ${config.prefill.length} prefill and ${config.decode.length} decode workers`);
  announce(`kvfence: serving model "${served.id}" (context ${dispatcher.provenContext}) on ${address}`);
  return {
    url: address,
    gateway,
    dispatcher,
    devMode: tenants.devMode,
    async close() {
      await dispatcher.close();
      await gateway.app.close();
    },
  };
}

/** `kvfence serve --disaggregated`: what a worker needs, as flags for its `kvfence prefill|decode` process. */
export interface DisaggregatedConfig {
  gateway: Omit<GatewayConfig, 'prefill' | 'decode' | 'secret'>;
  prefillCount: number;
  decodeCount: number;
  /** flags every worker gets (model, pool, bounds, log level…) */
  workerArgs: readonly string[];
  /** flags of prefill (or decode) workers only, after the shared ones (a later flag wins) */
  prefillArgs?: readonly string[];
  decodeArgs?: readonly string[];
  /** tests only: extra environment of the prefill (or decode) children */
  prefillEnv?: Readonly<Record<string, string>>;
  decodeEnv?: Readonly<Record<string, string>>;
  /** where incident stores go: one file per worker beside this path */
  incidentsDb: string;
  /** children's stdout shown (a CLI) or dropped (tests) */
  workerStdout: 'inherit' | 'ignore';
}

export interface RunningCluster extends RunningGateway {
  supervisor: Supervisor;
  /** the cluster secret the supervisor made (in-process only: tests open control connections with it) */
  secret: Uint8Array;
  workers: { name: string; role: 'prefill' | 'decode'; control: string; transfer?: string }[];
}

export async function startDisaggregatedServer(
  config: DisaggregatedConfig,
  announce: (line: string) => void = () => {},
): Promise<RunningCluster> {
  const secretText = newClusterSecretText();
  const supervisor = new Supervisor({
    cliPath: fileURLToPath(new URL('./main.js', import.meta.url)),
    env: { ...process.env, [CLUSTER_SECRET_ENV]: secretText },
    host: '127.0.0.1',
    readyTimeoutMs: 60_000,
    stdout: config.workerStdout,
    log: pino({ level: config.gateway.logLevel }),
  });
  const specs: SupervisedSpec[] = [];
  const spec = (role: 'prefill' | 'decode', i: number): SupervisedSpec => {
    const name = `${role}-${i}`;
    const extra = role === 'prefill' ? config.prefillArgs : config.decodeArgs;
    const env = role === 'prefill' ? config.prefillEnv : config.decodeEnv;
    return {
      name,
      role,
      args: [
        ...config.workerArgs,
        '--incidents-db',
        config.incidentsDb.replace(/(\.sqlite)?$/, `-${name}.sqlite`),
        ...(extra ?? []),
      ],
      ...(env !== undefined ? { env } : {}),
    };
  };
  for (let i = 0; i < config.prefillCount; i++) specs.push(spec('prefill', i));
  for (let i = 0; i < config.decodeCount; i++) specs.push(spec('decode', i));
  try {
    const ready = await Promise.all(specs.map((s) => supervisor.start(s)));
    const workers = specs.map((s, i) => ({
      name: s.name,
      role: s.role,
      control: ready[i]!.control,
      ...(ready[i]!.transfer !== undefined ? { transfer: ready[i]!.transfer } : {}),
    }));
    for (const w of workers)
      announce(
        `kvfence: ${w.role} worker ${w.name}: control ${w.control}${w.transfer !== undefined ? `, KV transfers ${w.transfer}` : ''}`,
      );
    const { secret } = loadClusterSecret(undefined, { [CLUSTER_SECRET_ENV]: secretText });
    const gateway = await startGateway(
      {
        ...config.gateway,
        prefill: workers.filter((w) => w.role === 'prefill').map((w) => w.control),
        decode: workers.filter((w) => w.role === 'decode').map((w) => w.control),
        secret,
      },
      announce,
    );
    return {
      ...gateway,
      supervisor,
      secret,
      workers,
      async close() {
        await gateway.close();
        await supervisor.close();
      },
    };
  } catch (error) {
    await supervisor.close();
    throw error;
  }
}

interface GatewayCliOptions {
  model?: string;
  servedModelName?: string;
  host: string;
  port: number;
  apiKeys?: string;
  prefill: string;
  decode: string;
  clusterSecretFile?: string;
  maxContext?: number;
  requestTimeoutMs: number;
  connectTimeoutMs: number;
  logLevel: string;
}

function addressList(flag: string, text: string): string[] {
  const list = text
    .split(',')
    .map((a) => a.trim())
    .filter((a) => a !== '');
  if (list.length === 0 || list.length > LIMITS.workerCountMax)
    throw new KvfenceError(
      'invalid_argument',
      `${flag} takes 1 to ${LIMITS.workerCountMax} host:port addresses, comma-separated`,
    );
  for (const a of list) {
    if (!/^[^\s]+:\d{1,5}$/.test(a)) throw new KvfenceError('invalid_argument', `${flag}: "${a}" is not host:port`);
  }
  return list;
}

export function addGatewayCommand(program: Command): void {
  const int = (min: number, max: number) => parseInteger(min, max);
  program
    .command('gateway')
    .description('run the HTTP gateway over prefill and decode workers (disaggregated serving)')
    .requiredOption('--prefill <addresses>', 'control addresses of the prefill workers, host:port, comma-separated')
    .requiredOption('--decode <addresses>', 'control addresses of the decode workers, host:port, comma-separated')
    .option('--cluster-secret-file <file>', 'file holding the cluster secret (else $KVFENCE_CLUSTER_SECRET)')
    .option('--model <file>', 'GGUF model file, for the tokenizer (default: the embedded generated model)')
    .option('--served-model-name <id>', "the model id clients send (default: the file's general.name)")
    .option('--host <host>', 'address to listen on', GATEWAY_DEFAULTS.host)
    .option('--port <n>', 'port (0: pick a free one)', int(0, 65535), GATEWAY_DEFAULTS.port)
    .option('--api-keys <file>', 'key file of tenants and key hashes; without it: single-tenant dev mode')
    .option(
      '--max-context <tokens>',
      'advertise at most this context (default: what the workers prove)',
      int(2, LIMITS.contextTokensMax),
    )
    .option(
      '--request-timeout-ms <ms>',
      'longest a request may take in all',
      int(1, LIMITS.queueTimeoutMsMax),
      GATEWAY_DEFAULTS.requestTimeoutMs,
    )
    .option(
      '--connect-timeout-ms <ms>',
      'longest wait for every worker at startup',
      int(1, LIMITS.queueTimeoutMsMax),
      GATEWAY_DEFAULTS.connectTimeoutMs,
    )
    .option('--log-level <level>', 'info, warn, error or silent', 'info')
    .action(async (o: GatewayCliOptions) => {
      if (!['info', 'warn', 'error', 'silent', 'debug'].includes(o.logLevel))
        throw new KvfenceError('invalid_argument', `unknown log level ${o.logLevel}`);
      const announce = (line: string) => process.stdout.write(`${line}\n`);
      const { secret, warning } = loadClusterSecret(o.clusterSecretFile, process.env);
      if (warning !== undefined) announce(`kvfence: WARNING: ${warning}`);
      const running = await startGateway(
        {
          ...(o.model !== undefined ? { modelPath: o.model } : {}),
          ...(o.servedModelName !== undefined ? { modelName: o.servedModelName } : {}),
          host: o.host,
          port: o.port,
          ...(o.apiKeys !== undefined ? { apiKeysPath: o.apiKeys } : {}),
          prefill: addressList('--prefill', o.prefill),
          decode: addressList('--decode', o.decode),
          secret,
          ...(o.maxContext !== undefined ? { contextCap: o.maxContext } : {}),
          requestTimeoutMs: o.requestTimeoutMs,
          connectTimeoutMs: o.connectTimeoutMs,
          logLevel: o.logLevel,
        },
        announce,
      );
      const stop = () => {
        void running.close().then(() => process.exit(0));
      };
      process.once('SIGINT', stop);
      process.once('SIGTERM', stop);
    });
}
