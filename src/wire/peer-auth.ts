/**
 * Peer authentication (DESIGN I10): both sides prove they hold the cluster secret, with fresh nonces from node:crypto,
 * agree on the cipher that seals (encrypts and authenticates) every frame, and derive per-session, per-direction keys
 * for it (secure-channel.ts). Three fixed-size messages (magic "KVFA", version 4: the cipher agreed here; version 3
 * always sealed with AES-256-GCM, version 2 with ChaCha20-Poly1305, version 1 sent frames in clear, so an older peer
 * is refused here rather than failing on its first frame):
 *
 *   initiator → responder  AUTH_HELLO      magic · version · nonceI (32) · offer (u8: a bit per cipher it runs)
 *   responder → initiator  AUTH_CHALLENGE  magic · version · nonceR (32) · chosen (u8: one bit of the offer) · proofR
 *   initiator → responder  AUTH_PROOF      magic · version · proofI
 *
 *   proofX = HMAC-SHA256(secret, "X" · nonceI · nonceR · offer · chosen)
 *   keyI→R, keyR→I = HKDF-SHA256(secret, salt = nonceI · nonceR, info = direction label · chosen cipher)
 *
 * The responder picks the first cipher of its own preference (frame-aead.ts: AEGIS-256X4, then AES-256-GCM) that the
 * offer holds, so two peers with the native addon seal with AEGIS-256X4 and a peer without it gets AES-256-GCM. Both
 * proofs cover the offer and the choice: a stranger who alters either (to push a pair onto the other cipher) fails
 * the proof it cannot make. A replayed AUTH_PROOF fails against the responder's fresh nonceR; a replayed
 * AUTH_CHALLENGE against the initiator's fresh nonceI; frames of an earlier session fail the AEAD tag under the new
 * keys. Proofs compare in constant time. The responder hands over no channel, so no frame reaches a receiver, until
 * AUTH_PROOF checks out; until then it reads at most LIMITS.preAuthBytesMax (a stranger costs a bounded amount).
 */
import { createHmac, hkdfSync, randomBytes, timingSafeEqual } from 'node:crypto';
import { TransferError } from '../transfer/transfer-error.js';
import { assert } from '../util/assert.js';
import type { Clock } from '../util/clock.js';
import { LIMITS } from '../util/limits.js';
import type { ByteStream } from './byte-stream.js';
import { type AeadKind, type Cipher, cipherOf, runnableAeads } from './frame-aead.js';
import { SecureChannel } from './secure-channel.js';

const MAGIC = [0x4b, 0x56, 0x46, 0x41]; // "KVFA"
const VERSION = 4;
const NONCE_BYTES = 32;
const PROOF_BYTES = 32;
const HEAD_BYTES = MAGIC.length + 1;
const LABEL = 'kvfence/transfer/auth/v4';
/** each cipher's bit in an offer, and the one bit of a choice */
const CIPHER_BITS: Record<Cipher, number> = { 'aes-256-gcm': 1, 'aegis-256x4': 2 };
const HELLO_BYTES = HEAD_BYTES + NONCE_BYTES + 1;
const CHALLENGE_BYTES = HEAD_BYTES + NONCE_BYTES + 1 + PROOF_BYTES;
const PROOF_MESSAGE_BYTES = HEAD_BYTES + PROOF_BYTES;
/** how long a last message to a refused peer has to leave before its stream is destroyed */
const FLUSH_GRACE_MS = 200;

/** why a message's head is not this version's (an older peer's messages are shorter: read before the whole message) */
function badHead(m: Uint8Array): string | undefined {
  for (let i = 0; i < MAGIC.length; i++) if (m[i] !== MAGIC[i]) return 'not a kvfence peer';
  return m[MAGIC.length] === VERSION ? undefined : `handshake version ${m[MAGIC.length]}`;
}

export type PeerRole = 'initiator' | 'responder';

type HandshakeFailure = 'auth_failed' | 'connection_closed' | 'deadline_exceeded';

