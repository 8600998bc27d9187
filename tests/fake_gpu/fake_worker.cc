// See fake_worker.h.
#include "fake_worker.h"

#include <cstdio>
#include <exception>
#include <utility>

namespace fakegpu {

StreamWorker::StreamWorker() : thread_([this] { Run(); }) {}

StreamWorker::~StreamWorker() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  work_cv_.notify_all();
  thread_.join();
}

uint64_t StreamWorker::Enqueue(Task task) {
  uint64_t ticket;
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(std::move(task));
    ticket = ++enqueued_;
  }
  work_cv_.notify_one();
  return ticket;
}

uint64_t StreamWorker::Tail() {
  std::lock_guard<std::mutex> lock(mu_);
  return enqueued_;
}

void StreamWorker::WaitFor(uint64_t ticket) {
  std::unique_lock<std::mutex> lock(mu_);
  done_cv_.wait(lock, [&] { return completed_ >= ticket; });
}

bool StreamWorker::Idle() {
  std::lock_guard<std::mutex> lock(mu_);
  return completed_ == enqueued_;
}

bool StreamWorker::OnWorkerThread() const {
  return std::this_thread::get_id() == thread_.get_id();
}

void StreamWorker::Run() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    work_cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stop_ and drained
    Task task = std::move(queue_.front());
    queue_.pop_front();
    lock.unlock();
    try {
      task();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "fake cudart: stream task threw: %s\n", e.what());
    } catch (...) {
      std::fprintf(stderr, "fake cudart: stream task threw\n");
    }
    task = nullptr;  // release what the task captured before counting it
    lock.lock();
    ++completed_;
    done_cv_.notify_all();
  }
}

void EventCapture::Complete() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    done_ = true;
  }
  cv_.notify_all();
}

bool EventCapture::Done() {
  std::lock_guard<std::mutex> lock(mu_);
  return done_;
}

void EventCapture::Wait() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return done_; });
}

}  // namespace fakegpu
