// A bounded pool of persistent worker threads. run() hands out task indices [0, taskCount) to the calling thread and
// every worker (atomic counter: whoever is free takes the next), and returns once all are done. Which thread runs a
// task never changes a value: tasks write disjoint outputs and each task's arithmetic is fixed.
//
// Workers spin briefly after a job (the next kernel call usually follows within microseconds), then sleep on a
// condition variable, so an idle pool costs no CPU. A worker joins a job only while it is open: run() closes the job
// once the caller has drained the task counter and then waits only for the workers that joined, so a worker that was
// asleep or descheduled (a busy machine) never holds the caller up — the caller simply does more of the tasks.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

namespace kvf {

class ThreadPool {
 public:
  using TaskFn = void (*)(const void* context, int32_t task);

  // threadCount includes the calling thread: threadCount - 1 workers are started.
  explicit ThreadPool(int32_t threadCount);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  void run(int32_t taskCount, TaskFn fn, const void* context);
  int32_t threadCount() const { return static_cast<int32_t>(workers_.size()) + 1; }

 private:
  void workerLoop();
  uint64_t awaitJob(uint64_t seen);
  void drain();

  // state_: generation (bits 17..63) | closed (bit 16) | workers in the job (bits 0..15)
  static constexpr uint64_t kActiveMask = 0xffff;
  static constexpr uint64_t kClosed = uint64_t{1} << 16;
  static constexpr int kGenerationShift = 17;

  std::vector<std::thread> workers_;
  // the job; written by run() before generation_ is bumped, read by workers after they see the bump
  TaskFn fn_ = nullptr;
  const void* context_ = nullptr;
  int32_t taskCount_ = 0;
  std::atomic<int32_t> nextTask_{0};
  std::atomic<uint64_t> state_{kClosed};
  std::atomic<bool> stopping_{false};
  std::atomic<int32_t> sleepers_{0};
  std::mutex mutex_;
  std::condition_variable wake_;
};

}  // namespace kvf
