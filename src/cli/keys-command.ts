/**
 * `kvfence keys hash` and `kvfence keys add`: make key-file entries so operators never store plaintext keys.
 *   keys hash --tenant acme < key.txt        prints {"tenant":"acme","sha256":"…"} for a key read from stdin
 *   keys add --tenant acme --file keys.json  makes a new random key, adds its hash to the file, prints the key once
 */
import { randomBytes } from 'node:crypto';
import { existsSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import type { Command } from 'commander';
import { hashApiKey, type KeyEntry, loadKeyFile, validTenantId } from '../gateway/tenants.js';
import { KvfenceError } from '../util/errors.js';

export function addKeysCommand(program: Command): void {
  const keys = program.command('keys').description('make API key file entries (the file holds only key hashes)');
  keys
    .command('hash')
    .description('print the key-file entry of a key read from stdin (or --key, which shows in the process list)')
    .requiredOption('--tenant <id>', 'tenant the key belongs to')
    .option('--key <key>', 'the key (default: read from stdin)')
    .action((o: { tenant: string; key?: string }) => {
      checkTenant(o.tenant);
      const key = (o.key ?? readFileSync(0, 'utf8')).trim();
      if (key.length < 16) throw new KvfenceError('invalid_argument', 'a key must be at least 16 characters');
      process.stdout.write(`${JSON.stringify({ tenant: o.tenant, sha256: hashApiKey(key) })}\n`);
    });
  keys
    .command('add')
    .description('make a new random key for a tenant, add its hash to the key file, and print the key (shown once)')
    .requiredOption('--tenant <id>', 'tenant the key belongs to')
    .requiredOption('--file <path>', 'key file (created when missing)')
    .action((o: { tenant: string; file: string }) => {
      checkTenant(o.tenant);
      const key = `kvf-${randomBytes(32).toString('base64url')}`;
      addKeyEntry(o.file, { tenant: o.tenant, sha256: hashApiKey(key) });
      process.stdout.write(`${key}\n`);
      process.stderr.write(
        `kvfence: added a key for tenant ${o.tenant} to ${o.file}; the key is printed once, store it now\n`,
      );
    });
}

export function addKeyEntry(path: string, entry: KeyEntry): void {
  let json: { keys: KeyEntry[]; tenants?: unknown } = { keys: [] };
  if (existsSync(path)) {
    loadKeyFile(path); // refuses a malformed file rather than overwrite it
    json = JSON.parse(readFileSync(path, 'utf8')) as typeof json;
  }
  json.keys.push(entry);
  const partial = `${path}.${process.pid}.partial`;
  writeFileSync(partial, `${JSON.stringify(json, null, 2)}\n`, { mode: 0o600 });
  renameSync(partial, path);
}

function checkTenant(tenant: string): void {
  if (!validTenantId(tenant))
    throw new KvfenceError('invalid_argument', `tenant id "${tenant}" must be 1-64 of A-Z a-z 0-9 . _ -`);
}
