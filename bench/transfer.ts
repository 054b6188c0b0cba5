/**
 * KV transfer throughput over TCP loopback, with checksums, peer authentication and encrypted frames on (the
 * production path), against raw TCP loopback moving the same bytes through a plain socket in the same run. The sender
 * is a child process (the prefill worker), the receiver this one (the decode worker), so each side has its own core as
 * in a real deployment. It also prints the bound that one core a side allows (oneCoreBound), to read the ratio against.
 *
 *   npm run bench:transfer -- [--pages 256] [--page-bytes 1048576] [--runs 5]
 */
import { type ChildProcess, fork } from 'node:child_process';
import { createCipheriv, createDecipheriv, randomBytes } from 'node:crypto';
import { createServer, connect as netConnect } from 'node:net';
import { fileURLToPath } from 'node:url';
import type { KvPageSink, KvPageSource } from '../src/transfer/kv-page-port.js';
import { createPageChecksum, type PageChecksum } from '../src/transfer/page-checksum.js';
import type { TransferTicket } from '../src/transfer/ticket.js';
import { TransferReceiver } from '../src/transfer/transfer-receiver.js';
import { TransferSender } from '../src/transfer/transfer-sender.js';
import { systemClock } from '../src/util/clock.js';
import { median } from '../src/util/median.js';
import { AEAD, SLICE_BYTES } from '../src/wire/secure-channel.js';
import { TcpTransport } from '../src/wire/tcp-transport.js';
import { numberFlag } from './bench-types.js';

const PAGE_SIZE_TOKENS = 16;

interface Args {
  pages: number;
  pageBytes: number;
  runs: number;
}

function parseArgs(argv: string[]): Args {
  const get = (name: string, fallback: number) => numberFlag(argv, name, fallback);
  return { pages: get('pages', 256), pageBytes: get('page-bytes', 1 << 20), runs: get('runs', 5) };
}

type ToChild =
  | { cmd: 'transfer'; address: string; secret: number[]; ticket: Omit<TransferTicket, 'nonce'> & { nonce: number[] } }
  | { cmd: 'raw'; address: string; bytes: number }
  | { cmd: 'exit' };

/** CPU time this process has used, ms (user + system): what a side costs, whatever else runs on the machine */
function cpuMs(): number {
  const u = process.cpuUsage();
  return (u.user + u.system) / 1e3;
}

/** The child's reply: "ok <cpu ms it spent>" or "error: …" */
function childCpuMs(reply: string): number {
  const [word, ms] = reply.split(' ');
  if (word !== 'ok') throw new Error(`sender failed: ${reply}`);
  return Number(ms);
}

/**
 * Single-core throughput of the per-page checksum and of sealing and opening a page as one frame (as the channel does:
 * SLICE_BYTES at a time, tag made, tag checked), GB/s.
 */
function hashThroughput(
  checksum: PageChecksum,
  pageBytes: number,
): { checksumGBs: number; sealGBs: number; openGBs: number } {
  const page = new Uint8Array(randomBytes(pageBytes));
  const key = randomBytes(32);
  const time = (f: () => void) => {
    for (let i = 0; i < 5; i++) f();
    const n = Math.max(20, Math.ceil((256 << 20) / pageBytes));
    const t0 = performance.now();
    for (let i = 0; i < n; i++) f();
    return (n * pageBytes) / ((performance.now() - t0) / 1e3) / 1e9;
  };
  // a fresh nonce per seal, as the channel's counter gives; the last sealed page is what `open` opens, again and again
  let seq = 0;
  let iv = Buffer.alloc(12);
  const sealed: Buffer[] = [];
  let tag = Buffer.alloc(0);
  const sealGBs = time(() => {
    iv = Buffer.alloc(12);
    iv.writeUInt32LE(seq++, 4);
    const c = createCipheriv(AEAD, key, iv, { authTagLength: 16 });
    sealed.length = 0;
    for (let at = 0; at < pageBytes; at += SLICE_BYTES) sealed.push(c.update(page.subarray(at, at + SLICE_BYTES)));
    c.final();
    tag = c.getAuthTag();
  });
  return {
    checksumGBs: time(() => checksum.of(page)),
    sealGBs,
    openGBs: time(() => {
      const d = createDecipheriv(AEAD, key, iv, { authTagLength: 16 });
      for (const piece of sealed) d.update(piece);
      d.setAuthTag(tag);
      d.final();
    }),
  };
}

/**
 * What one core a side allows: each side makes one AEAD pass and one XXH64 pass over every byte, on top of what the
 * plain socket costs that side (its CPU in the raw run). The copies in between are left out, so no build reaches it.
 */
