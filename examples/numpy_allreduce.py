"""The smallest hbcore job: every rank contributes its rank, all agree.

    hbrun -np 4 python examples/numpy_allreduce.py
"""
import numpy as np

import hbcore as hb


def main() -> None:
    hb.init()
    rank, size = hb.rank(), hb.size()
    x = np.full(1000, rank, np.float32)
    total = hb.allreduce(x, op=hb.Sum, name="x")
    expected = size * (size - 1) / 2
    assert np.all(total == expected), (total[:4], expected)
    mean = hb.allreduce(x, name="x.mean")  # Average is the default
    gathered = hb.allgather(np.full((rank + 1, 2), rank, np.int32), name="rows")
    print("rank %d/%d: sum=%g mean=%g gathered rows per rank=%s"
          % (rank, size, total[0], mean[0],
             np.bincount(gathered[:, 0], minlength=size).tolist()))
    hb.shutdown()


if __name__ == "__main__":
    main()
