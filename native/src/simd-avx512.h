// 16 f32 lanes in one AVX-512 register. Included only by kernels-avx512.cc, after its target pragma.
#pragma once

// (included inside a namespace: the including file has already included the system headers)

struct V16 {
  __m512 v;
};
// a compiler barrier that leaves a value in a register: a weight vector used by several rows is loaded once
static inline void vinRegister(V16& a) { __asm__("" : "+v"(a.v)); }

static inline __mmask16 laneMask(int n) { return static_cast<__mmask16>((1u << n) - 1u); }

static inline V16 vzero() { return {_mm512_setzero_ps()}; }
static inline V16 vset1(float s) { return {_mm512_set1_ps(s)}; }
static inline V16 vload(const float* p) { return {_mm512_loadu_ps(p)}; }
// lanes n..15 read as zero; nothing past p[n-1] is touched
static inline V16 vloadPartial(const float* p, int n) { return {_mm512_maskz_loadu_ps(laneMask(n), p)}; }
static inline void vstore(float* p, V16 a) { _mm512_storeu_ps(p, a.v); }
static inline void vstorePartial(float* p, V16 a, int n) { _mm512_mask_storeu_ps(p, laneMask(n), a.v); }

static inline V16 vloadF16(const uint16_t* p) {
  return {_mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)))};
}
static inline V16 vloadF16Partial(const uint16_t* p, int n) { return {_mm512_cvtph_ps(_mm256_maskz_loadu_epi16(laneMask(n), p))}; }
// f16 bits of each lane, rounded to nearest even; a NaN becomes its sign's quiet NaN without payload, as the other
// paths and util/half.ts make it
static inline __m256i halves(V16 a) {
  const __mmask16 nan = _mm512_cmp_ps_mask(a.v, a.v, _CMP_UNORD_Q);
  const __m512i sign = _mm512_and_si512(_mm512_castps_si512(a.v), _mm512_set1_epi32(INT32_MIN));
  const __m512 quiet = _mm512_castsi512_ps(_mm512_or_si512(sign, _mm512_set1_epi32(0x7fc00000)));
  return _mm512_cvtps_ph(_mm512_mask_mov_ps(a.v, nan, quiet), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}
static inline void vstoreF16Partial(uint16_t* p, V16 a, int n) { _mm256_mask_storeu_epi16(p, laneMask(n), halves(a)); }
static inline V16 bf16Widen(__m256i h) { return {_mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16))}; }
static inline V16 vloadBF16(const uint16_t* p) { return bf16Widen(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))); }
static inline V16 vloadBF16Partial(const uint16_t* p, int n) { return bf16Widen(_mm256_maskz_loadu_epi16(laneMask(n), p)); }
// d * q exactly (|q| <= 128 and d an f16 value: the product fits f32's mantissa)
static inline V16 vloadQ8(const int8_t* q, float d) {
  const __m512 f = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q))));
  return {_mm512_mul_ps(f, _mm512_set1_ps(d))};
}
// 32 quants of a block, one per 32-bit lane: values 0..15 in lo, 16..31 in hi (Q32; the operations' contract is in
// simd-portable.h). Bytes widen as they are loaded (vpmovzxbd from memory), every later step is a lane-wise integer
// operation, and single bits go through mask registers, so the only lane-crossing work is that widening and the
// conversion to f32 is one instruction per 16 values.
struct Q32 {
  __m512i lo;
  __m512i hi;
};
// the 32 quants as int8 in one ymm register (the Q8 activations' weights, simd-q8x-ymm.h): each lane's low byte
static inline __m256i q32Bytes(Q32 q) {
  return _mm256_inserti128_si256(_mm256_castsi128_si256(_mm512_cvtepi32_epi8(q.lo)), _mm512_cvtepi32_epi8(q.hi), 1);
}
static inline __m512i widen16(const uint8_t* p) { return _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
static inline Q32 q32Load(const uint8_t* p) { return {widen16(p), widen16(p + 16)}; }
static inline Q32 q32Nibbles(const uint8_t* p) {
  const __m512i v = widen16(p);
  return {_mm512_and_si512(v, _mm512_set1_epi32(0x0f)), _mm512_srli_epi32(v, 4)};
}
static inline Q32 q32Bits(Q32 a, int shift, uint8_t mask) {
  const __m128i s = _mm_cvtsi32_si128(shift);
  const __m512i m = _mm512_set1_epi32(mask);
  return {_mm512_and_si512(_mm512_srl_epi32(a.lo, s), m), _mm512_and_si512(_mm512_srl_epi32(a.hi, s), m)};
}
// the 32 bits at p as a mask: bit j for value j
static inline __mmask32 bitsAt(const uint8_t* p) {
  uint32_t b;
  std::memcpy(&b, p, sizeof b);
  return _cvtu32_mask32(b);
}
static inline __m256i load32(const uint8_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
static inline __mmask32 bitOf(const uint8_t* p, int bit) { return _mm256_test_epi8_mask(load32(p), _mm256_set1_epi8(static_cast<char>(1 << bit))); }
static inline __mmask32 bitNotOf(const uint8_t* p, int bit) { return _mm256_testn_epi8_mask(load32(p), _mm256_set1_epi8(static_cast<char>(1 << bit))); }
static inline Q32 addWhere(Q32 a, __mmask32 k, int value) {
  const __m512i v = _mm512_set1_epi32(value);
  return {_mm512_mask_add_epi32(a.lo, static_cast<__mmask16>(k), a.lo, v),
          _mm512_mask_add_epi32(a.hi, static_cast<__mmask16>(_kshiftri_mask32(k, 16)), a.hi, v)};
}
static inline Q32 subWhere(Q32 a, __mmask32 k, int value) {
  const __m512i v = _mm512_set1_epi32(value);
  return {_mm512_mask_sub_epi32(a.lo, static_cast<__mmask16>(k), a.lo, v),
          _mm512_mask_sub_epi32(a.hi, static_cast<__mmask16>(_kshiftri_mask32(k, 16)), a.hi, v)};
}
static inline Q32 q32AddBits(Q32 a, const uint8_t* bits, uint8_t value) { return addWhere(a, bitsAt(bits), value); }
static inline Q32 q32AddBitOf(Q32 a, const uint8_t* p, int bit, uint8_t value) { return addWhere(a, bitOf(p, bit), value); }
// byte + 2^(kBits−1)·bit − 2^(kBits−1) is byte − 2^(kBits−1) where the bit is clear: one masked subtraction
template <int kBits>
static inline Q32 q32CentreBits(Q32 a, const uint8_t* bits) {
  return subWhere(a, _knot_mask32(bitsAt(bits)), 1 << (kBits - 1));
}
template <int kBits>
static inline Q32 q32CentreBitOf(Q32 a, const uint8_t* p, int bit) {
  return subWhere(a, bitNotOf(p, bit), 1 << (kBits - 1));
}
static inline Q32 q32Or(Q32 a, Q32 b) { return {_mm512_or_si512(a.lo, b.lo), _mm512_or_si512(a.hi, b.hi)}; }
template <int kShift>
static inline Q32 q32Shl(Q32 a) {
  return {_mm512_slli_epi32(a.lo, kShift), _mm512_slli_epi32(a.hi, kShift)};
}
template <int kBits>
static inline Q32 q32Centre(Q32 a) {
  const __m512i c = _mm512_set1_epi32(1 << (kBits - 1));
  return {_mm512_sub_epi32(a.lo, c), _mm512_sub_epi32(a.hi, c)};
}
static inline void vcvtQ32(Q32 q, V16& lo, V16& hi) {
  lo = {_mm512_cvtepi32_ps(q.lo)};
  hi = {_mm512_cvtepi32_ps(q.hi)};
}
static inline float f16Scalar(uint16_t h) { return _cvtsh_ss(h); }
// every lane the f16 at p (a block's scale)
static inline V16 vset1F16(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, sizeof h);
  return vset1(f16Scalar(h));
}

static inline V16 vadd(V16 a, V16 b) { return {_mm512_add_ps(a.v, b.v)}; }
static inline V16 vsub(V16 a, V16 b) { return {_mm512_sub_ps(a.v, b.v)}; }
static inline V16 vmul(V16 a, V16 b) { return {_mm512_mul_ps(a.v, b.v)}; }
static inline V16 vdiv(V16 a, V16 b) { return {_mm512_div_ps(a.v, b.v)}; }
static inline V16 vmin(V16 a, V16 b) { return {_mm512_min_ps(a.v, b.v)}; }
static inline V16 vmax(V16 a, V16 b) { return {_mm512_max_ps(a.v, b.v)}; }
// a * b + c, rounded once
static inline V16 vfma(V16 a, V16 b, V16 c) { return {_mm512_fmadd_ps(a.v, b.v, c.v)}; }
// round to nearest, ties to even
static inline V16 vround(V16 a) { return {_mm512_roundscale_ps(a.v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)}; }
// 2^n for integral n in [-126, 127]
static inline V16 vpow2i(V16 n) {
  const __m512i e = _mm512_add_epi32(_mm512_cvtps_epi32(n.v), _mm512_set1_epi32(127));
  return {_mm512_castsi512_ps(_mm512_slli_epi32(e, 23))};
}

// the fixed tree: lanes j + j+8, then j + j+4, j + j+2, j + j+1
static inline float vhsum(V16 a) {
  const __m256 lo = _mm512_castps512_ps256(a.v);
  const __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(a.v), 1));
  const __m256 s8 = _mm256_add_ps(lo, hi);
  const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
  const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  const __m128 s1 = _mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1));
  return _mm_cvtss_f32(s1);
}
static inline float vhmax(V16 a) { return _mm512_reduce_max_ps(a.v); }

