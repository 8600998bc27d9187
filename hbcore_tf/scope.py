"""``hb.scope``, ``@hb.function`` and ``hb.wraps``: data parallelism by scope.

    with hb.scope(grad_nbuckets=2):
        model = build_model()
        opt = tf.compat.v1.train.AdagradOptimizer(0.1)   # or any Keras one
        train_op = opt.minimize(loss)

What happens inside an active scope (the outermost scope installs it, and
removes it on exit; nested scopes only stack options):

1. An optimizer that is CREATED (tf.compat.v1.train.Optimizer, Keras 3 and
   tf_keras optimizers, current and legacy) becomes an instance of the
   data-parallel subclass of its own class (hbcore_tf._parallel.data_parallel): its
   gradients are averaged over ranks in ``grad_nbuckets`` fused groups, in
   reverse variable order. The base-class ``__init__`` is patched for the
   duration of the scope; the swap happens when it returns.
2. A Keras model that is created becomes its data-parallel subclass:
   ``train_step`` runs under the data-sync step weight of its batch, and
   ``fit`` broadcasts the model's and the optimizer's variables (slots
   built first) from rank 0 before training.
3. Every variable created eagerly (TF2: Keras layers, tf.Variable, Keras
   optimizer slots built in the scope) takes rank 0's initial value: a
   variable creator broadcasts the initial value before the variable
   exists, so ranks agree from the first step even in a custom loop.
   Contract: every rank creates the same variables in the same order
   (the broadcasts are collectives). tf.compat.v1 graphs get the
   broadcast from hb.train.MonitoredTrainingSession instead (after the
   session restored or initialised the variables), which also covers
   slots and variables created outside the scope.
4. A tf.compat.v1 graph variable whose initial value is one repeated
   value (zeros, an optimizer's accumulator) is initialised by ``tf.fill``
   instead of a ``Const`` the session would keep beside the variable
   (hbcore_tf._parallel.splat_initial_values): it is held once, not twice.
5. ``tf.compat.v1.train.MonitoredTrainingSession`` is
   hb.train.MonitoredTrainingSession (HybridBackend's scope rewrites it
   too): broadcast from rank 0 after restore/initialisation, checkpoints,
   summaries and chief_only_hooks on rank 0 only. The attribute of
   ``tf.compat.v1.train`` is replaced, so a reference taken before the
   scope stays TF's.
6. A ``tf.compat.v1.train.Saver`` created without a
   ``save_relative_paths`` argument records relative paths in its
   ``checkpoint`` state file (as HybridBackend's scope sets), so a
   checkpoint directory written in the scope can be moved or copied and
   still restored.

Options given to the scope (``hb.scope(grad_nbuckets=2)``) apply to what
is built inside; an optimizer reads ``grad_nbuckets`` when it is created.
With ``sharding=True`` (or inside ``hb.embedding_scope()``), tables made by
``tf.compat.v1.get_variable`` are sharded across ranks
(hbcore_tf.embedding).
"""
import contextlib
import functools
import itertools
import numbers
import os
import random
import threading
from typing import Any, Callable, Dict, Iterator, Optional

import numpy as np
import tensorflow as tf

from hbcore_tf import mpi_ops
from hbcore_tf._base import compat as _compat
from hbcore_tf._base.context import Context, context
from hbcore_tf._base.options import options, validate
from hbcore_tf._parallel import data_parallel as _data_parallel
from hbcore_tf._parallel.splat_initial_values import fill_splat_initial_values
from hbcore_tf._parallel.wraps import wraps  # noqa: F401 (hb.wraps)
from hbcore_tf._patches import (model_new, monitored_session, optimizer_init,
                                saver_init)
from hbcore_tf.embedding.sharding import (creating_shard,
                                          sharding_variable_scope)
from hbcore_tf.train.session import MonitoredTrainingSession

# Two kinds of state, because they live in different places:
# - the class patches (optimizers, models) are process-wide: installed when
#   the first hb.scope on any thread opens, removed when the last closes
#   (_depth, under _lock);
# - TensorFlow's variable creator stack is per thread (and per graph): each
#   thread that opens an hb.scope pushes its own creators, and pops them on
#   that thread when its outermost hb.scope closes (_thread).
_lock = threading.RLock()
_depth = 0
_thread = threading.local()  # .depth, .creator_scopes
_init_counter = itertools.count()

_BROADCASTABLE = (tf.float16, tf.bfloat16, tf.float32, tf.float64, tf.int32,
                  tf.int64, tf.uint8, tf.int8, tf.int16)


# --- the patches (hbcore_tf._patches; installed by the first hb.scope to
# open, undone when the last one closes) ---------------------------------------

