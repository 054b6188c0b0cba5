/**
 * One direction's AES-256-GCM for the secure channel, a frame at a time, writing into buffers the caller owns: the
 * sender seals a frame's pages into the one buffer that goes on the wire, the receiver opens each socket read straight
 * into the frame's plaintext buffer. Two implementations give the same bytes (GCM is deterministic for a key, nonce
 * and AAD; frame-aead.test.ts checks each against the other):
 * - `native`: the addon's Gcm (native/src/aead.cc), OpenSSL's EVP calls into node's own libcrypto, with no allocation
 *   per call; 1.5–2.5× node:crypto's speed on node 20 here, several times on node 24 (docs/protocol.md §8). Only
 *   where node carries OpenSSL (`process.versions.openssl`): the addon resolves those symbols from the running node
 *   when first called;
 * - `node:crypto`: createCipheriv per frame, each output copied into place; what runs when the addon is not built.
 */
import { type CipherGCM, createCipheriv, createDecipheriv, type DecipherGCM } from 'node:crypto';
import { type NativeGcm, sharedAddon } from '../compute/native-backend.js';
import { assert } from '../util/assert.js';

export const AEAD = 'aes-256-gcm';
export const TAG_BYTES = 16;
export const KEY_BYTES = 32;
export const NONCE_BYTES = 12;
export const AEAD_KINDS = ['native', 'node:crypto'] as const;
export type AeadKind = (typeof AEAD_KINDS)[number];

export interface FrameAead {
  readonly kind: AeadKind;
  /** begins a frame: its nonce (never repeated under this key) and its AAD */
  start(nonce: Uint8Array, aad: Uint8Array): void;
  /** the input's bytes, sealed or opened, into output[at, at + input.byteLength); a call that throws ends the frame */
  update(input: Uint8Array, output: Uint8Array, at: number): void;
  /** ends a sealed frame, writing its tag (16 bytes) */
  finishSeal(tag: Uint8Array): void;
  /** ends an opened frame: whether its tag checks out (false: nothing it opened may be used) */
  finishOpen(tag: Uint8Array): boolean;
  /** forgets the key; later calls throw */
  dispose(): void;
}

/** The native AEAD when the addon loads, else node:crypto's; `kind` forces one (tests, the bench). */
export function createFrameAead(key: Uint8Array, seal: boolean, kind?: AeadKind | undefined): FrameAead {
  assert(key.byteLength === KEY_BYTES, 'an AES-256-GCM key is 32 bytes');
  const addon = kind === 'node:crypto' || process.versions.openssl === undefined ? null : sharedAddon();
  if (addon !== null) return nativeAead(new addon.Gcm(key, seal));
  assert(kind !== 'native', 'the native AEAD needs the native addon (npm run build:native)');
  return new NodeAead(key, seal);
}

function nativeAead(gcm: NativeGcm): FrameAead {
  return {
    kind: 'native',
    start: (nonce, aad) => gcm.start(nonce, aad),
    update: (input, output, at) => gcm.update(input, output, at),
    finishSeal: (tag) => gcm.finishSeal(tag),
    finishOpen: (tag) => gcm.finishOpen(tag),
    dispose: () => gcm.dispose(),
  };
}

class NodeAead implements FrameAead {
  readonly kind = 'node:crypto';
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
    const options = { authTagLength: TAG_BYTES };
    this.cipher = this.seal
      ? createCipheriv(AEAD, this.key, nonce, options)
      : createDecipheriv(AEAD, this.key, nonce, options);
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
