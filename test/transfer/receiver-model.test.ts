/**
 * Model-based test of the TransferReceiver (fast-check): random sequences of valid and invalid frames on several
 * connections, closes, cancels and clock jumps, against a small model of the protocol. After every step: the states
 * agree with the model; no page is written outside a live reservation; a transfer is COMMITTED only if every declared
 * page arrived exactly once, in order, with a valid checksum and digest; terminal states never change; every
 * non-committed terminal reservation is scrubbed and released.
 */
import assert from 'node:assert/strict';
import { before, test } from 'node:test';
import fc from 'fast-check';
import { manifestDigest } from '../../src/transfer/manifest.js';
import { createPageChecksum, type PageChecksum } from '../../src/transfer/page-checksum.js';
import { pageTokenCount, type TransferTicket } from '../../src/transfer/ticket.js';
import { type TransferHandle, TransferReceiver } from '../../src/transfer/transfer-receiver.js';
import { isTerminal, type ReceiverState } from '../../src/transfer/transfer-state.js';
import { encodeAbort, encodeCommit, encodeHello, encodePage, frameBytesMax } from '../../src/transfer/wire-format.js';
import type { Clock } from '../../src/util/clock.js';
import type { FrameChannel, FrameChannelHandlers } from '../../src/wire/frame-channel.js';
import { FIRST_TOKEN, PAGE_SIZE_TOKENS, randomSource, TestPool, type TestSink } from './harness.js';

const PAGE_BYTES = 64;
const IDLE_MS = 200;
const DEADLINE_MS = 1_000;

class ManualClock implements Clock {
  private now = 0;
  private timers: { at: number; fn: () => void; live: boolean }[] = [];
  nowMs(): number {
    return this.now;
  }
  after(delayMs: number, fn: () => void): () => void {
    const timer = { at: this.now + delayMs, fn, live: true };
    this.timers.push(timer);
    return () => {
      timer.live = false;
    };
  }
  advance(ms: number): void {
    const until = this.now + ms;
    for (;;) {
      const due = this.timers.filter((t) => t.live && t.at <= until).sort((a, b) => a.at - b.at)[0];
      if (due === undefined) break;
      due.live = false;
      this.now = due.at;
      due.fn();
    }
    this.now = until;
    this.timers = this.timers.filter((t) => t.live);
  }
}

/** A channel driven by the test: frames are delivered synchronously, even after the receiver ended it (late frames). */
class ScriptChannel implements FrameChannel {
  handlers: FrameChannelHandlers | undefined;
  closed = false;
  endedByReceiver = false;
  readonly replies: Uint8Array[] = [];
  send(parts: readonly Uint8Array[]): boolean {
    this.replies.push(Buffer.concat(parts));
    return true;
  }
  drained(): Promise<void> {
    return Promise.resolve();
  }
  setHandlers(handlers: FrameChannelHandlers): void {
    this.handlers = handlers;
  }
  /** what the receiver lets the peer send now: every frame the model sends must fit it */
  limit = Number.POSITIVE_INFINITY;
  limitFrames(bytes: number): void {
    this.limit = bytes;
  }
  end(): void {
    this.endedByReceiver = true;
  }
  destroy(): void {
    this.endedByReceiver = true;
  }
  deliver(frame: Uint8Array): void {
    assert.ok(frame.byteLength <= this.limit, `a ${frame.byteLength}-byte frame over the receiver's ${this.limit}`);
    if (!this.closed) this.handlers?.frame(frame);
  }
  peerClose(): void {
    if (this.closed) return;
    this.closed = true;
    this.handlers?.close(undefined);
  }
}

type Mutation =
  | 'none'
  | 'checksum'
  | 'bytes'
  | 'tokens'
  | 'nonce'
  | 'tenant'
  | 'request'
  | 'epoch'
  | 'digest'
  | 'truncate';
type Command =
  | { op: 'connect' }
  | {
      op: 'send';
      channel: number;
      ticket: number;
      kind: 'HELLO' | 'PAGE' | 'COMMIT' | 'ABORT';
      index: number;
      mutation: Mutation;
    }
  | { op: 'close'; channel: number }
  | { op: 'cancel' | 'expire'; ticket: number }
  | { op: 'tick' }
  | { op: 'jump' }
  /** the frame a correct sender of this ticket would send next (on channel = ticket number), perhaps mutated */
  | { op: 'next'; ticket: number; mutation: Mutation }
  /** the last frame sent on this channel, again */
  | { op: 'repeat'; channel: number };

