// The runtime's part of autotune (the protocol is in autotune.h): the
// starting parameters, applying an agreed proposal between cycles, and rank
// 0's sampling of executed collectives.
#include "hbcore/c_api.h"
#include "common/logging.h"
#include "negotiation/fusion.h"
#include "runtime/runtime.h"

namespace hbcore {

void Runtime::StartAutotune() {
  const Topology& topo = transport_->topology();
  Tuning& t = tuning_;
  t.fusion_threshold_bytes = config_.fusion_threshold_bytes;
  t.cycle_time_ms = config_.cycle_time_ms;
  t.cache_enabled = config_.cache_capacity > 0;
  t.hierarchical_allreduce = topo.hierarchical_allreduce;
  t.hierarchical_allgather = topo.hierarchical_allgather;
  t.ring_allreduce = topo.ring_allreduce;
  t.pipeline_piece_bytes = config_.pipeline_piece_bytes;
  start_tuning_ = t;
  // What the tuner may change: what the user did not set, where the layout
  // gives the parameter a meaning. Switches apply only to paths the
  // transport built (the tuner can turn them off and on again); pipeline
  // pieces only where fused batches go through the pipeline, between hosts.
  auto free = [&](const char* knob) {
    return config_.explicit_knobs.count(knob) == 0;
  };
  unsigned mask = 0;
  if (free("fusion_threshold")) mask |= HB_TUNE_FUSION_THRESHOLD;
  if (free("cycle_time")) mask |= HB_TUNE_CYCLE_TIME;
  if (free("cache_capacity") && config_.cache_capacity > 0) {
    mask |= HB_TUNE_CACHE_ENABLED;
  }
  if (free("hierarchical_allreduce") && topo.hierarchical_allreduce) {
    mask |= HB_TUNE_HIERARCHICAL_ALLREDUCE;
  }
  if (free("hierarchical_allgather") && topo.hierarchical_allgather) {
    mask |= HB_TUNE_HIERARCHICAL_ALLGATHER;
  }
  if (free("ring_allreduce") && topo.ring_allreduce) {
    mask |= HB_TUNE_RING_ALLREDUCE;
  }
  if (free("pipeline_piece_bytes") && topo.cross_size > 1) {
    mask |= HB_TUNE_PIPELINE_PIECE_BYTES;
  }
  tunable_mask_ = mask;
  if (config_.autotune && topo.rank == 0) {
    autotune_ = std::make_shared<AutotuneChannel>();
    sampler_ = std::make_unique<AutotuneSampler>(
        config_.autotune_steps_per_sample);
    sampler_->Start(tuning_);
  }
}

void Runtime::TuneBackends(SetState* set) {
  BackendTuning b;
  b.hierarchical_allreduce = tuning_.hierarchical_allreduce;
  b.hierarchical_allgather = tuning_.hierarchical_allgather;
  b.ring_allreduce = tuning_.ring_allreduce;
  b.piece_bytes = tuning_.pipeline_piece_bytes;
  Backend* cpu = set == global_ || set->group == nullptr
                     ? transport_->cpu_backend()
                     : set->group->cpu_backend();
  cpu->Tune(b);
  if (set->gpu_backend) set->gpu_backend->Tune(b);
}

void Runtime::ApplyTuning(const std::string& proposal, uint64_t cycle) {
  Tuning t;
  bool final = false;
  HB_CHECK(DecodeProposal(proposal, &t, &final),
           "malformed autotune proposal '" << proposal << "'");
  tuning_ = t;
  for (auto& kv : sets_) {
    SetState& set = *kv.second;
    if (!set.member()) continue;
    TuneBackends(&set);
    if (set.controller->SetCacheEnabled(t.cache_enabled, &set.pending)) {
      force_cycle_ = true;
    }
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    tuning_history_.emplace_back(cycle, t);
  }
  HB_LOG(kDebug, "autotune: cycle " << cycle << " applies " << t.ToString());
  if (!sampler_) return;
  if (final) {
    sampler_->Stop();
    HB_LOG(kInfo, "autotune converged; pin these values with their knobs: "
                      << t.ToString());
  } else {
    sampler_->Start(t);
  }
}

void Runtime::RecordForAutotune(const Response& response) {
  AutotuneSample sample;
  if (sampler_->Record(response, ResponseBytes(response), &sample)) {
    autotune_->Publish(sample);
  }
}

Tuning Runtime::CurrentTuning() {
  std::lock_guard<std::mutex> lock(mu_);
  return tuning_history_.empty() ? start_tuning_
                                 : tuning_history_.back().second;
}

Status Runtime::ProposeTuning(const Tuning& tuning, bool final) {
  if (!autotune_) {
    return Status::InvalidArgument(
        "autotune proposals are taken only on rank 0 with HB_AUTOTUNE=1");
  }
  autotune_->Propose(tuning, final);
  {
    std::lock_guard<std::mutex> lock(mu_);
    tuning_proposed_ = true;
  }
  cv_.notify_one();
  return Status::OK();
}

std::vector<std::pair<uint64_t, Tuning>> Runtime::TuningHistory() {
  std::lock_guard<std::mutex> lock(mu_);
  return tuning_history_;
}

}  // namespace hbcore
