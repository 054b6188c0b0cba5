// Q32 as the 32 bytes of one ymm register, for AVX2 (the operations are described in simd-q32-words.h). Single bits
// spread to bytes with one byte shuffle, an AND with each byte's bit and a compare. Included by simd-avx2.h inside its
// namespace.
#pragma once

struct Q32 {
  __m256i v;
};
// every byte b
static inline __m256i splat8(int b) { return _mm256_set1_epi8(static_cast<char>(b)); }
static inline Q32 q32Load(const uint8_t* p) { return {_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))}; }
// both 128-bit halves hold p[0..15]; the high half shifted right by 4 in 64-bit lanes, so masking each byte keeps
// its own high nibble
static inline Q32 q32Nibbles(const uint8_t* p) {
  const __m256i a = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  return {_mm256_and_si256(_mm256_srlv_epi64(a, _mm256_setr_epi64x(0, 0, 4, 4)), splat8(0x0f))};
}
static inline Q32 q32Bits(Q32 a, int shift, uint8_t mask) { return {_mm256_and_si256(_mm256_srli_epi16(a.v, shift), splat8(mask))}; }
// 0xff at byte j where bit j of the 32-bit little-endian word at bits is set
static inline __m256i spreadBits(const uint8_t* bits) {
  uint32_t b;
  std::memcpy(&b, bits, sizeof b);
  const __m256i byteOf = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,  //
                                          2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
  const __m256i bitOf = _mm256_set1_epi64x(0x8040201008040201ll);
  const __m256i spread = _mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int>(b)), byteOf);
  return _mm256_cmpeq_epi8(_mm256_and_si256(spread, bitOf), bitOf);
}
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
// a's bytes are below 2^(k−1), so byte − 2^(k−1) is byte | (256 − 2^(k−1)) where the bit is clear
template <int kBits>
static inline Q32 q32CentreBits(Q32 a, const uint8_t* bits) {
  return {_mm256_or_si256(a.v, _mm256_andnot_si256(spreadBits(bits), splat8(0x100 - (1 << (kBits - 1)))))};
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
