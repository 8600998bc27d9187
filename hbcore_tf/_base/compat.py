"""The one place where Keras 3, tf_keras and tf.compat.v1 differ.

Everything else in hbcore_tf's training layer (optimizers, tape, Keras
callbacks) asks this module instead of testing versions itself:

- which Keras ``hbcore_tf.keras`` serves (:func:`use_legacy_keras`,
  :func:`keras_module`): tf_keras when ``TF_USE_LEGACY_KERAS`` is set (as
  ``tf.keras`` itself decides), Keras 3 otherwise;
- which family an optimizer belongs to (:func:`optimizer_family`) and how
  that family applies gradients (the method DistributedOptimizer overrides);
- how to read and set the learning rate, find momentum buffers, and list
  an optimizer's (and a model's) variables;
- whether ops are being traced for XLA (where hbcore's ops cannot run);
- the Callback base class, load_model and the built-in optimizer classes
  of the Keras in use;
- how variables are unwrapped (a Keras 3 ``keras.Variable`` holds a
  ``tf.Variable`` in ``.value``), and what counts as a Keras layer.

Optimizers are classified by their class, not by the environment, so a
process may use Keras 3 and tf_keras optimizers side by side.
"""
import contextlib
import functools
import os
from typing import Any, Callable, List, Optional, Tuple

import tensorflow as tf

from hbcore_tf._patches import internals

KERAS3 = "keras3"
TF_KERAS = "tf_keras"            # tf_keras' current optimizers
TF_KERAS_LEGACY = "tf_keras_legacy"  # tf_keras.optimizers.legacy (OptimizerV2)
V1 = "v1"                        # tf.compat.v1.train.Optimizer

# --- tf.compat.v1 graph code called eagerly ----------------------------------

class GraphModeRequired(RuntimeError):
    """tf.compat.v1 graph code (feature-column tables made by get_variable)
    was called eagerly.

    Raised before the code has created anything, so ``hb.function`` can
    build the same call again in the default tf.compat.v1 graph, as
    HybridBackend (TensorFlow 1, graphs by default) did.
    """


def default_graph_if_eager() -> Any:
    """The global default tf.compat.v1 graph, entered, when executing
    eagerly (outside every tf.function); a no-op context otherwise.

    HybridBackend's v1 scripts run on TensorFlow 2 with only ``import
    tensorflow.compat.v1 as tf``: their graph-building calls then run
    eagerly, where TensorFlow 1 added them to this graph.

    Returns:
        A context manager.
    """
    if tf.executing_eagerly():
        return tf.compat.v1.get_default_graph().as_default()
    return contextlib.nullcontext()


def in_default_graph_if_eager(fn: Callable) -> Callable:
    """Decorator: ``fn`` runs inside :func:`default_graph_if_eager`."""
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with default_graph_if_eager():
            return fn(*args, **kwargs)
    return wrapper


# --- which Keras -------------------------------------------------------------

_TF_LEGACY_KERAS_TRUE = ("true", "True", "1")

def use_legacy_keras() -> bool:
    """Returns whether TF_USE_LEGACY_KERAS asks for tf_keras.

    TensorFlow's variable, read by TensorFlow's own rule (tensorflow/
    __init__.py and python/util/lazy_loader.py: exactly ``true``, ``True``
    or ``1``), not by hbcore's settings parser: a word TensorFlow ignores
    (``yes``) leaves tf.keras on Keras 3, and hbcore_tf must agree."""
    return os.environ.get("TF_USE_LEGACY_KERAS") in _TF_LEGACY_KERAS_TRUE


def keras_session() -> Any:
    """Returns the tf.compat.v1 session tf_keras runs a graph-mode
    ``fit`` in (Horovod's ``K.get_session()``). tf_keras keeps
    ``get_session`` out of its public ``backend`` module; TF exports it as
    ``tf.compat.v1.keras.backend.get_session``.

    Returns:
        A tf.compat.v1.Session.

    Raises:
        ImportError: as keras_module.
        AttributeError: the Keras in use has no session (Keras 3 runs
            eagerly only).
    """
    get = getattr(keras_module().backend, "get_session", None)
    if get is None:
        get = tf.compat.v1.keras.backend.get_session
    return get()


