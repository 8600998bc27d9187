"""The parameters autotune may change, and their coordinates for the
optimiser.

Every parameter is one coordinate in [0, 1]: sizes and times on a log scale
(a fusion threshold of 64 KiB and of 128 KiB differ as much as 64 MiB and
128 MiB do), switches as 0 / 1 (``>= 0.5`` is on). Only the parameters the
core reports as tunable (``hbcore._core.autotune_state``: they apply to the
job's layout and were not set explicitly) get a coordinate; the others keep
the value the job started with.
"""
import math
from typing import Dict, List, Mapping, NamedTuple, Optional, Sequence

Params = Dict[str, object]


class Parameter(NamedTuple):
    """One tunable parameter.

    Attributes:
        name: the knob that pins it (``fusion_threshold``...), also its key
            in the core's parameter dicts.
        kind: ``"log"`` (a size or time between ``low`` and ``high``) or
            ``"switch"`` (on / off).
        low, high: the range of a ``"log"`` parameter.
        integer: its values are whole numbers (bytes).
    """

    name: str
    kind: str
    low: float = 0.0
    high: float = 1.0
    integer: bool = False


# In the core's order (hb_tuning, c_api.h). The ranges bracket the
# defaults: fusion 128 MiB, cycle time 1 ms, pipeline pieces 4 MiB.
PARAMETERS = (
    Parameter("fusion_threshold", "log", 64 * 1024, 256 * 1024 * 1024, True),
    Parameter("cycle_time", "log", 0.1, 10.0),
    Parameter("cache_enabled", "switch"),
    Parameter("hierarchical_allreduce", "switch"),
    Parameter("hierarchical_allgather", "switch"),
    Parameter("ring_allreduce", "switch"),
    Parameter("pipeline_piece_bytes", "log", 256 * 1024, 64 * 1024 * 1024,
              True),
)


class Space:
    """The tuned parameters of one job and the fixed values of the rest.

    Args:
        start: the parameters in force when tuning starts (every key of
            :data:`PARAMETERS`).
        tunable: names of the parameters that may change.
    """

    def __init__(self, start: Mapping[str, object],
                 tunable: Sequence[str]) -> None:
        self.start: Params = dict(start)
        self.tuned: List[Parameter] = [p for p in PARAMETERS
                                       if p.name in set(tunable)]

    @property
    def dims(self) -> int:
        """How many coordinates a point has."""
        return len(self.tuned)

    def encode(self, params: Mapping[str, object]) -> List[float]:
        """The coordinates of ``params`` (values outside a range clip)."""
        out = []
        for p in self.tuned:
            v = params[p.name]
            if p.kind == "switch":
                out.append(1.0 if v else 0.0)
                continue
            v = float(v)
            if v <= 0:  # "the backend's own" piece: its default, 4 MiB
                v = 4 * 1024 * 1024
            x = (math.log(v) - math.log(p.low)) / (math.log(p.high) -
                                                   math.log(p.low))
            out.append(min(1.0, max(0.0, x)))
        return out

    def decode(self, x: Sequence[float],
               base: Optional[Mapping[str, object]] = None) -> Params:
        """The parameters at coordinates ``x``, the untuned ones from
        ``base`` (default: the start values)."""
        params = dict(self.start if base is None else base)
        for p, xi in zip(self.tuned, x):
            xi = min(1.0, max(0.0, float(xi)))
            if p.kind == "switch":
                params[p.name] = xi >= 0.5
                continue
            v = math.exp(math.log(p.low) + xi * (math.log(p.high) -
                                                 math.log(p.low)))
            # Sizes to whole KiB, times to 3 significant digits: values a
            # person can pin, and repeatable across samples.
            params[p.name] = (int(round(v / 1024.0)) * 1024 if p.integer
                              else float("%.3g" % v))
        return params