// lanes n..15 = fill
static inline V16 vloadPartialFill(const float* p, int n, float fill) {
  return {_mm512_mask_loadu_ps(_mm512_set1_ps(fill), laneMask(n), p)};
}

// Lane i = vhsum(d[i]), bit for bit: the same pairs added in the same tree (j + j+8, then j + j+4, j + j+2, j + j+1),
// done for 16 vectors at once by transposing as the tree goes (~3 shuffles and 1 add per vector instead of 8).
// always inlined: out of line, the 16 accumulators would go through memory after every matmul tile
__attribute__((always_inline)) static inline V16 vhsum16(const V16* d) {
  __m512 t[8];
  for (int m = 0; m < 8; m++) {  // per vector: quarters [s8 0..3, s8 4..7] for vectors 2m and 2m+1
    const __m512 a = d[2 * m].v;
    const __m512 b = d[2 * m + 1].v;
    t[m] = _mm512_add_ps(_mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(1, 0, 1, 0)), _mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(3, 2, 3, 2)));
  }
  __m512 u[4];
  for (int p = 0; p < 4; p++) {  // quarter k: s4 0..3 of vector 4p + k
    const __m512 a = t[2 * p];
    const __m512 b = t[2 * p + 1];
    u[p] = _mm512_add_ps(_mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(2, 0, 2, 0)), _mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(3, 1, 3, 1)));
  }
  __m512 v[2];
  for (int r = 0; r < 2; r++) {  // quarter k: (s4[0] + s4[2], s4[1] + s4[3]) of vectors 8r + k and 8r + 4 + k
    const __m512 a = u[2 * r];
    const __m512 b = u[2 * r + 1];
    v[r] = _mm512_add_ps(_mm512_shuffle_ps(a, b, _MM_SHUFFLE(1, 0, 1, 0)), _mm512_shuffle_ps(a, b, _MM_SHUFFLE(3, 2, 3, 2)));
  }
  // quarter k, lane j: the sum of vector k + 4j
  const __m512 w = _mm512_add_ps(_mm512_shuffle_ps(v[0], v[1], _MM_SHUFFLE(2, 0, 2, 0)), _mm512_shuffle_ps(v[0], v[1], _MM_SHUFFLE(3, 1, 3, 1)));
  const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  return {_mm512_permutexvar_ps(order, w)};
}