def _broadcast_creator(next_creator: Callable, **kwargs: Any) -> Any:
    # Eager only: graph variables get their broadcast from the session.
    # A sharded table's shard holds this rank's rows: never broadcast.
    if not tf.executing_eagerly() or creating_shard():
        return next_creator(**kwargs)
    initial = kwargs.get("initial_value")
    if callable(initial):
        initial = initial()
    dtype = kwargs.get("dtype")
    initial = tf.convert_to_tensor(
        initial, dtype_hint=tf.as_dtype(dtype) if dtype is not None else None)
    if initial.dtype in _BROADCASTABLE:
        initial = mpi_ops.broadcast(initial, 0,
                            name="hb_scope_init_%d" % next(_init_counter))
    kwargs["initial_value"] = initial
    return next_creator(**kwargs)


def _scoped_monitored_training_session(*args: Any, **kwargs: Any) -> Any:
    """``tf.compat.v1.train.MonitoredTrainingSession`` while an hb.scope is
    open: hb.train.MonitoredTrainingSession (HybridBackend's scope rewrites
    it the same way), which builds on TF's function from TF's own module,
    never on this public name."""
    return MonitoredTrainingSession(*args, **kwargs)


def _scoped_saver_defaults() -> Dict[str, Any]:
    """``Saver.__init__``'s defaults inside hb.scope, as HybridBackend's
    scope makes them: ``save_relative_paths`` True (a checkpoint directory
    can then be moved), ``max_to_keep`` / ``keep_checkpoint_every_n_hours``
    the options ``keep_checkpoint_max`` / ``keep_checkpoint_every_n_hours``
    when those are set (None: TF's default)."""
    return {"save_relative_paths": True,
            "max_to_keep": options.keep_checkpoint_max,
            "keep_checkpoint_every_n_hours":
                options.keep_checkpoint_every_n_hours}


def _install() -> None:
    monitored_session.install(_scoped_monitored_training_session)
    saver_init.install(_scoped_saver_defaults)
    if _compat.use_legacy_keras():
        _compat.keras_module()  # import tf_keras so its bases get patched
    optimizer_init.install(_data_parallel.make_data_parallel)
    model_new.install(_data_parallel.make_data_parallel_model)


def _uninstall() -> None:
    model_new.uninstall()
    optimizer_init.uninstall()
    saver_init.uninstall()
    monitored_session.uninstall()


@contextlib.contextmanager
def _thread_creators() -> Iterator[None]:
    """hb.scope's variable creators on this thread's stack, pushed by the
    thread's outermost hb.scope and popped when it closes."""
    depth = getattr(_thread, "depth", 0)
    if depth == 0:
        _thread.creator_scopes = []
        for make in (_broadcast_creator, fill_splat_initial_values):
            creator = tf.variable_creator_scope(make)
            creator.__enter__()
            _thread.creator_scopes.append(creator)
    _thread.depth = depth + 1
    try:
        yield
    finally:
        _thread.depth -= 1
        if _thread.depth == 0:
            while _thread.creator_scopes:
                _thread.creator_scopes.pop().__exit__(None, None, None)


# --- public API -------------------------------------------------------------------

def _check_seed(seed: Any) -> int:
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral):
        raise TypeError("hb.scope: seed expects an int, got %r (%s)" % (
            seed, type(seed).__name__))
    return int(seed)


def _apply_seed(seed: int) -> None:
    """HybridBackend's ``hb.scope(seed=...)``: seeds Python's, numpy's and
    TensorFlow's random generators (TF's graph-level seed of the default
    graph, or the global seed when eager), and sets PYTHONHASHSEED and
    TF_CUDNN_DETERMINISTIC=1 for processes started later."""
    random.seed(seed)
    np.random.seed(seed)
    tf.compat.v1.set_random_seed(seed)
    os.environ["PYTHONHASHSEED"] = str(seed)
    os.environ["TF_CUDNN_DETERMINISTIC"] = "1"


@contextlib.contextmanager
def scope(**kwargs: Any) -> Iterator[Any]:
    """Data-parallel scope with option overrides (see the module docstring).

    Args:
        **kwargs: option values for the code inside (hbcore_tf._base.options),
            and ``seed`` (an int, as HybridBackend's): seeds Python's,
            numpy's and TensorFlow's random generators on entry (see
            ``_apply_seed``); it is not restored on exit.

    Yields:
        The hb context.

    Raises:
        ValueError: an unknown option or a value outside its domain.
        TypeError: an option value (or the seed) of the wrong type.
    """
    global _depth
    seed = kwargs.pop("seed", None)
    if seed is not None:
        seed = _check_seed(seed)
    with options.scope(**kwargs):
        if seed is not None:
            _apply_seed(seed)
        context.rank  # HybridBackend scripts never call init(): do it here
        with _lock:
            _depth += 1
            if _depth == 1:
                try:
                    _install()
                except BaseException:
                    _depth -= 1
                    _uninstall()
                    raise
        try:
            with _thread_creators():
                if options.sharding:
                    with sharding_variable_scope():
                        yield context
                else:
                    yield context
        finally:
            with _lock:
                _depth -= 1
                if _depth == 0:
                    _uninstall()


