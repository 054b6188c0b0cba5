// N-API glue: the one place that trusts nothing. Every argument is checked here — typed-array kinds, lengths against
// the shapes, every page index against the arena, that outputs do not overlap inputs — before any kernel runs, and a
// bad call throws a TypeError or RangeError instead of reading or writing out of bounds. Then the call is split into
// independent tasks for the thread pool (see thread-pool.h); kernels never allocate.
#include <napi.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#if defined(__linux__)
#include <sys/mman.h>
#endif
#if defined(__unix__)
#include <fcntl.h>

#include <cerrno>
#endif

#include "aead.h"
#include "dispatch.h"
#include "kernels.h"
#include "thread-pool.h"
#include "widen-q5-0.h"
#include "xxh3.h"

namespace kvf {
namespace {

// Bumped whenever a method or its arguments change; src/compute/native-backend.ts refuses any other version.
constexpr int32_t kAbiVersion = 13;
constexpr int32_t kThreadCountMax = 256;
constexpr int64_t kDimMax = int64_t{1} << 24;
// Below this many multiply-adds a call runs on the calling thread: waking workers would cost more than it saves.
constexpr int64_t kInlineWork = int64_t{1} << 15;
// a single row's long tasks, one a thread, cover this share (%) of the columns; short ones the rest
constexpr int64_t kDecodeHeadShare = 90;

struct ColumnRange {
  int64_t begin;
  int64_t end;
};
// A matmul's output columns over tasks: headTasks tasks of head columns, then tasks of tail columns to the end.
struct ColumnSplit {
  int64_t columns;
  int64_t head;
  int32_t headTasks;
  int64_t tail;
  int32_t tasks;
  static ColumnSplit uniform(int64_t columns, int64_t chunk) {
    return {columns, 0, 0, chunk, static_cast<int32_t>((columns + chunk - 1) / chunk)};
  }
  static ColumnSplit headed(int64_t columns, int64_t head, int32_t headTasks, int64_t tail) {
    const int64_t rest = columns - head * headTasks;
    return {columns, head, headTasks, tail, headTasks + static_cast<int32_t>((rest + tail - 1) / tail)};
  }
  ColumnRange range(int32_t t) const {
    const int64_t begin = t < headTasks ? t * head : headTasks * head + (t - headTasks) * tail;
    return {begin, std::min(begin + (t < headTasks ? head : tail), columns)};
  }
};
// attention's span states when a call splits its rows' spans over tasks (64 MiB; a call that would need more walks
// each row's spans in one task instead)
constexpr int64_t kPartialFloatsMax = int64_t{1} << 24;
// matmuls(): products sharing one input per call, and the array entries that describe each
constexpr uint32_t kMatmulPartsMax = 8;
constexpr uint32_t kMatmulPartFields = 6;

// kAttentionSplit counts the attention calls whose rows' spans were split over tasks (a subset of kAttention)
enum Op { kMatmul, kMatmuls, kAttention, kAttentionSplit, kRmsNorm, kRope, kSwiglu, kEmbed, kStoreKv, kTriad, kOpCount };
const char* const kOpNames[kOpCount] = {"matmul", "matmuls", "attention", "attentionSplit", "rmsNorm",
                                        "rope",   "swiglu",  "embed",     "storeKv",        "triad"};

template <typename T>
struct Span {
  T* data;
  size_t length;
  size_t bytes() const { return length * sizeof(T); }
};

[[noreturn]] void throwType(Napi::Env env, const std::string& message) { throw Napi::TypeError::New(env, message); }
[[noreturn]] void throwRange(Napi::Env env, const std::string& message) { throw Napi::RangeError::New(env, message); }

template <typename T>
Span<T> typedArrayValue(Napi::Env env, napi_value v, napi_typedarray_type type, const char* kind, const char* name) {
  bool isTypedArray = false;
  napi_typedarray_type actual = napi_int8_array;
  size_t length = 0;
  void* data = nullptr;
  if (napi_is_typedarray(env, v, &isTypedArray) != napi_ok || !isTypedArray ||
      napi_get_typedarray_info(env, v, &actual, &length, &data, nullptr, nullptr) != napi_ok || actual != type) {
    throwType(env, std::string(name) + " must be a " + kind);
  }
  // a detached buffer reports no data: treat it as empty, so every length check fails
  return {static_cast<T*>(data), data == nullptr ? 0 : length};
}

template <typename T>
Span<T> typedArrayArg(const Napi::CallbackInfo& info, size_t index, napi_typedarray_type type, const char* kind,
                      const char* name) {
  return typedArrayValue<T>(info.Env(), info[index], type, kind, name);
}

Span<float> floatsArg(const Napi::CallbackInfo& info, size_t index, const char* name) {
  return typedArrayArg<float>(info, index, napi_float32_array, "Float32Array", name);
}
Span<uint16_t> halvesArg(const Napi::CallbackInfo& info, size_t index, const char* name) {
  return typedArrayArg<uint16_t>(info, index, napi_uint16_array, "Uint16Array", name);
}
// An index array (positions, page tables, lengths, token ids), copied before it is checked: kernels read it while they
// write their outputs, and the caller's view could share memory with an output (or be a SharedArrayBuffer another
// thread writes), so a row's index could change after it passed its check. The copy is what was checked. They are
// small: a few values a row.
struct Int32s {
  std::unique_ptr<int32_t[]> owned;  // moves keep `data` valid; copies are not allowed
  int32_t* data;
  size_t length;
};

Int32s int32sArg(const Napi::CallbackInfo& info, size_t index, const char* name) {
  const auto view = typedArrayArg<int32_t>(info, index, napi_int32_array, "Int32Array", name);
  std::unique_ptr<int32_t[]> owned(new int32_t[view.length == 0 ? 1 : view.length]);
  if (view.length > 0) std::memcpy(owned.get(), view.data, view.bytes());
  int32_t* data = owned.get();
  return {std::move(owned), data, view.length};
}

int64_t integerValue(Napi::Env env, Napi::Value v, const char* name, int64_t min, int64_t max) {
  if (!v.IsNumber()) throwType(env, std::string(name) + " must be a number");
  const double d = v.As<Napi::Number>().DoubleValue();
  if (!(d >= static_cast<double>(min) && d <= static_cast<double>(max)) || d != static_cast<double>(static_cast<int64_t>(d))) {
    throwRange(env, std::string(name) + " must be an integer in [" + std::to_string(min) + ", " + std::to_string(max) +
                        "], got " + std::to_string(d));
  }
  return static_cast<int64_t>(d);
}

int64_t integerArg(const Napi::CallbackInfo& info, size_t index, const char* name, int64_t min, int64_t max) {
  return integerValue(info.Env(), info[index], name, min, max);
}

void requireLength(Napi::Env env, size_t have, int64_t need, const char* name) {
  if (static_cast<int64_t>(have) < need) {
    throwRange(env, std::string(name) + " has " + std::to_string(have) + " elements, needs " + std::to_string(need));
  }
}

template <typename A, typename B>
bool overlaps(Span<A> a, Span<B> b) {
  const auto* a0 = reinterpret_cast<const uint8_t*>(a.data);
  const auto* b0 = reinterpret_cast<const uint8_t*>(b.data);
  return a.bytes() > 0 && b.bytes() > 0 && a0 < b0 + b.bytes() && b0 < a0 + a.bytes();
}

template <typename A, typename B>
void requireDisjoint(Napi::Env env, Span<A> out, Span<B> in, const char* outName, const char* inName) {
  if (overlaps(out, in)) throwRange(env, std::string(outName) + " must not overlap " + inName);
}

// A page a row names must be one of the arena's: what attention reads and storeKv writes stay inside the pool.
void requirePageInArena(Napi::Env env, int64_t row, int64_t page, int64_t pageCount) {
  if (page < 0 || page >= pageCount) {
    throwRange(env, "row " + std::to_string(row) + " names page " + std::to_string(page) + ", outside the arena's " +
                        std::to_string(pageCount) + " pages");
  }
}

// Weight storage by ggml type code, with its exact expected size.
struct WeightArg {
  const void* data;
  WeightType type;
  Span<const uint8_t> bytes;
};

WeightArg weightValue(Napi::Env env, Napi::Value data, Napi::Value typeCode, int64_t inDim, int64_t outDim) {
  const int64_t code = integerValue(env, typeCode, "weight type", 0, 1000);
  const int64_t count = inDim * outDim;
  auto expect = [&](size_t have, int64_t need) {
    if (static_cast<int64_t>(have) != need) {
      throwRange(env, "weight data has " + std::to_string(have) + " elements, the shape needs " + std::to_string(need));
    }
  };
  switch (static_cast<WeightType>(code)) {
    case WeightType::f32: {
      const auto s = typedArrayValue<float>(env, data, napi_float32_array, "Float32Array", "f32 weight data");
      expect(s.length, count);
      return {s.data, WeightType::f32, {reinterpret_cast<const uint8_t*>(s.data), s.bytes()}};
    }
    case WeightType::f16:
    case WeightType::bf16: {
      const auto s = typedArrayValue<uint16_t>(env, data, napi_uint16_array, "Uint16Array", "f16/bf16 weight data");
      expect(s.length, count);
      return {s.data, static_cast<WeightType>(code), {reinterpret_cast<const uint8_t*>(s.data), s.bytes()}};
    }
    case WeightType::q8_0:
    case WeightType::q4_0:
    case WeightType::q4_1:
    case WeightType::q5_0:
    case WeightType::q5_1:
    case WeightType::q2_k:
    case WeightType::q3_k:
    case WeightType::q4_k:
    case WeightType::q5_k:
    case WeightType::q6_k: {
      const auto type = static_cast<WeightType>(code);
      const BlockShape shape = blockShape(type);
      if (inDim % shape.size != 0) {
        throwRange(env, "rows of weight type " + std::to_string(code) + " must be whole blocks of " + std::to_string(shape.size) +
                            " values");
      }
      const auto s = typedArrayValue<uint8_t>(env, data, napi_uint8_array, "Uint8Array", "quantized weight data");
      expect(s.length, count / shape.size * shape.bytes);
      return {s.data, type, {s.data, s.length}};
    }
  }
  throwRange(env, "unsupported weight type code " + std::to_string(code));
}

WeightArg weightArg(const Napi::CallbackInfo& info, size_t dataIndex, size_t typeIndex, int64_t inDim, int64_t outDim) {
  return weightValue(info.Env(), info[dataIndex], info[typeIndex], inDim, outDim);
}

class Context : public Napi::ObjectWrap<Context> {
 public:
  static Napi::Function Define(Napi::Env env) {
    return DefineClass(env, "Context",
                       {
                           InstanceMethod<&Context::Matmul>("matmul"),
                           InstanceMethod<&Context::Matmuls>("matmuls"),
                           InstanceMethod<&Context::StoreKv>("storeKv"),
                           InstanceMethod<&Context::Attention>("attention"),
                           InstanceMethod<&Context::RmsNorm>("rmsNorm"),
                           InstanceMethod<&Context::Rope>("rope"),
                           InstanceMethod<&Context::Swiglu>("swiglu"),
                           InstanceMethod<&Context::Embed>("embed"),
                           InstanceMethod<&Context::Triad>("triad"),
                           InstanceMethod<&Context::CallCounts>("callCounts"),
                           InstanceMethod<&Context::SetIsa>("setIsa"),
                           InstanceMethod<&Context::Close>("close"),
                           InstanceAccessor<&Context::Isa>("isa"),
                           InstanceAccessor<&Context::SupportedIsas>("supportedIsas"),
                           InstanceAccessor<&Context::ThreadCount>("threadCount"),
                           InstanceAccessor<&Context::Q8Activations>("q8Activations"),
                       });
  }

