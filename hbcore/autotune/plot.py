"""A picture of an autotune log: each sample's score against each tuned
parameter, and the score sample by sample, with the chosen point marked.

Needs matplotlib (the ``autotune`` extra); it draws off screen (Agg).
"""
from typing import Dict, List

from hbcore.autotune.log import read_log

# The log column shown for each tuned parameter, its axis label and scale.
_AXES = {
    "fusion_threshold": ("tensor_fusion_threshold", "fusion threshold (MiB)",
                         "log"),
    "cycle_time": ("cycle_time_ms", "cycle time (ms)", "log"),
    "cache_enabled": ("cache_enabled", "response cache (0/1)", "linear"),
    "hierarchical_allreduce": ("hierarchical_allreduce",
                               "hierarchical allreduce (0/1)", "linear"),
    "hierarchical_allgather": ("hierarchical_allgather",
                               "hierarchical allgather (0/1)", "linear"),
    "ring_allreduce": ("ring_allreduce", "ring allreduce (0/1)", "linear"),
    "pipeline_piece_bytes": ("pipeline_piece_bytes",
                             "pipeline piece (bytes)", "log"),
}


def plot(log_file: str, out_png: str) -> None:
    """Draws ``log_file`` (an ``HB_AUTOTUNE_LOG``) into ``out_png``.

    One panel per tuned parameter (score against its value; warm-up samples
    hollow), one of score by sample; the chosen parameters (the ``best``
    row, or the best scored sample when the job ended before tuning
    converged) are a red star.

    Args:
        log_file: the CSV log.
        out_png: the picture to write.

    Raises:
        ValueError: ``log_file`` is not an autotune log, or has no sample.
        ImportError: matplotlib is not installed.
    """
    # matplotlib is an optional dependency (the "autotune" extra).
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = read_log(log_file)
    samples = [r for r in rows if r["phase"] in ("warmup", "sample")]
    if not samples:
        raise ValueError("%s holds no sample yet" % log_file)
    scored = [r for r in samples if r["phase"] == "sample"] or samples
    best = [r for r in rows if r["phase"] == "best"]
    chosen = best[0] if best else max(scored, key=lambda r: float(r["score"]))
    tuned = [t for t in samples[0]["tuned"].split("+") if t in _AXES]
    panels = len(tuned) + 1
    cols = min(3, panels)
    fig_rows = (panels + cols - 1) // cols
    fig, axes = plt.subplots(fig_rows, cols, squeeze=False,
                             figsize=(4.5 * cols, 3.6 * fig_rows))
    flat = [a for row in axes for a in row]
    top = max(float(r["score"]) for r in samples)
    per, unit = (1e9, "GB/s") if top >= 1e9 else (1e6, "MB/s")
    gb = lambda r: float(r["score"]) / per  # noqa: E731
    ylabel = "score (%s reduced)" % unit
    for ax, name in zip(flat, tuned):
        column, label, xscale = _AXES[name]
        _scatter(ax, samples, column, gb)
        ax.plot([float(chosen[column])], [gb(chosen)], "r*", markersize=16,
                label="chosen")
        ax.set_xscale(xscale)
        ax.set_xlabel(label)
        ax.set_ylabel(ylabel)
        ax.legend(loc="best", fontsize="small")
    ax = flat[len(tuned)]
    ax.plot([int(r["sample"]) for r in samples], [gb(r) for r in samples],
            "o-", color="tab:blue")
    ax.axhline(gb(chosen), color="r", linestyle="--", label="chosen")
    ax.set_xlabel("sample")
    ax.set_ylabel(ylabel)
    ax.set_title("converged" if best else "not converged (job ended)")
    ax.legend(loc="best", fontsize="small")
    for ax in flat[panels:]:
        ax.set_visible(False)
    fig.suptitle("hbcore autotune: %s" % log_file)
    fig.tight_layout()
    fig.savefig(out_png, dpi=90)
    plt.close(fig)


def _scatter(ax, samples: List[Dict[str, str]], column: str, gb) -> None:
    for phase, face in (("warmup", "none"), ("sample", "tab:blue")):
        rows = [r for r in samples if r["phase"] == phase]
        if rows:
            ax.scatter([float(r[column]) for r in rows], [gb(r) for r in rows],
                       facecolors=face, edgecolors="tab:blue", label=phase)
