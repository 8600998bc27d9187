"""``hvd.elastic`` for TensorFlow: Horovod's state objects for replicated
variables, on hbcore's elastic machinery (hbcore/elastic/, docs/elastic.md).

- ``TensorFlowKerasState(model, optimizer=None, backend=None, **kwargs)``:
  a Keras model's weights and its optimizer's variables, plus ObjectState
  values.
- ``TensorFlowState(variables=None, session=None, **kwargs)``: a list of
  variables, eager or in a tf.compat.v1 graph run by ``session`` (then
  the variables default to the graph's global variables, optimizer slots
  included, as Horovod's; the state builds its assign ops at
  construction, so every rank builds the same graph).

Both keep a copy of the values (numpy arrays) as the last commit, taken at
construction and by every ``save()``, with one copy per variable: eager,
the commit's Snapshot copies a read-only view of each variable's read
tensor into the previous commit's buffers (hbcore/elastic/snapshot.py);
in a graph, the arrays ``session.run`` returns are the copy, and the
Snapshot keeps them.  The replicated variables go to the per-host store
with the ObjectState values, and ``sync()`` broadcasts the newest commit
from a rank that has it (hbcore/elastic/state.py).  The rank-local
variables -- sharded embedding tables and their optimizer slots, found
among the state's variables by hbcore_tf._base.rank_local (v1 tables made
inside ``hb.scope``, Keras ShardedEmbedding, and the slots an optimizer
made for them) -- go to this rank's part of the commit instead, which is
also kept on a second host; a world of another size reshards them from
the commit's parts, in id order (hbcore/elastic/reshard.py: the row
blocks of hbcore_tf/embedding/partition.py).  An optimizer whose
variables are not created yet (Keras builds them at its first step) is
built for the model's trainable variables before a commit of its
variables is loaded.
"""

from typing import (Any, Callable, Dict, Iterable, List, Optional, Sequence,
                    Tuple)

import numpy as np
import tensorflow as tf

from hbcore.basics import rank as hb_rank
from hbcore.basics import size as hb_size
from hbcore.elastic import (HorovodInternalError, HostsUpdatedInterrupt,
                            ObjectState, State, reshard, run)
from hbcore_tf._base.rank_local import is_rank_local, shard_info

__all__ = ["run", "State", "ObjectState", "TensorFlowKerasState",
           "TensorFlowState", "HorovodInternalError", "HostsUpdatedInterrupt"]


def _optimizer_variables(optimizer: Any) -> List[Any]:
    # Keras 3 and tf_keras's optimizers: a property; legacy ones: a method.
    variables = optimizer.variables
    return list(variables() if callable(variables) else variables)


def _num_rows(variable: Any) -> int:
    """Rows of the whole table that a rank-local variable (a sharded
    table, or an optimizer slot of one) holds a block of."""
    info = shard_info(variable)
    if info is not None:
        return info.partition.num_rows
    inner = getattr(variable, "value", None)
    for v in (variable, inner):
        sliced = getattr(v, "_save_slice_info", None)
        if sliced is not None:
            return int(sliced.full_shape[0])
    raise ValueError("%s is rank-local but names no table"
                     % getattr(variable, "name", variable))


def _refuse_dynamic_tables(variables: Sequence[Any], state: str) -> None:
    """Raises NotImplementedError naming the dynamic embedding tables among
    ``variables``: a commit would hold their rows but not which key each
    row belongs to (the tables' hash maps are not variables), and a world
    of another size would reshard them as row blocks; a re-formed job
    would train on rows of the wrong keys, silently."""
    names = sorted({info.name for info in map(shard_info, variables)
                    if info is not None and info.partition.hashed})
    if names:
        raise NotImplementedError(
            "hbcore_tf.elastic.%s: dynamic embedding tables (%s) cannot be "
            "committed by elastic training yet (their keys are not in the "
            "commit); use a ShardedEmbedding of a fixed row count in an "
            "elastic job, or save them with tf.train.Checkpoint / Keras "
            "and restart" % (state, ", ".join(names)))


def _host_view(variable: Any) -> np.ndarray:
    """A variable's current value, uncopied where TF allows: a read-only
    view of the tensor that reads it.  The view never changes: TF copies
    a variable's buffer before an update while a read of it is alive.
    A tensor that numpy cannot view (not in host memory) is copied."""
    tensor = tf.convert_to_tensor(variable)
    try:
        return np.asarray(memoryview(tensor))
    except (TypeError, ValueError, BufferError):
        return tensor.numpy()


