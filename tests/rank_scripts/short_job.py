"""Rank script: the shortest useful job. One 4 MB float32 Sum allreduce
of ones; reports element 0 of the result (the number of ranks)."""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import env_rank, report  # noqa: E402

import hbcore as hb  # noqa: E402


def main() -> None:
    hb.init()
    out = hb.allreduce(np.ones(1 << 20, np.float32), op=hb.Sum, name="x")
    if not np.all(out == out[0]):
        raise AssertionError("allreduce result is not uniform")
    report({"value": float(out[0])}, env_rank())
    hb.shutdown()


if __name__ == "__main__":
    main()
