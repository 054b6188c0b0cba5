/**
 * The auditor's key file: the API keys of two or more tenants of the endpoint under audit (plaintext: the auditor is
 * a client). Two formats, told apart by the first non-blank character:
 *
 *   # text: one "tenant key" per line; blank lines and lines starting with # are ignored
 *   acme   sk-live-1111
 *   globex sk-live-2222
 *
 *   [{"tenant": "acme", "key": "sk-live-1111"}, {"tenant": "globex", "key": "sk-live-2222"}]   (JSON)
 *
 * Several keys of one tenant are allowed (its requests rotate over them); two tenants sharing a key are refused.
 */
import { readFileSync, statSync } from 'node:fs';
import { errorMessage, KvfenceError } from '../util/errors.js';

export interface AuditTenant {
  readonly name: string;
  /** every key of this tenant, at least one */
  readonly keys: readonly string[];
}

export const AUDIT_KEY_FILE_BYTES_MAX = 1024 * 1024;
export const AUDIT_TENANTS_MAX = 64;
const TENANT_NAME = /^[A-Za-z0-9._-]{1,64}$/;
const KEY = /^\S{1,4096}$/;

export function loadAuditKeys(path: string): AuditTenant[] {
  let text: string;
  try {
    if (statSync(path).size > AUDIT_KEY_FILE_BYTES_MAX)
      throw new Error(`larger than ${AUDIT_KEY_FILE_BYTES_MAX} bytes`);
    text = readFileSync(path, 'utf8');
  } catch (error) {
    throw new KvfenceError('file_not_found', `cannot read the key file ${path}: ${errorMessage(error)}`);
  }
  return parseAuditKeys(text, path);
}

export function parseAuditKeys(text: string, path: string): AuditTenant[] {
  const pairs = text.trimStart().startsWith('[') ? jsonPairs(text, path) : textPairs(text, path);
  const fail = (what: string) => new KvfenceError('invalid_argument', `${path}: ${what}`);
  const byTenant = new Map<string, string[]>();
  const ownerOfKey = new Map<string, string>();
  for (const [tenant, key] of pairs) {
    if (!TENANT_NAME.test(tenant)) throw fail(`tenant name "${tenant}" must be 1-64 of A-Z a-z 0-9 . _ -`);
    if (!KEY.test(key)) throw fail(`the key of tenant ${tenant} must be 1-4096 non-space characters`);
    const owner = ownerOfKey.get(key);
    if (owner !== undefined && owner !== tenant) throw fail(`tenants ${owner} and ${tenant} share a key`);
    ownerOfKey.set(key, tenant);
    const keys = byTenant.get(tenant) ?? [];
    if (!keys.includes(key)) keys.push(key);
    byTenant.set(tenant, keys);
  }
  if (byTenant.size < 2) throw fail(`keys of at least 2 tenants are needed, found ${byTenant.size}`);
  if (byTenant.size > AUDIT_TENANTS_MAX) throw fail(`at most ${AUDIT_TENANTS_MAX} tenants`);
  return [...byTenant].map(([name, keys]) => ({ name, keys }));
}

function textPairs(text: string, path: string): [string, string][] {
  const pairs: [string, string][] = [];
  const lines = text.split(/\r?\n/);
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i]!.trim();
    if (line === '' || line.startsWith('#')) continue;
    const fields = line.split(/\s+/);
    if (fields.length !== 2) {
      throw new KvfenceError(
        'invalid_argument',
        `${path}:${i + 1}: expected "tenant key", found ${fields.length} fields`,
      );
    }
    pairs.push([fields[0]!, fields[1]!]);
  }
  return pairs;
}

function jsonPairs(text: string, path: string): [string, string][] {
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch (error) {
    throw new KvfenceError('invalid_argument', `${path} is not JSON: ${errorMessage(error)}`);
  }
  if (!Array.isArray(json)) throw new KvfenceError('invalid_argument', `${path}: expected [{"tenant", "key"}, ...]`);
  return json.map((entry: unknown, i: number): [string, string] => {
    const e = entry as { tenant?: unknown; key?: unknown } | null;
    if (typeof e !== 'object' || e === null || typeof e.tenant !== 'string' || typeof e.key !== 'string') {
      throw new KvfenceError('invalid_argument', `${path}: entry ${i} must be {"tenant": string, "key": string}`);
    }
    return [e.tenant, e.key];
  });
}