interface ModelTicket {
  state: ReceiverState;
  next: number;
  channel: number | undefined;
}

interface ModelChannel {
  ticket: number | undefined;
  refused: boolean;
  closed: boolean;
}

const mutation: fc.Arbitrary<Mutation> = fc.oneof(
  { weight: 12, arbitrary: fc.constant<Mutation>('none') },
  {
    weight: 1,
    arbitrary: fc.constantFrom<Mutation>(
      'checksum',
      'bytes',
      'tokens',
      'nonce',
      'tenant',
      'request',
      'epoch',
      'digest',
      'truncate',
    ),
  },
);
const command: fc.Arbitrary<Command> = fc.oneof(
  { weight: 2, arbitrary: fc.constant<Command>({ op: 'connect' }) },
  {
    weight: 4,
    arbitrary: fc.record({
      op: fc.constant('send' as const),
      channel: fc.nat(3),
      ticket: fc.nat(2),
      kind: fc.constantFrom(
        'HELLO' as const,
        'PAGE' as const,
        'PAGE' as const,
        'PAGE' as const,
        'COMMIT' as const,
        'ABORT' as const,
      ),
      index: fc.nat(3),
      mutation,
    }),
  },
  { weight: 1, arbitrary: fc.record({ op: fc.constant('close' as const), channel: fc.nat(3) }) },
  { weight: 1, arbitrary: fc.record({ op: fc.constantFrom('cancel' as const, 'expire' as const), ticket: fc.nat(2) }) },
  {
    weight: 16,
    arbitrary: fc.record({ op: fc.constant('next' as const), ticket: fc.nat(2), mutation }),
  },
  { weight: 1, arbitrary: fc.record({ op: fc.constant('repeat' as const), channel: fc.nat(3) }) },
  { weight: 1, arbitrary: fc.constant<Command>({ op: 'tick' }) },
  { weight: 1, arbitrary: fc.constant<Command>({ op: 'jump' }) },
);

let checksum: PageChecksum;
before(async () => {
  checksum = await createPageChecksum();
});

function frameFor(
  ticket: TransferTicket,
  source: ReturnType<typeof randomSource>,
  c: Extract<Command, { op: 'send' }>,
): Uint8Array {
  const m = c.mutation;
  const binding = {
    request: m === 'request' ? `${ticket.request}-x` : ticket.request,
    tenant: m === 'tenant' ? 'tenant-other' : ticket.tenant,
    nonce: m === 'nonce' ? ticket.nonce.map((x) => x ^ 1) : ticket.nonce,
  };
  let parts: Uint8Array[];
  if (c.kind === 'HELLO')
    parts = encodeHello({ ...ticket, ...binding, epoch: m === 'epoch' ? ticket.epoch + 1 : ticket.epoch });
  else if (c.kind === 'PAGE') {
    const inRange = c.index < ticket.pageCount;
    const bytes = inRange ? source.pageView(c.index).slice() : new Uint8Array(ticket.pageBytes);
    const sum = checksum.of(bytes);
    if (m === 'bytes') bytes[3]! ^= 0x10;
    const tokenCount = (inRange ? pageTokenCount(ticket, c.index) : 1) + (m === 'tokens' ? 1 : 0);
    const page = {
      index: c.index,
      firstToken: c.index * PAGE_SIZE_TOKENS,
      tokenCount,
      checksum: m === 'checksum' ? sum ^ 1n : sum,
    };
    parts = encodePage(binding, page, bytes);
  } else if (c.kind === 'COMMIT') {
    const entries = Array.from({ length: ticket.pageCount }, (_, i) => ({
      index: i,
      tokenCount: pageTokenCount(ticket, i),
      checksum: checksum.of(source.pageView(i)),
    }));
    const digest = manifestDigest(ticket, entries);
    if (m === 'digest') digest[0]! ^= 1;
    parts = encodeCommit(binding, {
      pageCount: ticket.pageCount,
      tokenCount: ticket.tokenCount,
      digest,
      firstTokens: [FIRST_TOKEN],
    });
  } else parts = encodeAbort(binding, { code: 'prefill_failed', message: 'test' });
  const frame = new Uint8Array(Buffer.concat(parts));
  return m === 'truncate' ? frame.subarray(0, frame.byteLength - 1) : frame;
}

