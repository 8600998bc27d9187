"""Rank 0's tuner thread: reads each closed sample from the core, asks the
optimiser for the next parameters, proposes them, and logs.

The core measures and applies (csrc/core/src/runtime/autotune.h has the
protocol: rank 0 decides, one broadcast per sample carries the choice, every rank
applies it at the same cycle); this thread only decides, so the front end
that started the runtime (numpy hbcore, hbcore_tf) makes no difference.
It runs from :func:`hbcore.init` on rank 0 when ``HB_AUTOTUNE=1`` and ends
when tuning converged or the runtime stops.
"""
import logging
import threading
from typing import Dict, Optional

from hbcore._native import core
from hbcore.autotune.log import LogWriter
from hbcore.autotune.optimizer import BayesOptimizer
from hbcore.autotune.space import PARAMETERS, Space
from hbcore.exceptions import HbcoreError

logger = logging.getLogger("hbcore.autotune")

_thread: Optional[threading.Thread] = None
# What status() reports; written by the tuner thread only.
_status: Dict[str, object] = {"active": False, "samples": 0,
                              "converged": False, "params": None}
# How long one wait for a sample lasts before the thread checks again that
# the runtime still runs (the core's channel also wakes it at shutdown).
_POLL_SECONDS = 0.5


def settings() -> Dict[str, str]:
    """The runtime's autotune knobs as parsed by the core
    (``HB_AUTOTUNE``... from ``hbcore._core.config_string``)."""
    out = {}
    for line in core.config_string().splitlines():
        key, _, value = line.partition("=")
        if key.startswith("HB_AUTOTUNE"):
            out[key] = value
    return out


def check_available() -> None:
    """Raises ImportError when the optimiser's library is missing.

    Raises:
        ImportError: scikit-learn is not installed (the ``autotune``
            extra).
    """
    try:
        import sklearn.gaussian_process  # noqa: F401  (optional extra)
    except ImportError as e:
        raise ImportError("HB_AUTOTUNE=1 needs scikit-learn: pip install "
                          "'hbcore[autotune]' (%s)" % e) from e


def start() -> None:
    """Starts the tuner thread on rank 0 when ``HB_AUTOTUNE=1``.

    Raises:
        ImportError: as :func:`check_available`, on every rank (each rank
            checks, so none is left waiting for the others).
    """
    global _thread
    _status.update(active=False, samples=0, converged=False, params=None)
    conf = settings()
    if conf.get("HB_AUTOTUNE") != "1":
        return
    check_available()
    if core.rank() != 0:
        return
    start_params, mask = core.autotune_state()
    tunable = [p.name for p in PARAMETERS if mask & core.TUNE_BITS[p.name]]
    space = Space(start_params, tunable)
    optimizer = BayesOptimizer(
        space, int(conf["HB_AUTOTUNE_WARMUP_SAMPLES"]),
        int(conf["HB_AUTOTUNE_BAYES_OPT_MAX_SAMPLES"]),
        float(conf["HB_AUTOTUNE_GAUSSIAN_PROCESS_NOISE"]))
    log = LogWriter(conf.get("HB_AUTOTUNE_LOG") or None, tunable)
    _status.update(active=True, samples=0, converged=False,
                   params=dict(start_params))
    logger.info("autotune: tuning %s (fixed: the rest)",
                ", ".join(tunable) or "nothing")
    _thread = threading.Thread(target=_run, args=(optimizer, log),
                               name="hbcore-autotune", daemon=True)
    _thread.start()


def status() -> Dict[str, object]:
    """Rank 0's view of tuning: ``active`` (the tuner thread runs),
    ``samples`` (closed so far, warm-up included), ``converged`` and
    ``params`` (the last parameters proposed, the final ones once
    converged). Other ranks, and jobs without HB_AUTOTUNE, report
    inactive."""
    return dict(_status)


def join(timeout: float = 5.0) -> None:
    """Waits for the tuner thread to end (after the runtime stopped)."""
    global _thread
    if _thread is not None:
        _thread.join(timeout)
        _thread = None


def _run(optimizer: BayesOptimizer, log: LogWriter) -> None:
    sample = 0
    scored = []  # the sample number of each of optimizer.params
    try:
        while True:
            try:
                got = core.autotune_wait_sample(_POLL_SECONDS)
            except HbcoreError:  # the runtime stopped: no more samples
                return
            if got is None:
                continue
            params, score, seconds = got
            sample += 1
            phase, nxt, final = optimizer.observe(params, score)
            log.write(sample, phase, params, score, seconds)
            if phase == "sample":
                scored.append(sample)
            if final:
                # The best row names the sample that measured the choice.
                chosen = optimizer.params.index(nxt)
                log.write(scored[chosen], "best", nxt,
                          optimizer.scores[chosen], 0.0)
                logger.info("autotune converged after %d samples: %s",
                            sample, _pinning(nxt))
            try:
                core.autotune_propose(nxt, final)
            except HbcoreError:
                return
            _status.update(samples=sample, converged=final, params=nxt)
            if final:
                return
    finally:
        _status["active"] = False
        log.close()


def _pinning(params: Dict[str, object]) -> str:
    """The chosen values as the knobs that pin them."""
    return " ".join("%s=%s" % (k, int(v) if isinstance(v, bool) else v)
                    for k, v in params.items())
