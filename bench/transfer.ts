/**
 * KV transfer throughput over TCP loopback, with checksums, peer authentication and encrypted frames on (the
 * production path), against raw TCP loopback moving the same bytes through a plain socket in the same run. The sender
 * is a child process (the prefill worker), the receiver this one (the decode worker), so each side has its own core as
 * in a real deployment. Each run moves the pages once by each path — the native addon's AEGIS-256X4 and XXH3
 * (wire/frame-aead.ts, transfer/page-checksum.ts: what two workers with the addon agree on), the addon's AES-256-GCM
 * (node's OpenSSL) and XXH3, then node:crypto's AES-256-GCM and hash-wasm's XXH3, what runs without the addon — and
 * twice raw: into node's socket as it comes (a fresh buffer for every
 * read), and into one that reads into a buffer it reuses, as the transfer's sockets do (wire/socket-stream.ts). The
 * goal's ratio is read against the faster of the two. It also prints the bound that one core a side allows
 * (oneCoreBound), to read the ratio against. The sender reads its pages where they lie and sends the checksums sealed
 * with them beforehand, as the prefill worker sends a pool's pages (PrefillWorker.sendSource, which seals them right
 * after the forward pass: one XXH3 pass over the request's KV, outside this timing): a worker that
 * read them otherwise (until f10f58c it sent each through a fresh copy) would not run at these figures.
 *
 *   npm run bench:transfer -- [--pages 256] [--page-bytes 1048576] [--runs 5] [--paths aegis-256x4,aes-256-gcm,…]
 *
 * `--paths` keeps only the named AEAD paths (to profile one alone); the first kept is the one the ratios lead with.
 */
import { type ChildProcess, fork } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { type AddressInfo, createServer, connect as netConnect, type Server } from 'node:net';
import { fileURLToPath } from 'node:url';
import { sharedAddon } from '../src/compute/native-backend.js';
import type { KvPageSink, KvPageSource } from '../src/transfer/kv-page-port.js';
import { createPageChecksum, type PageChecksum } from '../src/transfer/page-checksum.js';
import type { TransferTicket } from '../src/transfer/ticket.js';
import { TransferReceiver } from '../src/transfer/transfer-receiver.js';
import { TransferSender } from '../src/transfer/transfer-sender.js';
import { systemClock } from '../src/util/clock.js';
import { median } from '../src/util/median.js';
import { type AeadKind, cipherOf, createFrameAead, runnableAeads } from '../src/wire/frame-aead.js';
import { SLICE_BYTES, sealNonce } from '../src/wire/secure-channel.js';
import { ReusedReads, rewrapAccepted } from '../src/wire/socket-stream.js';
import { TcpTransport } from '../src/wire/tcp-transport.js';
import type { TransferListener } from '../src/wire/transport.js';
import { numberFlag } from './bench-types.js';

const PAGE_SIZE_TOKENS = 16;

const RAW_KINDS = ['node', 'reused'] as const;
type RawKind = (typeof RAW_KINDS)[number];
const RAW_LABELS: Record<RawKind, string> = {
  node: "node's socket (a fresh buffer a read)",
  reused: 'a socket reading into one reused buffer',
};

/** A path's checksum: the addon's with its AEADs, hash-wasm with node:crypto's */
const checksumOf = (aead: AeadKind) => createPageChecksum(aead === 'aes-256-gcm/node:crypto' ? 'wasm' : 'native');
const LABELS: Record<AeadKind, string> = {
  'aegis-256x4': 'native addon, AEGIS-256X4',
  'aes-256-gcm': 'native addon, AES-256-GCM',
  'aes-256-gcm/node:crypto': 'node:crypto AES-256-GCM + hash-wasm',
};

interface Args {
  pages: number;
  pageBytes: number;
  runs: number;
  /** the AEAD paths to run, or every one this process runs */
  paths: AeadKind[] | undefined;
}

function parseArgs(argv: string[]): Args {
  const get = (name: string, fallback: number) => numberFlag(argv, name, fallback);
  const at = argv.indexOf('--paths');
  // checked against what this process runs, in parent
  const paths = at >= 0 ? (argv[at + 1] ?? '').split(',') : undefined;
  return {
    pages: get('pages', 256),
    pageBytes: get('page-bytes', 1 << 20),
    runs: get('runs', 5),
    paths: paths as AeadKind[] | undefined,
  };
}