export interface PeerAuthOptions {
  /** the cluster secret, shared by every worker; at least LIMITS.transferSecretBytesMin bytes */
  secret: Uint8Array;
  /** the whole handshake must finish within this */
  timeoutMs: number;
  clock: Clock;
  /**
   * the one implementation this side offers (tests, the bench); by default every one this process runs
   * (`runnableAeads`), and the handshake agrees on the best both run
   */
  aead?: AeadKind | undefined;
}

function message(...parts: Uint8Array[]): Uint8Array {
  const head = new Uint8Array([...MAGIC, VERSION]);
  return Buffer.concat([head, ...parts]);
}

/** what both sides know once the challenge is out: the nonces, the initiator's offer and the responder's choice */
interface Transcript {
  nonceI: Uint8Array;
  nonceR: Uint8Array;
  offer: number;
  chosen: number;
}

function proof(secret: Uint8Array, role: PeerRole, t: Transcript): Uint8Array {
  const hmac = createHmac('sha256', secret).update(`${LABEL} ${role}`).update(t.nonceI).update(t.nonceR);
  return new Uint8Array(hmac.update(new Uint8Array([t.offer, t.chosen])).digest());
}

function sessionKey(secret: Uint8Array, t: Transcript, cipher: Cipher, from: PeerRole): Uint8Array {
  const salt = Buffer.concat([t.nonceI, t.nonceR]);
  return new Uint8Array(hkdfSync('sha256', secret, salt, `${LABEL} key from ${from} ${cipher}`, 32));
}

const bitOf = (kind: AeadKind): number => CIPHER_BITS[cipherOf(kind)];
const offerOf = (kinds: readonly AeadKind[]): number => kinds.reduce((bits, k) => bits | bitOf(k), 0);

function sameSecretProof(a: Uint8Array, b: Uint8Array): boolean {
  return a.byteLength === b.byteLength && timingSafeEqual(a, b);
}

/**
 * Runs the handshake on a fresh stream; resolves with the authenticated channel, or rejects after destroying the
 * stream: auth_failed when the peer is no kvfence peer, lacks the secret or shares no cipher with this side (trying
 * again will not help);
 * connection_closed when the stream closed first (a listener under load dropped it, or the peer went away) and
 * deadline_exceeded when the handshake took longer than `timeoutMs` (both: the peer may be there, just busy).
 * Nothing but the three handshake messages is ever read before success.
 */