class _VariablesState(ObjectState):
    """ObjectState plus a list of TF variables copied at each save: the
    replicated ones in the commit's values, the rank-local ones (sharded
    tables and their slots) in this rank's part (module comment)."""

    def __init__(self, bcast_object: Optional[Callable], **kwargs: Any
                 ) -> None:
        _refuse_dynamic_tables(self._variables(), type(self).__name__)
        self._saved_local: List[Any] = []
        super().__init__(bcast_object=bcast_object, **kwargs)

    def _variables(self) -> List[Any]:
        raise NotImplementedError()

    def _prepare(self, count: int) -> None:
        """Creates missing variables before ``count`` values are loaded."""

    def _read(self) -> Tuple[List[np.ndarray], bool]:
        """The variables' values, and whether the arrays are fresh copies
        of their own (else read-only views, for the snapshot to copy)."""
        return [_host_view(v) for v in self._variables()], False

    def _assign(self, values: List[np.ndarray]) -> None:
        for variable, value in zip(self._variables(), values):
            variable.assign(value)

    def _split(self, values: List[Any]) -> Tuple[List[Any], List[Any]]:
        """``values`` (one per variable) as (replicated, rank-local)."""
        local = [is_rank_local(v) for v in self._variables()]
        return ([x for x, own in zip(values, local) if not own],
                [x for x, own in zip(values, local) if own])

    @property
    def _has_parts(self) -> bool:  # type: ignore[override]
        return any(is_rank_local(v) for v in self._variables())

    def _capture(self, values: Dict[str, Any]
                 ) -> Tuple[Any, Sequence[Any]]:
        # The replicated variables join the snapshot, uncopied; the
        # rank-local ones are this rank's part.
        read, fresh = self._read()
        replicated, local = self._split(read)
        self._saved_local = local if fresh else [np.array(x) for x in local]
        return ({"objects": values, "variables": replicated},
                replicated if fresh else ())

    def _apply(self, value: Any) -> None:
        super()._apply(value["objects"])

    def restore(self) -> None:
        """Sets the variables and objects back to the last commit."""
        value = self._saved.value()
        replicated, local = value["variables"], self._saved_local
        self._prepare(len(replicated) + len(local))
        variables = self._variables()
        mine = [is_rank_local(v) for v in variables]
        if (len(variables) - sum(mine), sum(mine)) != (len(replicated),
                                                       len(local)):
            raise ValueError(
                "%s: the commit holds %d replicated and %d rank-local "
                "variables, this process has %d and %d (every rank must "
                "build the same model and optimizer)"
                % (type(self).__name__, len(replicated), len(local),
                   len(variables) - sum(mine), sum(mine)))
        replicated_left, local_left = iter(replicated), iter(local)
        self._assign([next(local_left) if own else next(replicated_left)
                      for own in mine])
        self._apply(value)

    def _load(self, payload: bytes) -> None:
        super()._load(payload)
        if not self._has_parts:
            self.restore()

    def _part_payload(self) -> Optional[bytes]:
        if not self._saved_local:
            return None
        local = [v for v in self._variables() if is_rank_local(v)]
        return reshard.pack_part(
            {str(i): (_num_rows(v), value)
             for i, (v, value) in enumerate(zip(local, self._saved_local))},
            hb_size(), hb_rank())

    def _load_parts(self, parts: Iterable[bytes]) -> None:
        resharder = reshard.Resharder(hb_size(), hb_rank())
        for part in parts:
            resharder.take(part)
        blocks = resharder.blocks()
        self._saved_local = [blocks[str(i)] for i in range(len(blocks))]

    def sync(self) -> None:
        """State.sync; with rank-local variables the variables are
        assigned once, after both the values and the parts are in."""
        super().sync()
        if self._has_parts:
            self.restore()


class TensorFlowKerasState(_VariablesState):
    """Horovod's TensorFlowKerasState: a Keras model and optimizer.

    Args:
        model: The Keras model (Keras 3 or tf_keras).
        optimizer: Its optimizer (default: ``model.optimizer``, if any).
        backend: Accepted for Horovod's signature; unused.
        **kwargs: ObjectState values (epoch, batch, ...).
    """

    def __init__(self, model: Any, optimizer: Any = None, backend: Any = None,
                 **kwargs: Any) -> None:
        self.model = model
        self.optimizer = (optimizer if optimizer is not None
                          else getattr(model, "optimizer", None))
        self.backend = backend
        super().__init__(bcast_object=None, **kwargs)

    def _variables(self) -> List[Any]:
        variables = list(self.model.weights)
        if self.optimizer is not None:
            variables += _optimizer_variables(self.optimizer)
        return variables

    def _prepare(self, count: int) -> None:
        if (self.optimizer is not None and len(self._variables()) < count
                and hasattr(self.optimizer, "build")):
            self.optimizer.build(self.model.trainable_variables)


class TensorFlowState(_VariablesState):
    """Horovod's TensorFlowState: a list of variables, eager or in a
    tf.compat.v1 graph.

    Args:
        variables: The variables (default: in a graph, its global
            variables; eager, none).
        session: The tf.compat.v1 Session that runs the graph (default:
            the default session); unused in eager mode.
        **kwargs: ObjectState values.

    Raises:
        ValueError: In graph mode without a session.
    """

    def __init__(self, variables: Optional[Sequence[Any]] = None,
                 session: Any = None, **kwargs: Any) -> None:
        self.session = None
        if session is not None or not tf.executing_eagerly():
            self.session = session or tf.compat.v1.get_default_session()
            if self.session is None:
                raise ValueError(
                    "hbcore_tf.elastic.TensorFlowState: a tf.compat.v1 "
                    "graph needs its session (session=...)")
        if variables is None and self.session is not None:
            with self.session.graph.as_default():
                variables = tf.compat.v1.global_variables()
        self.variables = list(variables or [])
        if self.session is not None:
            self._build_assign()
        super().__init__(bcast_object=None, **kwargs)

    def _build_assign(self) -> None:
        # One placeholder and assign op per variable, made once (graph
        # ops are created identically on every rank).
        with self.session.graph.as_default():
            self._feeds = [tf.compat.v1.placeholder(v.dtype.base_dtype,
                                                    v.shape)
                           for v in self.variables]
            self._assign_op = tf.group(*[
                tf.compat.v1.assign(v, feed)
                for v, feed in zip(self.variables, self._feeds)])

    def _variables(self) -> List[Any]:
        return self.variables

    def _read(self) -> Tuple[List[np.ndarray], bool]:
        if self.session is None:
            return super()._read()
        return list(self.session.run(self.variables)), True

    def _assign(self, values: List[np.ndarray]) -> None:
        if self.session is None:
            super()._assign(values)
            return
        self.session.run(self._assign_op, feed_dict=dict(zip(self._feeds,
                                                             values)))
