"""One worker per visible GPU, for ``python -m hbcore.run`` (HybridBackend
style): which device each worker gets."""

import glob
import os
from typing import List, Mapping, Optional

# NVIDIA_VISIBLE_DEVICES values that list no device.
_NO_DEVICES = ("", "none", "void")


def _split(value: str) -> List[str]:
    return [item.strip() for item in value.split(",") if item.strip()]


def worker_devices(environ: Optional[Mapping[str, str]] = None,
                   dev_glob: str = "/dev/nvidia[0-9]*") -> Optional[List[str]]:
    """Returns the CUDA_VISIBLE_DEVICES value for each worker.

    CUDA_VISIBLE_DEVICES wins: ``"0,1"`` gives workers ``["0", "1"]``.
    Otherwise NVIDIA_VISIBLE_DEVICES (set by the NVIDIA container runtime)
    is used.  Inside such a container the listed GPUs are renumbered from
    0, so worker i gets device ``"i"``, not the host id listed; ``all``
    counts the ``/dev/nvidiaN`` nodes.  With neither variable set, every
    GPU of the machine is visible: one worker per ``/dev/nvidiaN`` node.

    Args:
        environ: Environment to read (default: os.environ).
        dev_glob: Pattern of GPU device nodes, for ``all``.

    Returns:
        One device string per worker, or None for a single worker that
        keeps the environment as it is (no GPU, an empty list, ``-1``,
        ``none``/``void``).
    """
    environ = os.environ if environ is None else environ
    cuda = environ.get("CUDA_VISIBLE_DEVICES")
    if cuda is not None:
        devices = _split(cuda)
        # CUDA ignores everything from the first invalid id on; "-1" is the
        # usual way to hide all GPUs.
        if not devices or devices[0].startswith("-"):
            return None
        return devices
    nvidia = environ.get("NVIDIA_VISIBLE_DEVICES")
    if nvidia is not None and nvidia.strip().lower() in _NO_DEVICES:
        return None
    if nvidia is None or nvidia.strip().lower() == "all":
        count = len(glob.glob(dev_glob))
    else:
        count = len(_split(nvidia))
    return [str(index) for index in range(count)] or None
