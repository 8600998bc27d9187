// The execution model of the fake CUDA runtime (libfakecudart only).
//
// StreamWorker: one thread that runs the tasks of one stream in FIFO
//   order, like the GPU runs a stream's kernels and copies. Every enqueued
//   task gets a ticket (1, 2, ...); the worker counts completed tasks, so
//   "everything enqueued before this call is done" is
//   completed() >= ticket-at-call-time. The destructor runs what is still
//   queued, then joins.
// EventCapture: what one cudaEventRecord captured: a flag set by a marker
//   task when its stream reaches it. An event holds its latest capture;
//   cudaStreamWaitEvent copies the capture current at the call, so a later
//   re-record does not change what an earlier wait waits for.
#ifndef HBCORE_TESTS_FAKE_GPU_FAKE_WORKER_H_
#define HBCORE_TESTS_FAKE_GPU_FAKE_WORKER_H_

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

namespace fakegpu {

class StreamWorker {
 public:
  using Task = std::function<void()>;

  StreamWorker();
  ~StreamWorker();
  StreamWorker(const StreamWorker&) = delete;
  StreamWorker& operator=(const StreamWorker&) = delete;

  // Queues a task; returns its ticket.
  uint64_t Enqueue(Task task);
  // The ticket of the last task enqueued so far (0 if none).
  uint64_t Tail();
  // Blocks until the task with this ticket (and all before it) is done.
  void WaitFor(uint64_t ticket);
  // True when every task enqueued so far is done.
  bool Idle();
  // True when called from this worker's own thread (where WaitFor on this
  // worker would deadlock).
  bool OnWorkerThread() const;

 private:
  void Run();

  std::mutex mu_;
  std::condition_variable work_cv_;  // a task was queued, or stop_
  std::condition_variable done_cv_;  // completed_ advanced
  std::deque<Task> queue_;
  uint64_t enqueued_ = 0;
  uint64_t completed_ = 0;
  bool stop_ = false;
  std::thread thread_;  // last: starts once the members above exist
};

class EventCapture {
 public:
  void Complete();
  bool Done();
  void Wait();

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
};

}  // namespace fakegpu

#endif  // HBCORE_TESTS_FAKE_GPU_FAKE_WORKER_H_
