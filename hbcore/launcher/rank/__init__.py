"""Code that runs on every rank's machine, inside or beside a rank.

The scripts here are started by path (``python .../rank_wrapper.py``) by
hydra's proxies, where hbcore may not be importable: they use the standard
library and each other only, importing each other as siblings when run by
path (``if __package__``), and nothing else of hbcore (a contract in
pyproject.toml). The launcher imports them as modules to share their
protocols (the status line, the elastic variables, the wire).

Modules:
    rank_wrapper     runs a rank's command, forwards signals, reports how
                     it ended (hbrun's and every placed job's ranks)
    rank_status      the status line and parent-death signal the wrapper
                     and the launcher share
    rank_output      rank-prefixed output lines
    hang_watch       a rank that stopped making progress (state T or D)
    store_keeper     removes an elastic job's store on its host once the
                     driver is gone (a kill -9 of hbrun, the job's end)
    elastic_protocol the variables, exit code and files the elastic driver
                     and the ranks' hbcore.elastic share
    run_task         hbcore.run(fn)'s rank: runs the pickled function
    rank_server      a Spark task's / Ray actor's rank: runs its host's calls
    wire             the one authenticated socket protocol every
                     job-internal connection uses
"""
import os

_HERE = os.path.dirname(os.path.abspath(__file__))

# The scripts the launcher starts by path.
RANK_WRAPPER = os.path.join(_HERE, "rank_wrapper.py")
RUN_TASK = os.path.join(_HERE, "run_task.py")
RANK_SERVER = os.path.join(_HERE, "rank_server.py")
