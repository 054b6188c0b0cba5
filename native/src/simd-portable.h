// 16 f32 lanes in a plain array, for CPUs without AVX2 (and other architectures). The same IEEE operation per lane as
// the SIMD paths — std::fma is one rounding, like vfmadd — so the results are the same bits. Built with
// -ffp-contract=off, so the compiler never fuses or reorders anything on its own.
#pragma once

// (included inside a namespace: the including file has already included the system headers)

struct V16 {
  float v[16];
};
// nothing to pin: the plain arrays are the compiler's to place (matmulTile says why the SIMD paths pin)
static inline void vinRegister(V16&) {}

#define KVF_LANES for (int j = 0; j < 16; j++)

static inline V16 vzero() { return V16{}; }
static inline V16 vset1(float s) {
  V16 r;
  KVF_LANES r.v[j] = s;
  return r;
}
static inline V16 vload(const float* p) {
  V16 r;
  std::memcpy(r.v, p, sizeof r.v);
  return r;
}
static inline V16 vloadPartial(const float* p, int n) {
  V16 r{};
  std::memcpy(r.v, p, sizeof(float) * static_cast<size_t>(n));
  return r;
}
static inline void vstore(float* p, V16 a) { std::memcpy(p, a.v, sizeof a.v); }
static inline void vstorePartial(float* p, V16 a, int n) { std::memcpy(p, a.v, sizeof(float) * static_cast<size_t>(n)); }

// IEEE half to float, exact (subnormals, infinities and NaNs included)
static inline float f16Scalar(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t mant = h & 0x3ffu;
  if (exp == 0) {
    const float m = std::ldexp(static_cast<float>(mant), -24);
    return sign != 0 ? -m : m;
  }
  const uint32_t bits = exp == 0x1f ? (sign | 0x7f800000u | (mant << 13)) : (sign | ((exp + 112u) << 23) | (mant << 13));
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}
// f16 bits of f, rounded to nearest even; a NaN becomes its sign's quiet NaN without payload (util/half.ts's
// f32ToF16, and what the SIMD paths make)
static inline uint16_t f16Bits(float f) {
  uint32_t x;
  std::memcpy(&x, &f, sizeof x);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t abs = x & 0x7fffffffu;
  if (abs > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // 65,520 and up round to infinity
  if (abs >= 0x38800000u) {  // a normal half: rebias the exponent, round away 13 bits (a carry is correct rounding)
    const uint32_t m = abs - 0x38000000u;
    return static_cast<uint16_t>(sign | ((m + 0xfffu + ((m >> 13) & 1u)) >> 13));
  }
  const uint32_t e = abs >> 23;
  if (e < 102) return static_cast<uint16_t>(sign);  // below 2^-25: rounds to zero
  const uint32_t mant = (abs & 0x7fffffu) | 0x800000u;
  const uint32_t shift = 126 - e;  // a subnormal half counts units of 2^-24
  const uint32_t q = mant >> shift;
  const uint32_t rest = mant & ((1u << shift) - 1u);
  const uint32_t half = 1u << (shift - 1);
  return static_cast<uint16_t>(sign | (q + (rest > half || (rest == half && (q & 1u)) ? 1u : 0u)));
}
static inline void vstoreF16Partial(uint16_t* p, V16 a, int n) {
  for (int j = 0; j < n; j++) p[j] = f16Bits(a.v[j]);
}
// every lane the f16 at p (a block's scale)
static inline V16 vset1F16(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, sizeof h);
  return vset1(f16Scalar(h));
}
static inline float bf16Scalar(uint16_t b) {
  const uint32_t bits = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}
