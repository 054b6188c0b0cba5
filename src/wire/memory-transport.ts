/**
 * The in-memory transport: connections are memory pipes. Listeners live in a MemoryNetwork object that the workers of
 * one process (or one test) share, never in module-global state.
 */

import { assert } from '../util/assert.js';
import { KvfenceError } from '../util/errors.js';
import type { FrameChannel } from './frame-channel.js';
import { createMemoryPipe } from './memory-pipe.js';
import { authenticate } from './peer-auth.js';
import type { TransferListener, TransferTransport, TransportOptions } from './transport.js';

/** A listening side: the responder authenticates with its own transport's secret, never the connecting one's. */
interface MemoryListening {
  readonly onChannel: (channel: FrameChannel) => void;
  readonly options: MemoryTransportOptions;
}

export class MemoryNetwork {
  readonly listeners = new Map<string, MemoryListening>();
}

export interface MemoryTransportOptions extends TransportOptions {
  network: MemoryNetwork;
  highWaterBytes: number;
}

export class MemoryTransport implements TransferTransport {
  readonly name = 'memory';
  private readonly listeners: Map<string, MemoryListening>;

  constructor(private readonly options: MemoryTransportOptions) {
    this.listeners = options.network.listeners;
  }

  async listen(address: string, onChannel: (channel: FrameChannel) => void): Promise<TransferListener> {
    assert(!this.listeners.has(address), `memory address ${address} is taken`);
    this.listeners.set(address, { onChannel, options: this.options });
    return {
      address,
      close: async () => {
        this.listeners.delete(address);
      },
    };
  }

  async connect(address: string): Promise<FrameChannel> {
    const listening = this.listeners.get(address);
    if (listening === undefined) throw new KvfenceError('worker_unavailable', 'nothing listens at that address');
    const [client, server] = createMemoryPipe({ highWaterBytes: this.options.highWaterBytes });
    const theirs = listening.options;
    authenticate(server, 'responder', authOptions(theirs)).then(listening.onChannel, (error: Error) =>
      theirs.onRefused?.(error),
    );
    const wrapped = this.options.wrapConnectStream?.(client) ?? client;
    return authenticate(wrapped, 'initiator', authOptions(this.options));
  }
}

function authOptions(options: TransportOptions) {
  return { secret: options.secret, timeoutMs: options.handshakeTimeoutMs, clock: options.clock, aead: options.aead };
}