type ToChild =
  | {
      cmd: 'transfer';
      aead: AeadKind;
      address: string;
      secret: number[];
      ticket: Omit<TransferTicket, 'nonce'> & { nonce: number[] };
    }
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

interface SingleCore {
  checksumGBs: number;
  /** the receiver's pass: the page copied into the decode pool's pages, one after another, and hashed */
  copyGBs: number;
  sealGBs: number;
  openGBs: number;
}

/**
 * Single-core throughput of the per-page checksum, of copying a page into each of `arena`'s pages while hashing it (the
 * receiver's pass), and of sealing and opening a page as one frame with `aead` (as the channel does: SLICE_BYTES at a
 * time into the frame's buffer, tag made, tag checked), GB/s.
 */
function singleCore(checksum: PageChecksum, pageBytes: number, aead: AeadKind, arena: Uint8Array): SingleCore {
  const page = new Uint8Array(randomBytes(pageBytes));
  const key = new Uint8Array(randomBytes(32));
  const sealer = createFrameAead(key, true, aead);
  const opener = createFrameAead(key, false, aead);
  const time = (f: () => void) => {
    for (let i = 0; i < 5; i++) f();
    const n = Math.max(20, Math.ceil((256 << 20) / pageBytes));
    const t0 = performance.now();
    for (let i = 0; i < n; i++) f();
    return (n * pageBytes) / ((performance.now() - t0) / 1e3) / 1e9;
  };
  // a fresh nonce per seal, as the channel's counter gives; the last sealed page is what `open` opens, again and again
  let seq = 0;
  let nonce = sealNonce(0, aead);
  const aad = new Uint8Array(4);
  const sealed = new Uint8Array(pageBytes);
  const tag = new Uint8Array(16);
  const pass = (f: (at: number) => void) => {
    for (let at = 0; at < pageBytes; at += SLICE_BYTES) f(at);
  };
  const sealGBs = time(() => {
    nonce = sealNonce(seq++, aead);
    sealer.start(nonce, aad);
    pass((at) => sealer.update(page.subarray(at, at + SLICE_BYTES), sealed, at));
    sealer.finishSeal(tag, sealed, pageBytes);
  });
  const opened = new Uint8Array(pageBytes);
  const openGBs = time(() => {
    opener.start(nonce, aad);
    pass((at) => opener.update(sealed.subarray(at, at + SLICE_BYTES), opened, at));
    if (!opener.finishOpen(tag, opened, pageBytes)) throw new Error('the bench could not open its own frame');
  });
  sealer.dispose();
  opener.dispose();
  let into = 0;
  const copyGBs = time(() => {
    if ((into + 1) * pageBytes > arena.byteLength) into = 0;
    checksum.copyOf(page, arena.subarray(into * pageBytes, ++into * pageBytes));
  });
  return { checksumGBs: time(() => checksum.of(page)), copyGBs, sealGBs, openGBs };
}

/**
 * What one core a side allows: on top of what the plain socket costs that side (its CPU in the raw run), the sender
 * makes one AEAD pass over every byte (it sends the checksums sealed with the pages), the receiver one AEAD pass and
 * one pass that copies each page into its pool and hashes it; the rest of the work (framing, JavaScript, the
 * channel's buffers) is left out, so no build reaches it.
 */
function oneCoreBound(bytes: number, hashes: SingleCore, rawSenderMs: number, rawReceiverMs: number): number {
  const passMs = (gbs: number) => (bytes / (gbs * 1e9)) * 1e3;
  const senderMs = passMs(hashes.sealGBs) + rawSenderMs;
  const receiverMs = passMs(hashes.openGBs) + passMs(hashes.copyGBs) + rawReceiverMs;
  return bytes / (Math.max(senderMs, receiverMs) / 1e3) / 1e9;
}

/** One implementation's transfers: wall time and each side's CPU, per run. */
interface Measured {
  ms: number[];
  sender: number[];
  receiver: number[];
  /** share of the transfer's wall time the receiver's event loop was busy (not waiting for bytes) */
  receiverBusy: number[];
}

