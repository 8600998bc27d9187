// A request as this rank holds it: the negotiated part (Request) plus the
// local buffers and callbacks, and the negotiation state that the background
// thread keeps for it.
#ifndef HBCORE_NEGOTIATION_TENSOR_ENTRY_H_
#define HBCORE_NEGOTIATION_TENSOR_ENTRY_H_

#include <chrono>
#include <memory>

#include "hbcore/c_api.h"
#include "negotiation/message.h"

namespace hbcore {

using Clock = std::chrono::steady_clock;

struct TensorEntry {
  Request request;
  const void* input = nullptr;
  void* output = nullptr;
  hb_alloc_fn alloc = nullptr;
  hb_done_fn done = nullptr;
  void* user = nullptr;
  // The process set it runs over (hb_request::process_set_id); request.rank
  // is this rank's rank in that set.
  int process_set_id = 0;
  // GPU requests: the event the backend waits for before reading `input`
  // (the front end's, or `own_event`, recorded on its stream at enqueue).
  void* ready_event = nullptr;
  std::shared_ptr<void> own_event;
  Clock::time_point enqueued;

  // Background-thread state. `announced`: the other ranks were told about
  // this entry (by its cache bit or through the coordinator). `cache_slot`:
  // the slot whose bit this entry sets each cycle, or -1.
  bool announced = false;
  int cache_slot = -1;
};

}  // namespace hbcore

#endif  // HBCORE_NEGOTIATION_TENSOR_ENTRY_H_