# hb.Context.scope is hb.scope (HybridBackend's classmethod).
Context._scope = staticmethod(scope)


@contextlib.contextmanager
def embedding_scope(**kwargs: Any) -> Iterator[Any]:
    """Shards the embedding tables created inside (``hb.embedding_scope``):
    ``tf.compat.v1.get_variable`` tables with enough rows become sharded
    tables (hbcore_tf.embedding.sharding).

    Equivalent to ``hb.scope(sharding=True, **kwargs)``.

    Args:
        **kwargs: option values for the code inside (hbcore_tf._base.options).

    Yields:
        The hb context.

    Raises:
        ValueError: an unknown option or a value outside its domain.
        TypeError: an option value of the wrong type.
    """
    kwargs["sharding"] = True
    with scope(**kwargs) as ctx:
        yield ctx


def is_active() -> bool:
    """Whether an hb.scope is open on any thread (its class patches are
    process-wide)."""
    return _depth > 0


def function(fn: Optional[Callable] = None, **kwargs: Any) -> Callable:
    """Decorator: runs the function inside ``hb.scope(**kwargs)``.

    Usable as ``@hb.function``, ``@hb.function()`` or
    ``@hb.function(grad_nbuckets=2)``; the options are validated when the
    decorator is applied. Stacks with ``tf.function`` in either order (the
    scope is active while the python function runs, i.e. while tracing
    under tf.function). Called eagerly, a body that reaches tf.compat.v1
    feature-column code (``DenseFeatures``, ``hb.dense_features``: a
    HybridBackend v1 script on TensorFlow 2) is built again in the
    default tf.compat.v1 graph, as TensorFlow 1 built it.

    Args:
        fn: the function to decorate (``@hb.function``), or None when the
            decorator is called with options (``@hb.function(...)``).
        **kwargs: option values for the scope (hbcore_tf._base.options), and
            ``seed`` (see :func:`scope`).

    Returns:
        With ``fn``, the wrapped function; without it, a decorator that
        wraps a function.

    Raises:
        ValueError: an unknown option or a value outside its domain.
        TypeError: an option value of the wrong type, or ``fn`` is not
            callable (``@hb.function(2)``: options are keywords).
    """
    if fn is not None and not callable(fn):
        raise TypeError("hb.function decorates a function, got %r (%s); "
                        "options are keywords: @hb.function(grad_nbuckets=2)"
                        % (fn, type(fn).__name__))

    for name, value in kwargs.items():
        if name == "seed":
            if value is not None:
                _check_seed(value)
        else:
            validate(name, value)

    def decorate(func: Callable) -> Callable:
        if hasattr(func, "get_concrete_function"):
            return _ScopedTfFunction(func, kwargs)

        @functools.wraps(func)
        def wrapper(*args: Any, **kw: Any) -> Any:
            eager = tf.executing_eagerly()
            try:
                with scope(**kwargs):
                    return func(*args, **kw)
            except _compat.GraphModeRequired:
                if not eager:
                    raise
            # Called eagerly, the body reached tf.compat.v1 graph code
            # (feature columns), which raises before creating anything:
            # a HybridBackend script on TensorFlow 2 with only
            # ``import tensorflow.compat.v1 as tf``. Build the call in the
            # default graph, where TensorFlow 1 built every hb.function
            # (hb.train.MonitoredTrainingSession opens on that graph).
            with _compat.default_graph_if_eager(), scope(**kwargs):
                return func(*args, **kw)
        return wrapper

    return decorate if fn is None else decorate(fn)


class _ScopedTfFunction:
    """``@hb.function`` over a ``tf.function``: calls it, and traces it
    through ``get_concrete_function``, inside the scope, and keeps the rest
    of its API (``python_function``, ``experimental_get_tracing_count``,
    ...; bound as a method when it is a class attribute)."""

    def __init__(self, func: Any, kwargs: dict, instance: Any = None) -> None:
        # Name, docstring and __wrapped__; not func's __dict__ (TF's
        # internals stay on func, reached through __getattr__).
        functools.update_wrapper(self, func, updated=())
        self._func = func
        self._kwargs = kwargs
        # A bound tf.function holds its instance weakly: keep it alive as
        # long as this bound wrapper (``Model().apply(x)``).
        self._instance = instance

    def __call__(self, *args: Any, **kw: Any) -> Any:
        with scope(**self._kwargs):
            return self._func(*args, **kw)

    def get_concrete_function(self, *args: Any, **kw: Any) -> Any:
        with scope(**self._kwargs):
            return self._func.get_concrete_function(*args, **kw)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name in ("_func", "_kwargs", "_instance"):
            raise AttributeError(name)
        return getattr(self._func, name)

    def __get__(self, instance: Any, owner: Any = None) -> Any:
        if instance is None:
            return self
        return _ScopedTfFunction(self._func.__get__(instance, owner),
                                 self._kwargs, instance)
