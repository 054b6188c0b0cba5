// The AVX-512 kernels (F, BW, VL, DQ; with FMA and F16C). Compiled for that target whatever the build machine's
// default; the dispatcher calls them only when the CPU reports every one of these features.
#include "kernels.h"

#if defined(__x86_64__)
// GCC 12 warns inside its own AVX-512 headers (_mm512_undefined_* "uninitialized"): a known false positive.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")
#endif

#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <new>
#include <utility>

namespace kvf {
namespace avx512 {
// 3 rows × 8 outputs: 24 accumulators + x for 2 × 3 rows + 2 w, the 32 registers, 32 values a step. Against the
// 4 × 6 tile (16 values a step: 34 registers would not fit), 2 threads, Zen 5: F16 products +10%, F32 +4–6%, the
// 15m shape's 288-value rows +10% (docs/native.md).
#define KVF_TILE_ROWS 3
#define KVF_TILE_COLS 8
// a V16 is one register: plain tiles run in one pass, with the same rows
#define KVF_HALF_PASSES 0
#define KVF_PLAIN_TILE_ROWS KVF_TILE_ROWS
#define KVF_X_BLOCK_BYTES 0
// a plain type's 32-value step must fit the registers: past them GCC spills accumulators (a 4 × 6 tile did)
static_assert(2 * KVF_TILE_ROWS + KVF_TILE_ROWS * KVF_TILE_COLS + 2 <= 32, "the matmul tile must fit the 32 registers");
// small batches: 5 rows × 4 outputs, 20 accumulators + x for 2 × 5 rows + 2 w (6 × 3 ran 1.2-1.5x the time; 4 × 4
// and 4 × 5 about as this at 4 rows, and slower at 5; 8 × 1, 7 × 2 and 6 × 2 slower but for Q4_K_M at 6-8 rows).
// Through it go batches of 4-16 F32, F16, BF16 or Q8_0 rows, and of 4 rows of the other block types, which skip the
// copy up to there (it wins from 5 rows for Q6_K, from 6 for Q4_K_M, and from 32 for Q8_0; docs/native.md).
#define KVF_WIDE_ROWS 5
#define KVF_WIDE_COLS 4
#define KVF_DIRECT_ROWS_Q8 16
#define KVF_DIRECT_ROWS 4
// attention: 6 row-heads scored over 4 key vectors (a block's 64 keys) at a time, 24 accumulators + 4 keys + a query
// value; weighted sums of 24 accumulators
#define KVF_SCORE_ROW_HEADS 6
#define KVF_SCORE_KEY_VECTORS 4
#define KVF_SUM_ACCUMULATORS 24
static_assert(KVF_SCORE_ROW_HEADS * KVF_SCORE_KEY_VECTORS + KVF_SCORE_KEY_VECTORS + 1 <= 32,
              "attention's scores must fit the 32 registers");
static_assert(2 * KVF_WIDE_ROWS + KVF_WIDE_ROWS * KVF_WIDE_COLS + 2 <= 32, "the wide tile must fit the 32 registers");
#include "simd-avx512.h"
// Q8 activations (q8x-body.inc, ymm registers): 4 rows × 4 outputs, 16 accumulators + 4 x + a block's w
#define KVF_Q8X_ROWS 4
#define KVF_Q8X_COLS 4
#include "kernels-body.inc"
#undef KVF_Q8X_ROWS
#undef KVF_Q8X_COLS
#undef KVF_TILE_ROWS
#undef KVF_TILE_COLS
#undef KVF_WIDE_ROWS
#undef KVF_WIDE_COLS
#undef KVF_DIRECT_ROWS_Q8
#undef KVF_DIRECT_ROWS
#undef KVF_SCORE_ROW_HEADS
#undef KVF_HALF_PASSES
#undef KVF_PLAIN_TILE_ROWS
#undef KVF_X_BLOCK_BYTES
#undef KVF_SCORE_KEY_VECTORS
#undef KVF_SUM_ACCUMULATORS
}  // namespace avx512

const KernelTable* kernelsAvx512() {
  static const KernelTable table = avx512::makeTable("avx512");
  return &table;
}
}  // namespace kvf

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

#else
namespace kvf {
const KernelTable* kernelsAvx512() { return nullptr; }
}  // namespace kvf
#endif