// r[i] lane j becomes r[j] lane i (a 16×16 transpose; data movement only)
static inline void vtranspose16(V16* r) {
  __m512 t[16];
  for (int i = 0; i < 8; i++) {  // per 128-bit quarter: (r[2i][0], r[2i+1][0], r[2i][1], r[2i+1][1]) and [2], [3]
    t[2 * i] = _mm512_unpacklo_ps(r[2 * i].v, r[2 * i + 1].v);
    t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i].v, r[2 * i + 1].v);
  }
  __m512 u[16];  // u[4g + k], quarter q: element 4q + k of rows 4g..4g+3
  for (int g = 0; g < 4; g++) {
    const __m512d a = _mm512_castps_pd(t[4 * g]), b = _mm512_castps_pd(t[4 * g + 2]);
    const __m512d c = _mm512_castps_pd(t[4 * g + 1]), d = _mm512_castps_pd(t[4 * g + 3]);
    u[4 * g] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, b));
    u[4 * g + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, b));
    u[4 * g + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(c, d));
    u[4 * g + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(c, d));
  }
  for (int k = 0; k < 4; k++) {  // gather the quarters: element k, 4 + k, 8 + k, 12 + k of all 16 rows
    const __m512 a = _mm512_shuffle_f32x4(u[k], u[4 + k], 0x88), b = _mm512_shuffle_f32x4(u[k], u[4 + k], 0xdd);
    const __m512 c = _mm512_shuffle_f32x4(u[8 + k], u[12 + k], 0x88), d = _mm512_shuffle_f32x4(u[8 + k], u[12 + k], 0xdd);
    r[k].v = _mm512_shuffle_f32x4(a, c, 0x88);
    r[8 + k].v = _mm512_shuffle_f32x4(a, c, 0xdd);
    r[4 + k].v = _mm512_shuffle_f32x4(b, d, 0x88);
    r[12 + k].v = _mm512_shuffle_f32x4(b, d, 0xdd);
  }
}
#include "simd-q8x-ymm.h"
