// An in-process ControlComm: one thread per rank, exchanging through shared
// memory. Lets the negotiation logic (controller, coordinator, cache) run
// at several ranks in milliseconds, without MPI.
#ifndef HBCORE_TESTS_FAKE_COMM_H_
#define HBCORE_TESTS_FAKE_COMM_H_

#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "backends/combined_buffer.h"
#include "negotiation/control_comm.h"

namespace hbcore {
namespace testing {

// Rendezvous of `size` threads: each contributes a string and gets all of
// them, in rank order. Rounds are separated by a generation counter.
class Exchange {
 public:
  explicit Exchange(int size) : size_(size), slots_(size) {}

  std::vector<std::string> AllGather(int rank, const std::string& mine) {
    std::unique_lock<std::mutex> lock(mu_);
    const uint64_t gen = generation_;
    slots_[rank] = mine;
    if (++arrived_ == size_) {
      result_ = slots_;
      arrived_ = 0;
      ++generation_;
      cv_.notify_all();
    } else {
      cv_.wait(lock, [&] { return generation_ != gen; });
    }
    return result_;
  }

 private:
  int size_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::string> slots_;
  std::vector<std::string> result_;
  int arrived_ = 0;
  uint64_t generation_ = 0;
};

class FakeComm : public ControlComm {
 public:
  FakeComm(std::shared_ptr<Exchange> exchange, int rank, int size)
      : exchange_(std::move(exchange)), rank_(rank), size_(size) {}

  int rank() const override { return rank_; }
  int size() const override { return size_; }

  Status AllreduceAnd(std::vector<uint64_t>* words) override {
    std::string mine(reinterpret_cast<const char*>(words->data()),
                     words->size() * sizeof(uint64_t));
    for (const std::string& other : exchange_->AllGather(rank_, mine)) {
      const uint64_t* w = reinterpret_cast<const uint64_t*>(other.data());
      for (size_t i = 0; i < words->size(); ++i) (*words)[i] &= w[i];
    }
    return Status::OK();
  }
  // Combined exactly as the MPI operation does (combined_buffer.h), in rank
  // order.
  Status AllreduceAndSum(std::vector<uint64_t>* words,
                         std::vector<uint8_t>* payload,
                         const std::vector<PayloadSegment>& segments) override {
    ++combined_calls;
    std::vector<uint8_t> packed = PackCombined(*words, *payload, segments);
    std::string mine(reinterpret_cast<const char*>(packed.data()),
                     packed.size());
    std::vector<std::string> all = exchange_->AllGather(rank_, mine);
    std::vector<uint8_t> result(all[0].begin(), all[0].end());
    for (size_t r = 1; r < all.size(); ++r) {
      if (all[r].size() != result.size() ||
          !CombineBuffers(reinterpret_cast<const uint8_t*>(all[r].data()),
                          result.data())) {
        return Status::Internal("combined buffers differ in layout");
      }
    }
    UnpackCombined(result.data(), words, payload);
    return Status::OK();
  }
  Status Gather(const std::string& mine,
                std::vector<std::string>* all) override {
    ++gather_calls;
    std::vector<std::string> got = exchange_->AllGather(rank_, mine);
    if (rank_ == 0) *all = got;
    return Status::OK();
  }
  Status Broadcast(std::string* bytes) override {
    *bytes = exchange_->AllGather(rank_, *bytes)[0];
    return Status::OK();
  }
  void SendWake(uint64_t) override {}
  bool PollWake(uint64_t*) override { return false; }
  Status Drain() override { return Status::OK(); }

  // How many collectives of each kind this rank ran (a cycle's round trips).
  int combined_calls = 0;
  int gather_calls = 0;

 private:
  std::shared_ptr<Exchange> exchange_;
  int rank_;
  int size_;
};

}  // namespace testing
}  // namespace hbcore

#endif  // HBCORE_TESTS_FAKE_COMM_H_