  // new Context(threadCount, q8Activations?): with q8Activations, products with Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 and
  // the K-quants round x to Q8 blocks first (q8x-body.inc)
  explicit Context(const Napi::CallbackInfo& info) : Napi::ObjectWrap<Context>(info) {
    const auto threads = static_cast<int32_t>(integerArg(info, 0, "threadCount", 1, kThreadCountMax));
    if (info.Length() > 1 && !info[1].IsUndefined()) {
      if (!info[1].IsBoolean()) throwType(info.Env(), "q8Activations must be a boolean");
      q8Activations_ = info[1].As<Napi::Boolean>().Value();
    }
    supported_ = supportedKernels();
    kernels_ = supported_.front();
    pool_ = std::make_unique<ThreadPool>(threads);
  }

 private:
  const KernelTable& kernels(Napi::Env env) {
    if (!pool_) throwType(env, "the native backend was closed");
    return *kernels_;
  }

  // matmul(out, x, rowCount, weightData, weightType, inDim, outDim)
  Napi::Value Matmul(const Napi::CallbackInfo& info) {
    const Napi::Env env = info.Env();
    const KernelTable& k = kernels(env);
    const auto out = floatsArg(info, 0, "out");
    const auto x = floatsArg(info, 1, "x");
    const int64_t rowCount = integerArg(info, 2, "rowCount", 0, kDimMax);
    const int64_t inDim = integerArg(info, 5, "inDim", 1, kDimMax);
    const int64_t outDim = integerArg(info, 6, "outDim", 1, kDimMax);
    const WeightArg w = weightArg(info, 3, 4, inDim, outDim);
    requireLength(env, x.length, rowCount * inDim, "x");
    requireLength(env, out.length, rowCount * outDim, "out");
    requireDisjoint(env, out, x, "out", "x");
    requireDisjoint(env, out, w.bytes, "out", "the weights");
    counts_[kMatmul]++;
    if (rowCount == 0) return env.Undefined();
    struct Job {
      MatmulArgs args;
      ColumnSplit split;
      const KernelTable* k;
    };
    Job job{{out.data, x.data, w.data, w.type, static_cast<int32_t>(rowCount), static_cast<int32_t>(inDim),
             static_cast<int32_t>(outDim), nullptr, false, {}},
            columnSplit(rowCount, inDim, outDim), &k};
    if (multipliesQ8(w.type)) quantizeX(k, job.args, x.data, rowCount, inDim);
    pool_->run(job.split.tasks, [](const void* c, int32_t t) {
      const auto* j = static_cast<const Job*>(c);
      const ColumnRange r = j->split.range(t);
      j->k->matmul(j->args, static_cast<int32_t>(r.begin), static_cast<int32_t>(r.end));
    }, &job);
    return env.Undefined();
  }

