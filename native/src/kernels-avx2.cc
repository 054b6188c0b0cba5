// The AVX2 kernels (with FMA and F16C). Compiled for that target whatever the build machine's
// default; the dispatcher calls them only when the CPU reports every one of these features.
#include "kernels.h"

#if defined(__x86_64__)
// GCC 12 warns inside its own AVX-512 headers (_mm512_undefined_* "uninitialized"): a known false positive.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
#endif

#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <new>
#include <utility>

namespace kvf {
namespace avx2 {
// 2 rows × 3 outputs: each V16 is two registers, so 12 accumulators + 2 x + 1 w of the 16
#define KVF_TILE_ROWS 2
#define KVF_TILE_COLS 3
// F32, F16 and BF16 tiles (and a dequantized copy's) run in two passes of 8 lanes (kernels-body.inc, halfPassTile),
// so 4 rows × 3 outputs fit: 12 accumulators + 3 w + an x value. A 512-row 135m F16 product, Zen 3: 0.63x the time
// of the one-pass 2 × 3 tile, F32 0.70x, Q8_0 (through the copy) 0.68x; 6 × 2 spilled (docs/native.md).
#define KVF_HALF_PASSES 1
#define KVF_PLAIN_TILE_ROWS 4
#define KVF_X_BLOCK_BYTES 196608
#include "simd-avx2.h"
// small batches of the block types: 4 rows × 1 output, 4 accumulators + x for 2 × 4 rows + 2 w (3 × 2 was as fast
// at 3 rows and no faster than 2 × 3 at 4). Through it go batches of 3-16 rows; they skip the copy up to there (it
// wins from 32 rows; docs/native.md). The plain types' 4-row tile leaves it no rows.
#define KVF_WIDE_ROWS 4
#define KVF_WIDE_COLS 1
#define KVF_DIRECT_ROWS_Q8 16
#define KVF_DIRECT_ROWS 16
// attention: 2 row-heads scored over 2 key vectors at a time, 8 accumulators + 4 keys + a query value, and weighted
// sums of 4 V16 (a 64-value head: 8 registers). AVX-512's 24 (48 registers here) spilled: a 64-row chunk's attention
// at 8,192 positions, 135m shape, 2 threads, Zen 3: 76-84 -> 53-58 ns a key (docs/native.md).
#define KVF_SCORE_ROW_HEADS 2
#define KVF_SCORE_KEY_VECTORS 2
#define KVF_SUM_ACCUMULATORS 4
static_assert(2 * (KVF_SCORE_ROW_HEADS * KVF_SCORE_KEY_VECTORS + KVF_SCORE_KEY_VECTORS) + 1 <= 16,
              "attention's scores must fit the 16 registers");
// Q8 activations (q8x-body.inc): 1 × 4 for a decode row, 2 × 4 for more: 8 accumulators + 2 x + a block's w
#define KVF_Q8X_ROWS 2
#define KVF_Q8X_COLS 4
#include "kernels-body.inc"
#undef KVF_Q8X_ROWS
#undef KVF_Q8X_COLS
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
#undef KVF_TILE_ROWS
#undef KVF_TILE_COLS
}  // namespace avx2

const KernelTable* kernelsAvx2() {
  static const KernelTable table = avx2::makeTable("avx2");
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
const KernelTable* kernelsAvx2() { return nullptr; }
}  // namespace kvf
#endif