function oneCoreBound(
  bytes: number,
  hashes: { checksumGBs: number; sealGBs: number; openGBs: number },
  rawSenderMs: number,
  rawReceiverMs: number,
): number {
  const passMs = (gbs: number) => (bytes / (gbs * 1e9)) * 1e3;
  const senderMs = passMs(hashes.sealGBs) + passMs(hashes.checksumGBs) + rawSenderMs;
  const receiverMs = passMs(hashes.openGBs) + passMs(hashes.checksumGBs) + rawReceiverMs;
  return bytes / (Math.max(senderMs, receiverMs) / 1e3) / 1e9;
}

async function parent(args: Args): Promise<void> {
  const checksum = await createPageChecksum();
  const secret = new Uint8Array(randomBytes(32));
  const transport = new TcpTransport({ secret, clock: systemClock, handshakeTimeoutMs: 5_000 });
  const receiver = new TransferReceiver({ checksum, clock: systemClock, idleTimeoutMs: 10_000 });
  const listener = await transport.listen('127.0.0.1:0', (c) => receiver.accept(c));
  const arena = new Uint8Array(args.pages * args.pageBytes); // the decode pool's pages
  // A serving pool's pages are mapped once it has used them (freeing scrubs a page, so it stays touched); PagePool does
  // not touch its arena when created, so only the first transfers into fresh pages pay first-touch faults. The bench
  // measures the steady state: every page touched before the timing.
  arena.fill(1).fill(0);
  let rawExpected = 0;
  let rawDone: () => void = () => {};
  const rawServer = createServer((socket) => {
    let got = 0;
    socket.on('data', (chunk) => {
      got += chunk.byteLength;
      if (got === rawExpected) rawDone();
    });
  });
  await new Promise<void>((r) => rawServer.listen(0, '127.0.0.1', r));
  const rawPort = (rawServer.address() as { port: number }).port;
  const child: ChildProcess = fork(fileURLToPath(import.meta.url), ['--child'], { stdio: 'inherit' });
  const fromChild = () => new Promise<string>((resolve) => child.once('message', (m) => resolve(String(m))));
  const bytes = args.pages * args.pageBytes;
  const transferMs: number[] = [];
  const rawMs: number[] = [];
  const cpu = {
    sender: [] as number[],
    receiver: [] as number[],
    /** share of the transfer's wall time the receiver's event loop was busy (not waiting for bytes) */
    receiverBusy: [] as number[],
    rawSender: [] as number[],
    rawReceiver: [] as number[],
  };
  for (let run = 0; run < args.runs + 1; run++) {
    let open = true;
    const sink: KvPageSink = {
      pageCount: args.pages,
      pageBytes: args.pageBytes,
      isOpen: () => open,
      pageView: (i) => arena.subarray(i * args.pageBytes, (i + 1) * args.pageBytes),
      markPageWritten: () => {},
      scrubAndRelease: () => {
        open = false;
        arena.fill(0);
      },
    };
    const handle = receiver.expect({
      request: `bench-${run}`,
      tenant: 'bench',
      epoch: run,
      tokenCount: args.pages * PAGE_SIZE_TOKENS,
      pageSizeTokens: PAGE_SIZE_TOKENS,
      sink,
      deadlineMs: 600_000,
    });
    const t0 = performance.now();
    const c0 = cpuMs();
    const loop0 = performance.eventLoopUtilization();
    child.send({
      cmd: 'transfer',
      address: listener.address,
      secret: [...secret],
      ticket: { ...handle.ticket, nonce: [...handle.ticket.nonce] },
    } satisfies ToChild);
    const outcome = await handle.outcome;
    const t1 = performance.now();
    const c1 = cpuMs();
    const busy = performance.eventLoopUtilization(loop0).utilization;
    const reply = await fromChild();
    if (outcome.state !== 'COMMITTED') throw new Error(`transfer failed: ${outcome.state} ${reply}`);
    const senderCpu = childCpuMs(reply);
    rawExpected = bytes;
    const rawFinished = new Promise<void>((r) => {
      rawDone = r;
    });
    const r0 = performance.now();
    const rc0 = cpuMs();
    child.send({ cmd: 'raw', address: `127.0.0.1:${rawPort}`, bytes } satisfies ToChild);
    await rawFinished;
    const r1 = performance.now();
    const rc1 = cpuMs();
    const rawSenderCpu = childCpuMs(await fromChild());
    if (run > 0) {
      // run 0 warms up both paths
      transferMs.push(t1 - t0);
      rawMs.push(r1 - r0);
      cpu.sender.push(senderCpu);
      cpu.receiver.push(c1 - c0);
      cpu.receiverBusy.push(busy);
      cpu.rawSender.push(rawSenderCpu);
      cpu.rawReceiver.push(rc1 - rc0);
    }
  }
  child.send({ cmd: 'exit' } satisfies ToChild);
  const hashes = hashThroughput(checksum, args.pageBytes);
  const gbs = (ms: number) => bytes / (ms / 1e3) / 1e9;
  const t = median(transferMs);
  const raw = median(rawMs);
  console.log(
    `KV transfer over TCP loopback: ${args.pages} pages × ${args.pageBytes} B = ${(bytes / 2 ** 20).toFixed(0)} MiB, median of ${args.runs} runs`,
  );
  console.log(
    `  kvfence transfer (xxh64 checksums, ${AEAD} frames, auth):         ${t.toFixed(1)} ms  ${(args.pages / (t / 1e3)).toFixed(0)} pages/s  ${gbs(t).toFixed(2)} GB/s`,
  );
  console.log(
    `  raw TCP, same bytes, plain socket:                                       ${raw.toFixed(1)} ms  ${(args.pages / (raw / 1e3)).toFixed(0)} pages/s  ${gbs(raw).toFixed(2)} GB/s`,
  );
  console.log(`  ratio transfer / raw: ${(gbs(t) / gbs(raw)).toFixed(2)}`);
  console.log(
    `  single core: xxh64 ${hashes.checksumGBs.toFixed(2)} GB/s, ${AEAD} seal ${hashes.sealGBs.toFixed(2)} GB/s, open ${hashes.openGBs.toFixed(2)} GB/s`,
  );
  const side = (ms: number) => `${ms.toFixed(0)} ms (${gbs(ms).toFixed(2)} GB/s a core)`;
  const rawSenderMs = median(cpu.rawSender);
  const rawReceiverMs = median(cpu.rawReceiver);
  console.log(
    `  CPU a side (medians): transfer sender ${side(median(cpu.sender))}, receiver ${side(median(cpu.receiver))}; ` +
      `raw sender ${side(rawSenderMs)}, receiver ${side(rawReceiverMs)}; ` +
      `transfer receiver busy ${(100 * median(cpu.receiverBusy)).toFixed(0)} % of the time`,
  );
  const bound = oneCoreBound(bytes, hashes, rawSenderMs, rawReceiverMs);
  console.log(
    `  bound with one core a side (an AEAD pass + an xxh64 pass + the raw socket's CPU, per side): ` +
      `${bound.toFixed(2)} GB/s = ${(bound / gbs(raw)).toFixed(2)}× raw; the transfer reaches ${(gbs(t) / bound).toFixed(2)} of it`,
  );
  console.log(
    `  runs (ms): transfer ${transferMs.map((x) => x.toFixed(0)).join(' ')} | raw ${rawMs.map((x) => x.toFixed(0)).join(' ')}`,
  );
  receiver.close();
  await listener.close();
  rawServer.close();
}