def keras_module() -> Any:
    """Returns the Keras package ``tf.keras`` resolves to.

    Raises:
        ImportError: TF_USE_LEGACY_KERAS is set but tf_keras is not installed
            (the same condition makes ``tf.keras`` fail), or Keras 3 is
            missing.
    """
    if use_legacy_keras():
        try:
            import tf_keras
        except ImportError as exc:
            raise ImportError(
                "TF_USE_LEGACY_KERAS=1 asks for tf_keras, which is not "
                "installed; `pip install tf-keras` (matching your TensorFlow "
                "version) or unset TF_USE_LEGACY_KERAS to use Keras 3."
            ) from exc
        return tf_keras
    import keras

    return keras


def keras_flavour(legacy: bool) -> Tuple[Any, Callable]:
    """The Keras package of a flavour and its serialization registrar.

    Args:
        legacy: True for tf_keras, False for Keras 3.

    Returns:
        (keras package, ``register_keras_serializable``).

    Raises:
        ImportError: the flavour is not installed.
    """
    if legacy:
        import tf_keras as keras
        return keras, keras.utils.register_keras_serializable
    import keras
    return keras, keras.saving.register_keras_serializable


def class_per_keras(cache: dict, make: Any, legacy: Optional[bool]) -> type:
    """A class built once per Keras flavour (a layer class defined on the
    flavour's base classes and registered with its serializer).

    Args:
        cache: the caller's {legacy: class} cache.
        make: builds the class; called with ``legacy``.
        legacy: True for tf_keras, False for Keras 3; None follows
            TF_USE_LEGACY_KERAS, as ``tf.keras`` does.

    Returns:
        The cached or newly built class.

    Raises:
        ImportError: the requested Keras is not installed.
    """
    if legacy is None:
        legacy = use_legacy_keras()
    cls = cache.get(legacy)
    if cls is None:
        cls = make(legacy)
        cache[legacy] = cls
    return cls


# --- optimizer families ------------------------------------------------------

def _keras3_base() -> Optional[type]:
    return internals.loaded_or_none(internals.KERAS3_BASE_OPTIMIZER)


def _tf_keras_bases() -> tuple:
    """(new optimizer base, legacy OptimizerV2 base), without importing
    tf_keras when nobody did (an import would only cost time)."""
    import sys

    if "tf_keras" not in sys.modules:
        return None, None
    return (internals.TF_KERAS_BASE_OPTIMIZER.load(),
            internals.TF_KERAS_OPTIMIZER_V2.load())


def optimizer_family(optimizer: Any) -> str:
    """Classifies an optimizer instance.

    Returns:
        One of ``"keras3"``, ``"tf_keras"``, ``"tf_keras_legacy"``, ``"v1"``.

    Raises:
        ValueError: the object is none of the supported optimizer kinds.
    """
    base = _keras3_base()
    if base is not None and isinstance(optimizer, base):
        return KERAS3
    new, legacy = _tf_keras_bases()
    if legacy is not None and isinstance(optimizer, legacy):
        return TF_KERAS_LEGACY
    if new is not None and isinstance(optimizer, new):
        return TF_KERAS
    if isinstance(optimizer, tf.compat.v1.train.Optimizer):
        return V1
    raise ValueError(
        "DistributedOptimizer supports Keras 3 optimizers, tf_keras "
        "optimizers (current and legacy) and tf.compat.v1.train.Optimizer; "
        "got %s.%s" % (type(optimizer).__module__, type(optimizer).__name__))


# The loss-scale wrappers of Keras 3, tf_keras (current, legacy) and
# tf.compat.v1, by class name: each holds another optimizer.
_LOSS_SCALE_CLASSES = frozenset((
    "LossScaleOptimizer", "LossScaleOptimizerV3", "BaseLossScaleOptimizer",
    "MixedPrecisionLossScaleOptimizer"))


def is_loss_scale_optimizer(optimizer: Any) -> bool:
    """Whether ``optimizer`` is a loss-scale wrapper around another
    optimizer (Keras 3, tf_keras or tf.compat.v1)."""
    return any(c.__name__ in _LOSS_SCALE_CLASSES
               for c in type(optimizer).__mro__)


def optimizer_class_family(cls: type) -> str:
    """Like optimizer_family, for a Keras optimizer class.

    Raises:
        ValueError: not a Keras 3 or tf_keras optimizer class.
    """
    names = {"%s.%s" % (c.__module__, c.__name__) for c in cls.__mro__}
    for entry, family in (
            (internals.KERAS3_BASE_OPTIMIZER, KERAS3),
            (internals.TF_KERAS_OPTIMIZER_V2, TF_KERAS_LEGACY),
            (internals.TF_KERAS_BASE_OPTIMIZER, TF_KERAS)):
        if internals.qualified_class_name(entry) in names:
            return family
    raise ValueError("%s is not a Keras optimizer class" % cls.__name__)