  // With q8Activations, x as Q8 blocks into the context's buffers (grown to the largest call: a quarter of its x,
  // a 32nd each for the scales and the scaled sums, a 16th for the halves' sums), named in args for its products on
  // them (multipliesQ8, kernels.h); calls of several rows split their rows over the pool. Without it, nothing: args
  // keep reading x.
  void quantizeX(const KernelTable& k, MatmulArgs& args, const float* x, int64_t rowCount, int64_t inDim) {
    if (!q8Activations_ || rowCount == 0) return;
    const auto values = static_cast<size_t>(rowCount * inDim);
    if (xq_.size() < values) {
      xq_.resize(values);
      xd_.resize(values / kQ8BlockSize);
      xe_.resize(values / kQ8BlockSize);
      xh_.resize(values / (kQ8BlockSize / 2));
    }
    struct Job {
      const KernelTable* k;
      Q8Rows out;
      const float* x;
      int32_t inDim;
      int32_t rows;
      int32_t tasks;
    };
    const auto tasks = static_cast<int32_t>(std::min<int64_t>(rowCount, rowCount * inDim < kInlineWork ? 1 : pool_->threadCount()));
    const Job job{&k, {xq_.data(), xd_.data(), xe_.data(), xh_.data()}, x, static_cast<int32_t>(inDim), static_cast<int32_t>(rowCount), tasks};
    pool_->run(tasks, [](const void* c, int32_t t) {
      const auto* j = static_cast<const Job*>(c);
      j->k->quantizeRowsQ8(j->out, j->x, j->inDim, static_cast<int32_t>(int64_t{j->rows} * t / j->tasks),
                           static_cast<int32_t>(int64_t{j->rows} * (t + 1) / j->tasks));
    }, &job);
    args.q8 = job.out;
  }

  // Output columns per matmul task: all of them when the call is small, else in multiples of every tile width. A
  // single row (a decode step, bound by reading the weights: each task starts a stream of its own, which costs ~1 µs
  // to get going from memory) gets one long task a thread over most of the columns, then two short ones a thread for
  // whichever thread is done first: on a shared machine one core often runs behind (of uniform tasks, one a thread
  // had made 135m Q8_0's decode products take 0.93x the time of two, four 1.03-1.06x; the long and short ones 0.97-0.99x
  // of one a thread, Zen 3; docs/native.md, "Threading"). More rows get about two tasks a thread.
  ColumnSplit columnSplit(int64_t rowCount, int64_t inDim, int64_t columns) const {
    const auto quantum = [](int64_t n) { return (n + kColumnQuantum - 1) / kColumnQuantum * kColumnQuantum; };
    const int64_t threads = pool_->threadCount();
    // n columns in whole tiles over two tasks a thread
    const auto twoEach = [&](int64_t n) { return quantum((n + 2 * threads - 1) / (2 * threads)); };
    if (rowCount * inDim * columns < kInlineWork || threads <= 1) return ColumnSplit::uniform(columns, columns);
    if (rowCount > 1) return ColumnSplit::uniform(columns, std::min(columns, twoEach(columns)));
    const int64_t head = quantum(columns * kDecodeHeadShare / (100 * threads));
    // long tasks that already cover every column are one a thread (head is then the whole tiles over threads)
    if (head * threads >= columns) return ColumnSplit::uniform(columns, std::min(columns, head));
    return ColumnSplit::headed(columns, head, static_cast<int32_t>(threads), twoEach(columns - head * threads));
  }

