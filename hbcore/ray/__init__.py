"""``hbcore.ray``: hbcore jobs on Ray actors, as ``horovod.ray``.

``RayExecutor(settings, num_workers=N)`` starts N actors that form one
hbcore job; ``run``/``execute`` call functions on all of them (runner.py).
Needs ray (``pip install "hbcore[ray]"``) and a Ray cluster
(``ray.init()``). ``ElasticRayExecutor`` runs an elastic job over the
cluster's nodes (elastic.py).
"""

from hbcore.ray.elastic import ElasticRayExecutor, RayHostDiscovery
from hbcore.ray.runner import MiniSettings, RayExecutor

__all__ = ["ElasticRayExecutor", "MiniSettings", "RayExecutor",
           "RayHostDiscovery"]
