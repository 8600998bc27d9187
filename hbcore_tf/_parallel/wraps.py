"""``hb.wraps`` (also ``hb.train.wraps_optimizer``): the data-parallel
subclass of an optimizer class, with the class's name.

A tf.compat.v1.train.Optimizer subclass gets the data-parallel subclass of
hbcore_tf._parallel.data_parallel (``v1_class``); a Keras 3 or tf_keras
optimizer class gets a thin subclass whose instances turn data-parallel
when they are created (``make_data_parallel``), so that ``grad_nbuckets``
is read per instance.
"""
import tensorflow as tf

from hbcore_tf._base import compat as _compat
from hbcore_tf._parallel import data_parallel as _data_parallel


def wraps(cls: type) -> type:
    """Class decorator: the data-parallel subclass of a user's optimizer
    class (tf.compat.v1.train.Optimizer subclass, or a Keras 3 / tf_keras
    optimizer class), with the same name.

    Raises:
        TypeError: ``cls`` is not an optimizer class.
    """
    if not isinstance(cls, type):
        raise TypeError("hb.wraps expects an optimizer class, got %r" % (cls,))
    if issubclass(cls, tf.compat.v1.train.Optimizer):
        return _data_parallel.v1_class(cls)
    try:
        family = _compat.optimizer_class_family(cls)
    except ValueError as exc:
        raise TypeError("hb.wraps expects a tf.compat.v1.train.Optimizer, "
                        "Keras 3 or tf_keras optimizer class, got %s.%s" % (
                            cls.__module__, cls.__name__)) from exc
    del family  # the instance's family is detected again when it is made
    return _keras_wrapped(cls)


def _keras_wrapped(cls: type) -> type:
    def __init__(self, *args, **kwargs):
        cls.__init__(self, *args, **kwargs)
        _data_parallel.make_data_parallel(self)

    # A thin subclass whose instances turn data-parallel when created, so
    # grad_nbuckets is read per instance (at its creation).
    wrapped = type(cls.__name__, (cls,), {
        "__init__": __init__, "__module__": cls.__module__,
        "__qualname__": cls.__qualname__, "__doc__": cls.__doc__})
    return wrapped