  // matmuls(x, rowCount, inDim, parts): several products of one input x in one pool dispatch (a layer's Q, K and V;
  // its gate and up). parts is a flat array of kMatmulPartFields entries per product: out, weightData, weightType,
  // outDim, bias (a Float32Array of outDim values, or null), accumulate (0: out = x·wᵀ + bias; 1: out += x·wᵀ + bias,
  // the residual add). Each part is split into the tasks a matmul of its own would get (so each task's weight slab is
  // as large as before, sized for the cache), and the tasks of all parts go to the pool as one job; every column is
  // computed by the same tile arithmetic as a matmul of its own part, so the bits are the same.
  Napi::Value Matmuls(const Napi::CallbackInfo& info) {
    const Napi::Env env = info.Env();
    const KernelTable& k = kernels(env);
    // parts' entries first, before any typed array's memory is taken: reading an array may run JavaScript (a getter,
    // a Proxy), which could detach or free a buffer already taken
    if (!info[3].IsArray()) throwType(env, "parts must be an array");
    const auto list = info[3].As<Napi::Array>();
    const uint32_t fields = list.Length();
    if (fields == 0 || fields % kMatmulPartFields != 0 || fields / kMatmulPartFields > kMatmulPartsMax) {
      throwRange(env, "parts must describe 1 to " + std::to_string(kMatmulPartsMax) + " products, " +
                          std::to_string(kMatmulPartFields) + " entries each");
    }
    Napi::Value entries[kMatmulPartsMax * kMatmulPartFields];
    for (uint32_t i = 0; i < fields; i++) entries[i] = list.Get(i);
    const auto xArg = floatsArg(info, 0, "x");
    const int64_t rowCount = integerArg(info, 1, "rowCount", 0, kDimMax);
    const int64_t inDim = integerArg(info, 2, "inDim", 1, kDimMax);
    const uint32_t count = fields / kMatmulPartFields;
    requireLength(env, xArg.length, rowCount * inDim, "x");
    const Span<float> x{xArg.data, static_cast<size_t>(rowCount * inDim)};
    struct Checked {
      Span<float> out;  // the rows written (and, with accumulate, read)
      WeightArg w;
      Span<float> bias;
    };
    struct Job {
      MatmulArgs parts[kMatmulPartsMax];
      ColumnSplit split[kMatmulPartsMax];  // each part's tasks, as a matmul of its own would split them
      int32_t firstTask[kMatmulPartsMax + 1];  // the part's first task; tasks of all parts numbered one after another
      uint32_t count;
      const KernelTable* k;
    };
    Checked checked[kMatmulPartsMax];
    Job job{};
    job.count = count;
    job.k = &k;
    job.firstTask[0] = 0;
    for (uint32_t p = 0; p < count; p++) {
      const uint32_t base = p * kMatmulPartFields;
      const auto out = typedArrayValue<float>(env, entries[base], napi_float32_array, "Float32Array", "out");
      const int64_t outDim = integerValue(env, entries[base + 3], "outDim", 1, kDimMax);
      const WeightArg w = weightValue(env, entries[base + 1], entries[base + 2], inDim, outDim);
      const Napi::Value biasValue = entries[base + 4];
      Span<float> bias{nullptr, 0};
      if (!biasValue.IsNull() && !biasValue.IsUndefined()) {
        bias = typedArrayValue<float>(env, biasValue, napi_float32_array, "Float32Array", "bias");
        if (static_cast<int64_t>(bias.length) != outDim) throwRange(env, "bias must hold outDim values");
      }
      const bool accumulate = integerValue(env, entries[base + 5], "accumulate", 0, 1) == 1;
      requireLength(env, out.length, rowCount * outDim, "out");
      checked[p] = {{out.data, static_cast<size_t>(rowCount * outDim)}, w, bias};
      job.parts[p] = {out.data, x.data, w.data, w.type, static_cast<int32_t>(rowCount), static_cast<int32_t>(inDim),
                      static_cast<int32_t>(outDim), bias.data, accumulate, {}};
      // each part keeps the task size a matmul of its own would get (whose weight slab the cache was sized for)
      job.split[p] = columnSplit(rowCount, inDim, outDim);
      job.firstTask[p + 1] = job.firstTask[p] + job.split[p].tasks;
    }
    // no output may overlap what any part reads (x, weights, biases) or another part's output
    for (uint32_t p = 0; p < count; p++) {
      requireDisjoint(env, checked[p].out, x, "out", "x");
      for (uint32_t q = 0; q < count; q++) {
        requireDisjoint(env, checked[p].out, checked[q].w.bytes, "out", "the weights");
        requireDisjoint(env, checked[p].out, checked[q].bias, "out", "a bias");
        if (q != p) requireDisjoint(env, checked[p].out, checked[q].out, "out", "another part's out");
      }
    }
    counts_[kMatmuls]++;
    if (rowCount == 0) return env.Undefined();
    for (uint32_t p = 0; p < count; p++) {
      if (!multipliesQ8(job.parts[p].type)) continue;
      quantizeX(k, job.parts[p], x.data, rowCount, inDim);  // once: the parts share x
      for (uint32_t q = p + 1; q < count; q++) job.parts[q].q8 = job.parts[p].q8;
      break;
    }
    pool_->run(job.firstTask[count], [](const void* c, int32_t t) {
      const auto* j = static_cast<const Job*>(c);
      uint32_t p = 0;
      while (t >= j->firstTask[p + 1]) p++;
      const ColumnRange r = j->split[p].range(t - j->firstTask[p]);
      j->k->matmul(j->parts[p], static_cast<int32_t>(r.begin), static_cast<int32_t>(r.end));
    }, &job);
    return env.Undefined();
  }

  // storeKv(k, v, rowCount, positions, pageTables, pageTableStarts, layer, layerCount, pageSize, kvDim, valuesPerPage,
  //         arena): row r of k and of v (rowCount, kvDim) into its slot of layer `layer`: slot positions[r] % pageSize
  // of page pageTables[pageTableStarts[r] + positions[r] / pageSize] (src/kv/kv-layout.ts). Every row is checked
  // before any is written. Each value is rounded to f16 (kernels.h storeHalves); a few KiB: on the calling thread, a
  // dispatch would cost more.
  Napi::Value StoreKv(const Napi::CallbackInfo& info) {
    const Napi::Env env = info.Env();
    const KernelTable& k = kernels(env);
    const auto kIn = floatsArg(info, 0, "k");
    const auto vIn = floatsArg(info, 1, "v");
    const int64_t rowCount = integerArg(info, 2, "rowCount", 0, kDimMax);
    const auto positions = int32sArg(info, 3, "positions");
    const auto pageTables = int32sArg(info, 4, "pageTables");
    const auto pageTableStarts = int32sArg(info, 5, "pageTableStarts");
    const int64_t layerCount = integerArg(info, 7, "layerCount", 1, 1 << 16);
    const int64_t layer = integerArg(info, 6, "layer", 0, layerCount - 1);
    const int64_t pageSize = integerArg(info, 8, "pageSize", 1, 1 << 16);
    const int64_t kvDim = integerArg(info, 9, "kvDim", 1, kDimMax);
    const int64_t valuesPerPage = integerArg(info, 10, "valuesPerPage", 1, int64_t{1} << 40);
    const auto arena = halvesArg(info, 11, "arena");
    if (valuesPerPage != layerCount * 2 * pageSize * kvDim) throwRange(env, "valuesPerPage does not match the layout");
    requireLength(env, kIn.length, rowCount * kvDim, "k");
    requireLength(env, vIn.length, rowCount * kvDim, "v");
    requireLength(env, positions.length, rowCount, "positions");
    requireLength(env, pageTableStarts.length, rowCount, "pageTableStarts");
    const Span<float> kRows{kIn.data, static_cast<size_t>(rowCount * kvDim)};
    const Span<float> vRows{vIn.data, static_cast<size_t>(rowCount * kvDim)};
    requireDisjoint(env, arena, kRows, "the arena", "k");
    requireDisjoint(env, arena, vRows, "the arena", "v");
    const int64_t pageCount = static_cast<int64_t>(arena.length) / valuesPerPage;
    for (int64_t r = 0; r < rowCount; r++) {
      const int64_t position = positions.data[r];
      const int64_t entry = pageTableStarts.data[r] + position / pageSize;
      if (position < 0 || pageTableStarts.data[r] < 0 || entry >= static_cast<int64_t>(pageTables.length)) {
        throwRange(env, "row " + std::to_string(r) + "'s position " + std::to_string(position) + " runs past pageTables");
      }
      requirePageInArena(env, r, pageTables.data[entry], pageCount);
    }
    counts_[kStoreKv]++;
    for (int64_t r = 0; r < rowCount; r++) {
      const int64_t position = positions.data[r];
      const int64_t page = pageTables.data[pageTableStarts.data[r] + position / pageSize];
      const int64_t kSlot = page * valuesPerPage + (layer * 2 * pageSize + position % pageSize) * kvDim;
      k.storeHalves(arena.data + kSlot, kRows.data + r * kvDim, static_cast<int32_t>(kvDim));
      k.storeHalves(arena.data + kSlot + pageSize * kvDim, vRows.data + r * kvDim, static_cast<int32_t>(kvDim));
    }
    return env.Undefined();
  }