static inline V16 vloadF16Partial(const uint16_t* p, int n) {
  V16 r{};
  for (int j = 0; j < n; j++) r.v[j] = f16Scalar(p[j]);
  return r;
}
static inline V16 vloadF16(const uint16_t* p) { return vloadF16Partial(p, 16); }
static inline V16 vloadBF16Partial(const uint16_t* p, int n) {
  V16 r{};
  for (int j = 0; j < n; j++) r.v[j] = bf16Scalar(p[j]);
  return r;
}
static inline V16 vloadBF16(const uint16_t* p) { return vloadBF16Partial(p, 16); }
static inline V16 vloadQ8(const int8_t* q, float d) {
  V16 r;
  KVF_LANES r.v[j] = static_cast<float>(q[j]) * d;
  return r;
}

#include "simd-q32-words.h"
#include "simd-q8x-scalar.h"
static inline void vcvtQ32(Q32 q, V16& lo, V16& hi) {
  for (int j = 0; j < 16; j++) {
    lo.v[j] = static_cast<float>(static_cast<int8_t>(static_cast<uint8_t>(q.w[j >> 3] >> (8 * (j & 7)))));
    hi.v[j] = static_cast<float>(static_cast<int8_t>(static_cast<uint8_t>(q.w[2 + (j >> 3)] >> (8 * (j & 7)))));
  }
}

#define KVF_V16_BINARY(name, expr) \
  static inline V16 name(V16 a, V16 b) {  \
    V16 r;                                \
    KVF_LANES r.v[j] = (expr);            \
    return r;                             \
  }
KVF_V16_BINARY(vadd, a.v[j] + b.v[j])
KVF_V16_BINARY(vsub, a.v[j] - b.v[j])
KVF_V16_BINARY(vmul, a.v[j] * b.v[j])
KVF_V16_BINARY(vdiv, a.v[j] / b.v[j])
// x86's minps/maxps: the second operand when the comparison is false (NaN included)
KVF_V16_BINARY(vmin, a.v[j] < b.v[j] ? a.v[j] : b.v[j])
KVF_V16_BINARY(vmax, a.v[j] > b.v[j] ? a.v[j] : b.v[j])
#undef KVF_V16_BINARY

static inline V16 vfma(V16 a, V16 b, V16 c) {
  V16 r;
  KVF_LANES r.v[j] = std::fma(a.v[j], b.v[j], c.v[j]);
  return r;
}
static inline V16 vround(V16 a) {
  V16 r;
  KVF_LANES r.v[j] = std::nearbyint(a.v[j]);  // the default rounding mode: nearest, ties to even
  return r;
}
static inline V16 vpow2i(V16 n) {
  V16 r;
  KVF_LANES {
    const uint32_t bits = static_cast<uint32_t>(static_cast<int32_t>(n.v[j]) + 127) << 23;
    std::memcpy(&r.v[j], &bits, sizeof bits);
  }
  return r;
}

static inline float vhsum(V16 a) {
  float s8[8];
  for (int j = 0; j < 8; j++) s8[j] = a.v[j] + a.v[j + 8];
  float s4[4];
  for (int j = 0; j < 4; j++) s4[j] = s8[j] + s8[j + 4];
  const float s2a = s4[0] + s4[2];
  const float s2b = s4[1] + s4[3];
  return s2a + s2b;
}
static inline float vhmax(V16 a) {
  float m = a.v[0];
  for (int j = 1; j < 16; j++) m = a.v[j] > m ? a.v[j] : m;
  return m;
}
#undef KVF_LANES

// lanes n..15 = fill
static inline V16 vloadPartialFill(const float* p, int n, float fill) {
  alignas(64) float t[16];
  for (int j = 0; j < 16; j++) t[j] = j < n ? p[j] : fill;
  return vload(t);
}

// lane i = vhsum(d[i])
static inline V16 vhsum16(const V16* d) {
  alignas(64) float t[16];
  for (int j = 0; j < 16; j++) t[j] = vhsum(d[j]);
  return vload(t);
}

// r[i] lane j becomes r[j] lane i
static inline void vtranspose16(V16* r) {
  for (int i = 0; i < 16; i++)
    for (int j = i + 1; j < 16; j++) std::swap(r[i].v[j], r[j].v[i]);
}
