// Negotiation at several ranks in one process: one thread per rank, each
// with its own Controller over a FakeComm, all running cycles in lockstep.
#ifndef HBCORE_TESTS_NEGOTIATION_HARNESS_H_
#define HBCORE_TESTS_NEGOTIATION_HARNESS_H_

#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "check.h"
#include "fake_comm.h"
#include "negotiation/controller.h"

namespace hbcore {
namespace testing {

// An entry whose input reads zeros (the fast path copies inputs of cached
// small allreduces into its payload), up to kZeroBytes.
constexpr size_t kZeroBytes = 1 << 16;
inline TensorEntry Entry(int rank, const std::string& name, Shape shape,
                         OpType op = OpType::kAllreduce) {
  static const std::vector<uint8_t> zeros(kZeroBytes, 0);
  TensorEntry e;
  e.input = zeros.data();
  e.request.rank = rank;
  e.request.name = name;
  e.request.op = op;
  e.request.shape = std::move(shape);
  e.enqueued = Clock::now();
  return e;
}

// Runs `body(rank, controller, comm)` on `size` threads.
inline void RunRanks(
    int size, Config config,
    const std::function<void(int, Controller*, FakeComm*)>& body) {
  auto exchange = std::make_shared<Exchange>(size);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < size; ++rank) {
    threads.emplace_back([&, rank] {
      FakeComm comm(exchange, rank, size);
      Controller controller(&comm, config);
      body(rank, &controller, &comm);
    });
  }
  for (std::thread& t : threads) t.join();
}

inline void RunRanks(int size, Config config,
                     const std::function<void(int, Controller*)>& body) {
  RunRanks(size, config,
           [&](int rank, Controller* c, FakeComm*) { body(rank, c); });
}

// One cycle; executed responses leave the table, as in the runtime.
inline CycleOutput Cycle(Controller* c, PendingTable* pending,
                         CycleInput input = CycleInput()) {
  CycleOutput out;
  Status s = c->RunCycle(pending, input, &out);
  CHECK(s.ok());
  for (size_t i = 0; i < out.responses.size(); ++i) {
    auto it = pending->find(out.responses[i].name);
    c->Commit(out, i, it == pending->end() ? nullptr : &it->second);
    if (it != pending->end()) pending->erase(it);
  }
  c->RevalidateSlots(pending);
  return out;
}

inline std::vector<std::string> Names(const CycleOutput& out) {
  std::vector<std::string> names;
  for (const Response& r : out.responses) names.push_back(r.name);
  return names;
}

}  // namespace testing
}  // namespace hbcore

#endif  // HBCORE_TESTS_NEGOTIATION_HARNESS_H_
