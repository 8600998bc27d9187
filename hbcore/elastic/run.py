"""``hvd.elastic.run``: Horovod's retry loop, over generations of worlds.

Horovod re-forms the job inside the running processes.  hbcore cannot
(MPI keeps a dead peer in the communicator), so the loop spans processes:

1. Start of a process: ``state.sync()`` brings every rank to the job's
   newest commit (state.py).  In a generation after the first, the reset
   callbacks run first (``state.on_reset()``), as after Horovod's reset.
2. ``func(state)`` runs.  When it returns, the rank leaves its finished
   marker (elastic_protocol.py) and the value is returned.
3. A runtime failure (``ShutdownError``: a peer died or left the world,
   or ``WaitTimeoutError``) or a HostsUpdatedInterrupt ends this process
   with REFORM_EXIT_CODE; on HostsUpdatedInterrupt the current values are
   saved first (no rollback: the next generation goes on from them).
   hbrun's driver then starts the next generation (elastic/driver.py),
   whose step 1 restores the last commit.  Other errors propagate: they
   are bugs that a restart would repeat.
   When the failure is the core's stall shutdown (ranks that never
   submitted a tensor the others wait for: stuck in their own code), the
   rank first leaves the stalled marker naming them (elastic_protocol.py),
   so that the driver counts them as failed and blacklists their hosts.
Outside hbrun's elastic driver, step 3 re-raises (nothing can re-form).
"""

import functools
import json
import os
import re
import sys
from typing import Any, Callable, List

from hbcore.exceptions import (HostsUpdatedInterrupt, ShutdownError,
                               WaitTimeoutError)
from hbcore.elastic.state import State
from hbcore.launcher.rank.elastic_protocol import (GENERATION_VAR,
                                                   REFORM_EXIT_CODE, STORE_VAR,
                                                   finished_path, stalled_path)
from hbcore.basics import exit_without_finalize
from hbcore.basics import rank as hb_rank

# Failures of the world rather than of this rank's program.
_WORLD_FAILURES = (ShutdownError, WaitTimeoutError)
# The core's stall shutdown (csrc/core/src/negotiation/stall_inspector.cc):
# "stalled tensor 'NAME' ... was submitted by rank(s) A, B N s ago but not
# yet by rank(s) C, D: ..." (global ranks).
_STALLED = re.compile(r"\bstalled tensor .* but not yet by rank\(s\) "
                      r"(\d+(?:, \d+)*):")


def stalled_ranks(reason: BaseException) -> List[int]:
    """The ranks a stall shutdown found stuck (see the module comment).

    Args:
        reason: The error that ends this rank's world.

    Returns:
        The ranks that never submitted the stalled tensor, or [] when
        ``reason`` is not the core's stall shutdown.
    """
    if not isinstance(reason, ShutdownError):
        return []
    match = _STALLED.search(str(reason))
    if match is None:
        return []
    return [int(r) for r in match.group(1).split(", ")]


def _reform(reason: BaseException) -> None:
    stalled = stalled_ranks(reason)
    if stalled:
        try:
            with open(stalled_path(os.environ[STORE_VAR],
                                   int(os.environ[GENERATION_VAR]),
                                   hb_rank()), "w") as f:
                json.dump(stalled, f)
        except OSError:
            pass  # the driver then re-forms on every host, as before
    sys.stderr.write("hbcore.elastic: rank %d leaves generation %s to "
                     "re-form the job: %s: %s\n"
                     % (hb_rank(), os.environ.get(GENERATION_VAR),
                        type(reason).__name__, reason))
    # Not sys.exit: MPI_Finalize would wait for every peer to finalize
    # too, and one that hangs (its process running, stuck outside the
    # collectives) never does, so the driver would never see this rank
    # leave.  What the next generation needs is in the store already.
    exit_without_finalize(REFORM_EXIT_CODE)


def run(func: Callable[..., Any]) -> Callable[..., Any]:
    """Decorates a training function ``func(state, ...)`` for elastic
    training (see the module comment).

    Args:
        func: Takes a State first; runs training from the state's values.

    Returns:
        The wrapped function, called as ``func(state, *args, **kwargs)``.

    Raises:
        HostsUpdatedInterrupt, ShutdownError, WaitTimeoutError: Outside
            hbrun's elastic driver.  Under it the process exits with
            REFORM_EXIT_CODE instead (os._exit: see _reform).
    """
    @functools.wraps(func)
    def wrapper(state: State, *args: Any, **kwargs: Any) -> Any:
        elastic = bool(os.environ.get(GENERATION_VAR))
        if int(os.environ.get(GENERATION_VAR) or 0) > 0:
            state.on_reset()
        state.sync()
        try:
            result = func(state, *args, **kwargs)
        except HostsUpdatedInterrupt as exc:
            if not elastic:
                raise
            state.save()
            _reform(exc)
        except _WORLD_FAILURES as exc:
            if not elastic:
                raise
            _reform(exc)
        if elastic:
            # This rank finished: its exit 0 is not a worker leaving early.
            open(finished_path(os.environ[STORE_VAR],
                               int(os.environ[GENERATION_VAR]),
                               hb_rank()), "w").close()
        return result
    return wrapper