def build_optimizer(optimizer: Any, family: str, variables: List[Any]) -> None:
    """Creates the optimizer's slot variables for ``variables`` now, outside
    any function being traced and before a ``tf.cond`` that applies
    gradients (variables cannot be created inside a cond branch)."""
    with tf.init_scope():
        if family == KERAS3:
            if not optimizer.built:
                name_scope = internals.KERAS3_NAME_SCOPE.load()
                # The name scope Keras 3's own apply() builds under.
                with name_scope(optimizer.name, caller=optimizer):
                    optimizer.build(variables)
                optimizer.built = True
        elif family == TF_KERAS_LEGACY:
            optimizer._create_all_weights(variables)
        elif family == TF_KERAS:
            optimizer.build(variables)
        elif family == V1:
            optimizer._create_slots(variables)


def is_keras_family(family: str) -> bool:
    return family in (KERAS3, TF_KERAS, TF_KERAS_LEGACY)


# --- layers ------------------------------------------------------------------

def is_keras_layer(obj: Any) -> bool:
    """Returns whether ``obj`` is a Keras 3 or a tf_keras layer (tf_keras
    is only checked when something imported it already)."""
    import sys

    try:
        import keras

        if isinstance(obj, keras.layers.Layer):
            return True
    except ImportError:  # pragma: no cover - Keras 3 not installed
        pass
    tf_keras = sys.modules.get("tf_keras")
    return tf_keras is not None and isinstance(obj, tf_keras.layers.Layer)


def local_layer_variables(local_layers: Any) -> List[Any]:
    """The trainable variables of ``local_layers`` (None, one Keras layer,
    or a collection of them), for PartialDistributedGradientTape and
    PartialDistributedOptimizer.

    Raises:
        ValueError: an element is not a Keras layer (Horovod's message).
    """
    if local_layers is None:
        return []
    if is_keras_layer(local_layers):
        local_layers = [local_layers]
    try:
        local_layers = list(local_layers)
    except TypeError:
        local_layers = [local_layers]
    if not all(is_keras_layer(layer) for layer in local_layers):
        raise ValueError("All local layers must be of tf.keras.layers.Layer "
                         "type.")
    return [var for layer in local_layers for var in layer.trainable_weights]


# --- variables -----------------------------------------------------------------

def tape_is_recording() -> bool:
    """Whether a GradientTape records the ops created now (eagerly, or
    while a tf.function is traced): True in ``model.fit``'s train step and
    a custom loop's forward pass, False in ``predict`` and ``evaluate``."""
    return bool(internals.TAPE_COULD_RECORD.load()())


def unwrap_variable(variable: Any) -> Any:
    """Returns the tf.Variable behind a Keras 3 variable (others unchanged)."""
    value = getattr(variable, "value", None)
    if isinstance(value, tf.Variable):
        return value
    return variable


def variable_key(variable: Any) -> Any:
    """A hashable identity of a variable that is the same for a Keras 3
    variable and the tf.Variable inside it."""
    return id(unwrap_variable(variable))


def optimizer_variables(optimizer: Any) -> List[Any]:
    """Returns the optimizer's own variables (slots, iterations, learning
    rate) as a list; ``variables`` is a property in Keras 3 and current
    tf_keras and a method in legacy tf_keras and v1."""
    variables = getattr(optimizer, "variables", None)
    if callable(variables):
        variables = variables()
    return list(variables or [])


def model_variables(model: Any) -> List[Any]:
    """Returns every variable of a Keras model (weights and non-trainable
    state such as BatchNorm statistics) that exists now: [] for a model
    whose weights are created at its first call (a Sequential without an
    input shape), where tf_keras raises "Weights for model ... have not yet
    been created" and Keras 3 returns []."""
    try:
        variables = getattr(model, "variables", None)
        if variables is None:
            variables = model.weights
    except ValueError:
        if getattr(model, "built", True):
            raise  # a built model: not the "not yet created" case
        return []
    return list(variables)


# --- learning rate, momentum, iterations ----------------------------------------

def _is_schedule(value: Any) -> bool:
    """A LearningRateSchedule or another callable: not a settable value."""
    return (callable(value) and not hasattr(value, "assign")
            and not isinstance(value, (tf.Variable, tf.Tensor)))


def _as_float(value: Any) -> float:
    value = unwrap_variable(value)
    if (isinstance(value, (tf.Variable, tf.Tensor))
            and not tf.executing_eagerly()):
        # A graph's variable (tf_keras with eager execution disabled): only
        # Keras' session can read it.
        return float(keras_session().run(value))
    if hasattr(value, "numpy"):
        value = value.numpy()
    return float(value)


