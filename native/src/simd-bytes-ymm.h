// Byte operations on the 32 bytes of a ymm register, shared by the AVX2 block unpacking (simd-q32-ymm.h) and the Q8
// activations' weights (simd-q8x-ymm.h, AVX2 and AVX-512). Included inside the instruction set's namespace.
#pragma once

// every byte b
static inline __m256i splat8(int b) { return _mm256_set1_epi8(static_cast<char>(b)); }
// the 32 nibbles of p[0..15], low nibbles first: both 128-bit halves hold p[0..15], the high half shifted right by 4
// in 64-bit lanes, so masking each byte keeps its own high nibble
static inline __m256i nibbles32(const uint8_t* p) {
  const __m256i a = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  return _mm256_and_si256(_mm256_srlv_epi64(a, _mm256_setr_epi64x(0, 0, 4, 4)), splat8(0x0f));
}
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
// a's bytes are below 2^(k−1), so byte − 2^(k−1) is byte | (256 − 2^(k−1)) where the bit is clear: each byte plus
// 2^(k−1) times bit j of bits, minus 2^(k−1)
template <int kBits>
static inline __m256i centreBits32(__m256i a, const uint8_t* bits) {
  return _mm256_or_si256(a, _mm256_andnot_si256(spreadBits(bits), splat8(0x100 - (1 << (kBits - 1)))));
}
