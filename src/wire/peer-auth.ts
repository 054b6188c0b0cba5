/**
 * Peer authentication (DESIGN I10): both sides prove they hold the cluster secret, with fresh nonces from node:crypto,
 * before any transfer frame flows; then both derive per-session, per-direction keys that seal (encrypt and
 * authenticate) every frame (secure-channel.ts). Three fixed-size messages (magic "KVFA", version 3: frames sealed with
 * AES-256-GCM; version 2 sealed them with ChaCha20-Poly1305 and version 1 sent them in clear, so an older peer is
 * refused here rather than failing on its first frame):
 *
 *   initiator → responder  AUTH_HELLO      magic · version · nonceI (32)
 *   responder → initiator  AUTH_CHALLENGE  magic · version · nonceR (32) · proofR = HMAC(secret, "responder" · nonceI · nonceR)
 *   initiator → responder  AUTH_PROOF      magic · version · proofI = HMAC(secret, "initiator" · nonceI · nonceR)
 *
 *   keyI→R, keyR→I = HKDF-SHA256(secret, salt = nonceI · nonceR, info = direction label)
 *
 * A replayed AUTH_PROOF fails against the responder's fresh nonceR; a replayed AUTH_CHALLENGE against the initiator's
 * fresh nonceI; frames of an earlier session fail the AEAD tag under the new keys. Proofs compare in constant time.
 * The responder hands over no channel, so no frame reaches a receiver, until AUTH_PROOF checks out; until then it
 * reads at most LIMITS.preAuthBytesMax (a stranger costs a bounded amount).
 */
import { createHmac, hkdfSync, randomBytes, timingSafeEqual } from 'node:crypto';
import { TransferError } from '../transfer/transfer-error.js';
import { assert } from '../util/assert.js';
import type { Clock } from '../util/clock.js';
import { LIMITS } from '../util/limits.js';
import type { ByteStream } from './byte-stream.js';
import type { AeadKind } from './frame-aead.js';
import { SecureChannel } from './secure-channel.js';

const MAGIC = [0x4b, 0x56, 0x46, 0x41]; // "KVFA"
const VERSION = 3;
const NONCE_BYTES = 32;
const PROOF_BYTES = 32;
const HEAD_BYTES = MAGIC.length + 1;
const LABEL = 'kvfence/transfer/auth/v3';

export type PeerRole = 'initiator' | 'responder';

type HandshakeFailure = 'auth_failed' | 'connection_closed' | 'deadline_exceeded';

export interface PeerAuthOptions {
  /** the cluster secret, shared by every worker; at least LIMITS.transferSecretBytesMin bytes */
  secret: Uint8Array;
  /** the whole handshake must finish within this */
  timeoutMs: number;
  clock: Clock;
  /** which implementation seals and opens the channel's frames (the same bytes either way; default: native if built) */
  aead?: AeadKind | undefined;
}

function message(...parts: Uint8Array[]): Uint8Array {
  const head = new Uint8Array([...MAGIC, VERSION]);
  return Buffer.concat([head, ...parts]);
}

function proof(secret: Uint8Array, role: PeerRole, nonceI: Uint8Array, nonceR: Uint8Array): Uint8Array {
  return new Uint8Array(createHmac('sha256', secret).update(`${LABEL} ${role}`).update(nonceI).update(nonceR).digest());
}

function sessionKey(secret: Uint8Array, nonceI: Uint8Array, nonceR: Uint8Array, from: PeerRole): Uint8Array {
  const salt = Buffer.concat([nonceI, nonceR]);
  return new Uint8Array(hkdfSync('sha256', secret, salt, `${LABEL} key from ${from}`, 32));
}

function sameSecretProof(a: Uint8Array, b: Uint8Array): boolean {
  return a.byteLength === b.byteLength && timingSafeEqual(a, b);
}

/**
 * Runs the handshake on a fresh stream; resolves with the authenticated channel, or rejects after destroying the
 * stream: auth_failed when the peer is no kvfence peer or lacks the secret (trying again will not help);
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
  return new Promise((resolve, reject) => {
    const nonceMine = new Uint8Array(randomBytes(NONCE_BYTES));
    let nonceI = role === 'initiator' ? nonceMine : undefined;
    let nonceR = role === 'responder' ? nonceMine : undefined;
    let buffered: Uint8Array = new Uint8Array(0);
    let settled = false;
    // the one message this side waits for next, by size
    let expecting: number = role === 'initiator' ? HEAD_BYTES + NONCE_BYTES + PROOF_BYTES : HEAD_BYTES + NONCE_BYTES;
    const cancelTimer = options.clock.after(options.timeoutMs, () =>
      fail(`no handshake within ${options.timeoutMs} ms`, 'deadline_exceeded'),
    );
    const fail = (why: string, reason: HandshakeFailure = 'auth_failed') => {
      if (settled) return;
      settled = true;
      cancelTimer();
      const error = new TransferError(reason, why);
      stream.destroy(error);
      reject(error);
    };
    const succeed = (leftover: Uint8Array) => {
      settled = true;
      cancelTimer();
      assert(nonceI !== undefined && nonceR !== undefined, 'both nonces are known');
      const other: PeerRole = role === 'initiator' ? 'responder' : 'initiator';
      const sendKey = sessionKey(secret, nonceI, nonceR, role);
      const receiveKey = sessionKey(secret, nonceI, nonceR, other);
      const channel = new SecureChannel(stream, sendKey, receiveKey, leftover, options.aead);
      sendKey.fill(0); // the channel's AEADs hold their own copies
      receiveKey.fill(0);
      resolve(channel);
    };
    const onMessage = (m: Uint8Array, rest: Uint8Array) => {
      for (let i = 0; i < MAGIC.length; i++) if (m[i] !== MAGIC[i]) return fail('not a kvfence peer');
      if (m[MAGIC.length] !== VERSION) return fail(`handshake version ${m[MAGIC.length]}`);
      const body = m.subarray(HEAD_BYTES);
      if (role === 'responder' && nonceI === undefined) {
        nonceI = new Uint8Array(body.subarray(0, NONCE_BYTES)); // copies: the stream lends each read for its call
        expecting = HEAD_BYTES + PROOF_BYTES;
        stream.write([message(nonceMine, proof(secret, 'responder', nonceI, nonceMine))]);
        return step(rest);
      }
      if (role === 'responder') {
        if (!sameSecretProof(body, proof(secret, 'initiator', nonceI!, nonceMine))) return fail('bad initiator proof');
        return succeed(new Uint8Array(rest));
      }
      nonceR = new Uint8Array(body.subarray(0, NONCE_BYTES));
      if (!sameSecretProof(body.subarray(NONCE_BYTES), proof(secret, 'responder', nonceMine, nonceR))) {
        return fail('bad responder proof');
      }
      stream.write([message(proof(secret, 'initiator', nonceMine, nonceR))]);
      return succeed(new Uint8Array(rest));
    };
    const step = (bytes: Uint8Array) => {
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
    if (role === 'initiator') stream.write([message(nonceMine)]);
  });
}
