/**
 * The gateway's tenant table: API keys → tenants, and each tenant's limits. The gateway owns it for the whole
 * cluster (DESIGN I11): it enforces each tenant's concurrency itself (tenant-gate.ts) and sends each request's page
 * quota along with the request, so colocated and disaggregated deployments apply the same key file the same way.
 *
 * The key file holds only SHA-256 hashes of keys, never keys; a presented key is hashed and compared against every
 * entry in constant time (no early exit, timingSafeEqual), so timing tells nothing about which prefix matched. Without
 * a key file the gateway runs in single-tenant dev mode: every request is tenant "dev". `replace` swaps in a re-read
 * key file (SIGHUP): new requests see the new keys and limits; requests in flight keep the limits they started with.
 *
 * Key file (JSON):
 *   { "keys": [ { "tenant": "acme", "sha256": "<64 hex>" } ],
 *     "tenants": { "acme": { "concurrentRequestsMax": 8, "kvPagesMax": 512 } } }      ← limits optional
 */
import { createHash, timingSafeEqual } from 'node:crypto';
import { readFileSync, statSync } from 'node:fs';
import { assert } from '../util/assert.js';
import { errorMessage, KvfenceError } from '../util/errors.js';
import { LIMITS } from '../util/limits.js';

export const DEV_TENANT = 'dev';
const TENANT_ID = /^[A-Za-z0-9._-]{1,64}$/;
const HEX_SHA256 = /^[0-9a-f]{64}$/;

export interface TenantLimits {
  /** waiting + running requests of the tenant at once, cluster-wide; more get 429 */
  concurrentRequestsMax: number;
  /** KV pages the tenant's requests may hold together; more wait (one tenant cannot starve the others) */
  kvPagesMax: number;
}

export interface KeyEntry {
  tenant: string;
  sha256: string;
}

export interface KeyFile {
  keys: KeyEntry[];
  tenants: Map<string, Partial<TenantLimits>>;
}

export function hashApiKey(key: string): string {
  return createHash('sha256').update(key, 'utf8').digest('hex');
}

export function validTenantId(tenant: string): boolean {
  return TENANT_ID.test(tenant);
}

export function loadKeyFile(path: string): KeyFile {
  let text: string;
  try {
    if (statSync(path).size > LIMITS.apiKeyFileBytesMax)
      throw new Error(`larger than ${LIMITS.apiKeyFileBytesMax} bytes`);
    text = readFileSync(path, 'utf8');
  } catch (error) {
    throw new KvfenceError('file_not_found', `cannot read the API key file ${path}: ${errorMessage(error)}`);
  }
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch (error) {
    throw new KvfenceError('invalid_argument', `${path} is not JSON: ${errorMessage(error)}`);
  }
  return parseKeyFile(json, path);
}

export function parseKeyFile(json: unknown, path: string): KeyFile {
  const fail = (what: string) => new KvfenceError('invalid_argument', `${path}: ${what}`);
  if (!isObject(json) || !Array.isArray(json['keys']))
    throw fail('expected {"keys": [{"tenant": ..., "sha256": ...}]}');
  const keys: KeyEntry[] = json['keys'].map((entry: unknown, i: number) => {
    if (!isObject(entry)) throw fail(`keys[${i}] is not an object`);
    const { tenant, sha256 } = entry;
    if (typeof tenant !== 'string' || !validTenantId(tenant)) throw fail(`keys[${i}].tenant must match ${TENANT_ID}`);
    if ('key' in entry) throw fail(`keys[${i}] holds a plaintext key: store only its sha256 (kvfence keys hash)`);
    if (typeof sha256 !== 'string' || !HEX_SHA256.test(sha256))
      throw fail(`keys[${i}].sha256 must be 64 lowercase hex digits`);
    return { tenant, sha256 };
  });
  if (keys.length === 0) throw fail('no keys: remove --api-keys to run the single-tenant dev mode instead');
  if (new Set(keys.map((k) => k.sha256)).size !== keys.length) throw fail('the same key hash appears twice');
  const tenants = new Map<string, Partial<TenantLimits>>();
  const limits = json['tenants'] ?? {};
  if (!isObject(limits)) throw fail('"tenants" must be an object of per-tenant limits');
  for (const [tenant, value] of Object.entries(limits)) {
    if (!isObject(value)) throw fail(`tenants.${tenant} must be an object`);
    const entry: Partial<TenantLimits> = {};
    for (const name of ['concurrentRequestsMax', 'kvPagesMax'] as const) {
      const v = value[name];
      if (v === undefined) continue;
      if (typeof v !== 'number' || !Number.isInteger(v) || v < 1)
        throw fail(`tenants.${tenant}.${name} must be a positive integer`);
      entry[name] = v;
    }
    tenants.set(tenant, entry);
  }
  if (tenants.size + keys.length > LIMITS.tenantCountMax) throw fail('too many tenants');
  return { keys, tenants };
}

