"""``hbcore.run(fn, np=...)`` and ``python -m hbcore.run CMD...``.

``python -m hbcore.run python train.py --lr 0.1`` (HybridBackend style)
starts one worker per GPU listed in CUDA_VISIBLE_DEVICES (or
NVIDIA_VISIBLE_DEVICES), each with CUDA_VISIBLE_DEVICES narrowed to its own
device, or one worker when neither is set.  It takes hbrun's tuning and
output flags (``--timeline-filename``, ``--log-level``, ...) before the
command, and launches, reports failures and exits like hbrun.

With a ``TF_CONFIG`` naming a cluster (Kubernetes TFJob, PAI), the same
command started on every machine forms one job across the machines
(hbcore/launcher/tf_config_launch.py); ``HB_IGNORE_TF_CONFIG=1``
keeps it to this machine.

``run`` is implemented in hbcore/launcher/run_fn.py (see there why) and
re-exported here.
"""

import argparse
import os
import sys
import types
from typing import Any, List, Optional, Sequence

from hbcore.launcher.run_fn import run

__all__ = ["run", "main"]


def build_parser() -> argparse.ArgumentParser:
    """Builds the parser of ``python -m hbcore.run``.

    Returns:
        The parser; ``args.command`` holds the command and its own flags.
    """
    from hbcore.launcher.cli import (EPILOG, add_tf_config_flags,
                                     add_tuning_flags)
    parser = argparse.ArgumentParser(
        prog="python -m hbcore.run", allow_abbrev=False,
        epilog=EPILOG.format(prog="hbcore.run"),
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Launch one worker per visible GPU (CUDA_VISIBLE_DEVICES "
                    "or NVIDIA_VISIBLE_DEVICES; one worker when neither is "
                    "set), each seeing only its own GPU.")
    add_tuning_flags(parser)
    add_tf_config_flags(parser, always=True)
    parser.add_argument("command", nargs=argparse.REMAINDER,
                        help="the command each worker runs")
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point of ``python -m hbcore.run``.

    Args:
        argv: Arguments without the program name (default: sys.argv[1:]).

    Returns:
        The exit code: 0, or the first failing worker's code (see hbrun).
    """
    from hbcore.launcher.cli import run_job, use_tf_config, validate_common
    from hbcore.launcher.devices import worker_devices
    parser = build_parser()
    args = parser.parse_args(argv)
    validate_common(parser, args)
    if use_tf_config(parser, args, os.environ):
        from hbcore.launcher.cli import run_tf_config
        return run_tf_config(args, "hbcore.run")
    devices = worker_devices(os.environ)
    per_rank_env: Optional[List[dict]] = None
    if devices:
        per_rank_env = [{"CUDA_VISIBLE_DEVICES": device} for device in devices]
    return run_job(args, len(devices) if devices else 1, None, per_rank_env,
                   program="hbcore.run")


class _CallableModule(types.ModuleType):
    """Importing this module sets the package attribute ``hbcore.run`` to
    the module, over the function of that name: the module is callable
    as the function, so ``hbcore.run(fn, np=2)`` works either way."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return run(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule

if __name__ == "__main__":
    sys.exit(main())
