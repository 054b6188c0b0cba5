// The kernel table: one implementation per instruction set (AVX-512, AVX2+FMA+F16C, portable), chosen once at load.
// Kernels never allocate and never check arguments: the N-API glue (addon.cc) validates every length, index and page
// before a kernel runs. Each kernel computes a range of independent work items (output columns, rows, (row, head)
// pairs), so the glue can split a call over threads without changing any value.
//
// Numerics shared by every implementation (see docs/native.md): dot products use 16 "virtual lanes" — lane j sums
// the products of inputs k ≡ j (mod 16), in increasing k, with fused multiply-add — then a fixed pairwise tree
// (j + j+8, j + j+4, j + j+2, j + j+1). AVX-512 holds the 16 lanes in one register, AVX2 in two, the portable path in
// an array, so all three give the same bits, and no value depends on how many rows share a call.
#pragma once

#include <cstddef>
#include <cstdint>

namespace kvf {

// ggml's type codes, as in src/model/gguf-types.ts GGML_TYPE_CODES.
enum class WeightType : int32_t {
  f32 = 0,
  f16 = 1,
  q4_0 = 2,
  q4_1 = 3,
  q5_0 = 6,
  q5_1 = 7,
  q8_0 = 8,
  q2_k = 10,
  q3_k = 11,
  q4_k = 12,
  q5_k = 13,
  q6_k = 14,
  bf16 = 30,
};

constexpr int kQ8BlockSize = 32;
constexpr int kQ8BlockBytes = 34;

// values and bytes per block of the block types (ggml-common.h); {1, 0} for the float types and unknown codes
struct BlockShape {
  int size;
  int bytes;
};
constexpr BlockShape blockShape(WeightType t) {
  switch (t) {
    case WeightType::q4_0:
      return {32, 18};
    case WeightType::q4_1:
      return {32, 20};
    case WeightType::q5_0:
      return {32, 22};
    case WeightType::q5_1:
      return {32, 24};
    case WeightType::q8_0:
      return {32, 34};
    case WeightType::q2_k:
      return {256, 84};
    case WeightType::q3_k:
      return {256, 110};
    case WeightType::q4_k:
      return {256, 144};
    case WeightType::q5_k:
      return {256, 176};
    case WeightType::q6_k:
      return {256, 210};
    default:
      return {1, 0};
  }
}
// the weight types whose products run on Q8 activations when asked (q8x-body.inc): every block type
constexpr bool multipliesQ8(WeightType t) { return blockShape(t).size > 1; }
constexpr int kHeadDimMax = 1024;      // attention keeps its heads' accumulators on the stack
constexpr int kAttentionHeadsMax = 4;  // query heads of one KV head that one attention call handles together
constexpr int kAttentionRowsMax = 16;  // rows of one sequence that one attention call handles together
// A row's positions split into spans of this many from its first position (a multiple of the 64-position score
// block). Each span runs its own softmax state; the row's result folds the spans' states in order (kernels-body.inc
// foldSpan), so it is the same whether one task walks all of a row's spans or tasks split them: a decode step of few
// rows spreads its long rows over every thread.
constexpr int32_t kAttentionSpan = 128;
constexpr int64_t attentionSpans(int64_t positions) { return (positions + kAttentionSpan - 1) / kAttentionSpan; }
// floats of one span's state of one row-head in AttentionArgs::partials: its accumulators (headDim rounded up to 16
// lanes), its 16 lane sums, its max (padded to 16)
constexpr int64_t attentionPartialFloats(int32_t headDim) { return (headDim + 15) / 16 * 16 + 32; }
// Output columns per matmul task are a multiple of every instruction set's tile width (kernels-body.inc checks), so
// a task boundary never cuts a tile short.
constexpr int32_t kColumnQuantum = 24;

// out = x · wᵀ (+ bias), rounded to f32 after each operation; with accumulate, out += that (one more f32 rounding)
// rows of x as Q8 blocks of 32 values (q8x-body.inc): a row's inDim int8 quants q; a block's scale d and scaled sum
// e = d · Σq, inDim / 32 each a row; and each 16-value half's scaled sum h (Q2_K's mins), inDim / 16 a row
struct Q8Rows {
  int8_t* q = nullptr;
  float* d = nullptr;
  float* e = nullptr;
  float* h = nullptr;
};

struct MatmulArgs {
  float* out;         // (rowCount, outDim)
  const float* x;     // (rowCount, inDim)
  const void* w;      // (outDim rows, inDim) in `type` storage
  WeightType type;
  int32_t rowCount;
  int32_t inDim;
  int32_t outDim;
  const float* bias;  // (outDim) or nullptr
  bool accumulate;
  // x as Q8 blocks (quantizeRowsQ8): given (q8.q set), the types multipliesQ8 names multiply these instead of x
  // (q8x-body.inc); other types ignore them
  Q8Rows q8;
};

struct AttentionArgs {
  float* out;                     // (rowCount, headCount*headDim)
  const float* q;                 // (rowCount, headCount*headDim)
  const uint16_t* arena;          // the KV pool's arena: f16 values
  const int32_t* kvLengths;       // (rowCount)
  const int32_t* kvStarts;        // (rowCount): row r attends over positions [kvStarts[r], kvLengths[r])
  const int32_t* pageTables;      // concatenated page tables
  const int32_t* pageTableStarts; // (rowCount)
  int32_t layer;
  int32_t headCount;
  int32_t kvHeadCount;
  int32_t headDim;
  int32_t pageSize;
  int32_t kvDim;
  int64_t valuesPerPage;
  // span states of rows whose spans tasks split: row r's span k of head h is record (partialStarts[r] + k) *
  // headCount + h, attentionPartialFloats(headDim) floats each; nullptr when no task splits a row
  float* partials;
  const int32_t* partialStarts;  // (rowCount)
};

struct RopeArgs {
  float* x;                // (rowCount, headCount*headDim)
  const int32_t* positions;  // (rowCount)
  const double* cosSin;    // (positions, ropeDim/2, 2): cos and sin of pos * theta^(-2i/ropeDim)
  int32_t headCount;
  int32_t headDim;
  int32_t ropeDim;
  int32_t neox;            // 0: rotate (x[2i], x[2i+1]); 1: rotate (x[i], x[i + ropeDim/2])
};

struct KernelTable {
  const char* name;
  // outputs [oBegin, oEnd) of every row
  void (*matmul)(const MatmulArgs& a, int32_t oBegin, int32_t oEnd);
  // rows [rowBegin, rowEnd) of one sequence (the same page table and first position, at most kAttentionRowsMax),
  // heads [firstHead, firstHead + heads), all of one KV head, heads <= kAttentionHeadsMax, over the spans
  // [spanBegin, spanEnd) of their positions. A row-head with every span in the range gets its output; otherwise the
  // range is one span, and its state goes to partials.
  void (*attention)(const AttentionArgs& a, int32_t rowBegin, int32_t rowEnd, int32_t firstHead, int32_t heads,
                    int32_t spanBegin, int32_t spanEnd);
  // rows [rBegin, rEnd): each row of more than one span gets every head's output from its span states in partials
  void (*attentionMerge)(const AttentionArgs& a, int32_t rBegin, int32_t rEnd);
  // rows [rBegin, rEnd)
  void (*rmsNorm)(float* out, const float* x, const float* weight, int32_t dim, double eps, int32_t rBegin, int32_t rEnd);
  void (*rope)(const RopeArgs& a, int32_t rBegin, int32_t rEnd);
  // elements [begin, end)
  void (*swiglu)(float* gate, const float* up, int64_t begin, int64_t end);
  // out (inDim) = row `token` of w
  void (*embedRow)(float* out, const void* w, WeightType type, int32_t inDim, int32_t token);
  // out[i] = x[i] rounded to f16 (nearest even; a NaN to its sign's quiet NaN), i < n: a K or V row as stored
  void (*storeHalves)(uint16_t* out, const float* x, int32_t n);
  // rows [rBegin, rEnd) of x (inDim values, a multiple of 32, each) into out (MatmulArgs::q8)
  void (*quantizeRowsQ8)(const Q8Rows& out, const float* x, int32_t inDim, int32_t rBegin, int32_t rEnd);
  // a[i] = b[i] + s * c[i] for i in [begin, end): STREAM's triad
  void (*triad)(float* a, const float* b, const float* c, float s, int64_t begin, int64_t end);
};

// nullptr where the build target cannot have them (not x86-64); whether the CPU can run them is dispatch.cc's question
const KernelTable* kernelsAvx512();
const KernelTable* kernelsAvx2();
const KernelTable* kernelsPortable();

}  // namespace kvf
