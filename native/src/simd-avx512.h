// 16 f32 lanes in one AVX-512 register. Included only by kernels-avx512.cc, after its target pragma.
#pragma once

// (included inside a namespace: the including file has already included the system headers)

struct V16 {
  __m512 v;
};

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
static inline V16 bf16Widen(__m256i h) { return {_mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16))}; }
static inline V16 vloadBF16(const uint16_t* p) { return bf16Widen(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))); }
static inline V16 vloadBF16Partial(const uint16_t* p, int n) { return bf16Widen(_mm256_maskz_loadu_epi16(laneMask(n), p)); }
// d * q exactly (|q| <= 128 and d an f16 value: the product fits f32's mantissa)
static inline V16 vloadQ8(const int8_t* q, float d) {
  const __m512 f = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q))));
  return {_mm512_mul_ps(f, _mm512_set1_ps(d))};
}
// d * q for the 16 int8 values packed little-endian in lo (lanes 0..7) and hi (lanes 8..15): vloadQ8 from registers
static inline V16 vmulI8(uint64_t lo, uint64_t hi, float d) {
  const __m128i b = _mm_set_epi64x(static_cast<long long>(hi), static_cast<long long>(lo));
  return {_mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(b)), _mm512_set1_ps(d))};
}
static inline float f16Scalar(uint16_t h) { return _cvtsh_ss(h); }

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
static inline V16 vhsum16(const V16* d) {
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
