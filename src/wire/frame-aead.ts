/**
 * One direction's AEAD for the secure channel, a frame at a time, writing into buffers the caller owns: the sender
 * seals a frame's pages into the one buffer that goes on the wire, the receiver opens each socket read straight into
 * the frame's plaintext buffer. Two ciphers, which the handshake agrees on (peer-auth.ts):
 * - `aegis-256x4` (AEGIS-256X4, draft-irtf-cfrg-aegis-aead): the native addon's, from the vendored libaegis
 *   (native/src/aead.cc), on the AES instructions, VAES where the CPU has them: 20–29 GB/s a core through these
 *   calls where AES-256-GCM runs 4.4 (node 20's OpenSSL 3.0) or 10 (node 24's 3.5) on the same machine
 *   (docs/protocol.md §8). Where both peers run the addon;
 * - `aes-256-gcm`: node's own OpenSSL, either through the addon (`aes-256-gcm`: its Gcm class, the EVP calls into
 *   node's libcrypto, no allocation per call) or through node:crypto (`aes-256-gcm/node:crypto`: createCipheriv per
 *   frame, each output copied into place; what runs without the addon). The two give the same bytes (GCM is
 *   deterministic for a key, nonce and AAD; frame-aead.test.ts checks each against the other), so a peer with the
 *   addon and one without agree on GCM.
 */
import { type CipherGCM, createCipheriv, createDecipheriv, type DecipherGCM } from 'node:crypto';
import { type NativeAead, sharedAddon } from '../compute/native-backend.js';
import { assert } from '../util/assert.js';

export const TAG_BYTES = 16;
export const KEY_BYTES = 32;
/** the ciphers a channel's frames can be sealed with, the handshake's preference first */
export const CIPHERS = ['aegis-256x4', 'aes-256-gcm'] as const;
export type Cipher = (typeof CIPHERS)[number];
/** the implementations: a cipher, and for AES-256-GCM which code runs it */
export const AEAD_KINDS = ['aegis-256x4', 'aes-256-gcm', 'aes-256-gcm/node:crypto'] as const;
export type AeadKind = (typeof AEAD_KINDS)[number];

export const cipherOf = (kind: AeadKind): Cipher => (kind === 'aegis-256x4' ? 'aegis-256x4' : 'aes-256-gcm');
/** A cipher's nonce length: AES-256-GCM's 12 bytes, AEGIS-256X4's 32. */
export const nonceBytesOf = (cipher: Cipher): number => (cipher === 'aegis-256x4' ? 32 : 12);

export interface FrameAead {
  readonly kind: AeadKind;
  /** begins a frame: its nonce (never repeated under this key; nonceBytesOf its cipher) and its AAD */
  start(nonce: Uint8Array, aad: Uint8Array): void;
  /**
   * The input's bytes, sealed or opened, into output[at, at + input.byteLength). AEGIS works in 64-byte blocks and
   * may hold back the last partial block it was given, which it writes just before the next call's `at`, or before
   * `end` at the finish: all the calls of one frame must write one contiguous run of one output. A call that throws
   * ends the frame.
   */
  update(input: Uint8Array, output: Uint8Array, at: number): void;
  /** ends a sealed frame: writes its tag (16 bytes), and what was held back just before output[end] */
  finishSeal(tag: Uint8Array, output: Uint8Array, end: number): void;
  /** ends an opened frame: whether its tag checks out (false: nothing it opened may be used) */
  finishOpen(tag: Uint8Array, output: Uint8Array, end: number): boolean;
  /** forgets the key; later calls throw */
  dispose(): void;
}

/** The addon, where it loads and node carries the OpenSSL its AES-256-GCM calls into; else null. */
const aeadAddon = () => (process.versions.openssl === undefined ? null : sharedAddon());

/**
 * The kinds this process runs, best first: with the addon, AEGIS-256X4 (where the CPU has the AES instructions), then
 * its AES-256-GCM; without it, node:crypto's AES-256-GCM. Both peers of a handshake offer theirs (peer-auth.ts).
 */
export function runnableAeads(): AeadKind[] {
  const addon = aeadAddon();
  if (addon === null) return ['aes-256-gcm/node:crypto'];
  return addon.aegis256x4Runs ? ['aegis-256x4', 'aes-256-gcm'] : ['aes-256-gcm'];
}

/** One direction's AEAD of `kind` (default: the best this process runs); throws where this process cannot run it. */
export function createFrameAead(key: Uint8Array, seal: boolean, kind: AeadKind = runnableAeads()[0]!): FrameAead {
  assert(key.byteLength === KEY_BYTES, 'a frame key is 32 bytes');
  if (kind === 'aes-256-gcm/node:crypto') return new NodeGcm(key, seal);
  const addon = aeadAddon();
  assert(addon !== null, `${kind} needs the native addon (npm run build:native)`);
  const made = kind === 'aegis-256x4' ? new addon.Aegis256x4(key, seal) : new addon.Gcm(key, seal);
  return nativeAead(kind, made);
}

function nativeAead(kind: AeadKind, aead: NativeAead): FrameAead {
  return {
    kind,
    start: (nonce, aad) => aead.start(nonce, aad),
    update: (input, output, at) => aead.update(input, output, at),
    finishSeal: (tag, output, end) => aead.finishSeal(tag, output, end),
    finishOpen: (tag, output, end) => aead.finishOpen(tag, output, end),
    dispose: () => aead.dispose(),
  };
}

/** node:crypto's AES-256-GCM: a stream mode, so it holds nothing back and its finishes write no bytes. */
class NodeGcm implements FrameAead {
  readonly kind = 'aes-256-gcm/node:crypto';
  private key: Uint8Array | undefined;
  private cipher: CipherGCM | DecipherGCM | undefined;

  constructor(
    key: Uint8Array,
    private readonly seal: boolean,
  ) {
    this.key = new Uint8Array(key);
  }

  start(nonce: Uint8Array, aad: Uint8Array): void {
    assert(this.key !== undefined, 'this AEAD was disposed');
    assert(this.cipher === undefined, 'a frame was started and not finished');
    assert(nonce.byteLength === nonceBytesOf('aes-256-gcm'), 'an AES-256-GCM nonce is 12 bytes');
    const options = { authTagLength: TAG_BYTES };
    this.cipher = this.seal
      ? createCipheriv('aes-256-gcm', this.key, nonce, options)
      : createDecipheriv('aes-256-gcm', this.key, nonce, options);
    this.cipher.setAAD(aad);
  }

  update(input: Uint8Array, output: Uint8Array, at: number): void {
    const cipher = this.cipher;
    assert(cipher !== undefined, 'no frame was started');
    this.cipher = undefined; // until this call has done its part
    const out = cipher.update(input);
    assert(out.byteLength === input.byteLength, 'GCM gives a byte for every byte');
    output.set(out, at);
    this.cipher = cipher;
  }

  finishSeal(tag: Uint8Array): void {
    const cipher = this.cipher as CipherGCM | undefined;
    assert(cipher !== undefined && this.seal, 'no sealed frame was started');
    this.cipher = undefined;
    cipher.final();
    tag.set(cipher.getAuthTag());
  }

  finishOpen(tag: Uint8Array): boolean {
    const decipher = this.cipher as DecipherGCM | undefined;
    assert(decipher !== undefined && !this.seal, 'no opened frame was started');
    this.cipher = undefined;
    try {
      decipher.setAuthTag(tag);
      decipher.final();
      return true;
    } catch {
      return false;
    }
  }

  dispose(): void {
    this.key?.fill(0);
    this.key = undefined;
    this.cipher = undefined;
  }
}