  // attention(out, q, rowCount, kvLengths, pageTables, pageTableStarts,
  //           layer, layerCount, headCount, kvHeadCount, headDim, pageSize, kvDim, valuesPerPage, arena, kvStarts)
  Napi::Value Attention(const Napi::CallbackInfo& info) {
    const Napi::Env env = info.Env();
    const KernelTable& k = kernels(env);
    const auto out = floatsArg(info, 0, "out");
    const auto q = floatsArg(info, 1, "q");
    const int64_t rowCount = integerArg(info, 2, "rowCount", 0, kDimMax);
    const auto kvLengths = int32sArg(info, 3, "kvLengths");
    const auto pageTables = int32sArg(info, 4, "pageTables");
    const auto pageTableStarts = int32sArg(info, 5, "pageTableStarts");
    const int64_t layerCount = integerArg(info, 7, "layerCount", 1, 1 << 16);
    const int64_t layer = integerArg(info, 6, "layer", 0, layerCount - 1);
    const int64_t headCount = integerArg(info, 8, "headCount", 1, 1 << 16);
    const int64_t kvHeadCount = integerArg(info, 9, "kvHeadCount", 1, headCount);
    const int64_t headDim = integerArg(info, 10, "headDim", 1, kHeadDimMax);
    const int64_t pageSize = integerArg(info, 11, "pageSize", 1, 1 << 16);
    const int64_t kvDim = integerArg(info, 12, "kvDim", 1, kDimMax);
    const int64_t valuesPerPage = integerArg(info, 13, "valuesPerPage", 1, int64_t{1} << 40);
    const auto arena = halvesArg(info, 14, "arena");
    const auto kvStarts = int32sArg(info, 15, "kvStarts");
    if (headCount % kvHeadCount != 0) throwRange(env, "headCount must be a multiple of kvHeadCount");
    if (kvDim != kvHeadCount * headDim) throwRange(env, "kvDim must be kvHeadCount * headDim");
    if (valuesPerPage != layerCount * 2 * pageSize * kvDim) throwRange(env, "valuesPerPage does not match the layout");
    const int64_t qDim = headCount * headDim;
    requireLength(env, q.length, rowCount * qDim, "q");
    requireLength(env, out.length, rowCount * qDim, "out");
    requireLength(env, kvLengths.length, rowCount, "kvLengths");
    requireLength(env, pageTableStarts.length, rowCount, "pageTableStarts");
    requireLength(env, kvStarts.length, rowCount, "kvStarts");
    requireDisjoint(env, out, q, "out", "q");
    requireDisjoint(env, out, arena, "out", "the arena");
    const int64_t pageCount = static_cast<int64_t>(arena.length) / valuesPerPage;
    int64_t work = 0;
    for (int64_t r = 0; r < rowCount; r++) {
      const int64_t kvLength = kvLengths.data[r];
      const int64_t start = pageTableStarts.data[r];
      const int64_t kvStart = kvStarts.data[r];
      if (kvStart < 0 || kvStart >= kvLength) throwRange(env, "row " + std::to_string(r) + " attends over no positions");
      const int64_t pages = (kvLength + pageSize - 1) / pageSize;
      if (start < 0 || start + pages > static_cast<int64_t>(pageTables.length)) {
        throwRange(env, "row " + std::to_string(r) + "'s page table runs past pageTables");
      }
      for (int64_t i = 0; i < pages; i++) requirePageInArena(env, r, pageTables.data[start + i], pageCount);
      work += kvLength - kvStart;
    }
    counts_[kAttention]++;
    // tiles: up to kAttentionRowsMax consecutive rows of one sequence (the same page table and first position), so
    // a prefill chunk's rows share each block of K/V (and its transposition) while it is in L1; a decode batch's rows
    // are tiles of one. Smaller tiles when there would be too few tasks to keep every thread busy (a short chunk);
    // the tiling never changes a bit.
    const int64_t group = headCount / kvHeadCount;
    const int64_t partsPerGroup = (group + kAttentionHeadsMax - 1) / kAttentionHeadsMax;
    const int64_t tasksPerUnit = kvHeadCount * partsPerGroup;  // a unit's query heads: one task per KV head and part
    const int64_t tasksWanted = 4 * static_cast<int64_t>(pool_->threadCount());
    std::vector<int32_t> tileBegins;
    for (int64_t tileRows = kAttentionRowsMax;; tileRows /= 2) {
      tileBegins.clear();
      for (int64_t r = 0; r < rowCount; r++) {
        const bool joins = !tileBegins.empty() && r - tileBegins.back() < tileRows &&
                           pageTableStarts.data[r] == pageTableStarts.data[tileBegins.back()] &&
                           kvStarts.data[r] == kvStarts.data[tileBegins.back()];
        if (!joins) tileBegins.push_back(static_cast<int32_t>(r));
      }
      if (tileRows <= 4 || static_cast<int64_t>(tileBegins.size()) * tasksPerUnit >= tasksWanted) break;
    }
    tileBegins.push_back(static_cast<int32_t>(rowCount));
    const int64_t tiles = static_cast<int64_t>(tileBegins.size()) - 1;
    // Still too few tasks (a decode step of few rows): rows longer than a span have their spans split over tasks,
    // each span's state kept in partials_ and folded by attentionMerge. That never changes a bit either.
    const bool onCaller = work * qDim * 2 < kInlineWork;
    std::vector<int32_t> partialStarts(static_cast<size_t>(rowCount));
    int64_t records = 0;
    int64_t spansMax = 1;
    for (int64_t r = 0; r < rowCount; r++) {
      const int64_t spans = attentionSpans(kvLengths.data[r] - kvStarts.data[r]);
      partialStarts[r] = static_cast<int32_t>(std::min<int64_t>(records, INT32_MAX));
      if (spans > 1) records += spans;
      spansMax = std::max(spansMax, spans);
    }
    const int64_t partialFloats = records * headCount * attentionPartialFloats(static_cast<int32_t>(headDim));
    const bool split = !onCaller && pool_->threadCount() > 1 && records > 0 && tiles * tasksPerUnit < tasksWanted &&
                       partialFloats <= kPartialFloatsMax;
    // units: a tile over a range of spans (all of them, or one when split)
    std::vector<int32_t> unitTiles;
    std::vector<int32_t> unitSpans;
    for (int64_t tile = 0; tile < tiles; tile++) {
      int32_t kvEnd = 0;
      for (int32_t r = tileBegins[tile]; r < tileBegins[tile + 1]; r++) kvEnd = std::max(kvEnd, kvLengths.data[r]);
      const int64_t spans = split ? attentionSpans(kvEnd - kvStarts.data[tileBegins[tile]]) : 1;
      for (int64_t span = 0; span < spans; span++) {
        unitTiles.push_back(static_cast<int32_t>(tile));
        unitSpans.push_back(split ? static_cast<int32_t>(span) : -1);
      }
    }
    const int64_t tasks = static_cast<int64_t>(unitTiles.size()) * tasksPerUnit;
    if (tasks > INT32_MAX) throwRange(env, "too many attention tasks in one call");
    if (split) {
      counts_[kAttentionSplit]++;
      if (partials_.size() < static_cast<size_t>(partialFloats)) partials_.resize(static_cast<size_t>(partialFloats));
    }
    struct Task {
      AttentionArgs args;
      const KernelTable* k;
      const int32_t* tileBegins;
      const int32_t* unitTiles;
      const int32_t* unitSpans;
      int32_t group;
      int32_t partsPerGroup;
    };
    const Task task{{out.data, q.data, arena.data, kvLengths.data, kvStarts.data, pageTables.data, pageTableStarts.data,
                     static_cast<int32_t>(layer), static_cast<int32_t>(headCount), static_cast<int32_t>(kvHeadCount),
                     static_cast<int32_t>(headDim), static_cast<int32_t>(pageSize), static_cast<int32_t>(kvDim),
                     valuesPerPage, split ? partials_.data() : nullptr, partialStarts.data()},
                    &k,
                    tileBegins.data(),
                    unitTiles.data(),
                    unitSpans.data(),
                    static_cast<int32_t>(group),
                    static_cast<int32_t>(partsPerGroup)};
    // one task: a unit's query heads of one KV head, at most kAttentionHeadsMax of them
    auto one = [](const void* c, int32_t t) {
      const auto* j = static_cast<const Task*>(c);
      const int32_t perUnit = j->args.kvHeadCount * j->partsPerGroup;
      const int32_t unit = t / perUnit;
      const int32_t kvHead = (t % perUnit) / j->partsPerGroup;
      const int32_t part = t % j->partsPerGroup;
      const int32_t firstHead = kvHead * j->group + part * kAttentionHeadsMax;
      const int32_t heads = std::min(kAttentionHeadsMax, j->group - part * kAttentionHeadsMax);
      const int32_t tile = j->unitTiles[unit];
      const int32_t span = j->unitSpans[unit];
      j->k->attention(j->args, j->tileBegins[tile], j->tileBegins[tile + 1], firstHead, heads, span < 0 ? 0 : span,
                      span < 0 ? INT32_MAX : span + 1);
    };
    if (onCaller) {
      for (int32_t t = 0; t < static_cast<int32_t>(tasks); t++) one(&task, t);
    } else {
      pool_->run(static_cast<int32_t>(tasks), one, &task);
    }
    if (split) {
      forRows(rowCount, qDim * spansMax, [&](int64_t begin, int64_t end) {
        k.attentionMerge(task.args, static_cast<int32_t>(begin), static_cast<int32_t>(end));
      });
    }
    return env.Undefined();
  }

