"""Rank side of a hosted rank: ``python rank_server.py`` under hydra.

Spark tasks and Ray actors are processes that someone else started; they
cannot become MPI ranks themselves (hydra's proxy starts the ranks). So
each of them hosts one rank (manual/hosted_rank.py): it starts its
proxy, the proxy starts this server as the rank, and the server connects
back to its host and runs the functions the host sends, in this one
process, so state (``hbcore.init()``, a model, an executable object) lives
from one call to the next as it does in a Horovod Ray actor.

Protocol (hbcore's authenticated wire, wire.py, context ``rank-host``,
to the host's address in ``HB_RANK_HOST_ADDRESS`` with the hex key in
``HB_RANK_HOST_KEY``; every message one frame holding a cloudpickled
object, which each side unpickles only because the wire authenticated its
peer, the rank's own host, first):

1. Host -> rank: a call ``(sys_path, fn, args, kwargs, mode)`` with mode
   ``"call"`` (run ``fn(*args, **kwargs)``), ``"executable"`` (run
   ``fn(executable, *args, **kwargs)``) or ``"make-executable"`` (the
   result becomes the executable, nothing is returned but ``None``); or
   ``None``, which ends the server with exit code 0.
2. Rank -> host: ``("ok", value)`` or ``("error", info)`` (run_task.py's
   outcomes). After an error the server exits with code 1: the others may
   wait for this rank in a collective, and the supervisor's first-failure
   teardown is what frees them.

Run by path like the rank wrapper, so nothing of hbcore is imported unless
the user's function imports it.
"""

import os
import sys
from typing import Any, Optional, Tuple

if __package__:
    from hbcore.launcher.rank import wire
    from hbcore.launcher.rank.run_task import error_outcome, use_caller_path
else:  # run by path: sys.path[0] is this directory
    import wire  # type: ignore
    from run_task import error_outcome, use_caller_path  # type: ignore

ADDRESS_VAR = "HB_RANK_HOST_ADDRESS"
KEY_VAR = "HB_RANK_HOST_KEY"
CONTEXT = "rank-host"
MODES = ("call", "executable", "make-executable")
# The largest call or result: a bound against a broken stream only (the
# peer authenticated), so a user's large arguments still pass.
MAX_CALL = 1 << 36


class _Server:
    """Runs calls; holds the executable between them."""

    def __init__(self) -> None:
        self.executable: Any = None

    def run(self, call: tuple) -> Tuple[str, Any]:
        path, fn, args, kwargs, mode = call
        use_caller_path(path)
        try:
            if mode == "executable":
                return ("ok", fn(self.executable, *args, **kwargs))
            value = fn(*args, **kwargs)
            if mode == "make-executable":
                self.executable = value
                return ("ok", None)
            return ("ok", value)
        except Exception as exc:
            return error_outcome(exc, "", skip_frame=True)


def main(argv: Optional[list] = None) -> int:
    """Serves the host's calls until it says stop.

    Args:
        argv: Unused (the address comes from the environment).

    Returns:
        0 when the host ended the server, 1 after a failed call.
    """
    import cloudpickle  # functions and values may be lambdas
    host, _, port = os.environ[ADDRESS_VAR].rpartition(":")
    connection = wire.connect((host, int(port)),
                              bytes.fromhex(os.environ[KEY_VAR]), CONTEXT,
                              name="rank", max_frame=MAX_CALL)
    server = _Server()
    while True:
        try:
            data = connection.receive_bytes()
        except OSError:
            data = None
        if data is None:
            return 1  # the host went away; its member ends the job
        try:
            call = cloudpickle.loads(data)  # from the authenticated host
        except Exception as exc:
            outcome = error_outcome(exc, "cannot unpickle the function: ")
        else:
            if call is None:
                return 0
            outcome = server.run(call)
        try:
            reply = cloudpickle.dumps(outcome)
        except Exception as exc:
            outcome = error_outcome(exc, "cannot pickle the result: ")
            reply = cloudpickle.dumps(outcome)
        connection.send_bytes(reply)
        if outcome[0] == "error":
            sys.stderr.write(outcome[1]["traceback"])
            sys.stderr.flush()
            return 1


if __name__ == "__main__":
    sys.exit(main())
