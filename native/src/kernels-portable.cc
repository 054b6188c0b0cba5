// The portable kernels: plain C++ over 16-lane arrays, for CPUs without AVX2 and for other architectures. Built with
// the compiler's baseline target; the same arithmetic per lane as the SIMD paths.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <new>
#include <utility>

#include "kernels.h"

namespace kvf {
namespace portable {
#define KVF_TILE_ROWS 2
#define KVF_TILE_COLS 2
#define KVF_HALF_PASSES 0
#define KVF_PLAIN_TILE_ROWS KVF_TILE_ROWS
#define KVF_X_BLOCK_BYTES 0
#include "simd-portable.h"
// no wide tile; Q8_0 batches of up to 4 row tiles skip the dequantized copy, the other types' none
#define KVF_WIDE_ROWS KVF_TILE_ROWS
#define KVF_WIDE_COLS KVF_TILE_COLS
#define KVF_DIRECT_ROWS_Q8 (4 * KVF_TILE_ROWS)
#define KVF_DIRECT_ROWS KVF_TILE_ROWS
#define KVF_SCORE_ROW_HEADS 6
#define KVF_SCORE_KEY_VECTORS 4
#define KVF_SUM_ACCUMULATORS 24
// Q8 activations (q8x-body.inc)
#define KVF_Q8X_ROWS 2
#define KVF_Q8X_COLS 2
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
}  // namespace portable

const KernelTable* kernelsPortable() {
  static const KernelTable table = portable::makeTable("portable");
  return &table;
}
}  // namespace kvf