  // Splits rows [0, rowCount) into tasks of about kInlineWork values each (one task when small).
  template <typename Fn>
  void forRows(int64_t rowCount, int64_t valuesPerRow, const Fn& fn) {
    const int64_t rowsPerTask = std::max<int64_t>(1, kInlineWork / std::max<int64_t>(1, valuesPerRow));
    struct Job {
      const Fn* fn;
      int64_t rowsPerTask;
      int64_t rowCount;
    };
    const Job job{&fn, rowsPerTask, rowCount};
    pool_->run(static_cast<int32_t>((rowCount + rowsPerTask - 1) / rowsPerTask), [](const void* c, int32_t t) {
      const auto* j = static_cast<const Job*>(c);
      const int64_t begin = t * j->rowsPerTask;
      (*j->fn)(begin, std::min(begin + j->rowsPerTask, j->rowCount));
    }, &job);
  }

  // rmsNorm(out, x, rowCount, weight, eps): out may be x itself, never a partial overlap
  Napi::Value RmsNorm(const Napi::CallbackInfo& info) {
    const Napi::Env env = info.Env();
    const KernelTable& k = kernels(env);
    const auto out = floatsArg(info, 0, "out");
    const auto x = floatsArg(info, 1, "x");
    const int64_t rowCount = integerArg(info, 2, "rowCount", 0, kDimMax);
    const auto weight = floatsArg(info, 3, "weight");
    if (!info[4].IsNumber()) throwType(env, "eps must be a number");
    const double eps = info[4].As<Napi::Number>().DoubleValue();
    const auto dim = static_cast<int64_t>(weight.length);
    if (dim < 1 || dim > kDimMax) throwRange(env, "weight must hold between 1 and 2^24 values");
    requireLength(env, x.length, rowCount * dim, "x");
    requireLength(env, out.length, rowCount * dim, "out");
    if (out.data != x.data) requireDisjoint(env, out, x, "out", "x");
    requireDisjoint(env, out, weight, "out", "weight");
    counts_[kRmsNorm]++;
    forRows(rowCount, dim, [&](int64_t begin, int64_t end) {
      k.rmsNorm(out.data, x.data, weight.data, static_cast<int32_t>(dim), eps, static_cast<int32_t>(begin),
                static_cast<int32_t>(end));
    });
    return env.Undefined();
  }

  // rope(x, rowCount, headCount, headDim, ropeDim, positions, cosSin, tablePositions, neox)
  Napi::Value Rope(const Napi::CallbackInfo& info) {
    const Napi::Env env = info.Env();
    const KernelTable& k = kernels(env);
    const auto x = floatsArg(info, 0, "x");
    const int64_t rowCount = integerArg(info, 1, "rowCount", 0, kDimMax);
    const int64_t headCount = integerArg(info, 2, "headCount", 1, 1 << 16);
    const int64_t headDim = integerArg(info, 3, "headDim", 1, kDimMax);
    const int64_t ropeDim = integerArg(info, 4, "ropeDim", 0, headDim);
    const auto positions = int32sArg(info, 5, "positions");
    const auto cosSin = typedArrayArg<double>(info, 6, napi_float64_array, "Float64Array", "cosSin");
    const int64_t tablePositions = integerArg(info, 7, "tablePositions", 0, int64_t{1} << 31);
    const int64_t neox = integerArg(info, 8, "neox", 0, 1);
    if (ropeDim % 2 != 0) throwRange(env, "ropeDim must be even");
    // a row's width bounded first, so that the row count times it cannot overflow
    if (headCount * headDim > kDimMax) throwRange(env, "headCount * headDim must be at most 2^24");
    requireLength(env, x.length, rowCount * headCount * headDim, "x");
    requireLength(env, positions.length, rowCount, "positions");
    requireLength(env, cosSin.length, tablePositions * ropeDim, "cosSin");
    for (int64_t r = 0; r < rowCount; r++) {
      if (positions.data[r] < 0 || positions.data[r] >= tablePositions) {
        throwRange(env, "position " + std::to_string(positions.data[r]) + " is outside the cos/sin table");
      }
    }
    counts_[kRope]++;
    const RopeArgs args{x.data, positions.data, cosSin.data, static_cast<int32_t>(headCount), static_cast<int32_t>(headDim),
                        static_cast<int32_t>(ropeDim), static_cast<int32_t>(neox)};
    forRows(rowCount, headCount * ropeDim * 4, [&](int64_t begin, int64_t end) {
      k.rope(args, static_cast<int32_t>(begin), static_cast<int32_t>(end));
    });
    return env.Undefined();
  }

