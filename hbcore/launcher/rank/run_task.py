"""Rank side of ``hbcore.run(fn)``: ``python run_task.py WORKDIR``.

Reads ``WORKDIR/fn.pkl`` (the caller's sys.path, then the cloudpickled
``(fn, args, kwargs)``), runs ``fn(*args, **kwargs)`` and writes
``WORKDIR/result.<rank>.pkl``: ``("ok", value)`` or ``("error", info)`` with
the exception type, message and formatted traceback.  A rank whose fn
raises exits with code 1, so the launcher stops the other ranks (which may
be waiting for it in a collective).

It does not call ``hbcore.init()``: the user's fn does that.  Like the rank
wrapper it is run by path, so the ``hbcore`` package (and the native core)
is imported only if the fn itself uses it.
"""

import os
import pickle
import sys
import time
import traceback
from typing import Any, List, Optional, Tuple

FN_FILE = "fn.pkl"


def result_file(workdir: str, rank: int,
                generation: Optional[str] = None) -> str:
    """Returns the path of a rank's result file.

    Args:
        workdir: The work directory of the ``hbcore.run`` call.
        rank: The rank whose result it holds.
        generation: Under hbrun's elastic driver, the rank's generation
            (HB_ELASTIC_GENERATION; elastic/run_fn.py).

    Returns:
        ``workdir/result.<rank>.pkl``, or ``result.<generation>.<rank>.pkl``.
    """
    if generation:
        return os.path.join(workdir, "result.%s.%d.pkl" % (generation, rank))
    return os.path.join(workdir, "result.%d.pkl" % rank)


def _rank() -> int:
    for name in ("PMI_RANK", "PMIX_RANK", "OMPI_COMM_WORLD_RANK"):
        if os.environ.get(name, "").isdigit():
            return int(os.environ[name])
    return 0


def use_caller_path(caller_path: List[str]) -> None:
    """Puts the caller's sys.path first, this directory out."""
    # Run by path, sys.path[0] is this directory; its modules (cli, output,
    # ...) must not shadow the user's.  Then put the caller's path first,
    # so functions pickled by reference import from where the caller did.
    here = os.path.dirname(os.path.abspath(__file__))
    own = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    sys.path[:] = list(caller_path) + [p for p in own if p not in caller_path]


def error_outcome(exc: BaseException, what: str, skip_frame: bool = False
                  ) -> Tuple[str, dict]:
    """``("error", info)`` for an exception: its type, message, traceback
    (from the user's frame on when ``skip_frame``) and when it was caught
    (``time``, seconds since the epoch: the earliest error of a job is its
    cause, the others often its consequence)."""
    tb = exc.__traceback__
    if skip_frame and tb is not None:
        tb = tb.tb_next  # start the traceback in the user's fn, not in _run
    return ("error", {
        "type": type(exc).__name__,
        "message": "%s%s" % (what, exc),
        "traceback": "".join(traceback.format_exception(type(exc), exc, tb)),
        "time": time.time(),
    })


def _run(workdir: str) -> Tuple[str, Any]:
    with open(os.path.join(workdir, FN_FILE), "rb") as f:
        use_caller_path(pickle.load(f))
        try:
            fn, args, kwargs = pickle.load(f)
        except Exception as exc:
            return error_outcome(exc, "cannot unpickle the function: ")
    try:
        return ("ok", fn(*args, **kwargs))
    except Exception as exc:
        return error_outcome(exc, "", skip_frame=True)


def _write(path: str, outcome: Tuple[str, Any]) -> None:
    import cloudpickle  # values may be lambdas or local classes
    try:
        data = cloudpickle.dumps(outcome)
    except Exception as exc:
        data = cloudpickle.dumps(error_outcome(exc,
                                               "cannot pickle the result: "))
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)  # the caller never sees half a file


def main(argv: Optional[List[str]] = None) -> int:
    """Runs this rank's share of ``hbcore.run``.

    Args:
        argv: ``[WORKDIR]`` (default: sys.argv[1:]).

    Returns:
        0 if the fn returned, 1 if it raised.
    """
    argv = sys.argv[1:] if argv is None else argv
    workdir = argv[0]
    outcome = _run(workdir)
    _write(result_file(workdir, _rank(),
                       os.environ.get("HB_ELASTIC_GENERATION")), outcome)
    if outcome[0] == "error":
        sys.stderr.write(outcome[1]["traceback"])
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
