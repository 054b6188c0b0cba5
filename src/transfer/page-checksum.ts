/**
 * Per-page checksum: XXH64 (xxhash-wasm), ~8.5 GB/s on one core here (docs/protocol.md), so a page costs far less to
 * check than to move. It guards against corruption between the pools (a bug, a bad copy, a bad buffer), not against an
 * attacker: the secure channel's MAC does that. Loading the WebAssembly module is async, so a checksum is made once
 * at startup and passed to whoever needs it (no module-global state).
 */
import xxhash from 'xxhash-wasm';

export interface PageChecksum {
  readonly name: string;
  of(bytes: Uint8Array): bigint;
}

export async function createPageChecksum(): Promise<PageChecksum> {
  const api = await xxhash();
  return { name: 'xxh64', of: (bytes) => api.h64Raw(bytes) };
}