/**
 * Who a request is (a tenant, or undefined for a missing or wrong key), and what that tenant may use here. With
 * `gateways` > 1 (`--gateways N`: that many gateways share one cluster, each holding its own tenant gate), each enforces
 * 1/N of every limit, rounded down, so that together they hold the limits cluster-wide (I11); a limit that cannot be
 * split so (fewer than N requests or pages) is refused, loudly, at startup and at a reload.
 */
export class TenantDirectory {
  private file: KeyFile | undefined;
  private hashes: { tenant: string; hash: Buffer }[] = [];

  constructor(
    keyFile: KeyFile | undefined,
    /** limits of a tenant the key file gives none for (the --tenant-* flags), cluster-wide */
    readonly defaults: TenantLimits,
    readonly gateways = 1,
  ) {
    assert(Number.isInteger(gateways) && gateways >= 1, 'at least one gateway');
    this.checkSplit(keyFile);
    this.file = keyFile;
    this.hashes = hashesOf(keyFile);
  }

  get devMode(): boolean {
    return this.file === undefined;
  }

  get keyFile(): KeyFile | undefined {
    return this.file;
  }

  /** Every tenant with a key (dev mode: "dev"). */
  tenants(): string[] {
    return this.devMode ? [DEV_TENANT] : [...new Set(this.hashes.map((h) => h.tenant))];
  }

  /** What `tenant` may use through this gateway: its share of its cluster-wide limits */
  limitsOf(tenant: string): TenantLimits {
    return this.shareOf(this.clusterLimitsOf(tenant));
  }

  /**
   * `tenant`'s limits across the cluster: what a worker checks a request against (it serves every gateway, whose gates
   * each hold their share, so together they stay within these)
   */
  clusterLimitsOf(tenant: string): TenantLimits {
    return { ...this.defaults, ...this.file?.tenants.get(tenant) };
  }

  /** A gateway's share of cluster-wide limits */
  shareOf(limits: TenantLimits): TenantLimits {
    return {
      concurrentRequestsMax: Math.floor(limits.concurrentRequestsMax / this.gateways),
      kvPagesMax: Math.floor(limits.kvPagesMax / this.gateways),
    };
  }

  /** The smallest page quota any tenant has here: the capacity proof (I1) checks the context fits it. */
  smallestPageQuota(): number {
    const overrides = [...(this.file?.tenants.values() ?? [])].map((l) => l.kvPagesMax ?? this.defaults.kvPagesMax);
    return Math.floor(Math.min(this.defaults.kvPagesMax, ...overrides) / this.gateways);
  }

  /** Swaps in a re-read key file (dev mode stays dev mode: there is no file to re-read). */
  replace(keyFile: KeyFile): void {
    if (this.devMode) throw new KvfenceError('invalid_argument', 'dev mode has no key file to reload');
    this.checkSplit(keyFile);
    this.file = keyFile;
    this.hashes = hashesOf(keyFile);
  }

  /** Every limit, the defaults' and the key file's, splits into a share of at least one for each gateway */
  private checkSplit(keyFile: KeyFile | undefined): void {
    if (this.gateways === 1) return;
    const entries: [string, TenantLimits][] = [
      ['the default (--tenant-* flags)', this.defaults],
      ...[...(keyFile?.tenants ?? [])].map(([t, l]): [string, TenantLimits] => [
        `tenant ${t}`,
        { ...this.defaults, ...l },
      ]),
    ];
    for (const [who, limits] of entries) {
      for (const name of ['concurrentRequestsMax', 'kvPagesMax'] as const) {
        if (limits[name] < this.gateways) {
          throw new KvfenceError(
            'invalid_argument',
            `${who}: ${name} ${limits[name]} cannot be split across ${this.gateways} gateways (--gateways): ` +
              `give it at least ${this.gateways}, or run fewer gateways`,
          );
        }
      }
    }
  }

  authenticate(authorization: string | undefined): string | undefined {
    if (this.devMode) return DEV_TENANT;
    const match = /^Bearer\s+(\S+)\s*$/i.exec(authorization ?? '');
    const presented = createHash('sha256')
      .update(match?.[1] ?? '', 'utf8')
      .digest();
    let found: string | undefined;
    for (const entry of this.hashes) {
      // compare every entry, whatever matched before: the time does not depend on which one matches
      if (timingSafeEqual(presented, entry.hash) && match !== null) found = entry.tenant;
    }
    return found;
  }
}

function hashesOf(keyFile: KeyFile | undefined): { tenant: string; hash: Buffer }[] {
  return (keyFile?.keys ?? []).map((k) => ({ tenant: k.tenant, hash: Buffer.from(k.sha256, 'hex') }));
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}
