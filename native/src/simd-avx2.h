// 16 f32 lanes in two AVX2 registers: lo holds lanes 0..7, hi lanes 8..15. Every operation is the same IEEE operation
// per lane as in simd-avx512.h, so both paths give the same bits. Included only by kernels-avx2.cc.
#pragma once

// (included inside a namespace: the including file has already included the system headers)

struct V16 {
  __m256 lo;
  __m256 hi;
};
// a compiler barrier that leaves a value in registers: a weight vector used by several rows is loaded once
static inline void vinRegister(V16& a) { __asm__("" : "+x"(a.lo), "+x"(a.hi)); }

static inline V16 vzero() { return {_mm256_setzero_ps(), _mm256_setzero_ps()}; }
static inline V16 vset1(float s) { return {_mm256_set1_ps(s), _mm256_set1_ps(s)}; }
static inline V16 vload(const float* p) { return {_mm256_loadu_ps(p), _mm256_loadu_ps(p + 8)}; }
// lane i's sign bit set for i < n, lanes 0..7 and 8..15: AVX2's masked loads never touch the lanes they leave out
struct LaneMasks {
  __m256i lo;
  __m256i hi;
};
static inline LaneMasks laneMasks(int n) {
  const __m256i index = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  const __m256i limit = _mm256_set1_epi32(n);
  return {_mm256_cmpgt_epi32(limit, index), _mm256_cmpgt_epi32(limit, _mm256_add_epi32(index, _mm256_set1_epi32(8)))};
}
static inline V16 vloadPartial(const float* p, int n) {
  const LaneMasks m = laneMasks(n);
  return {_mm256_maskload_ps(p, m.lo), _mm256_maskload_ps(p + 8, m.hi)};
}
static inline void vstore(float* p, V16 a) {
  _mm256_storeu_ps(p, a.lo);
  _mm256_storeu_ps(p + 8, a.hi);
}
// a whole vector stores directly (AMD's masked stores are slow, and a byte count's copy costs a call)
static inline void vstorePartial(float* p, V16 a, int n) {
  if (n == 16) return vstore(p, a);
  alignas(32) float t[16];
  vstore(t, a);
  std::memcpy(p, t, sizeof(float) * static_cast<size_t>(n));
}

static inline V16 vloadF16(const uint16_t* p) {
  return {_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))),
          _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 8)))};
}
static inline V16 vloadF16Partial(const uint16_t* p, int n) {
  alignas(32) uint16_t t[16] = {};
  std::memcpy(t, p, sizeof(uint16_t) * static_cast<size_t>(n));
  return vloadF16(t);
}
// f16 bits of each lane, rounded to nearest even; a NaN becomes its sign's quiet NaN without payload, as the other
// paths and util/half.ts make it
static inline __m128i halves8(__m256 a) {
  const __m256 nan = _mm256_cmp_ps(a, a, _CMP_UNORD_Q);
  const __m256 sign = _mm256_and_ps(a, _mm256_castsi256_ps(_mm256_set1_epi32(INT32_MIN)));
  const __m256 quiet = _mm256_or_ps(sign, _mm256_castsi256_ps(_mm256_set1_epi32(0x7fc00000)));
  return _mm256_cvtps_ph(_mm256_blendv_ps(a, quiet, nan), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}
static inline void vstoreF16Partial(uint16_t* p, V16 a, int n) {
  alignas(32) uint16_t t[16];
  _mm_storeu_si128(reinterpret_cast<__m128i*>(t), halves8(a.lo));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(t + 8), halves8(a.hi));
  std::memcpy(p, t, sizeof(uint16_t) * static_cast<size_t>(n));
}
static inline __m256 bf16Widen8(const uint16_t* p) {
  const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
}
static inline V16 vloadBF16(const uint16_t* p) { return {bf16Widen8(p), bf16Widen8(p + 8)}; }
static inline V16 vloadBF16Partial(const uint16_t* p, int n) {
  alignas(32) uint16_t t[16] = {};
  std::memcpy(t, p, sizeof(uint16_t) * static_cast<size_t>(n));
  return vloadBF16(t);
}
// the low 8 int8 of q as f32
static inline __m256 i8Widen8(__m128i q) { return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q)); }
static inline __m256 q8Widen8(const int8_t* q) { return i8Widen8(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(q))); }
static inline V16 vloadQ8(const int8_t* q, float d) {
  const __m256 s = _mm256_set1_ps(d);
  return {_mm256_mul_ps(q8Widen8(q), s), _mm256_mul_ps(q8Widen8(q + 8), s)};
}
#include "simd-q32-ymm.h"
#include "simd-q8x-ymm.h"
static inline float f16Scalar(uint16_t h) { return _cvtsh_ss(h); }
// every lane the f16 at p (a block's scale): a word broadcast and one conversion instead of the scalar's insert,
// convert and broadcast (135m Q4_0 and Q4_K_M decode products: 0.98x the time)
static inline V16 vset1F16(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, sizeof h);
  const __m256 v = _mm256_cvtph_ps(_mm_set1_epi16(static_cast<short>(h)));
  return {v, v};
}

#define KVF_V16_BINARY(name, op) \
  static inline V16 name(V16 a, V16 b) { return {op(a.lo, b.lo), op(a.hi, b.hi)}; }
