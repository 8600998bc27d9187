"""Elastic jobs: one MPI world per generation, run by the launcher
(docs/elastic.md).

Modules:
    driver     the generations: limits, resets, blacklist, the next world
               (protocol in its module comment)
    discovery  --host-discovery-script and the host blacklist
    notice     the host-change notice, driver -> rank 0, over the wire
    run_fn     hbcore.run(fn)'s elastic variant
    hosted     elastic Spark/Ray jobs: the driver's generations as jobs of
               hosted ranks

The variables, exit code and files the driver and the ranks share are
rank-side (rank/elastic_protocol.py).
"""
