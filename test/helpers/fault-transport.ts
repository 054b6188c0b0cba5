/**
 * A transport whose outgoing transfers suffer per-tenant faults: how the end-to-end tests fault a prefill worker's
 * KV transfers, by handing the worker this transport (start-worker.ts `transport`) instead of a switch in the worker.
 * The tenant of a connection is read from its first frame (the HELLO); its byte faults act below the MAC from the
 * stream's first byte (handshake included), its frame faults above it. A `replay` fault replays the frames of the
 * previous transfer made through this transport.
 */

import { decodeFrame } from '../../src/transfer/wire-format.js';
import type { FrameChannel, FrameChannelHandlers } from '../../src/wire/frame-channel.js';
import { TcpTransport } from '../../src/wire/tcp-transport.js';
import type { TransferListener, TransferTransport, TransportOptions } from '../../src/wire/transport.js';
import { type ByteFaultPlan, FaultyFrameChannel, type FrameFault, withByteFaults } from './fault-injection.js';

export interface TenantFaults {
  /** frame faults; a `replay` fault's `recorded` is filled in from the previous transfer */
  frames?: readonly (FrameFault | { kind: 'replay'; frame: number })[];
  bytes?: ByteFaultPlan;
}

export type FaultPlans = Readonly<Record<string, TenantFaults>>;

export function faultTransport(plans: FaultPlans): (options: TransportOptions) => TransferTransport {
  return (options) => new FaultTransport(options, plans);
}

class FaultTransport implements TransferTransport {
  readonly name = 'tcp-with-faults';
  private readonly plain: TcpTransport;
  /** the frames of the previous transfer, for `replay` */
  private lastRecord: readonly Uint8Array[] = [];

  constructor(
    private readonly options: TransportOptions,
    private readonly plans: FaultPlans,
  ) {
    this.plain = new TcpTransport(options);
  }

  listen(address: string, onChannel: (channel: FrameChannel) => void): Promise<TransferListener> {
    return this.plain.listen(address, onChannel);
  }

  async connect(address: string): Promise<FrameChannel> {
    const bytes: { corruptByteAt?: number; cutAfterBytes?: number } = {};
    const tcp = new TcpTransport({ ...this.options, wrapConnectStream: (stream) => withByteFaults(stream, bytes) });
    const channel = await tcp.connect(address);
    return new TenantFaultChannel(channel, (tenant) => {
      const plan = this.plans[tenant];
      Object.assign(bytes, plan?.bytes ?? {});
      const frames = (plan?.frames ?? []).map((f) =>
        f.kind === 'replay' ? { kind: 'replay' as const, frame: f.frame, recorded: this.lastRecord } : f,
      );
      const faulty = new FaultyFrameChannel(channel, frames);
      return { faulty, done: () => (this.lastRecord = faulty.record) };
    });
  }
}

/** Decides its faults at the first frame sent (the HELLO names the tenant), then forwards everything through them. */
class TenantFaultChannel implements FrameChannel {
  private chosen: { faulty: FaultyFrameChannel; done: () => void } | undefined;

  constructor(
    private readonly inner: FrameChannel,
    private readonly choose: (tenant: string) => { faulty: FaultyFrameChannel; done: () => void },
  ) {}

  get closed(): boolean {
    return this.inner.closed;
  }

  send(parts: readonly Uint8Array[]): boolean {
    if (this.chosen === undefined) this.chosen = this.choose(decodeFrame(Buffer.concat(parts)).binding.tenant);
    return this.chosen.faulty.send(parts);
  }

  drained(timeoutMs: number): Promise<void> {
    return this.inner.drained(timeoutMs);
  }

  setHandlers(handlers: FrameChannelHandlers): void {
    this.inner.setHandlers({
      frame: handlers.frame,
      close: (error) => {
        this.chosen?.done();
        handlers.close(error);
      },
    });
  }

  end(): void {
    this.inner.end();
  }

  limitFrames(bytes: number): void {
    this.inner.limitFrames(bytes);
  }

  destroy(error?: Parameters<FrameChannel['destroy']>[0]): void {
    this.chosen?.done();
    this.inner.destroy(error);
  }
}