  // swiglu(gate, up, n)
  Napi::Value Swiglu(const Napi::CallbackInfo& info) {
    const Napi::Env env = info.Env();
    const KernelTable& k = kernels(env);
    const auto gate = floatsArg(info, 0, "gate");
    const auto up = floatsArg(info, 1, "up");
    const int64_t n = integerArg(info, 2, "n", 0, int64_t{1} << 40);
    requireLength(env, gate.length, n, "gate");
    requireLength(env, up.length, n, "up");
    requireDisjoint(env, gate, up, "gate", "up");
    counts_[kSwiglu]++;
    forRows(n, 8, [&](int64_t begin, int64_t end) { k.swiglu(gate.data, up.data, begin, end); });
    return env.Undefined();
  }

  // embed(out, tokens, weightData, weightType, inDim, outDim)
  Napi::Value Embed(const Napi::CallbackInfo& info) {
    const Napi::Env env = info.Env();
    const KernelTable& k = kernels(env);
    const auto out = floatsArg(info, 0, "out");
    const auto tokens = int32sArg(info, 1, "tokens");
    const int64_t inDim = integerArg(info, 4, "inDim", 1, kDimMax);
    const int64_t outDim = integerArg(info, 5, "outDim", 1, kDimMax);
    const WeightArg w = weightArg(info, 2, 3, inDim, outDim);
    requireLength(env, out.length, static_cast<int64_t>(tokens.length) * inDim, "out");
    requireDisjoint(env, out, w.bytes, "out", "the weights");
    for (size_t r = 0; r < tokens.length; r++) {
      if (tokens.data[r] < 0 || tokens.data[r] >= outDim) {
        throwRange(env, "token " + std::to_string(tokens.data[r]) + " outside the vocabulary of " + std::to_string(outDim));
      }
    }
    counts_[kEmbed]++;
    for (size_t r = 0; r < tokens.length; r++) {
      k.embedRow(out.data + r * static_cast<size_t>(inDim), w.data, w.type, static_cast<int32_t>(inDim), tokens.data[r]);
    }
    return env.Undefined();
  }

  // triad(a, b, c, s): a = b + s * c over equal lengths, each thread one contiguous slice (STREAM's split)
  Napi::Value Triad(const Napi::CallbackInfo& info) {
    const Napi::Env env = info.Env();
    const KernelTable& k = kernels(env);
    const auto a = floatsArg(info, 0, "a");
    const auto b = floatsArg(info, 1, "b");
    const auto c = floatsArg(info, 2, "c");
    if (!info[3].IsNumber()) throwType(env, "s must be a number");
    const auto s = static_cast<float>(info[3].As<Napi::Number>().DoubleValue());
    if (b.length != a.length || c.length != a.length) throwRange(env, "triad arrays must have equal lengths");
    requireDisjoint(env, a, b, "a", "b");
    requireDisjoint(env, a, c, "a", "c");
    counts_[kTriad]++;
    struct Job {
      const KernelTable* k;
      float* a;
      const float* b;
      const float* c;
      float s;
      int64_t n;
      int32_t parts;
    };
    const Job job{&k, a.data, b.data, c.data, s, static_cast<int64_t>(a.length), pool_->threadCount()};
    pool_->run(job.parts, [](const void* p, int32_t t) {
      const auto* j = static_cast<const Job*>(p);
      const int64_t per = (j->n / j->parts + 15) / 16 * 16;
      const int64_t begin = std::min(j->n, t * per);
      j->k->triad(j->a, j->b, j->c, j->s, begin, t + 1 == j->parts ? j->n : std::min(j->n, begin + per));
    }, &job);
    return env.Undefined();
  }

  // callCounts(): kernel calls that passed validation, by kind — proof that the native path ran
  Napi::Value CallCounts(const Napi::CallbackInfo& info) {
    Napi::Object counts = Napi::Object::New(info.Env());
    for (int op = 0; op < kOpCount; op++) counts.Set(kOpNames[op], Napi::Number::New(info.Env(), static_cast<double>(counts_[op])));
    return counts;
  }

  // setIsa(name): run another supported kernel table (tests compare them bit for bit)
  Napi::Value SetIsa(const Napi::CallbackInfo& info) {
    const Napi::Env env = info.Env();
    if (!info[0].IsString()) throwType(env, "setIsa needs an instruction set name");
    const std::string name = info[0].As<Napi::String>().Utf8Value();
    for (const KernelTable* t : supported_) {
      if (name == t->name) {
        kernels_ = t;
        return env.Undefined();
      }
    }
    throwRange(env, "instruction set " + name + " is not supported on this CPU");
  }

  Napi::Value Close(const Napi::CallbackInfo& info) {
    pool_.reset();
    return info.Env().Undefined();
  }

  Napi::Value Isa(const Napi::CallbackInfo& info) { return Napi::String::New(info.Env(), kernels_->name); }

  Napi::Value SupportedIsas(const Napi::CallbackInfo& info) {
    Napi::Array names = Napi::Array::New(info.Env(), supported_.size());
    for (uint32_t i = 0; i < supported_.size(); i++) names.Set(i, Napi::String::New(info.Env(), supported_[i]->name));
    return names;
  }

  Napi::Value Q8Activations(const Napi::CallbackInfo& info) { return Napi::Boolean::New(info.Env(), q8Activations_); }

  Napi::Value ThreadCount(const Napi::CallbackInfo& info) {
    return Napi::Number::New(info.Env(), pool_ ? pool_->threadCount() : 0);
  }