/** What the protocol says a delivered frame does, in the model. */
function modelSend(
  tickets: ModelTicket[],
  channels: ModelChannel[],
  c: Extract<Command, { op: 'send' }>,
  chIndex: number,
  pageCounts: number[],
): void {
  const ch = channels[chIndex]!;
  if (ch.closed || ch.refused) return;
  if (ch.ticket !== undefined && isTerminal(tickets[ch.ticket]!.state)) return; // late frame: dropped
  const m = c.mutation;
  const fail = (t: ModelTicket) => {
    t.state = 'FAILED';
  };
  if (ch.ticket === undefined) {
    const t = tickets[c.ticket]!;
    if (m === 'truncate' || m === 'request' || isTerminal(t.state)) {
      ch.refused = true;
      return;
    }
    if (t.channel !== undefined || c.kind !== 'HELLO') {
      fail(t);
      ch.refused = true;
      return;
    }
    t.channel = chIndex;
    ch.ticket = c.ticket;
  }
  const t = tickets[ch.ticket]!;
  const ok = c.ticket === ch.ticket && m !== 'truncate' && m !== 'request' && m !== 'nonce' && m !== 'tenant';
  if (!ok) fail(t);
  else if (c.kind === 'HELLO') {
    if (t.state !== 'AWAIT_HELLO' || m === 'epoch') fail(t);
    else t.state = 'RECEIVING';
  } else if (c.kind === 'PAGE') {
    const inRange = c.index < pageCounts[ch.ticket]!;
    if (
      t.state !== 'RECEIVING' ||
      !inRange ||
      c.index !== t.next ||
      m === 'checksum' ||
      m === 'bytes' ||
      m === 'tokens'
    ) {
      fail(t);
    } else t.next++;
  } else if (c.kind === 'COMMIT') {
    if (t.state !== 'RECEIVING' || t.next !== pageCounts[ch.ticket]! || m === 'digest') fail(t);
    else t.state = 'COMMITTED';
  } else fail(t);
}

