// Q8 activations × Q8_0 or Q5_0 weights (q8x-body.inc) in plain C++: the same integers and the same f32
// operations per lane as simd-q8x-ymm.h, so the same bits. Included by simd-portable.h inside its namespace.
#pragma once

struct Q8Acc {
  float l[8];
};
using Q8Scale = float;
struct Q8W {
  int8_t q[32];
};
static inline Q8Acc q8AccZero() { return {}; }
using Q8X = const int8_t*;  // a block of x's 32 quants
static inline Q8X q8LoadX(const int8_t* q) { return q; }
// a weight block's quants: Q8_0's bytes, or those of the Q8_0 block a Q5_0 block widens to (widen-q5-0.h)
template <WeightType T>
static inline Q8W q8LoadW(const uint8_t* block) {
  static_assert(T == WeightType::q8_0 || T == WeightType::q5_0, "Q8 activations multiply Q8_0 and Q5_0 weights");
  Q8W w;
  if constexpr (T == WeightType::q8_0) {
    std::memcpy(w.q, block + 2, 32);
  } else {
    uint8_t widened[kQ8BlockBytes];
    widenQ5_0(block, 1, widened);
    std::memcpy(w.q, widened + 2, 32);
  }
  return w;
}
static inline Q8Scale q8ScaleX(float d) { return d; }
static inline Q8Scale q8WeightScale(const uint8_t* block) {
  uint16_t h;
  std::memcpy(&h, block, sizeof h);
  return f16Scalar(h);
}
static inline Q8Scale q8Mul(Q8Scale dw, Q8Scale dx) { return dw * dx; }
static inline Q8Acc q8Dot(Q8Acc acc, Q8X x, const Q8W& w, Q8Scale s) {
  for (int l = 0; l < 8; l++) {
    int32_t sum = 0;
    for (int j = 4 * l; j < 4 * l + 4; j++) sum += int32_t{w.q[j]} * int32_t{x[j]};
    acc.l[l] = std::fma(s, static_cast<float>(sum), acc.l[l]);
  }
  return acc;
}
static inline float q8Sum(const Q8Acc& a) {
  const float* l = a.l;
  return ((l[0] + l[4]) + (l[2] + l[6])) + ((l[1] + l[5]) + (l[3] + l[7]));
}
static inline void q8QuantizeBlock(int8_t* q, float* d, const float* x) {
  float amax = 0.0f;
  for (int i = 0; i < 32; i++) {
    const float a = std::fabs(x[i]);
    if (!(a < INFINITY)) {
      std::memset(q, 0, 32);
      *d = NAN;
      return;
    }
    amax = std::max(amax, a);
  }
  const float scale = amax / 127.0f;
  *d = scale;
  for (int i = 0; i < 32; i++) {
    q[i] = scale == 0.0f ? 0 : static_cast<int8_t>(std::nearbyint(std::min(std::max(x[i] / scale, -127.0f), 127.0f)));
  }
}