  std::vector<const KernelTable*> supported_;
  const KernelTable* kernels_ = nullptr;
  std::unique_ptr<ThreadPool> pool_;
  std::vector<float> partials_;  // attention's span states (kPartialFloatsMax at most)
  bool q8Activations_ = false;
  std::vector<int8_t> xq_;  // x as Q8 blocks (quantizeX)
  std::vector<float> xd_;
  std::vector<float> xe_;
  std::vector<float> xh_;
  uint64_t counts_[kOpCount] = {};
};

}  // namespace

// Asks the kernel to back the 2 MiB-aligned interior of an ArrayBuffer with transparent huge pages (madvise
// MADV_HUGEPAGE); returns the bytes advised, 0 where the buffer holds no whole huge page or the kernel refuses the
// advice (no THP in it). The kernel takes the advice even with THP switched off: the caller checks that first.
// Advice given before the pages are first touched makes the first touch fault in huge pages: the model loader calls
// this on its fresh weight arena, so a decode step's weight stream takes a TLB miss per 2 MiB instead of per 4 KiB.
Napi::Value AdviseHugePages(const Napi::CallbackInfo& info) {
  const Napi::Env env = info.Env();
  if (info.Length() != 1 || !info[0].IsArrayBuffer()) throwType(env, "adviseHugePages takes one ArrayBuffer");
  auto buffer = info[0].As<Napi::ArrayBuffer>();
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  constexpr uintptr_t kHuge = uintptr_t{2} << 20;
  const auto start = reinterpret_cast<uintptr_t>(buffer.Data());
  const uintptr_t first = (start + kHuge - 1) & ~(kHuge - 1);
  const uintptr_t end = (start + buffer.ByteLength()) & ~(kHuge - 1);
  if (end > first && madvise(reinterpret_cast<void*>(first), end - first, MADV_HUGEPAGE) == 0) {
    return Napi::Number::New(env, static_cast<double>(end - first));
  }
#endif
  return Napi::Number::New(env, 0);
}

// A second descriptor for the same open socket (close-on-exec); throws an Error with strerror's text when there is
// none to be had. Lets an accepted connection be rewrapped in a net.Socket of the caller's making (one that reads into
// a buffer it reuses: src/wire/socket-stream.ts)
Napi::Value DupFd(const Napi::CallbackInfo& info) {
  const Napi::Env env = info.Env();
  if (info.Length() != 1 || !info[0].IsNumber()) throwType(env, "dupFd takes one file descriptor");
  const int fd = info[0].As<Napi::Number>().Int32Value();
#if defined(__unix__)
  const int copy = fcntl(fd, F_DUPFD_CLOEXEC, 0);
  if (copy < 0) throw Napi::Error::New(env, std::string("dupFd: ") + std::strerror(errno));
  return Napi::Number::New(env, copy);
#else
  throw Napi::Error::New(env, "dupFd: not on this platform");
#endif
}

const char* xxh3IsaName(Xxh3Isa isa) { return isa == Xxh3Isa::avx2 ? "avx2" : "portable"; }

// the form of XXH3's long-input loop argument `index` names (tests compare them), else the best this CPU runs
Xxh3Isa xxh3IsaArg(const Napi::CallbackInfo& info, size_t index) {
  const std::vector<Xxh3Isa>& supported = xxh3Isas();
  if (info.Length() <= index || info[index].IsUndefined()) return supported.front();
  if (!info[index].IsString()) throwType(info.Env(), "an XXH3 form is named by a string");
  const std::string name = info[index].As<Napi::String>().Utf8Value();
  for (const Xxh3Isa isa : supported) {
    if (name == xxh3IsaName(isa)) return isa;
  }
  throwType(info.Env(), "this CPU does not run the XXH3 form " + name);
}

// XXH3 (64-bit, seed 0) of a Uint8Array, as a BigInt: the transfer's page checksum, read where the page lies
Napi::Value Xxh3(const Napi::CallbackInfo& info) {
  if (info.Length() < 1 || info.Length() > 2) throwType(info.Env(), "xxh3 takes one Uint8Array and a form's name");
  const auto bytes = typedArrayArg<uint8_t>(info, 0, napi_uint8_array, "Uint8Array", "xxh3's bytes");
  return Napi::BigInt::New(info.Env(), xxh3(bytes.data, bytes.length, xxh3IsaArg(info, 1)));
}

// Copies one Uint8Array into another of the same length and returns the XXH3 of the bytes written, in one pass: the
// receiver's page, from the frame into its pool
Napi::Value Xxh3Copy(const Napi::CallbackInfo& info) {
  const Napi::Env env = info.Env();
  if (info.Length() < 2 || info.Length() > 3) throwType(env, "xxh3Copy takes two Uint8Arrays and a form's name");
  const auto source = typedArrayArg<uint8_t>(info, 0, napi_uint8_array, "Uint8Array", "xxh3Copy's source");
  const auto destination = typedArrayArg<uint8_t>(info, 1, napi_uint8_array, "Uint8Array", "xxh3Copy's destination");
  if (source.length != destination.length) throwType(env, "xxh3Copy: the lengths differ");
  if (overlaps(source, destination)) throwType(env, "xxh3Copy: the ranges overlap");
  return Napi::BigInt::New(env, xxh3Copy(source.data, source.length, destination.data, xxh3IsaArg(info, 2)));
}

// widenQ5_0(src, dst): src's Q5_0 blocks into dst as Q8_0 blocks of the same values (the model loader's widening)
Napi::Value WidenQ5_0(const Napi::CallbackInfo& info) {
  const Napi::Env env = info.Env();
  if (info.Length() != 2) throwType(env, "widenQ5_0 takes two Uint8Arrays");
  const auto source = typedArrayArg<uint8_t>(info, 0, napi_uint8_array, "Uint8Array", "widenQ5_0's source");
  const auto destination = typedArrayArg<uint8_t>(info, 1, napi_uint8_array, "Uint8Array", "widenQ5_0's destination");
  const size_t blocks = source.length / kQ5_0BlockBytes;
  if (source.length % kQ5_0BlockBytes != 0) throwRange(env, "widenQ5_0: the source is not whole Q5_0 blocks");
  if (destination.length != blocks * kQ8BlockBytes) throwRange(env, "widenQ5_0: the destination does not fit the blocks");
  if (overlaps(source, destination)) throwType(env, "widenQ5_0: the ranges overlap");
  widenQ5_0(source.data, blocks, destination.data);
  return env.Undefined();
}

// the forms of XXH3's long-input loop this CPU runs, best first
Napi::Value Xxh3Isas(Napi::Env env) {
  const std::vector<Xxh3Isa>& isas = xxh3Isas();
  Napi::Array names = Napi::Array::New(env, isas.size());
  for (uint32_t i = 0; i < isas.size(); i++) names.Set(i, Napi::String::New(env, xxh3IsaName(isas[i])));
  return names;
}

Napi::Object Init(Napi::Env env, Napi::Object exports) {
  exports.Set("Context", Context::Define(env));
  exports.Set("Gcm", DefineGcm(env));
  exports.Set("Aegis256x4", DefineAegis256x4(env));
  exports.Set("aegis256x4Runs", Napi::Boolean::New(env, aegis256x4Runs()));
  exports.Set("xxh3", Napi::Function::New<Xxh3>(env, "xxh3"));
  exports.Set("xxh3Copy", Napi::Function::New<Xxh3Copy>(env, "xxh3Copy"));
  exports.Set("xxh3Isas", Xxh3Isas(env));
  exports.Set("widenQ5_0", Napi::Function::New<WidenQ5_0>(env, "widenQ5_0"));
  exports.Set("adviseHugePages", Napi::Function::New<AdviseHugePages>(env, "adviseHugePages"));
  exports.Set("dupFd", Napi::Function::New<DupFd>(env, "dupFd"));
  exports.Set("abiVersion", Napi::Number::New(env, kAbiVersion));
  return exports;
}

}  // namespace kvf

static Napi::Object InitKvfenceNative(Napi::Env env, Napi::Object exports) { return kvf::Init(env, exports); }

NODE_API_MODULE(kvfence_native, InitKvfenceNative)
