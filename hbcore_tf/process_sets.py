"""Horovod's process sets for hbcore_tf: the one implementation in
:mod:`hbcore.process_sets`, shared with the numpy API (a set added through
either front end is the same set)."""
from hbcore.process_sets import (ProcessSet, add_process_set,
                                 global_process_set, process_set_by_id,
                                 process_set_id, process_sets,
                                 remove_process_set)

__all__ = ["ProcessSet", "add_process_set", "global_process_set",
           "process_set_by_id", "process_set_id", "process_sets",
           "remove_process_set"]
