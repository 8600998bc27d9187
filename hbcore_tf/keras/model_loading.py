"""hvd.keras.load_model (Horovod's signature): a saved Keras model whose
optimizer comes back wrapped in DistributedOptimizer, in every format the
installed Keras loads (.keras; .h5 and SavedModel for tf_keras), for both
generations of tf_keras optimizers and for Horovod's custom-object
factories."""
import inspect
import types
from typing import Any, Dict, Optional, Sequence

from hbcore_tf import Average, Compression
from hbcore_tf._base import compat as _compat
from hbcore_tf._parallel.distributed_optimizer import (
    _Settings, distributed_keras_class)
from hbcore_tf.process_sets import global_process_set


def load_model(filepath: str, custom_optimizers: Optional[Sequence[type]] = None,
               custom_objects: Optional[Dict[str, Any]] = None,
               compression: Any = Compression.none) -> Any:
    """Loads a saved Keras model whose optimizer comes back wrapped in
    DistributedOptimizer (gradients averaged over all ranks).

    Args:
        filepath: the saved model (.keras, or .h5 / SavedModel for tf_keras).
        custom_optimizers: optimizer classes not built into Keras that the
            model may use; they are wrapped too.
        custom_objects: other custom objects for deserialization; as in
            Horovod, an optimizer may map to a function of its config
            (`lambda **kwargs: DistributedOptimizer(Opt(**kwargs))`), in
            every format (.keras included).
        compression: compression of the wrapped optimizer's allreduces.

    Returns:
        The model, compiled with a distributed optimizer when it was saved
        compiled.
    """
    settings = _Settings(None, compression, False, 1, Average, 1.0, False,
                         None, "", "", global_process_set, True)
    objects: Dict[str, Any] = {}
    for cls in _compat.keras_optimizer_classes():
        wrapped = distributed_keras_class(cls, settings)
        for key in (cls.__name__, cls.__name__.lower()):
            objects[key] = _by_generation(objects.get(key), wrapped)
    for cls in custom_optimizers or []:
        wrapped = distributed_keras_class(cls, settings)
        objects[cls.__name__] = wrapped
        objects.setdefault(cls.__name__.lower(), wrapped)
    if custom_objects:
        objects.update({key: _config_factory_class(value)
                        for key, value in custom_objects.items()})
    return _compat.load_model_fn()(filepath, custom_objects=objects)


def _by_generation(current: Any, wrapped: type) -> type:
    """The custom object for an optimizer name, given the one registered
    so far (None) and another wrapped class of that name. tf_keras has two
    classes per name (``keras.optimizers.SGD`` and
    ``keras.optimizers.legacy.SGD``); only the current one writes
    ``is_legacy_optimizer`` (False) into its config. One class per name
    would build the other generation from a config it rejects
    (``weight_decay`` / ``decay``), so a name shared by both becomes a
    class whose ``from_config`` picks by that flag."""
    if current is None or not isinstance(current, type) or getattr(
            current, "_hb_by_generation", False):
        return current or wrapped
    family = _compat.optimizer_class_family(wrapped)
    if family == _compat.optimizer_class_family(current):
        return current
    legacy_cls, new_cls = ((wrapped, current)
                           if family == _compat.TF_KERAS_LEGACY
                           else (current, wrapped))

    class _ByGeneration:
        _hb_by_generation = True

        @classmethod
        def from_config(cls, config: Dict[str, Any], *args: Any,
                        **kwargs: Any) -> Any:
            chosen = (legacy_cls if config.get("is_legacy_optimizer", True)
                      else new_cls)
            return chosen.from_config(config, *args, **kwargs)

        def __new__(cls, *args: Any, **kwargs: Any) -> Any:
            return new_cls(*args, **kwargs)

    _ByGeneration.__name__ = new_cls.__name__
    return _ByGeneration


def _config_factory_class(value: Any) -> Any:
    """Horovod's way of wrapping a custom optimizer at load time,
    ``custom_objects={'Opt': lambda **kwargs: DistributedOptimizer(Opt(
    **kwargs))}``, is a function that takes the saved config as keyword
    arguments. The h5 and SavedModel loaders call it; the ``.keras``
    loader (Keras 3, tf_keras) returns a function unchanged instead of
    building the object from it, and compile then fails with "Could not
    interpret optimizer identifier". A function with keyword arguments
    only becomes a class whose ``from_config(config)`` is
    ``value(**config)`` and whose call is the function's, so every loader
    builds the optimizer. Classes and other callables pass unchanged."""
    if not isinstance(value, (types.FunctionType, types.LambdaType)):
        return value
    try:
        params = list(inspect.signature(value).parameters.values())
    except (TypeError, ValueError):
        return value
    if not params or any(p.kind not in (p.VAR_KEYWORD, p.KEYWORD_ONLY)
                         for p in params):
        return value

    class _ConfigFactory:
        def __new__(cls, *args: Any, **kwargs: Any) -> Any:
            return value(*args, **kwargs)

        @classmethod
        def from_config(cls, config: Dict[str, Any]) -> Any:
            return value(**config)

    _ConfigFactory.__name__ = getattr(value, "__name__", "_ConfigFactory")
    return _ConfigFactory
