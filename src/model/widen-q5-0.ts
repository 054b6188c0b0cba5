/**
 * Q5_0 weights kept as Q8_0 blocks of the same values. A Q5_0 block holds an f16 scale d and 32 five-bit codes u;
 * ggml dequantizes value j to d · (u − 16), and a Q8_0 block's value j to d · q for its int8 q. Writing u − 16
 * (−16..15) as q and copying d gives every weight the same f32 value in every kernel and in the reference (both
 * products are exact, 11 bits of d times 5 of q), so results keep their bits. The block grows from 22 to 34 bytes;
 * in exchange the five-bit codes are not unpacked again for every token (on AVX2 about 30 vector instructions per 32
 * weights and output for Q5_0 against Q8_0's 19: docs/native.md, "Q5_0 weights widened at load").
 */
import { sharedAddon } from '../compute/native-backend.js';
import { assert } from '../util/assert.js';
import { QUANT_BLOCKS } from './gguf-types.js';

const FROM = QUANT_BLOCKS.q5_0.bytes;
const TO = QUANT_BLOCKS.q8_0.bytes;

/** Bytes of Q8_0 blocks for `q5_0Bytes` bytes of Q5_0 blocks. */
export function widenedBytes(q5_0Bytes: number): number {
  return (q5_0Bytes / FROM) * TO;
}

/**
 * Writes src's Q5_0 blocks into dst as Q8_0 blocks, one for one: through the native addon where it loads (the same
 * loop in C++, native/src/widen-q5-0.cc, 16-25× faster: a large Q5_0 file would otherwise load seconds slower), else
 * here.
 */
export function widenQ5_0(src: Uint8Array, dst: Uint8Array): void {
  const addon = sharedAddon();
  if (addon !== null) addon.widenQ5_0(src, dst);
  else widenQ5_0Here(src, dst);
}

/** The loop in JavaScript: what runs without the addon, and the tests' oracle for it. */
export function widenQ5_0Here(src: Uint8Array, dst: Uint8Array): void {
  const blocks = src.length / FROM;
  assert(Number.isInteger(blocks) && dst.length === blocks * TO, 'Q5_0 widening needs whole blocks and room for them');
  for (let b = 0; b < blocks; b++) {
    const s = b * FROM;
    const d = b * TO;
    dst[d] = src[s]!;
    dst[d + 1] = src[s + 1]!;
    const high = (src[s + 2]! | (src[s + 3]! << 8) | (src[s + 4]! << 16) | (src[s + 5]! << 24)) >>> 0;
    for (let j = 0; j < 16; j++) {
      const nibbles = src[s + 6 + j]!;
      // a Uint8Array stores the int8's two's complement
      dst[d + 2 + j] = ((nibbles & 0xf) | (((high >>> j) & 1) << 4)) - 16;
      dst[d + 18 + j] = ((nibbles >> 4) | (((high >>> (j + 16)) & 1) << 4)) - 16;
    }
  }
}
