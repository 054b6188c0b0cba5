// Q8 activations' primitives (q8x-body.inc), in one ymm register: a weight block's 32 quants as int8 (Q5_0's
// nibbles and fifth bits assembled as simd-q32-ymm.h does; a K-quant's as its BlockFormat assembles them, q32Bytes),
// their products with x's summed four at a time into 8 int32 lanes (lane l: bytes 4l .. 4l + 3) by vpmaddubsw and
// vpmaddwd, which are exact here (|w| ≤ 128 and |x| ≤ 127, so a pair's sum ≤ 32,512 fits the int16), then converted
// and multiply-added into 8 f32 lanes. Used by AVX2 and AVX-512 alike (the same instructions), included inside their
// namespaces after their Q32.
#pragma once

#include "simd-bytes-ymm.h"

using Q8Acc = __m256;
using Q8Scale = __m256;  // a scale for each lane
struct Q8W {
  __m256i q;    // the block's quants
  __m256i abs;  // their magnitudes (−128 becomes 128 as an unsigned byte)
};
static inline Q8Acc q8AccZero() { return _mm256_setzero_ps(); }
static inline Q8W q8WOf(__m256i q) { return {q, _mm256_abs_epi8(q)}; }
using Q8X = __m256i;  // a block of x's 32 quants
static inline Q8X q8LoadX(const int8_t* q) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q)); }
// a block of 32 values' quants, assembled in the ymm register itself (BlockFormat's AVX-512 Q32 would take 32-bit
// lanes and a narrowing on the way)
template <WeightType T>
static inline Q8W q8LoadW(const uint8_t* block) {
  static_assert(blockShape(T).size == 32, "a block of 32 values");
  if constexpr (T == WeightType::q8_0) return q8WOf(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(block + 2)));
  if constexpr (T == WeightType::q5_0) return q8WOf(centreBits32<5>(nibbles32(block + 6), block + 2));
  if constexpr (T == WeightType::q4_0) return q8WOf(_mm256_sub_epi8(nibbles32(block + 2), splat8(8)));
  if constexpr (T == WeightType::q4_1) return q8WOf(nibbles32(block + 4));
  // Q5_1: the nibbles plus 16 where the fifth bit is set
  return q8WOf(_mm256_or_si256(nibbles32(block + 8), _mm256_and_si256(spreadBits(block + 4), splat8(0x10))));
}
// a Q4_0 block's nibbles, its quants before the − 8 (q8x-body.inc)
static inline Q8W q8LoadNibbles(const uint8_t* block) { return q8WOf(nibbles32(block + 2)); }
// a K-quant's 32 quants of a chunk, as its BlockFormat assembles them
static inline Q8W q8WOfQ32(Q32 quants) { return q8WOf(q32Bytes(quants)); }
// 32 quants as bytes (a prepared K-quant block, q8x-body.inc)
static inline Q8W q8LoadQuants(const uint8_t* p) { return q8WOf(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))); }
static inline void q8StoreQuants(uint8_t* p, const Q8W& w) { _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), w.q); }
static inline Q8Scale q8ScaleX(float d) { return _mm256_set1_ps(d); }
// a weight block's f16 scale (exact), and its product with an x block's, rounded once
static inline Q8Scale q8WeightScale(const uint8_t* block) {
  int16_t h;
  std::memcpy(&h, block, sizeof h);
  return _mm256_cvtph_ps(_mm_set1_epi16(h));
}
static inline Q8Scale q8Mul(Q8Scale dw, Q8Scale dx) { return _mm256_mul_ps(dw, dx); }
// a K-quant chunk's (values 32·i .. 32·i + 31) group scales g (BlockFormat::scales) by lane: groups of 32 one for
// every lane, groups of 16 g[2i] for lanes 0..3 (values 0..15) and g[2i + 1] for lanes 4..7
template <int kGroup>
static inline Q8Scale q8GroupScales(const float* g, int i) {
  static_assert(kGroup == 16 || kGroup == 32, "K-quant groups are 16 or 32 values");
  if constexpr (kGroup == 32) return _mm256_broadcast_ss(g + i);
  // g[2i], g[2i + 1] by movq (through __m128i, which may alias the floats; a double* load may not)
  const __m128 two = _mm_castsi128_ps(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(g + 2 * i)));
  return _mm256_permutevar8x32_ps(_mm256_castps128_ps256(two), _mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1));
}
static inline Q8Scale q8LoadScales(const float* p) { return _mm256_loadu_ps(p); }
static inline void q8StoreScales(float* p, Q8Scale s) { _mm256_storeu_ps(p, s); }
// lane l: acc − m[l] · e[l], rounded once
static inline Q8Acc q8SubMins(Q8Acc acc, const float* m, const float* e) {
  return _mm256_fnmadd_ps(_mm256_loadu_ps(m), _mm256_loadu_ps(e), acc);
}
// lane l: the sum of a[j] · b[j] for j in 4l .. 4l + 3, a unsigned and b signed bytes (vpmaddubsw, then vpmaddwd by
// ones; exact where each pair's sum fits an int16)
static inline __m256i q8Quads(__m256i a, __m256i b) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(a, b), _mm256_set1_epi16(1));
}
// acc + s · (the block's 8 partial sums of w · x), one fused multiply-add a lane. vpsignb moves w's sign onto x (x
// never holds −128, so that never overflows) and zeroes x where w is 0; weights that are never negative
// (kUnsigned: at most 31) multiply x as they are.
template <bool kUnsigned>
static inline Q8Acc q8Dot(Q8Acc acc, Q8X x, const Q8W& w, Q8Scale s) {
  const __m256i quads = kUnsigned ? q8Quads(w.q, x) : q8Quads(w.abs, _mm256_sign_epi8(x, w.q));
  return _mm256_fmadd_ps(s, _mm256_cvtepi32_ps(quads), acc);
}
// 8 times the sum of x's quants 4l .. 4l + 3 in lane l (exact), which a Q4_0 tile subtracts (q8DotNibbles)
using Q8XSums = __m256i;
static inline Q8XSums q8XSums8(Q8X x) { return _mm256_slli_epi32(q8Quads(splat8(1), x), 3); }
// q8Dot for a Q4_0 block's nibbles u = w + 8: Σ u·q − 8·Σ q, the same integer as Σ w·q, without vpabsb and vpsignb
static inline Q8Acc q8DotNibbles(Q8Acc acc, Q8X x, const Q8W& u, Q8XSums cx, Q8Scale s) {
  return _mm256_fmadd_ps(s, _mm256_cvtepi32_ps(_mm256_sub_epi32(q8Quads(u.q, x), cx)), acc);
}
// ((a0 + a4) + (a2 + a6)) + ((a1 + a5) + (a3 + a7))
static inline float q8Sum(Q8Acc a) {
  const __m128 four = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
  const __m128 two = _mm_add_ps(four, _mm_movehl_ps(four, four));
  return _mm_cvtss_f32(_mm_add_ss(two, _mm_movehdup_ps(two)));
}
// 32 values of x: d = max |x| / 127, q = each x / d rounded to the nearest integer (ties to even), within ±127,
// e = d · (the sum of the q) and h[k] = d · (the sum of half k's q), each rounded once; a block of zeros (or so small
// that d rounds to 0) gets d = 0, q = 0 and e = h = 0; one with an infinity or NaN gets d = e = h = NaN and q = 0, so
// every product over it is NaN
static inline void q8QuantizeBlock(int8_t* q, float* d, float* e, float* h, const float* x) {
  const __m256 magnitude = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  __m256 v[4];
  __m256 amax = _mm256_setzero_ps();
  __m256 finite = _mm256_castsi256_ps(_mm256_set1_epi32(-1));
  for (int i = 0; i < 4; i++) {
    v[i] = _mm256_loadu_ps(x + 8 * i);
    const __m256 a = _mm256_and_ps(v[i], magnitude);
    finite = _mm256_and_ps(finite, _mm256_cmp_ps(a, _mm256_set1_ps(INFINITY), _CMP_LT_OQ));
    amax = _mm256_max_ps(amax, a);
  }
  if (_mm256_movemask_ps(finite) != 0xff) {
    std::memset(q, 0, 32);
    *d = *e = h[0] = h[1] = NAN;
    return;
  }
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(amax), _mm256_extractf128_ps(amax, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_movehdup_ps(m));
  const float scale = _mm_cvtss_f32(m) / 127.0f;
  *d = scale;
  if (scale == 0.0f) {
    std::memset(q, 0, 32);
    *e = h[0] = h[1] = 0.0f;
    return;
  }
  __m256i n[4];
  for (int i = 0; i < 4; i++) {
    const __m256 r = _mm256_div_ps(v[i], _mm256_set1_ps(scale));
    n[i] = _mm256_cvtps_epi32(_mm256_min_ps(_mm256_max_ps(r, _mm256_set1_ps(-127.0f)), _mm256_set1_ps(127.0f)));
  }
  // the halves' sums: 128-bit lane 0 of s sums values 0..15, lane 1 values 16..31
  const __m256i low16 = _mm256_add_epi32(n[0], n[1]);
  const __m256i high16 = _mm256_add_epi32(n[2], n[3]);
  __m256i s = _mm256_add_epi32(_mm256_permute2x128_si256(low16, high16, 0x20),
                               _mm256_permute2x128_si256(low16, high16, 0x31));
  s = _mm256_add_epi32(s, _mm256_shuffle_epi32(s, 0x4e));
  s = _mm256_add_epi32(s, _mm256_shuffle_epi32(s, 0xb1));
  const int32_t low = _mm256_cvtsi256_si32(s);
  const int32_t high = _mm256_extract_epi32(s, 4);
  *e = scale * static_cast<float>(low + high);
  h[0] = scale * static_cast<float>(low);
  h[1] = scale * static_cast<float>(high);
  // packs interleave the 128-bit halves: the permutation puts the 32 bytes back in order
  const __m256i bytes = _mm256_packs_epi16(_mm256_packs_epi32(n[0], n[1]), _mm256_packs_epi32(n[2], n[3]));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(q),
                      _mm256_permutevar8x32_epi32(bytes, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
}
