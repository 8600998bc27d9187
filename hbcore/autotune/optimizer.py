"""Rank 0's choice of the next parameters: Bayesian optimisation with
scikit-learn's Gaussian process and expected improvement, as Horovod's
autotuner does (its own C++ Gaussian process; hbcore uses the library).

The sequence, one proposal per closed sample:
  1. ``warmup`` samples of the starting parameters are discarded (the
     first steps of a job include graph building and first-touch costs).
  2. ``max_samples`` scored samples: the starting parameters first (so the
     defaults are always measured), then a few spread points (a fixed
     design), then the point of highest expected improvement under the
     Gaussian process fitted to every score so far.
  3. Then the final choice: the scored point with the highest posterior
     mean (not the single highest score: one lucky sample on a noisy host
     must not win), applied for the rest of the job.
"""
import warnings
from typing import List, Optional, Tuple

import numpy as np

from hbcore.autotune.space import Params, Space

# Spread points tried after the start point, before the model decides: the
# corners and centre of the continuous coordinates, switches alternating.
_DESIGN = ((0.5,), (0.15,), (0.85,))
# Candidates scored by expected improvement for each proposal.
_CANDIDATES = 2000


class BayesOptimizer:
    """Gaussian-process Bayesian optimisation over a :class:`Space`.

    Args:
        space: the tuned parameters.
        warmup: samples discarded before scoring
            (``HB_AUTOTUNE_WARMUP_SAMPLES``).
        max_samples: scored samples before the final choice
            (``HB_AUTOTUNE_BAYES_OPT_MAX_SAMPLES``).
        noise: the Gaussian process's noise level on normalised scores
            (``HB_AUTOTUNE_GAUSSIAN_PROCESS_NOISE``, scikit-learn's
            ``alpha``).
        seed: the candidates' random seed (rank 0 alone decides, so any
            seed is consistent; fixed for repeatable runs).
    """

    def __init__(self, space: Space, warmup: int, max_samples: int,
                 noise: float, seed: int = 0) -> None:
        self.space = space
        self.warmup_left = warmup
        self.max_samples = max_samples
        self.noise = noise
        self.rng = np.random.default_rng(seed)
        self.xs: List[List[float]] = []
        self.scores: List[float] = []
        self.params: List[Params] = []
        self.best: Optional[Params] = None

    @property
    def done(self) -> bool:
        """Whether the final choice was made."""
        return self.best is not None

    def observe(self, params: Params, score: float) -> Tuple[str, Params,
                                                            bool]:
        """Takes one closed sample and returns what to do next.

        Args:
            params: the parameters the sample measured.
            score: its bytes per second.

        Returns:
            (phase of this sample: ``"warmup"`` or ``"sample"``, the next
            parameters, whether they are final).
        """
        if self.warmup_left > 0:
            self.warmup_left -= 1
            return "warmup", dict(params), False
        self.xs.append(self.space.encode(params))
        self.scores.append(float(score))
        self.params.append(dict(params))
        if len(self.scores) >= self.max_samples or self.space.dims == 0:
            self.best = self._choose()
            return "sample", dict(self.best), True
        return "sample", self._next(), False

    def _design(self, k: int) -> Optional[List[float]]:
        if k >= len(_DESIGN):
            return None
        x = []
        for i, p in enumerate(self.space.tuned):
            if p.kind == "switch":
                x.append(float((k + i) % 2))
            else:
                x.append(_DESIGN[k][0])
        return x

    def _fit(self):
        # scikit-learn is an optional dependency (the "autotune" extra):
        # imported only when a job tunes.
        from sklearn.gaussian_process import GaussianProcessRegressor
        from sklearn.gaussian_process.kernels import ConstantKernel, Matern

        kernel = ConstantKernel(1.0, (1e-2, 1e2)) * Matern(
            length_scale=[0.3] * self.space.dims, length_scale_bounds=(
                0.05, 10.0), nu=2.5)
        gp = GaussianProcessRegressor(kernel=kernel, alpha=self.noise,
                                      normalize_y=True,
                                      n_restarts_optimizer=1,
                                      random_state=0)
        # A length scale at its bound on a few samples is expected, not a
        # problem to report on every rank 0's stderr.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            gp.fit(np.array(self.xs), np.array(self.scores))
        return gp

    def _next(self) -> Params:
        design = self._design(len(self.scores) - 1)
        if design is not None:
            return self.space.decode(design)
        from scipy.stats import norm  # with scikit-learn, as above

        gp = self._fit()
        cand = self.rng.random((_CANDIDATES, self.space.dims))
        # Switches take their two values only, so EI compares real points.
        for i, p in enumerate(self.space.tuned):
            if p.kind == "switch":
                cand[:, i] = np.round(cand[:, i])
        mean, std = gp.predict(cand, return_std=True)
        best = max(gp.predict(np.array(self.xs)))
        std = np.maximum(std, 1e-12)
        z = (mean - best) / std
        ei = (mean - best) * norm.cdf(z) + std * norm.pdf(z)
        return self.space.decode(cand[int(np.argmax(ei))])

    def _choose(self) -> Params:
        if len(self.scores) < 3 or self.space.dims == 0:
            return dict(self.params[int(np.argmax(self.scores))])
        mean = self._fit().predict(np.array(self.xs))
        return dict(self.params[int(np.argmax(mean))])