export function authenticate(stream: ByteStream, role: PeerRole, options: PeerAuthOptions): Promise<SecureChannel> {
  const { secret } = options;
  assert(
    secret.byteLength >= LIMITS.transferSecretBytesMin && secret.byteLength <= LIMITS.transferSecretBytesMax,
    `the cluster secret must be ${LIMITS.transferSecretBytesMin}..${LIMITS.transferSecretBytesMax} bytes`,
  );
  assert(options.timeoutMs > 0 && options.timeoutMs <= LIMITS.transferTimeoutMsMax, 'handshake timeout out of range');
  const kinds = options.aead === undefined ? runnableAeads() : [options.aead];
  return new Promise((resolve, reject) => {
    const nonceMine = new Uint8Array(randomBytes(NONCE_BYTES));
    const offerMine = offerOf(kinds);
    let transcript: Transcript | undefined; // once the challenge is out (responder) or in (initiator)
    let agreed: AeadKind | undefined;
    let buffered: Uint8Array = new Uint8Array(0);
    let settled = false;
    // the one message this side waits for next, by size
    let expecting = role === 'initiator' ? CHALLENGE_BYTES : HELLO_BYTES;
    const cancelTimer = options.clock.after(options.timeoutMs, () =>
      fail(`no handshake within ${options.timeoutMs} ms`, 'deadline_exceeded'),
    );
    // `flush`: the stream ends after what was written (a last message to the peer) instead of being destroyed
    const fail = (why: string, reason: HandshakeFailure = 'auth_failed', flush = false) => {
      if (settled) return;
      settled = true;
      cancelTimer();
      const error = new TransferError(reason, why);
      if (flush) {
        stream.end();
        // a peer that never closes its side is cut off all the same: no socket outlives its handshake by much
        options.clock.after(FLUSH_GRACE_MS, () => stream.destroy(error));
      } else {
        stream.destroy(error);
      }
      reject(error);
    };
    const succeed = (leftover: Uint8Array) => {
      settled = true;
      cancelTimer();
      assert(transcript !== undefined && agreed !== undefined, 'the transcript and the cipher are known');
      const other: PeerRole = role === 'initiator' ? 'responder' : 'initiator';
      const cipher = cipherOf(agreed);
      const sendKey = sessionKey(secret, transcript, cipher, role);
      const receiveKey = sessionKey(secret, transcript, cipher, other);
      const channel = new SecureChannel(stream, sendKey, receiveKey, leftover, agreed);
      sendKey.fill(0); // the channel's AEADs hold their own copies
      receiveKey.fill(0);
      resolve(channel);
    };
    const onMessage = (m: Uint8Array, rest: Uint8Array) => {
      const body = m.subarray(HEAD_BYTES);
      if (role === 'responder' && transcript === undefined) {
        const offer = body[NONCE_BYTES]!;
        agreed = kinds.find((k) => (bitOf(k) & offer) !== 0); // this side's preference first
        // copies: the stream lends each read for its call
        const nonceI = new Uint8Array(body.subarray(0, NONCE_BYTES));
        // no cipher in common: the choice 0, proven like any other, so that the initiator learns why and does not retry
        const chosen = agreed === undefined ? 0 : bitOf(agreed);
        transcript = { nonceI, nonceR: nonceMine, offer, chosen };
        expecting = PROOF_MESSAGE_BYTES;
        stream.write([message(nonceMine, new Uint8Array([chosen]), proof(secret, 'responder', transcript))]);
        if (agreed === undefined)
          return fail(`no cipher in common (offered ${offer}, runs ${offerMine})`, 'auth_failed', true);
        return step(rest);
      }
      if (role === 'responder') {
        if (!sameSecretProof(body, proof(secret, 'initiator', transcript!))) return fail('bad initiator proof');
        return succeed(new Uint8Array(rest));
      }
      const nonceR = new Uint8Array(body.subarray(0, NONCE_BYTES));
      transcript = { nonceI: nonceMine, nonceR, offer: offerMine, chosen: body[NONCE_BYTES]! };
      if (!sameSecretProof(body.subarray(NONCE_BYTES + 1), proof(secret, 'responder', transcript))) {
        return fail('bad responder proof');
      }
      if (transcript.chosen === 0) return fail(`no cipher in common (the responder runs none of ${offerMine})`);
      const { chosen } = transcript;
      agreed = kinds.find((k) => bitOf(k) === chosen); // one bit, of a cipher this side offered
      if (agreed === undefined) return fail(`the responder chose a cipher not offered (${transcript.chosen})`);
      stream.write([message(proof(secret, 'initiator', transcript))]);
      return succeed(new Uint8Array(rest));
    };
    const step = (bytes: Uint8Array) => {
      // each message's head as soon as it is here: another version's message may be shorter than this one's
      const bad = !settled && bytes.byteLength >= HEAD_BYTES ? badHead(bytes) : undefined;
      if (bad !== undefined) return fail(bad);
      if (settled || bytes.byteLength < expecting) {
        buffered = new Uint8Array(bytes);
        return;
      }
      onMessage(bytes.subarray(0, expecting), bytes.subarray(expecting));
    };
    stream.setHandlers({
      data: (bytes) => {
        if (settled) return;
        // bounded: the handshake is a few fixed-size messages; the initiator may pipeline frames after its proof,
        // which come in reads of at most 64 KiB (TCP) or one write each (memory pipe), so one read is all that follows
        if (buffered.byteLength + bytes.byteLength > LIMITS.preAuthBytesMax) return fail('handshake flood');
        step(buffered.byteLength === 0 ? bytes : Buffer.concat([buffered, bytes]));
      },
      drain: () => {},
      close: (error) =>
        fail(`connection closed during the handshake${error ? `: ${error.message}` : ''}`, 'connection_closed'),
    });
    if (role === 'initiator') stream.write([message(nonceMine, new Uint8Array([offerMine]))]);
  });
}