def _raw_learning_rate(optimizer: Any, family: str) -> Any:
    if family == TF_KERAS_LEGACY:
        return optimizer._get_hyper("learning_rate")
    return getattr(optimizer, "_learning_rate", None)


def get_learning_rate(optimizer: Any) -> float:
    """Returns the optimizer's current learning rate as a Python float.

    Raises:
        TypeError: the learning rate is a schedule or another callable
            (it has no single value).
    """
    family = optimizer_family(optimizer)
    lr = _raw_learning_rate(optimizer, family)
    if _is_schedule(lr):
        raise TypeError("the learning rate of %s is a schedule (%s); it has "
                        "no single value to read or set" % (
                            type(optimizer).__name__, type(lr).__name__))
    return _as_float(lr)


def set_learning_rate(optimizer: Any, value: float) -> None:
    """Sets the optimizer's learning rate (its variable, so compiled train
    steps see the new value).

    Raises:
        TypeError: the learning rate is a schedule, or a v1 optimizer whose
            learning rate is a Python number baked into the graph.
    """
    family = optimizer_family(optimizer)
    if family == V1:
        lr = getattr(optimizer, "_learning_rate", None)
        if isinstance(lr, tf.Variable):
            lr.assign(value)
            return
        raise TypeError("set the learning rate of a tf.compat.v1 optimizer by "
                        "passing a tf.Variable as learning_rate")
    if family == TF_KERAS_LEGACY:
        optimizer._set_hyper("learning_rate", value)  # assigns the variable
        return
    current = _raw_learning_rate(optimizer, family)
    if _is_schedule(current):
        raise TypeError("the learning rate of %s is a schedule (%s) and cannot "
                        "be set" % (type(optimizer).__name__,
                                    type(current).__name__))
    optimizer.learning_rate = value


def momentum_buffers(optimizer: Any) -> List[Any]:
    """Returns the momentum accumulators whose values include the learning
    rate (SGD with momentum, RMSprop with momentum), or [] when there are
    none (momentum 0, other optimizers, not built yet).

    Scaling these by new_lr / old_lr when the learning rate changes is the
    momentum correction of Goyal et al., the same as Horovod's trick of
    multiplying ``momentum`` by that ratio for one batch; scaling the
    buffers also works when ``momentum`` is a Python float compiled into a
    traced train step (Keras 3, current tf_keras).
    """
    family = optimizer_family(optimizer)
    momentum = getattr(optimizer, "momentum", 0)
    if family == TF_KERAS_LEGACY:
        try:
            momentum = _as_float(optimizer._get_hyper("momentum"))
        except (KeyError, AttributeError, ValueError):
            return []
        if not momentum:
            return []
        out = []
        for weight in optimizer.weights:
            name = weight.name.split(":")[0]
            if name.endswith("/momentum"):
                out.append(weight)
        return out
    if family == V1:
        # MomentumOptimizer's accumulator holds unscaled gradients; there is
        # nothing to correct.
        return []
    try:
        momentum = _as_float(momentum)
    except (TypeError, ValueError):
        return []
    if not momentum:
        return []
    buffers = getattr(optimizer, "momentums", None)
    if buffers is None:
        buffers = getattr(optimizer, "_momentums", None)
    return [b for b in (buffers or []) if b is not None]


# --- callbacks -------------------------------------------------------------------

def callback_base() -> type:
    """Returns the Callback base class of the Keras in use."""
    return keras_module().callbacks.Callback


def load_model_fn() -> Any:
    """Returns the load_model function of the Keras in use."""
    return keras_module().models.load_model


def keras_optimizer_classes() -> List[type]:
    """Returns the built-in optimizer classes of the Keras in use (for
    load_model's custom_objects)."""
    keras = keras_module()
    base = keras.optimizers.Optimizer
    classes = []
    for name in dir(keras.optimizers):
        obj = getattr(keras.optimizers, name)
        if isinstance(obj, type) and issubclass(obj, base) and obj is not base:
            classes.append(obj)
    if use_legacy_keras():
        legacy = getattr(keras.optimizers, "legacy", None)
        legacy_base = getattr(legacy, "Optimizer", None)
        for name in dir(legacy or []):
            obj = getattr(legacy, name)
            if (isinstance(obj, type) and legacy_base is not None
                    and issubclass(obj, legacy_base) and obj is not legacy_base):
                classes.append(obj)
    return classes
