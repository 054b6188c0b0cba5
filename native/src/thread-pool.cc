#include "thread-pool.h"

#include <chrono>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace kvf {

namespace {

inline void cpuRelax() {
#if defined(__x86_64__)
  _mm_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield");
#endif
}

// A waiting thread first spins on the CPU (the answer usually comes within microseconds), then yields its core to
// whatever else is runnable, and a worker finally sleeps. The spin bridges the JavaScript between two kernel calls of
// a forward pass; the sleep makes an idle process quiet within a couple of milliseconds.
constexpr auto kSpinHot = std::chrono::microseconds(50);
constexpr auto kSpinTotal = std::chrono::microseconds(2000);

class Backoff {
 public:
  // true while the caller should keep polling; false once the total spin time is over
  bool pause() {
    if ((++polls_ & 63) != 0) {
      cpuRelax();
      return true;
    }
    const auto elapsed = std::chrono::steady_clock::now() - start_;
    if (elapsed > kSpinTotal) return false;
    if (elapsed > kSpinHot) std::this_thread::yield();
    return true;
  }

 private:
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  uint32_t polls_ = 0;
};

}  // namespace

ThreadPool::ThreadPool(int32_t threadCount) {
  workers_.reserve(static_cast<size_t>(threadCount > 1 ? threadCount - 1 : 0));
  for (int32_t i = 1; i < threadCount; i++) workers_.emplace_back([this] { workerLoop(); });
}

ThreadPool::~ThreadPool() {
  stopping_.store(true);
  state_.fetch_add(uint64_t{1} << kGenerationShift);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    wake_.notify_all();
  }
  for (auto& worker : workers_) worker.join();
}

void ThreadPool::drain() {
  for (;;) {
    const int32_t task = nextTask_.fetch_add(1, std::memory_order_relaxed);
    if (task >= taskCount_) return;
    fn_(context_, task);
  }
}

void ThreadPool::run(int32_t taskCount, TaskFn fn, const void* context) {
  if (taskCount <= 0) return;
  if (taskCount == 1 || workers_.empty()) {
    for (int32_t task = 0; task < taskCount; task++) fn(context, task);
    return;
  }
  // The previous job is closed with no worker in it, so nobody reads these fields now.
  fn_ = fn;
  context_ = context;
  taskCount_ = taskCount;
  nextTask_.store(0, std::memory_order_relaxed);
  const uint64_t generation = (state_.load() >> kGenerationShift) + 1;
  state_.store(generation << kGenerationShift);  // seq_cst: opens the job; ordered before the sleepers_ read
  if (sleepers_.load() > 0) {
    std::lock_guard<std::mutex> lock(mutex_);
    wake_.notify_all();
  }
  drain();
  state_.fetch_or(kClosed);  // from here no worker joins; those inside finish their last task and leave
  Backoff backoff;
  while ((state_.load(std::memory_order_acquire) & kActiveMask) != 0) {
    if (!backoff.pause()) std::this_thread::yield();
  }
}

uint64_t ThreadPool::awaitJob(uint64_t seen) {
  Backoff backoff;
  while (backoff.pause()) {
    const uint64_t g = state_.load(std::memory_order_acquire) >> kGenerationShift;
    if (g != seen) return g;
  }
  std::unique_lock<std::mutex> lock(mutex_);
  sleepers_.fetch_add(1);  // seq_cst: either run() sees a sleeper and notifies, or we see its new generation
  uint64_t g = state_.load() >> kGenerationShift;
  while (g == seen) {
    wake_.wait(lock);
    g = state_.load() >> kGenerationShift;
  }
  sleepers_.fetch_sub(1);
  return g;
}

void ThreadPool::workerLoop() {
  uint64_t seen = 0;
  for (;;) {
    seen = awaitJob(seen);
    if (stopping_.load()) return;
    uint64_t s = state_.load();
    while ((s >> kGenerationShift) == seen && (s & kClosed) == 0) {
      if (state_.compare_exchange_weak(s, s + 1)) {
        drain();
        state_.fetch_sub(1, std::memory_order_release);
        break;
      }
    }
  }
}

}  // namespace kvf
