// hbcore._core's autotune functions: the C API's hb_autotune_* with the
// parameters as dicts keyed by the knobs' names (hbcore/autotune/ drives
// them from rank 0's tuner thread).
#include <pybind11/stl.h>

#include <vector>

#include "common.h"
#include "hbcore/c_api.h"

namespace hbcore_py {
namespace {

py::dict ToDict(const hb_tuning& t) {
  py::dict d;
  d["fusion_threshold"] = t.fusion_threshold;
  d["cycle_time"] = t.cycle_time;
  d["cache_enabled"] = t.cache_enabled != 0;
  d["hierarchical_allreduce"] = t.hierarchical_allreduce != 0;
  d["hierarchical_allgather"] = t.hierarchical_allgather != 0;
  d["ring_allreduce"] = t.ring_allreduce != 0;
  d["pipeline_piece_bytes"] = t.pipeline_piece_bytes;
  return d;
}

hb_tuning FromDict(const py::dict& d) {
  hb_tuning t;
  t.fusion_threshold = d["fusion_threshold"].cast<int64_t>();
  t.cycle_time = d["cycle_time"].cast<double>();
  t.cache_enabled = d["cache_enabled"].cast<bool>() ? 1 : 0;
  t.hierarchical_allreduce = d["hierarchical_allreduce"].cast<bool>() ? 1 : 0;
  t.hierarchical_allgather = d["hierarchical_allgather"].cast<bool>() ? 1 : 0;
  t.ring_allreduce = d["ring_allreduce"].cast<bool>() ? 1 : 0;
  t.pipeline_piece_bytes = d["pipeline_piece_bytes"].cast<int64_t>();
  return t;
}

}  // namespace

void RegisterAutotune(py::module_& m) {
  m.attr("TUNE_BITS") = py::dict(
      py::arg("fusion_threshold") = int{HB_TUNE_FUSION_THRESHOLD},
      py::arg("cycle_time") = int{HB_TUNE_CYCLE_TIME},
      py::arg("cache_enabled") = int{HB_TUNE_CACHE_ENABLED},
      py::arg("hierarchical_allreduce") = int{HB_TUNE_HIERARCHICAL_ALLREDUCE},
      py::arg("hierarchical_allgather") = int{HB_TUNE_HIERARCHICAL_ALLGATHER},
      py::arg("ring_allreduce") = int{HB_TUNE_RING_ALLREDUCE},
      py::arg("pipeline_piece_bytes") = int{HB_TUNE_PIPELINE_PIECE_BYTES});
  m.def(
      "autotune_state",
      [] {
        hb_tuning t;
        unsigned mask = 0;
        const int code = hb_autotune_state(&t, &mask);
        if (code != HB_OK) RaiseFor(code, "hbcore has not been initialized");
        return py::make_tuple(ToDict(t), mask);
      },
      "autotune_state() -> (params: dict, tunable: int bit mask)");
  m.def(
      "autotune_wait_sample",
      [](double timeout_s) -> py::object {
        int got = 0;
        hb_tuning t;
        double score = 0, seconds = 0;
        char err[512] = {0};
        int code;
        {
          py::gil_scoped_release release;
          code = hb_autotune_wait_sample(timeout_s, &got, &t, &score,
                                         &seconds, err, sizeof(err));
        }
        if (code != HB_OK) RaiseFor(code, err);
        if (!got) return py::none();
        return py::make_tuple(ToDict(t), score, seconds);
      },
      py::arg("timeout_s"),
      "autotune_wait_sample(timeout_s) -> (params, score, seconds) or None "
      "on timeout; ShutdownError once the runtime stopped");
  m.def(
      "autotune_propose",
      [](const py::dict& params, bool final) {
        const hb_tuning t = FromDict(params);
        char err[512] = {0};
        const int code = hb_autotune_propose(&t, final ? 1 : 0, err,
                                             sizeof(err));
        if (code != HB_OK) RaiseFor(code, err);
      },
      py::arg("params"), py::arg("final"));
  m.def(
      "autotune_history",
      [] {
        const int n = hb_autotune_history(nullptr, nullptr, 0);
        std::vector<int64_t> cycles(n);
        std::vector<hb_tuning> applied(n);
        const int m2 = hb_autotune_history(cycles.data(), applied.data(), n);
        py::list out;
        for (int i = 0; i < std::min(n, m2); ++i) {
          out.append(py::make_tuple(cycles[i], ToDict(applied[i])));
        }
        return out;
      },
      "autotune_history() -> [(cycle, params)]: the proposals this rank "
      "applied, in order");
}

}  // namespace hbcore_py
