// Q8 activations' primitives (q8x-body.inc) in plain C++: the same integers and the same f32
// operations per lane as simd-q8x-ymm.h, so the same bits. Included by simd-portable.h inside its namespace.
#pragma once

struct Q8Acc {
  float l[8];
};
struct Q8Scale {
  float l[8];  // a scale for each lane
};
struct Q8W {
  int8_t q[32];
};
static inline Q8Acc q8AccZero() { return {}; }
using Q8X = const int8_t*;  // a block of x's 32 quants
static inline Q8X q8LoadX(const int8_t* q) { return q; }
static inline Q8W q8LoadQuants(const void* p) {
  Q8W w;
  std::memcpy(w.q, p, 32);
  return w;
}
static inline void q8StoreQuants(uint8_t* p, const Q8W& w) { std::memcpy(p, w.q, 32); }
// the 32 quants a block decoder assembles (Q32): byte j of word k is value 8k + j (simd-q32-words.h)
static inline Q8W q8WOfQ32(const Q32& quants) { return q8LoadQuants(quants.w); }
template <WeightType T>
struct BlockFormat;  // kernels-body.inc
// a block of 32 values' quants: Q8_0's bytes, the others as their BlockFormat assembles them for the f32 path
template <WeightType T>
static inline Q8W q8LoadW(const uint8_t* block) {
  static_assert(blockShape(T).size == 32, "a block of 32 values");
  if constexpr (T == WeightType::q8_0)
    return q8LoadQuants(block + 2);
  else
    return q8WOfQ32(BlockFormat<T>::quants(block, 0));
}
// a Q4_0 block's nibbles, its quants before the − 8 (q8x-body.inc)
static inline Q8W q8LoadNibbles(const uint8_t* block) { return q8WOfQ32(q32Nibbles(block + 2)); }
static inline Q8Scale q8Splat(float s) { return {{s, s, s, s, s, s, s, s}}; }
static inline Q8Scale q8ScaleX(float d) { return q8Splat(d); }
static inline Q8Scale q8WeightScale(const uint8_t* block) {
  uint16_t h;
  std::memcpy(&h, block, sizeof h);
  return q8Splat(f16Scalar(h));
}
static inline Q8Scale q8Mul(const Q8Scale& dw, const Q8Scale& dx) {
  Q8Scale s;
  for (int l = 0; l < 8; l++) s.l[l] = dw.l[l] * dx.l[l];
  return s;
}
template <int kGroup>
static inline Q8Scale q8GroupScales(const float* g, int i) {
  static_assert(kGroup == 16 || kGroup == 32, "K-quant groups are 16 or 32 values");
  Q8Scale s;
  for (int l = 0; l < 8; l++) s.l[l] = kGroup == 32 ? g[i] : g[2 * i + l / 4];
  return s;
}
static inline Q8Scale q8LoadScales(const float* p) {
  Q8Scale s;
  std::memcpy(s.l, p, sizeof s.l);
  return s;
}
static inline void q8StoreScales(float* p, const Q8Scale& s) { std::memcpy(p, s.l, sizeof s.l); }
// m may point into a prepared block's bytes: read by memcpy, as q8LoadScales does
static inline Q8Acc q8SubMins(Q8Acc acc, const float* m, const float* e) {
  float mins[8];
  std::memcpy(mins, m, sizeof mins);
  for (int l = 0; l < 8; l++) acc.l[l] = std::fma(-mins[l], e[l], acc.l[l]);
  return acc;
}
struct Q8XSums {
  int32_t l[8];
};
// lane l: acc + s · (the sum of w[j] · x[j] for j in 4l .. 4l + 3, less minus[l]), one fused multiply-add
static inline Q8Acc q8LaneDots(Q8Acc acc, Q8X x, const Q8W& w, const Q8XSums& minus, const Q8Scale& s) {
  for (int l = 0; l < 8; l++) {
    int32_t sum = -minus.l[l];
    for (int j = 4 * l; j < 4 * l + 4; j++) sum += int32_t{w.q[j]} * int32_t{x[j]};
    acc.l[l] = std::fma(s.l[l], static_cast<float>(sum), acc.l[l]);
  }
  return acc;
}
template <bool kUnsigned>  // the same integers either way
static inline Q8Acc q8Dot(Q8Acc acc, Q8X x, const Q8W& w, const Q8Scale& s) {
  return q8LaneDots(acc, x, w, Q8XSums{}, s);
}
static inline Q8XSums q8XSums8(Q8X x) {
  Q8XSums c;
  for (int l = 0; l < 8; l++) c.l[l] = 8 * (int32_t{x[4 * l]} + x[4 * l + 1] + x[4 * l + 2] + x[4 * l + 3]);
  return c;
}
static inline Q8Acc q8DotNibbles(Q8Acc acc, Q8X x, const Q8W& u, const Q8XSums& cx, const Q8Scale& s) {
  return q8LaneDots(acc, x, u, cx, s);
}
static inline float q8Sum(const Q8Acc& a) {
  const float* l = a.l;
  return ((l[0] + l[4]) + (l[2] + l[6])) + ((l[1] + l[5]) + (l[3] + l[7]));
}
static inline void q8QuantizeBlock(int8_t* q, float* d, float* e, float* h, const float* x) {
  float amax = 0.0f;
  for (int i = 0; i < 32; i++) {
    const float a = std::fabs(x[i]);
    if (!(a < INFINITY)) {
      std::memset(q, 0, 32);
      *d = *e = h[0] = h[1] = NAN;
      return;
    }
    amax = std::max(amax, a);
  }
  const float scale = amax / 127.0f;
  *d = scale;
  int32_t sums[2] = {0, 0};  // of values 0..15 and 16..31
  for (int i = 0; i < 32; i++) {
    q[i] = scale == 0.0f ? 0 : static_cast<int8_t>(std::nearbyint(std::min(std::max(x[i] / scale, -127.0f), 127.0f)));
    sums[i / 16] += q[i];
  }
  *e = scale * static_cast<float>(sums[0] + sums[1]);
  h[0] = scale * static_cast<float>(sums[0]);
  h[1] = scale * static_cast<float>(sums[1]);
}