async function childMain(): Promise<void> {
  const checksum = await createPageChecksum();
  let source: (KvPageSource & { all: Uint8Array }) | undefined;
  const sourceFor = (pages: number, pageBytes: number) => {
    if (source?.pageCount !== pages || source.pageBytes !== pageBytes) {
      const all = new Uint8Array(randomBytes(pages * pageBytes));
      const pageView = (i: number) => all.subarray(i * pageBytes, (i + 1) * pageBytes);
      const checksums = Array.from({ length: pages }, (_, i) => checksum.of(pageView(i)));
      source = { pageCount: pages, pageBytes, all, checksums, pageView };
    }
    return source;
  };
  process.on('message', async (m: ToChild) => {
    if (m.cmd === 'exit') process.exit(0);
    if (m.cmd === 'transfer') {
      const ticket: TransferTicket = { ...m.ticket, nonce: new Uint8Array(m.ticket.nonce) };
      const transport = new TcpTransport({
        secret: new Uint8Array(m.secret),
        clock: systemClock,
        handshakeTimeoutMs: 5_000,
      });
      try {
        const channel = await transport.connect(m.address);
        const sender = new TransferSender(channel, ticket, {
          checksum,
          clock: systemClock,
          deadlineMs: 600_000,
          idleTimeoutMs: 10_000,
        });
        const pages = sourceFor(ticket.pageCount, ticket.pageBytes);
        const c0 = cpuMs();
        await sender.send(pages, [{ id: 1, logprob: -1, top: [] }]);
        process.send?.(`ok ${cpuMs() - c0}`);
      } catch (error) {
        process.send?.(`error: ${String(error)}`);
      }
      return;
    }
    const [host, port] = m.address.split(':') as [string, string];
    const all = source?.all ?? new Uint8Array(randomBytes(m.bytes));
    const pageBytes = source?.pageBytes ?? 1 << 20;
    const c0 = cpuMs();
    const socket = netConnect({ host, port: Number(port) }, async () => {
      socket.setNoDelay(true);
      for (let offset = 0; offset < m.bytes; offset += pageBytes) {
        if (!socket.write(all.subarray(offset, Math.min(m.bytes, offset + pageBytes)))) {
          await new Promise((r) => socket.once('drain', r));
        }
      }
      socket.end(() => process.send?.(`ok ${cpuMs() - c0}`));
    });
  });
}

if (process.argv.includes('--child')) await childMain();
else await parent(parseArgs(process.argv));
