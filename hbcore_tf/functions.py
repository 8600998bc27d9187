"""Broadcasting variables and Python objects (horovod.tensorflow.functions).

Objects travel through hbcore's numpy collectives (cloudpickle over uint8
arrays), which need no graph or session: ``session`` arguments are
accepted for Horovod compatibility and ignored.
"""
from typing import Any, Callable, List, Optional, Sequence

import hbcore
import tensorflow as tf

from hbcore_tf import mpi_ops
from hbcore_tf._ops.collectives import _check_initialized
from hbcore_tf._base.rank_local import is_rank_local
from hbcore_tf.process_sets import ProcessSet, global_process_set


def broadcast_variables(variables: Sequence[Any], root_rank: int,
                        process_set: ProcessSet = global_process_set,
                        inplace: bool = False) -> Optional[tf.Operation]:
    """Overwrites ``variables`` with ``root_rank``'s values, in one grouped
    broadcast (one op: every variable negotiates and fuses together).

    Sharded embedding tables and their optimizer slots are left out: each
    rank holds its own rows of them (hbcore_tf.embedding).

    Args:
        variables: tf.Variable / Keras variables, the same list (order,
            shapes, dtypes) on every rank.
        root_rank: rank whose values are kept.
        process_set: the ranks it runs over (default: all).
        inplace: accepted for Horovod compatibility; the broadcast is
            always one grouped op followed by assigns.

    Returns:
        None eagerly (the variables are already updated); in a graph, the
        op that performs the broadcast when run.

    Raises:
        ValueError: hbcore is not initialized.
        tf.errors.InvalidArgumentError: ``root_rank`` is out of range.
    """
    del inplace  # one grouped broadcast either way
    variables = [v for v in variables if not is_rank_local(v)]
    assigned = mpi_ops.broadcast_(variables, root_rank,
                                  process_set=process_set)
    if tf.executing_eagerly():
        return None
    return tf.group(*assigned)


def broadcast_global_variables(root_rank: int) -> tf.Operation:
    """Broadcasts all tf.compat.v1 global variables of the default graph
    from ``root_rank``, except sharded embedding tables and their slots
    (each rank holds its own rows of those).

    Args:
        root_rank: rank whose variable values are kept.

    Returns:
        The op to run (e.g. in a tf.compat.v1.Session).

    Raises:
        RuntimeError: called in eager mode (use broadcast_variables with the
            model's and optimizer's variables instead).
        ValueError: hbcore is not initialized.
        tf.errors.InvalidArgumentError: ``root_rank`` is out of range.
    """
    if tf.executing_eagerly():
        raise RuntimeError(
            "hvd.broadcast_global_variables() does not support eager "
            "execution. Please use `hvd.broadcast_variables(<model/optimizer "
            "variables>)` instead.")
    # broadcast_variables leaves out sharded tables and their slots.
    return broadcast_variables(tf.compat.v1.global_variables(), root_rank)


def broadcast_object(obj: Any, root_rank: int = 0, session: Any = None,
                     name: Optional[str] = None,
                     process_set: ProcessSet = global_process_set) -> Any:
    """Returns ``root_rank``'s ``obj`` on every rank.

    Args:
        obj: any cloudpickle-able object (only the root's is used).
        root_rank: rank whose object is sent.
        session: ignored (no graph is needed).
        name: name matched across ranks (auto-generated when None).
        process_set: the ranks it runs over (default: all).

    Returns:
        On ``root_rank``, ``obj`` itself (as Horovod returns it, not a
        copy); on the other ranks, the root's object unpickled.

    Raises:
        ValueError: hbcore is not initialized.
        hbcore.InvalidArgumentError: ``root_rank`` is not a rank of
            ``process_set`` (a ValueError).
    """
    del session
    _check_initialized()
    received = hbcore.broadcast_object(obj, root_rank, name=name,
                                       process_set=process_set)
    return obj if mpi_ops.rank() == root_rank else received


def broadcast_object_fn(root_rank: int = 0, session: Any = None,
                        name: Optional[str] = None,
                        process_set: ProcessSet = global_process_set
                        ) -> Callable[[Any], Any]:
    """Returns a function ``f(obj)`` that broadcasts ``obj`` from
    ``root_rank`` (Horovod's helper for repeated broadcasts).

    Args:
        root_rank: rank whose object each call sends.
        session: ignored (no graph is needed).
        name: name matched across ranks, used by every call of ``f``
            (auto-generated per call when None).
        process_set: the ranks it runs over (default: all).

    Returns:
        A function taking ``obj`` and returning the root's object, as
        :func:`broadcast_object` with the arguments given here.
    """
    def _broadcast(obj: Any) -> Any:
        return broadcast_object(obj, root_rank, session, name, process_set)
    return _broadcast


def allgather_object(obj: Any, session: Any = None,
                     name: Optional[str] = None,
                     process_set: ProcessSet = global_process_set
                     ) -> List[Any]:
    """Returns the list of every rank's ``obj``, in rank order.

    Args:
        obj: any cloudpickle-able object.
        session: ignored (no graph is needed).
        name: name matched across ranks (auto-generated when None).
        process_set: the ranks it runs over (default: all).
    """
    del session
    _check_initialized()
    return hbcore.allgather_object(obj, name=name, process_set=process_set)
