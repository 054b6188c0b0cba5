/**
 * A transport makes authenticated FrameChannels between workers: TCP (tcp-transport.ts) between hosts, in-memory
 * (memory-transport.ts) within a process and in tests. Both share the handshake and the encrypted framing; one
 * conformance suite (test/transfer/transport-conformance.ts) runs against each.
 */

import type { Clock } from '../util/clock.js';
import type { ByteStream } from './byte-stream.js';
import type { AeadKind } from './frame-aead.js';
import type { FrameChannel } from './frame-channel.js';

export interface TransferListener {
  /** where peers connect: "host:port" for TCP, a name for in-memory */
  readonly address: string;
  /** stops accepting; open channels stay open (their owners close them) */
  close(): Promise<void>;
}

export interface TransferTransport {
  readonly name: string;
  /**
   * accepts connections; each is handed to `onChannel` only after the peer proved it holds the secret. Connections
   * still in the handshake and authenticated ones are bounded apart (TCP: connection-gate.ts)
   */
  listen(address: string, onChannel: (channel: FrameChannel) => void): Promise<TransferListener>;
  /**
   * connects and authenticates; rejects with auth_failed (the peer lacks the secret) or worker_unavailable (no
   * authenticated connection within the handshake timeout: the peer is down, or too busy to answer)
   */
  connect(address: string): Promise<FrameChannel>;
}

export interface TransportOptions {
  /** the cluster secret (DESIGN I10) */
  secret: Uint8Array;
  handshakeTimeoutMs: number;
  clock: Clock;
  /** failed handshakes on the listening side (strangers, replays), for logs and tests */
  onRefused?: (error: Error) => void;
  /**
   * which implementation seals and opens frames: the same bytes either way, so peers need not agree (wire/frame-aead.ts;
   * default: the native one where the addon is built). The bench sets it to compare the two.
   */
  aead?: AeadKind;
  /**
   * Tests only, never set in production: wraps the connecting side's raw stream before the handshake (see
   * `withByteFaults` in fault-injection.ts). Absent means no wrapper.
   */
  wrapConnectStream?: (stream: ByteStream) => ByteStream;
}
