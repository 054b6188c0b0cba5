// Q32 in four little-endian 64-bit words, for the portable path (AVX2 has its own, simd-q32-ymm.h). Included by
// simd-portable.h inside its namespace, which adds vcvtQ32.
#pragma once

// Q32: the 32 quants of a block (values 32·i .. 32·i + 31 of it) as 32 bytes, while a block decoder assembles them
// from their bit fields with integer operations only — every path (simd-q32-ymm.h, simd-avx512.h, this plain version
// in four little-endian 64-bit words, byte j of word w being value 8w + j) gets the same integers. Bytes stay in
// 0..255 and no operation carries into the next byte; q32Centre subtracts the format's offset, after which a byte is
// the signed int8 quant that vcvtQ32 converts to f32, exactly (values 0..15 in lo, 16..31 in hi).
//   q32Load(p): bytes p[0..31];  q32Nibbles(p): the low nibbles of p[0..15], then their high nibbles;
//   q32Bits(a, shift, mask): (byte >> shift) & mask, mask <= 0xff >> shift;
//   q32AddBits(a, bits, value): byte j + value where bit j of the 32-bit little-endian word at bits is set (the sum
//   stays below 256);  q32AddBitOf(a, p, bit, value): byte j + value where bit `bit` of p[j] is set;
//   q32CentreBits<k>(a, bits), q32CentreBitOf<k>(a, p, bit): q32Centre<k> of those with value 2^(k−1), for bytes
//   of a below 2^(k−1);
//   q32Or(a, b); q32Shl<k>(a): byte << k, for bytes below 2^(8−k);  q32Centre<k>(a): byte − 2^(k−1), bytes < 2^k.
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "the block decoders read 8 quant bytes as one word");
struct Q32 {
  uint64_t w[4];
};
constexpr uint64_t kBytes01 = 0x0101010101010101ull;
// kSpreadBits[b]: byte j = bit j of b (0 or 1)
constexpr std::array<uint64_t, 256> makeSpreadBits() {
  std::array<uint64_t, 256> t{};
  for (int b = 0; b < 256; b++)
    for (int j = 0; j < 8; j++) t[b] |= static_cast<uint64_t>((b >> j) & 1) << (8 * j);
  return t;
}
constexpr std::array<uint64_t, 256> kSpreadBits = makeSpreadBits();

static inline uint64_t loadU64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
static inline Q32 q32Load(const uint8_t* p) { return {{loadU64(p), loadU64(p + 8), loadU64(p + 16), loadU64(p + 24)}}; }
static inline Q32 q32Nibbles(const uint8_t* p) {
  const uint64_t a = loadU64(p);
  const uint64_t b = loadU64(p + 8);
  const uint64_t m = kBytes01 * 0x0f;
  return {{a & m, b & m, (a >> 4) & m, (b >> 4) & m}};
}
static inline Q32 q32Bits(Q32 a, int shift, uint8_t mask) {
  for (auto& w : a.w) w = (w >> shift) & (kBytes01 * mask);
  return a;
}
static inline Q32 q32AddBits(Q32 a, const uint8_t* bits, uint8_t value) {
  for (int w = 0; w < 4; w++) a.w[w] += kSpreadBits[bits[w]] * value;
  return a;
}
static inline Q32 q32AddBitOf(Q32 a, const uint8_t* p, int bit, uint8_t value) {
  for (int w = 0; w < 4; w++) a.w[w] += ((loadU64(p + 8 * w) >> bit) & kBytes01) * value;
  return a;
}
static inline Q32 q32Or(Q32 a, Q32 b) {
  for (int w = 0; w < 4; w++) a.w[w] |= b.w[w];
  return a;
}
template <int kShift>
static inline Q32 q32Shl(Q32 a) {
  for (auto& w : a.w) w <<= kShift;
  return a;
}
// flip the top bit, then sign-extend from it: v − 2^(kBits−1) as int8
template <int kBits>
static inline Q32 q32Centre(Q32 a) {
  for (auto& w : a.w) {
    const uint64_t y = w ^ (kBytes01 << (kBits - 1));
    w = y | (((y >> (kBits - 1)) & kBytes01) * ((0xffu << kBits) & 0xffu));
  }
  return a;
}
// a's bytes are below 2^(k−1), so byte − 2^(k−1) is byte | (256 − 2^(k−1)) where the bit is clear
template <int kBits>
static inline Q32 q32CentreBits(Q32 a, const uint8_t* bits) {
  for (int w = 0; w < 4; w++) a.w[w] |= kSpreadBits[static_cast<uint8_t>(~bits[w])] * (0x100 - (1 << (kBits - 1)));
  return a;
}
template <int kBits>
static inline Q32 q32CentreBitOf(Q32 a, const uint8_t* p, int bit) {
  for (int w = 0; w < 4; w++) a.w[w] |= ((~loadU64(p + 8 * w) >> bit) & kBytes01) * (0x100 - (1 << (kBits - 1)));
  return a;
}
