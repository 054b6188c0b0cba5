/**
 * The HTTP gateway over any InferenceWorker (the colocated worker, or the remote dispatcher of a cluster): the tenant
 * table from the key file, the quota half of I1, fastify listening, and a key-file reload (SIGHUP) that applies to new
 * requests without a restart. Both `kvfence serve` and `kvfence gateway` open their gateway here.
 */
import type { FastifyBaseLogger } from 'fastify';
import type { InferenceWorker } from '../engine/inference-worker.js';
import type { CompletionRunClass } from '../gateway/completion-run.js';
import { checkReloadedQuotas, proveTenantQuotas } from '../gateway/quota-proof.js';
import type { ServedModel } from '../gateway/served-model.js';
import { buildGateway, type Gateway } from '../gateway/server.js';
import { loadKeyFile, TenantDirectory } from '../gateway/tenants.js';
import { errorMessage } from '../util/errors.js';
import { LIMITS } from '../util/limits.js';

export interface GatewaySettings {
  host: string;
  port: number;
  apiKeysPath?: string;
  /** limits of a tenant the key file gives none for */
  tenantConcurrentMax: number;
  tenantKvPages?: number;
  clampContext: boolean;
  /** the longest a request waits for its tenant's pages (then 503) */
  queueTimeoutMs: number;
  requestTimeoutMs: number;
}

export interface OpenGateway {
  url: string;
  gateway: Gateway;
  tenants: TenantDirectory;
  /** the advertised context: the workers' proof within every tenant's quota */
  context: number;
  /** re-reads the key file; returns what changed, or throws (the old table stays) */
  reloadKeys(): string;
  close(): Promise<void>;
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
  );
  const proof = proveTenantQuotas(worker.provenContext, worker.pageSize, tenants, settings.clampContext);
  if (proof.clamped) announce(`kvfence: ${proof.summary}`);
  const context = proof.provenContext;
  const gateway = buildGateway({
    model,
    worker,
    tenants,
    logger,
    context,
    queueTimeoutMs: settings.queueTimeoutMs,
    requestTimeoutMs: settings.requestTimeoutMs,
    retryAfterS: 1,
    ...(parts.completionRun !== undefined ? { completionRun: parts.completionRun } : {}),
  });
  const url = await gateway.app.listen({ host: settings.host, port: settings.port });
  if (tenants.devMode)
    announce(
      'kvfence: DEV MODE: no --api-keys given: single tenant "dev", no authentication. Do not expose this port.',
    );
  else announce(`kvfence: ${tenants.tenants().length} tenants from ${settings.apiKeysPath}`);
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
    close: () => gateway.app.close(),
  };
}

/** SIGHUP re-reads the key file; a bad file is reported and the running table stays. */
export function reloadKeysOnHangup(open: { reloadKeys(): string }, announce: (line: string) => void): () => void {
  const onHangup = () => {
    try {
      announce(`kvfence: ${open.reloadKeys()}`);
    } catch (error) {
      announce(`kvfence: key file NOT reloaded: ${errorMessage(error)}`);
    }
  };
  process.on('SIGHUP', onHangup);
  return () => process.off('SIGHUP', onHangup);
}
