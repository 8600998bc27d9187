"""Which variables are sharded state: the sharded tables among a list of
variables and their optimizer slots (what the collective save writes
per rank), and whether a graph holds any.
"""
from typing import Any, Iterable, List, Optional

import tensorflow as tf

from hbcore_tf._base.rank_local import shard_info

_V1 = tf.compat.v1


def _slice_info(variable: Any) -> Any:
    return getattr(variable, "_save_slice_info", None)


def sharded_state(variables: Iterable[Any]) -> List[Any]:
    """The sharded tables among ``variables`` and their optimizer slots.

    A slot of a table is a variable whose checkpoint slice is named
    ``<table>/<slot>`` and covers the same rows as the table's shard
    (TF's slot_creator gives it that slice).

    Args:
        variables: tf.Variables (e.g. tf.compat.v1.global_variables()).

    Returns:
        The variables, in the given order, that each rank holds only its
        rows of.
    """
    variables = list(variables)
    tables = {}
    for v in variables:
        info = shard_info(v)
        if info is not None:
            tables[info.name] = info
    if not tables:
        return []
    found = []
    for v in variables:
        if shard_info(v) is not None:
            found.append(v)
            continue
        sl = _slice_info(v)
        if sl is None or "/" not in sl.full_name:
            continue
        info = tables.get(sl.full_name.rsplit("/", 1)[0])
        if (info is not None and list(sl.var_offset[:1]) == [info.offset]
                and list(sl.var_shape[:1]) == [info.rows]):
            found.append(v)
    return found



def saver_variables(saver: Any) -> List[Any]:
    """The variables a tf.compat.v1 Saver saves (flattened).

    Args:
        saver: a tf.compat.v1.train.Saver.

    Returns:
        Its var_list's variables, or the global variables when it has none.
    """
    var_list = getattr(saver, "_var_list", None)
    if var_list is None:
        return _V1.global_variables()
    if isinstance(var_list, dict):
        var_list = list(var_list.values())
    flat = []
    for v in var_list:
        if isinstance(v, (list, tuple)):
            flat.extend(v)
        elif isinstance(v, tf.Variable):
            flat.append(v)
    return flat



def table_names(variables: Iterable[Any]) -> List[str]:
    """The sorted names of the sharded tables among ``variables``."""
    return sorted({shard_info(v).name for v in variables
                   if shard_info(v) is not None})



def graph_has_sharded_tables(graph: Optional[Any] = None) -> bool:
    """Whether ``graph`` (default: the default graph) holds a sharded
    table among its global variables.

    Args:
        graph: a tf.Graph; None: the default graph.

    Returns:
        True when a global variable of ``graph`` is a sharded table's
        shard.
    """
    graph = graph or _V1.get_default_graph()
    with graph.as_default():
        return any(shard_info(v) is not None for v in _V1.global_variables())


