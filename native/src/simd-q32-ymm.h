// Q32 as the 32 bytes of one ymm register, for AVX2 (the operations are described in simd-q32-words.h). Single bits
// spread to bytes with one byte shuffle, an AND with each byte's bit and a compare. Included by simd-avx2.h inside its
// namespace.
#pragma once

#include "simd-bytes-ymm.h"

struct Q32 {
  __m256i v;
};
// the 32 quants as int8 in one ymm register (the Q8 activations' weights, simd-q8x-ymm.h)
static inline __m256i q32Bytes(Q32 q) { return q.v; }
static inline Q32 q32Load(const uint8_t* p) { return {_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))}; }
static inline Q32 q32Nibbles(const uint8_t* p) { return {nibbles32(p)}; }
static inline Q32 q32Bits(Q32 a, int shift, uint8_t mask) { return {_mm256_and_si256(_mm256_srli_epi16(a.v, shift), splat8(mask))}; }
// 0xff at byte j where bit `bit` of p[j] is set
static inline __m256i bitOfBytes(const uint8_t* p, int bit) {
  const __m256i m = splat8(1 << bit);
  return _mm256_cmpeq_epi8(_mm256_and_si256(q32Load(p).v, m), m);
}
static inline Q32 q32AddBits(Q32 a, const uint8_t* bits, uint8_t value) {
  return {_mm256_add_epi8(a.v, _mm256_and_si256(spreadBits(bits), splat8(value)))};
}
static inline Q32 q32AddBitOf(Q32 a, const uint8_t* p, int bit, uint8_t value) {
  return {_mm256_add_epi8(a.v, _mm256_and_si256(bitOfBytes(p, bit), splat8(value)))};
}
template <int kBits>
static inline Q32 q32CentreBits(Q32 a, const uint8_t* bits) {
  return {centreBits32<kBits>(a.v, bits)};
}
template <int kBits>
static inline Q32 q32CentreBitOf(Q32 a, const uint8_t* p, int bit) {
  return {_mm256_or_si256(a.v, _mm256_andnot_si256(bitOfBytes(p, bit), splat8(0x100 - (1 << (kBits - 1)))))};
}
static inline Q32 q32Or(Q32 a, Q32 b) { return {_mm256_or_si256(a.v, b.v)}; }
template <int kShift>
static inline Q32 q32Shl(Q32 a) {
  return {_mm256_slli_epi16(a.v, kShift)};
}
template <int kBits>
static inline Q32 q32Centre(Q32 a) {
  return {_mm256_sub_epi8(a.v, splat8(1 << (kBits - 1)))};
}
static inline void vcvtQ32(Q32 q, V16& lo, V16& hi) {
  const __m128i a = _mm256_castsi256_si128(q.v);
  const __m128i b = _mm256_extracti128_si256(q.v, 1);
  lo = {i8Widen8(a), i8Widen8(_mm_srli_si128(a, 8))};
  hi = {i8Widen8(b), i8Widen8(_mm_srli_si128(b, 8))};
}
