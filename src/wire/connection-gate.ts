/**
 * Connection slots of one listener (a worker's control or transfer port), in two separate pools so that strangers
 * cannot take real peers' slots (DESIGN I11):
 *
 * - pre-authentication: at most `preAuthMax` connections still in the handshake. A new one beyond that pushes out
 *   the oldest that has sent nothing yet (or, if every one has, the oldest): a real peer sends its opening message as
 *   soon as it connects and finishes in a few round trips, so the connections that linger are the ones that say
 *   nothing; a peer mid-handshake is not cut by a wave of silent sockets. Refusing the newest instead would let a
 *   flood of `preAuthMax` idle sockets, renewed once per handshake timeout, lock every real peer out.
 * - authenticated: at most `authenticatedMax`; a peer that proved the secret beyond that is closed at once.
 *
 * A connection leaves its pool when its socket closes, however it closes.
 */
import type { Socket } from 'node:net';
import { assert } from '../util/assert.js';

export interface ConnectionGateOptions {
  preAuthMax: number;
  authenticatedMax: number;
}

export class ConnectionGate {
  /** in arrival order (a Set iterates in insertion order): the first is the oldest */
  private readonly preAuth = new Set<Socket>();
  private readonly authenticated = new Set<Socket>();

  constructor(private readonly options: ConnectionGateOptions) {
    assert(options.preAuthMax >= 1 && options.authenticatedMax >= 1, 'connection caps are positive');
  }

  get preAuthCount(): number {
    return this.preAuth.size;
  }

  get authenticatedCount(): number {
    return this.authenticated.size;
  }

  /** A freshly accepted socket enters the pre-authentication pool; when it is full, one there is dropped first. */
  admit(socket: Socket): void {
    if (this.preAuth.size >= this.options.preAuthMax) {
      let victim: Socket | undefined;
      for (const s of this.preAuth) {
        victim ??= s; // the oldest, unless a silent one is found: then the oldest silent one
        if (s.bytesRead === 0) {
          victim = s;
          break;
        }
      }
      if (victim !== undefined) {
        this.preAuth.delete(victim);
        victim.destroy();
      }
    }
    this.preAuth.add(socket);
    socket.once('close', () => {
      this.preAuth.delete(socket);
      this.authenticated.delete(socket);
    });
  }

  /** The socket's peer proved the secret: false (the caller closes it) when the authenticated pool is full. */
  promote(socket: Socket): boolean {
    if (!this.preAuth.delete(socket)) return false; // dropped or closed meanwhile
    if (this.authenticated.size >= this.options.authenticatedMax) return false;
    this.authenticated.add(socket);
    return true;
  }
}