KVF_V16_BINARY(vadd, _mm256_add_ps)
KVF_V16_BINARY(vsub, _mm256_sub_ps)
KVF_V16_BINARY(vmul, _mm256_mul_ps)
KVF_V16_BINARY(vdiv, _mm256_div_ps)
KVF_V16_BINARY(vmin, _mm256_min_ps)
KVF_V16_BINARY(vmax, _mm256_max_ps)
#undef KVF_V16_BINARY

static inline V16 vfma(V16 a, V16 b, V16 c) { return {_mm256_fmadd_ps(a.lo, b.lo, c.lo), _mm256_fmadd_ps(a.hi, b.hi, c.hi)}; }
static inline V16 vround(V16 a) {
  constexpr int kMode = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
  return {_mm256_round_ps(a.lo, kMode), _mm256_round_ps(a.hi, kMode)};
}
static inline __m256 pow2i8(__m256 n) {
  const __m256i e = _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127));
  return _mm256_castsi256_ps(_mm256_slli_epi32(e, 23));
}
static inline V16 vpow2i(V16 n) { return {pow2i8(n.lo), pow2i8(n.hi)}; }

static inline float vhsum(V16 a) {
  const __m256 s8 = _mm256_add_ps(a.lo, a.hi);
  const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
  const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  const __m128 s1 = _mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1));
  return _mm_cvtss_f32(s1);
}
static inline float vhmax(V16 a) {
  const __m256 m8 = _mm256_max_ps(a.lo, a.hi);
  const __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m8), _mm256_extractf128_ps(m8, 1));
  const __m128 m2 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
  return _mm_cvtss_f32(_mm_max_ss(m2, _mm_shuffle_ps(m2, m2, 1)));
}

// lanes n..15 = fill
static inline V16 vloadPartialFill(const float* p, int n, float fill) {
  const LaneMasks m = laneMasks(n);
  const __m256 f = _mm256_set1_ps(fill);
  return {_mm256_blendv_ps(f, _mm256_maskload_ps(p, m.lo), _mm256_castsi256_ps(m.lo)),
          _mm256_blendv_ps(f, _mm256_maskload_ps(p + 8, m.hi), _mm256_castsi256_ps(m.hi))};
}

// Half vectors: lanes 0..7 or 8..15 of a V16, for the two-pass matmul tiles (kernels-body.inc, KVF_HALF_PASSES)
using Half = __m256;
static inline Half hzero() { return _mm256_setzero_ps(); }
static inline Half hfma(Half a, Half b, Half c) { return _mm256_fmadd_ps(a, b, c); }
static inline Half hload(const float* p) { return _mm256_loadu_ps(p); }
static inline Half hloadF16(const uint16_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
static inline Half hloadBF16(const uint16_t* p) { return bf16Widen8(p); }
static inline void vsetHalf(V16& a, int h, Half v) { (h == 0 ? a.lo : a.hi) = v; }

// lane i = vhsum(d[i])
// always inlined: out of line, the 16 accumulators would go through memory after every matmul tile
__attribute__((always_inline)) static inline V16 vhsum16(const V16* d) {
  alignas(64) float t[16];
  for (int j = 0; j < 16; j++) t[j] = vhsum(d[j]);
  return vload(t);
}

// an 8×8 transpose of m[0..7] in place
static inline void transpose8(__m256* m) {
  __m256 t[8], u[8];
  for (int i = 0; i < 4; i++) {
    t[2 * i] = _mm256_unpacklo_ps(m[2 * i], m[2 * i + 1]);
    t[2 * i + 1] = _mm256_unpackhi_ps(m[2 * i], m[2 * i + 1]);
  }
  for (int g = 0; g < 2; g++) {  // u[4g + k], half h: element 4h + k of rows 4g..4g+3
    u[4 * g] = _mm256_shuffle_ps(t[4 * g], t[4 * g + 2], _MM_SHUFFLE(1, 0, 1, 0));
    u[4 * g + 1] = _mm256_shuffle_ps(t[4 * g], t[4 * g + 2], _MM_SHUFFLE(3, 2, 3, 2));
    u[4 * g + 2] = _mm256_shuffle_ps(t[4 * g + 1], t[4 * g + 3], _MM_SHUFFLE(1, 0, 1, 0));
    u[4 * g + 3] = _mm256_shuffle_ps(t[4 * g + 1], t[4 * g + 3], _MM_SHUFFLE(3, 2, 3, 2));
  }
  for (int k = 0; k < 4; k++) {
    m[k] = _mm256_permute2f128_ps(u[k], u[4 + k], 0x20);
    m[4 + k] = _mm256_permute2f128_ps(u[k], u[4 + k], 0x31);
  }
}

// r[i] lane j becomes r[j] lane i (a 16×16 transpose; data movement only)
static inline void vtranspose16(V16* r) {
  __m256 a[8], b[8], c[8], d[8];  // rows 0..7 lanes 0..7 and 8..15, rows 8..15 the same
  for (int i = 0; i < 8; i++) {
    a[i] = r[i].lo;
    b[i] = r[i].hi;
    c[i] = r[8 + i].lo;
    d[i] = r[8 + i].hi;
  }
  transpose8(a);
  transpose8(b);
  transpose8(c);
  transpose8(d);
  for (int i = 0; i < 8; i++) {
    r[i] = {a[i], c[i]};
    r[8 + i] = {b[i], d[i]};
  }
}