test('TransferReceiver agrees with the protocol model on random command sequences', () => {
  const scenario = fc.record({
    tokens: fc.tuple(fc.integer({ min: 1, max: 12 }), fc.integer({ min: 1, max: 12 }), fc.integer({ min: 1, max: 12 })),
    commands: fc.array(command, { maxLength: 60 }),
  });
  let committed = 0;
  fc.assert(
    fc.property(scenario, ({ tokens, commands }) => {
      const clock = new ManualClock();
      const receiver = new TransferReceiver({ checksum, clock, idleTimeoutMs: IDLE_MS });
      const pool = new TestPool(16, PAGE_BYTES);
      const pageCounts = tokens.map((n) => Math.ceil(n / PAGE_SIZE_TOKENS));
      const sinks: TestSink[] = [];
      const handles: TransferHandle[] = [];
      const sources = pageCounts.map((n) => randomSource(n, PAGE_BYTES, checksum));
      tokens.forEach((tokenCount, i) => {
        const sink = pool.reserve(pageCounts[i]!);
        sinks.push(sink);
        handles.push(
          receiver.expect({
            request: `req-${i}`,
            tenant: 'tenant-a',
            epoch: 7,
            tokenCount,
            pageSizeTokens: PAGE_SIZE_TOKENS,
            sink,
            deadlineMs: DEADLINE_MS,
          }),
        );
      });
      const model: ModelTicket[] = tokens.map(() => ({ state: 'AWAIT_HELLO', next: 0, channel: undefined }));
      const modelChannels: ModelChannel[] = [];
      const channels: ScriptChannel[] = [];
      const connect = () => {
        const ch = new ScriptChannel();
        channels.push(ch);
        modelChannels.push({ ticket: undefined, refused: false, closed: false });
        receiver.accept(ch);
      };
      for (let i = 0; i < 3; i++) connect();
      const lastSent: (Extract<Command, { op: 'send' }> | undefined)[] = [];
      const asSend = (c: Command): Command => {
        if (c.op === 'repeat') return lastSent[c.channel % channels.length] ?? { op: 'tick' };
        if (c.op !== 'next') return c;
        const ticket = c.ticket;
        const t = model[ticket]!;
        const channel = t.channel ?? ticket;
        const bound = modelChannels[channel]!.ticket;
        const send = { op: 'send' as const, channel, ticket, mutation: c.mutation };
        if (bound === undefined || t.state === 'AWAIT_HELLO') return { ...send, kind: 'HELLO', index: 0 };
        if (t.state === 'RECEIVING' && t.next === pageCounts[ticket]) return { ...send, kind: 'COMMIT', index: 0 };
        return { ...send, kind: 'PAGE', index: t.next };
      };
      const seenTerminal: (ReceiverState | undefined)[] = [undefined, undefined, undefined];
      for (const generated of commands) {
        const c = asSend(generated);
        switch (c.op) {
          case 'connect':
            if (channels.length < 6) connect();
            break;
          case 'send': {
            const chIndex = c.channel % channels.length;
            lastSent[chIndex] = c;
            modelSend(model, modelChannels, c, chIndex, pageCounts);
            channels[chIndex]!.deliver(frameFor(handles[c.ticket]!.ticket, sources[c.ticket]!, c));
            break;
          }
          case 'close': {
            const chIndex = c.channel % channels.length;
            const mc = modelChannels[chIndex]!;
            if (!mc.closed && mc.ticket !== undefined && !isTerminal(model[mc.ticket]!.state))
              model[mc.ticket]!.state = 'FAILED';
            mc.closed = true;
            channels[chIndex]!.peerClose();
            break;
          }
          case 'cancel':
          case 'expire': {
            const t = model[c.ticket]!;
            if (!isTerminal(t.state)) t.state = c.op === 'cancel' ? 'CANCELLED' : 'EXPIRED';
            if (c.op === 'cancel') handles[c.ticket]!.cancel('test');
            else handles[c.ticket]!.expire('test');
            break;
          }
          case 'tick':
            clock.advance(1);
            break;
          case 'next':
          case 'repeat':
            assert.fail('translated to send above');
            break;
          case 'jump':
            for (const t of model) if (!isTerminal(t.state)) t.state = 'EXPIRED';
            for (const mc of modelChannels) if (mc.ticket === undefined) mc.refused = true;
            clock.advance(DEADLINE_MS + IDLE_MS);
            break;
        }
        // after every step
        assert.deepEqual(pool.violations, [], 'no write outside a live reservation');
        model.forEach((t, i) => {
          const handle = handles[i]!;
          const sink = sinks[i]!;
          assert.equal(handle.state, t.state, `ticket ${i} after ${JSON.stringify(c)}`);
          if (seenTerminal[i] !== undefined)
            assert.equal(handle.state, seenTerminal[i], 'terminal states never change');
          if (isTerminal(handle.state)) seenTerminal[i] = handle.state;
          if (handle.state === 'COMMITTED') {
            assert.deepEqual(sink.writes, [...Array(pageCounts[i]).keys()], 'every page exactly once, in order');
            assert.deepEqual(sink.bytes(), sources[i]!.all);
            assert.ok(!sink.released);
          } else if (isTerminal(handle.state)) {
            assert.ok(sink.released, 'a failed reservation is scrubbed and released');
          } else {
            assert.deepEqual(sink.writes, [...Array(t.next).keys()]);
          }
        });
        assert.equal(receiver.liveCount, model.filter((t) => !isTerminal(t.state)).length);
        // what a connection may send: a HELLO or an ABORT before its first frame, then its live ticket's frames
        modelChannels.forEach((mc, i) => {
          if (lastSent[i] === undefined) assert.equal(channels[i]!.limit, frameBytesMax(), `channel ${i}, unbound`);
          else if (mc.ticket !== undefined && !mc.closed && !isTerminal(model[mc.ticket]!.state))
            assert.equal(
              channels[i]!.limit,
              frameBytesMax(handles[mc.ticket]!.ticket.pageBytes),
              `channel ${i}, bound`,
            );
        });
        pool.checkClean();
      }
      committed += handles.filter((h) => h.state === 'COMMITTED').length;
      receiver.close();
      assert.ok(
        handles.every((h) => isTerminal(h.state)),
        'close ends every transfer',
      );
    }),
    { numRuns: 500, seed: 20261202 },
  );
  assert.ok(committed > 20, `the valid runs reached COMMITTED (${committed} times)`);
});
