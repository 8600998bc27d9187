#include "negotiation/coordinator.h"

#include <algorithm>
#include <functional>
#include <sstream>

namespace hbcore {
namespace {

// Groups the ranks by the value `describe` gives their request; returns ""
// when all agree, else "rank 0 sent X; ranks 1, 2 sent Y" (global ranks).
std::string Disagreement(
    const ProcessSetInfo& set, const std::vector<Request>& requests,
    const std::function<std::string(const Request&)>& describe) {
  std::vector<std::pair<std::string, std::vector<int>>> groups;
  for (const Request& r : requests) {
    std::string value = describe(r);
    const int rank = set.GlobalRank(r.rank);
    auto it = std::find_if(groups.begin(), groups.end(),
                           [&](const auto& g) { return g.first == value; });
    if (it == groups.end()) {
      groups.push_back({value, {rank}});
    } else {
      it->second.push_back(rank);
    }
  }
  if (groups.size() <= 1) return "";
  std::ostringstream out;
  for (size_t i = 0; i < groups.size(); ++i) {
    if (i) out << "; ";
    out << RankList(groups[i].second) << " sent " << groups[i].first;
  }
  return out.str();
}

std::string TrailingDims(const Request& r) {
  Shape rest(r.shape.begin() + (r.shape.empty() ? 0 : 1), r.shape.end());
  return std::to_string(r.shape.size()) + "-d shape with trailing dimensions " +
         ShapeString(rest);
}

std::string Scales(const Request& r) {
  std::ostringstream out;
  out << "prescale " << r.prescale << ", postscale " << r.postscale;
  return out.str();
}

}  // namespace

Coordinator::Coordinator(int size)
    : Coordinator(ProcessSetInfo::Global(size)) {}

Coordinator::Coordinator(ProcessSetInfo set)
    : set_(std::move(set)), size_(set_.size()) {}

void Coordinator::Add(const RequestList& list, int rank) {
  for (const Request& r : list.requests) {
    if (r.op == OpType::kJoin) {
      joined_.insert(rank);
      last_joined_ = rank;
      if (static_cast<int>(joined_.size()) == size_) {
        Response done;
        done.op = OpType::kJoin;
        done.name = r.name;
        done.root_rank = last_joined_;
        joined_.clear();
        ready_.push_back(done);
      } else {
        // A join can complete tensors the joined rank never submits.
        std::vector<std::string> names = arrival_order_;
        for (const std::string& name : names) CompleteIfReady(name);
      }
      continue;
    }
    AddRequest(r);
  }
}

void Coordinator::AddRequest(const Request& request) {
  auto it = table_.find(request.name);
  if (it == table_.end()) {
    table_[request.name] = {request};
    arrival_order_.push_back(request.name);
  } else {
    it->second.push_back(request);
  }
  CompleteIfReady(request.name);
}

void Coordinator::CompleteIfReady(const std::string& name) {
  auto it = table_.find(name);
  if (it == table_.end()) return;
  int contributing = 0;
  for (const Request& r : it->second) {
    if (!joined_.count(r.rank)) ++contributing;
  }
  if (contributing < ActiveRanks() || it->second.empty()) return;
  std::vector<Request> requests = std::move(it->second);
  table_.erase(it);
  arrival_order_.erase(
      std::find(arrival_order_.begin(), arrival_order_.end(), name));
  std::sort(requests.begin(), requests.end(),
            [](const Request& a, const Request& b) { return a.rank < b.rank; });
  ready_.push_back(Validate(requests));
}

Response Coordinator::Validate(const std::vector<Request>& requests) const {
  const Request& first = requests.front();
  Response resp;
  resp.op = first.op;
  resp.name = first.name;
  resp.reduce_op = first.reduce_op;
  resp.dtype = first.dtype;
  resp.shape = first.shape;
  resp.root_rank = first.root_rank;
  resp.prescale = first.prescale;
  resp.postscale = first.postscale;
  resp.device = first.device;

  auto fail = [&](const std::string& what, const std::string& detail) {
    resp.error = "Mismatched " + what + " for tensor '" + first.name + "' (" +
                 OpTypeName(first.op) + ")" + set_.Suffix() + ": " + detail;
    resp.error_code = HB_ERR_MISMATCH;
    return resp;
  };
  std::string d;
  d = Disagreement(set_, requests, [](const Request& r) {
    return std::string(OpTypeName(r.op));
  });
  if (!d.empty()) return fail("operation", d);
  d = Disagreement(set_, requests, [](const Request& r) {
    return std::string(DataTypeName(r.dtype));
  });
  if (!d.empty()) return fail("data type", d);
  // Device kind only: each rank drives its own GPU, so ordinals differ.
  d = Disagreement(set_, requests, [](const Request& r) {
    return r.device == HB_DEVICE_CPU ? std::string("CPU") : std::string("GPU");
  });
  if (!d.empty()) return fail("device", d);

  auto full_shape = [](const Request& r) { return ShapeString(r.shape); };
  auto reduce = [](const Request& r) {
    return std::string(ReduceOpName(r.reduce_op));
  };
  switch (first.op) {
    case OpType::kAllreduce:
    case OpType::kReducescatter:
      if (!(d = Disagreement(set_, requests, full_shape)).empty()) {
        return fail("shape", d);
      }
      if (!(d = Disagreement(set_, requests, reduce)).empty()) {
        return fail("reduce op", d);
      }
      if (!(d = Disagreement(set_, requests, Scales)).empty()) {
        return fail("scale factors", d);
      }
      if (first.op == OpType::kReducescatter && !joined_.empty()) {
        resp.error = "reducescatter of tensor '" + first.name +
                     "' is not supported while " +
                     RankList({joined_.begin(), joined_.end()}) +
                     " joined";
        resp.error_code = HB_ERR_UNSUPPORTED;
      }
      break;
    case OpType::kBroadcast:
      if (!(d = Disagreement(set_, requests, [](const Request& r) {
             return "root rank " + std::to_string(r.root_rank);
           })).empty()) {
        return fail("root rank", d);
      }
      if (!(d = Disagreement(set_, requests, full_shape)).empty()) {
        return fail("shape", d);
      }
      // Front ends name the root by its global rank; the backend runs on
      // the set's communicator (runtime.cc checked it is a member).
      resp.root_rank = set_.SetRank(first.root_rank);
      if (joined_.count(first.root_rank)) {
        resp.error = "broadcast of tensor '" + first.name + "': root rank " +
                     std::to_string(first.root_rank) + " has joined";
        resp.error_code = HB_ERR_MISMATCH;
      }
      break;
    case OpType::kAllgather:
      if (!(d = Disagreement(set_, requests, TrailingDims)).empty()) {
        return fail("shape", d);
      }
      resp.rank_dims.assign(size_, 0);
      for (const Request& r : requests) {
        resp.rank_dims[r.rank] = r.shape.empty() ? 1 : r.shape[0];
      }
      break;
    case OpType::kAlltoall:
      if (!(d = Disagreement(set_, requests, TrailingDims)).empty()) {
        return fail("shape", d);
      }
      if (!joined_.empty()) {
        resp.error = "alltoall of tensor '" + first.name +
                     "' is not supported while " +
                     RankList({joined_.begin(), joined_.end()}) +
                     " joined";
        resp.error_code = HB_ERR_UNSUPPORTED;
        break;
      }
      resp.rank_dims.assign(static_cast<size_t>(size_) * size_, 0);
      for (const Request& r : requests) {
        std::copy(r.splits.begin(), r.splits.end(),
                  resp.rank_dims.begin() + static_cast<size_t>(r.rank) * size_);
      }
      break;
    case OpType::kBarrier:
    case OpType::kJoin:
      break;
    case OpType::kProcessSetAdd:
      return ValidateAdd(requests, resp);
    case OpType::kProcessSetRemove:
      if (!(d = Disagreement(set_, requests, [](const Request& r) {
             return "process set id " + std::to_string(r.root_rank);
           })).empty()) {
        return fail("process set", d);
      }
      break;
  }
  return resp;
}

Response Coordinator::ValidateAdd(const std::vector<Request>& requests,
                                  Response resp) const {
  // Ranks that know the members list them (in `splits`); a rank outside a
  // set defined by a communicator it does not belong to sends none. Every
  // list sent must be the same, and every member must send it.
  std::vector<Request> listing;
  for (const Request& r : requests) {
    if (!r.splits.empty()) listing.push_back(r);
  }
  auto fail = [&](const std::string& detail) {
    resp.error = "add_process_set: " + detail;
    resp.error_code = HB_ERR_MISMATCH;
    return resp;
  };
  if (listing.empty()) return fail("no rank named any member");
  std::string d = Disagreement(set_, listing, [](const Request& r) {
    std::vector<int64_t> sorted = r.splits;
    std::sort(sorted.begin(), sorted.end());
    return "members " + ShapeString(sorted);
  });
  if (!d.empty()) return fail("ranks disagree about the members: " + d);
  std::vector<int64_t> members = listing.front().splits;
  std::sort(members.begin(), members.end());
  for (const Request& r : requests) {
    const int rank = set_.GlobalRank(r.rank);
    const bool member =
        std::binary_search(members.begin(), members.end(), rank);
    if (member && r.splits.empty()) {
      return fail("rank " + std::to_string(rank) + " is one of the members " +
                  ShapeString(members) + " but did not name them");
    }
  }
  resp.rank_dims = members;
  return resp;
}

std::vector<Response> Coordinator::TakeResponses() {
  std::vector<Response> out;
  out.swap(ready_);
  return out;
}

std::vector<StallReport> Coordinator::FindStalls(
    const std::vector<RequestList>& lists) const {
  // name -> (ranks that have it, oldest age)
  std::map<std::string, std::pair<std::vector<int>, double>> seen;
  std::vector<std::string> order;
  for (size_t rank = 0; rank < lists.size(); ++rank) {
    const RequestList& l = lists[rank];
    for (size_t i = 0; i < l.pending_names.size(); ++i) {
      auto& entry = seen[l.pending_names[i]];
      if (entry.first.empty()) order.push_back(l.pending_names[i]);
      entry.first.push_back(static_cast<int>(rank));
      entry.second = std::max(entry.second, l.pending_ages[i]);
    }
  }
  std::vector<StallReport> out;
  for (const std::string& name : order) {
    const auto& entry = seen[name];
    StallReport report;
    for (int r = 0; r < size_; ++r) {
      bool has = std::find(entry.first.begin(), entry.first.end(), r) !=
                 entry.first.end();
      if (has) {
        report.ready_ranks.push_back(set_.GlobalRank(r));
      } else if (!joined_.count(r)) {
        report.missing_ranks.push_back(set_.GlobalRank(r));
      }
    }
    if (report.missing_ranks.empty()) continue;
    report.name = name;
    report.age_seconds = entry.second;
    out.push_back(report);
  }
  return out;
}

}  // namespace hbcore
