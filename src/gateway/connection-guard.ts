/**
 * A bound on connections that have not authenticated, per source address (DESIGN I11: a stranger costs the server a
 * small bounded amount). A connection counts from its accept until a request on it presents a valid key (or it
 * closes); past `perAddressMax` such connections from one address, a new one from that address is closed at once.
 * Tenants' connections stop counting at their first authenticated request, so a tenant's connection pool is never
 * refused because of a stranger behind the same address beyond the bound.
 *
 * IPv6 addresses are grouped by their /64 (one host usually holds a whole /64, so a per-address bound would not bind).
 * The table holds at most `addressesMax` addresses; when full, a connection from an address not in it evicts the
 * unauthenticated connection that has waited longest (closed, as the headers timeout would close it later), so the
 * bound on memory holds under a spread-out flood and a newcomer still gets in. Refusing newcomers instead let a
 * stranger holding one silent connection from each of 15,000 addresses (IPv6 gives one host millions of /64s) shut
 * every tenant's new connection out: a tenant's connection counts until its first request authenticates.
 */
import type { Socket } from 'node:net';
import { assert } from '../util/assert.js';

export interface ConnectionGuardOptions {
  perAddressMax: number;
  addressesMax: number;
  /** called when a connection is refused, or evicted for a newcomer (for a debug log line) */
  onRefused: (address: string, why: 'per_address' | 'table_full') => void;
}

export class ConnectionGuard {
  private readonly unauthenticated = new Map<string, number>();
  /** each counted connection → its address key, oldest first (removed once it stops counting) */
  private readonly counted = new Map<Socket, string>();
  private total = 0;

  constructor(private readonly options: ConnectionGuardOptions) {
    assert(options.addressesMax >= 1 && options.perAddressMax >= 1, 'the guard admits at least one connection');
  }

  /** Unauthenticated connections counted now, all addresses together (a public gauge). */
  get count(): number {
    return this.total;
  }

  /** A new connection: counted, or destroyed when its address is at the bound. */
  accept(socket: Socket): void {
    const key = addressKey(socket.remoteAddress ?? '');
    // a new address in a full table: the longest-waiting connections go until its address leaves the table
    while (!this.unauthenticated.has(key) && this.unauthenticated.size >= this.options.addressesMax) {
      const [oldest, oldestKey] = this.counted.entries().next().value!;
      this.options.onRefused(oldestKey, 'table_full');
      this.release(oldest);
      oldest.destroy();
    }
    const current = this.unauthenticated.get(key);
    if ((current ?? 0) >= this.options.perAddressMax) {
      this.options.onRefused(key, 'per_address');
      socket.destroy();
      return;
    }
    this.unauthenticated.set(key, (current ?? 0) + 1);
    this.total++;
    this.counted.set(socket, key);
    socket.once('close', () => this.release(socket));
  }

  /** A request on this connection authenticated: it no longer counts against its address. */
  authenticated(socket: Socket): void {
    this.release(socket);
  }

  private release(socket: Socket): void {
    const key = this.counted.get(socket);
    if (key === undefined) return;
    this.counted.delete(socket);
    this.total--;
    const n = (this.unauthenticated.get(key) ?? 1) - 1;
    if (n <= 0) this.unauthenticated.delete(key);
    else this.unauthenticated.set(key, n);
  }
}

/** The key an address is counted under: IPv4 as is (also when IPv4-mapped), IPv6 by its first four groups (/64). */
export function addressKey(address: string): string {
  const mapped = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(address);
  if (mapped !== null) return mapped[1]!;
  if (!address.includes(':')) return address;
  const [head = '', tail] = address.toLowerCase().split('%')[0]!.split('::');
  const headGroups = head === '' ? [] : head.split(':');
  const tailGroups = tail === undefined || tail === '' ? [] : tail.split(':');
  const zeros = Array<string>(Math.max(0, 8 - headGroups.length - tailGroups.length)).fill('0');
  const groups = tail === undefined ? headGroups : [...headGroups, ...zeros, ...tailGroups];
  return `${groups
    .slice(0, 4)
    .map((g) => g.replace(/^0+(?=.)/, ''))
    .join(':')}::/64`;
}
