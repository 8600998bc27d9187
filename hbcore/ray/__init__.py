"""``hbcore.ray``: hbcore jobs on Ray actors, as ``horovod.ray``.

``RayExecutor(settings, num_workers=N)`` starts N actors that form one
hbcore job; ``run``/``execute`` call functions on all of them (runner.py).
Needs ray (``pip install "hbcore[ray]"``) and a Ray cluster
(``ray.init()``).
"""

from hbcore.ray.runner import MiniSettings, RayExecutor

__all__ = ["MiniSettings", "RayExecutor"]