async function parent(args: Args): Promise<void> {
  const secret = new Uint8Array(randomBytes(32));
  // what this process runs (best first), and node:crypto's path, what runs without the addon
  const runnable = [...new Set<AeadKind>([...runnableAeads(), 'aes-256-gcm/node:crypto'])];
  const kinds = args.paths ?? runnable;
  for (const k of kinds) {
    if (!runnable.includes(k))
      throw new Error(`bench:transfer: --paths: ${k} is none of ${runnable} (what this process runs)`);
  }
  if (sharedAddon() === null) console.log('bench:transfer: the native addon is not built; node:crypto only');
  const checksums = new Map<AeadKind, PageChecksum>();
  const receivers = new Map<AeadKind, TransferReceiver>();
  const listeners = new Map<AeadKind, TransferListener>();
  for (const aead of kinds) {
    const checksum = await checksumOf(aead);
    const receiver = new TransferReceiver({ checksum, clock: systemClock, idleTimeoutMs: 10_000 });
    const transport = new TcpTransport({ secret, clock: systemClock, handshakeTimeoutMs: 5_000, aead });
    checksums.set(aead, checksum);
    receivers.set(aead, receiver);
    listeners.set(aead, await transport.listen('127.0.0.1:0', (c) => receiver.accept(c)));
  }
  const arena = new Uint8Array(args.pages * args.pageBytes); // the decode pool's pages
  // A serving pool's pages are mapped once it has used them (freeing scrubs a page, so it stays touched); PagePool does
  // not touch its arena when created, so only the first transfers into fresh pages pay first-touch faults. The bench
  // measures the steady state: every page touched before the timing.
  arena.fill(1).fill(0);
  let rawExpected = 0;
  let rawDone: () => void = () => {};
  const counter = () => {
    let got = 0;
    return (chunk: Uint8Array) => {
      got += chunk.byteLength;
      if (got === rawExpected) rawDone();
    };
  };
  // two plain sockets: node's as it comes (a fresh buffer for every read), and one reading into a buffer it reuses,
  // as the transfer's sockets do (wire/socket-stream.ts): the stricter baseline
  const rawServers: Record<RawKind, Server> = {
    node: createServer((socket) => socket.on('data', counter())),
    reused: createServer({ pauseOnConnect: true }, (accepted) => {
      const reads = new ReusedReads();
      const count = counter();
      reads.to = count;
      // without the addon the socket stays node's (and this baseline is the other one again)
      const socket = rewrapAccepted(accepted, reads);
      if (socket === accepted) socket.on('data', count);
      socket.resume();
    }),
  };
  const rawPorts = {} as Record<RawKind, number>;
  for (const kind of RAW_KINDS) {
    await new Promise<void>((r) => rawServers[kind].listen(0, '127.0.0.1', r));
    rawPorts[kind] = (rawServers[kind].address() as AddressInfo).port;
  }
  const child: ChildProcess = fork(fileURLToPath(import.meta.url), ['--child'], { stdio: 'inherit' });
  const fromChild = () => new Promise<string>((resolve) => child.once('message', (m) => resolve(String(m))));
  const bytes = args.pages * args.pageBytes;
  const measured = new Map<AeadKind, Measured>(
    kinds.map((k) => [k, { ms: [], sender: [], receiver: [], receiverBusy: [] }]),
  );
  const raws = Object.fromEntries(
    RAW_KINDS.map((k) => [k, { ms: [] as number[], sender: [] as number[], receiver: [] as number[] }]),
  ) as Record<RawKind, { ms: number[]; sender: number[]; receiver: number[] }>;
  let epoch = 0;
  const transfer = async (aead: AeadKind, keep: boolean) => {
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
    epoch++;
    const handle = receivers.get(aead)!.expect({
      request: `bench-${epoch}`,
      tenant: 'bench',
      epoch,
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
      aead,
      address: listeners.get(aead)!.address,
      secret: [...secret],
      ticket: { ...handle.ticket, nonce: [...handle.ticket.nonce] },
    } satisfies ToChild);
    const outcome = await handle.outcome;
    const t1 = performance.now();
    const c1 = cpuMs();
    const busy = performance.eventLoopUtilization(loop0).utilization;
    const reply = await fromChild();
    if (outcome.state !== 'COMMITTED') throw new Error(`transfer (${aead}) failed: ${outcome.state} ${reply}`);
    const m = measured.get(aead)!;
    if (!keep) return;
    m.ms.push(t1 - t0);
    m.sender.push(childCpuMs(reply));
    m.receiver.push(c1 - c0);
    m.receiverBusy.push(busy);
  };
  const rawPass = async (kind: RawKind, keep: boolean) => {
    rawExpected = bytes;
    const rawFinished = new Promise<void>((r) => {
      rawDone = r;
    });
    const r0 = performance.now();
    const rc0 = cpuMs();
    child.send({ cmd: 'raw', address: `127.0.0.1:${rawPorts[kind]}`, bytes } satisfies ToChild);
    await rawFinished;
    const r1 = performance.now();
    const rc1 = cpuMs();
    const senderCpu = childCpuMs(await fromChild());
    if (!keep) return;
    raws[kind].ms.push(r1 - r0);
    raws[kind].sender.push(senderCpu);
    raws[kind].receiver.push(rc1 - rc0);
  };
  for (let run = 0; run < args.runs + 1; run++) {
    // run 0 warms up every path; the order turns each run so neither implementation always goes first
    const order = run % 2 === 0 ? kinds : [...kinds].reverse();
    for (const aead of order) await transfer(aead, run > 0);
    for (const kind of run % 2 === 0 ? RAW_KINDS : [...RAW_KINDS].reverse()) await rawPass(kind, run > 0);
  }
  child.send({ cmd: 'exit' } satisfies ToChild);
  const gbs = (ms: number) => bytes / (ms / 1e3) / 1e9;
  const side = (ms: number) => `${ms.toFixed(0)} ms (${gbs(ms).toFixed(2)} GB/s a core)`;
  const rawMedians = Object.fromEntries(
    RAW_KINDS.map((k) => [
      k,
      { ms: median(raws[k].ms), sender: median(raws[k].sender), receiver: median(raws[k].receiver) },
    ]),
  ) as Record<RawKind, { ms: number; sender: number; receiver: number }>;
  // the goal is read against the faster plain socket
  const strict = RAW_KINDS.reduce((a, b) => (rawMedians[a].ms <= rawMedians[b].ms ? a : b));
  const raw = rawMedians[strict];
  console.log(
    `KV transfer over TCP loopback: ${args.pages} pages × ${args.pageBytes} B = ${(bytes / 2 ** 20).toFixed(0)} MiB, median of ${args.runs} runs; ` +
      `node ${process.version}, OpenSSL ${process.versions.openssl ?? 'none'} (the AEAD's speed depends on it)`,
  );
  const line = (label: string, ms: number) =>
    console.log(
      `  ${label.padEnd(91)}${ms.toFixed(1).padStart(7)} ms  ${(args.pages / (ms / 1e3)).toFixed(0)} pages/s  ${gbs(ms).toFixed(2)} GB/s`,
    );
  for (const aead of kinds) {
    line(
      `kvfence transfer (xxh3 checksums, ${cipherOf(aead)} frames, auth; ${LABELS[aead]}):`,
      median(measured.get(aead)!.ms),
    );
  }
  for (const kind of RAW_KINDS) line(`raw TCP, same bytes, ${RAW_LABELS[kind]}:`, rawMedians[kind].ms);
  const primary = kinds[0]!; // the path that serves: AEGIS-256X4 where the addon is built
  const primaryMs = median(measured.get(primary)!.ms);
  for (const kind of RAW_KINDS) {
    const against = rawMedians[kind].ms;
    console.log(
      `  ratio transfer / raw (${RAW_LABELS[kind]}${kind === strict ? ', the faster: the goal' : ''}): ` +
        kinds.map((k) => `${(against / median(measured.get(k)!.ms)).toFixed(2)} (${LABELS[k]})`).join(', '),
    );
  }
  // each run's transfer against the same run's raw pass, a second or so apart: on a shared machine the raw socket
  // moves between states for minutes at a time, which a ratio of the two medians mixes up
  const byRun = measured.get(primary)!.ms.map((ms, i) => raws[strict].ms[i]! / ms);
  console.log(
    `  ratio transfer / raw (${RAW_LABELS[strict]}), run by run, ${LABELS[primary]}: median ${median(byRun).toFixed(2)} ` +
      `(the runs: ${byRun.map((x) => x.toFixed(2)).join(' ')})`,
  );
  for (const other of kinds.slice(1)) {
    const pairs = measured.get(primary)!.ms.map((ms, i) => measured.get(other)!.ms[i]! / ms);
    console.log(
      `  ${LABELS[primary]} ÷ ${LABELS[other]}, transfer speed: ${median(pairs).toFixed(2)}× (median of the runs' pairs: ${pairs.map((x) => x.toFixed(2)).join(' ')})`,
    );
  }
  const cores = new Map(kinds.map((k) => [k, singleCore(checksums.get(k)!, args.pageBytes, k, arena)] as const));
  for (const k of kinds) {
    const c = cores.get(k)!;
    console.log(
      `  single core, ${LABELS[k]}: xxh3 ${c.checksumGBs.toFixed(2)} GB/s, copied into the pool and hashed ${c.copyGBs.toFixed(2)} GB/s, ${cipherOf(k)} seal ${c.sealGBs.toFixed(2)} GB/s, open ${c.openGBs.toFixed(2)} GB/s`,
    );
  }
  for (const aead of kinds) {
    const m = measured.get(aead)!;
    console.log(
      `  CPU a side (medians), ${LABELS[aead]}: transfer sender ${side(median(m.sender))}, receiver ${side(median(m.receiver))}; ` +
        `receiver busy ${(100 * median(m.receiverBusy)).toFixed(0)} % of the time`,
    );
  }
  for (const kind of RAW_KINDS) {
    const r = rawMedians[kind];
    console.log(
      `  CPU a side (medians), raw, ${RAW_LABELS[kind]}: sender ${side(r.sender)}, receiver ${side(r.receiver)}`,
    );
  }
  const bound = oneCoreBound(bytes, cores.get(primary)!, raw.sender, raw.receiver);
  console.log(
    `  bound with one core a side (${LABELS[primary]}: the faster raw socket's CPU + an AEAD pass, + the copy-and-hash pass at the receiver): ` +
      `${bound.toFixed(2)} GB/s = ${(bound / gbs(raw.ms)).toFixed(2)}× raw; the transfer reaches ${(gbs(primaryMs) / bound).toFixed(2)} of it`,
  );
  const runs = (ms: number[]) => ms.map((x) => x.toFixed(0)).join(' ');
  console.log(
    `  runs (ms): ${[
      ...kinds.map((k) => `${LABELS[k]} ${runs(measured.get(k)!.ms)}`),
      ...RAW_KINDS.map((k) => `raw, ${RAW_LABELS[k]} ${runs(raws[k].ms)}`),
    ].join(' | ')}`,
  );
  for (const r of receivers.values()) r.close();
  for (const l of listeners.values()) await l.close();
  for (const server of Object.values(rawServers)) server.close();
}

async function childMain(): Promise<void> {
  // the sender hashes nothing: only the sealing below does, with the checksum every build has
  const sealedWith = await createPageChecksum('wasm');
  let source: (KvPageSource & { all: Uint8Array }) | undefined;
  // the pages and the checksums sealed with them (where prefill computed them), made once, outside any timing: the
  // same values whichever path computes them
  const sourceFor = (pages: number, pageBytes: number) => {
    if (source?.pageCount !== pages || source.pageBytes !== pageBytes) {
      const all = new Uint8Array(randomBytes(pages * pageBytes));
      const pageView = (i: number) => all.subarray(i * pageBytes, (i + 1) * pageBytes);
      const sealed = Array.from({ length: pages }, (_, i) => sealedWith.of(pageView(i)));
      source = { pageCount: pages, pageBytes, all, checksums: sealed, pageView };
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
        aead: m.aead,
      });
      try {
        const channel = await transport.connect(m.address);
        const sender = new TransferSender(channel, ticket, {
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
