/**
 * The HTTP gateway over any InferenceWorker (the colocated worker, or the remote dispatcher of a cluster): the tenant
 * table from the key file, the quota half of I1, the body limit the proven context allows, the admin token, fastify
 * listening, and a key-file reload (SIGHUP) that applies to new requests without a restart. Both `kvfence serve` and
 * `kvfence gateway` open their gateway here.
 */
import type { FastifyBaseLogger } from 'fastify';
import type { InferenceWorker } from '../engine/inference-worker.js';
import { AdminToken } from '../gateway/admin-token.js';
import { bodyLimitFor } from '../gateway/body-limit.js';
import type { CompletionRunClass } from '../gateway/completion-run.js';
import { HTTP_DEFAULTS, type HttpLimits } from '../gateway/http-limits.js';
import { checkReloadedQuotas, proveTenantQuotas } from '../gateway/quota-proof.js';
import type { ServedModel } from '../gateway/served-model.js';
import { buildGateway, type Gateway } from '../gateway/server.js';
import { loadKeyFile, TenantDirectory } from '../gateway/tenants.js';
import { listenFailure } from '../util/errors.js';
import { LIMITS } from '../util/limits.js';

export interface GatewaySettings {
  host: string;
  port: number;
  apiKeysPath?: string;
  /** limits of a tenant the key file gives none for */
  tenantConcurrentMax: number;
  tenantKvPages?: number;
  /** how many gateways share the cluster: each enforces its share of every tenant limit (TenantDirectory); default 1 */
  gateways?: number;
  clampContext: boolean;
  /** the longest a request waits for its tenant's pages (then 503) */
  queueTimeoutMs: number;
  requestTimeoutMs: number;
  /** HTTP timeouts and the unauthenticated-connection bound; absent fields: HTTP_DEFAULTS */
  http?: Partial<HttpLimits>;
  /** file holding the token that may read /metrics' per-tenant series; absent: they are left out */
  adminTokenFile?: string;
}

export interface OpenGateway {
  url: string;
  gateway: Gateway;
  tenants: TenantDirectory;
  /** the advertised context: the workers' proof within every tenant's quota */
  context: number;
  /** re-reads the key file; returns what changed, or throws (the old table stays) */
  reloadKeys(): string;
  /** /health/ready answers 503 from now on (call before stopping the workers) */
  beginShutdown(): void;
  close(): Promise<void>;
  /** closes every HTTP connection at once, requests in flight or not (the end of a shutdown: drain-http.ts) */
  cutConnections(): void;
}

export interface GatewayParts {
  /** the completion handler (test/mutants/ hands in a subclass) */
  completionRun?: CompletionRunClass;
}

export async function openGateway(
  worker: InferenceWorker,
  model: ServedModel,
  settings: GatewaySettings,
  logger: FastifyBaseLogger,
  announce: (line: string) => void,
  parts: GatewayParts = {},
): Promise<OpenGateway> {
  const tenants = new TenantDirectory(
    settings.apiKeysPath === undefined ? undefined : loadKeyFile(settings.apiKeysPath),
    {
      concurrentRequestsMax: settings.tenantConcurrentMax,
      kvPagesMax: settings.tenantKvPages ?? LIMITS.kvPagesMax,
    },
    settings.gateways,
  );
  const proof = proveTenantQuotas(worker.provenContext, worker.pageSize, tenants, settings.clampContext);
  if (proof.clamped) announce(`kvfence: ${proof.summary}`);
  const context = proof.provenContext;
  const adminToken =
    settings.adminTokenFile === undefined ? undefined : AdminToken.fromFile(settings.adminTokenFile, announce);
  const bodyLimit = bodyLimitFor(context, model.tokenizer);
  const gateway = buildGateway({
    model,
    worker,
    tenants,
    logger,
    context,
    queueTimeoutMs: settings.queueTimeoutMs,
    requestTimeoutMs: settings.requestTimeoutMs,
    retryAfterS: 1,
    bodyLimitBytes: bodyLimit.bytes,
    http: { ...HTTP_DEFAULTS, ...settings.http },
    ...(adminToken !== undefined ? { adminToken } : {}),
    ...(parts.completionRun !== undefined ? { completionRun: parts.completionRun } : {}),
  });
  let url: string;
  try {
    url = await gateway.app.listen({ host: settings.host, port: settings.port });
  } catch (error) {
    await gateway.app.close(); // its tokenizer and body threads
    throw listenFailure(error, `${settings.host}:${settings.port}`);
  }
  if (tenants.devMode)
    announce(
      'kvfence: DEV MODE: no --api-keys given: single tenant "dev", no authentication. Do not expose this port.',
    );
  else announce(`kvfence: ${tenants.tenants().length} tenants from ${settings.apiKeysPath}`);
  announce(
    `kvfence: request bodies up to ${bodyLimit.bytes} bytes (context ${context} × longest token ` +
      `${bodyLimit.longestTokenBytes} bytes, JSON-escaped, + other fields)`,
  );
  announce(
    adminToken !== undefined
      ? `kvfence: /metrics per-tenant series for the admin token in ${settings.adminTokenFile}`
      : 'kvfence: /metrics per-tenant series off (no --admin-token-file)',
  );
  return {
    url,
    gateway,
    tenants,
    context,
    reloadKeys() {
      const path = settings.apiKeysPath;
      if (path === undefined) return 'dev mode: no key file to reload';
      const file = loadKeyFile(path);
      checkReloadedQuotas(file, tenants, context, worker.pageSize);
      tenants.replace(file);
      return `${tenants.tenants().length} tenants reloaded from ${path}`;
    },
    beginShutdown() {
      gateway.state.shuttingDown = true;
    },
    close: () => {
      gateway.state.shuttingDown = true;
      return gateway.app.close();
    },
    cutConnections: () => gateway.app.server.closeAllConnections(),
  };
}
