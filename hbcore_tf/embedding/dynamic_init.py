"""Initial rows of a dynamic table that depend on the key only.

A dynamic table creates a row when its key is first looked up, on the
key's owner. For a result that does not depend on the world size, or on
which rank saw a key first, the row's initial values are a function of
(seed, key): a counter-based generator, not a stateful random op.

The formula (docs/embedding.md, "Dynamic tables", states it for users
who want to reproduce a row): with ``mix`` the splitmix64 finalizer on
64-bit words (the owner hash of csrc/tf/shard_route.cc) and
``G = 0x9E3779B97F4A7C15``,

    base   = mix(key ^ mix(seed))
    h[j]   = mix(base + (j + 1) * G)          j = 0 .. 2 * dim - 1
    u[j]   = (h[j] >> 11) * 2**-53             uniform in [0, 1)

- uniform (``RandomUniform(minval, maxval)``, Keras' "uniform"):
  ``minval + (maxval - minval) * u[j]``, j < dim;
- normal (``RandomNormal(mean, stddev)``):
  ``mean + stddev * sqrt(-2 ln(1 - u[j])) * cos(2 pi u[dim + j])``
  (Box-Muller), j < dim;
- zeros, ones, a scalar Constant: that value.

All arithmetic on words is modulo 2**64; values are computed in float64
and cast to the table's dtype.
"""
import math
from typing import Any, Callable, Dict

import numpy as np
import tensorflow as tf

GOLDEN = 0x9E3779B97F4A7C15


def _word(value: int) -> tf.Tensor:
    return tf.constant(value & (2 ** 64 - 1), tf.uint64)


def mix(z: tf.Tensor) -> tf.Tensor:
    """The splitmix64 finalizer on uint64 words (wrapping arithmetic).

    Args:
        z: a uint64 tensor.

    Returns:
        A uint64 tensor of the same shape.
    """
    shift = tf.bitwise.right_shift
    z = (z ^ shift(z, _word(30))) * _word(0xBF58476D1CE4E5B9)
    z = (z ^ shift(z, _word(27))) * _word(0x94D049BB133111EB)
    return z ^ shift(z, _word(31))


def uniforms(keys: tf.Tensor, seed: int, count: int) -> tf.Tensor:
    """``count`` float64 uniforms in [0, 1) per key (``u`` above).

    Args:
        keys: int64 keys, a vector.
        seed: the table's seed.
        count: values per key.

    Returns:
        A ``[len(keys), count]`` float64 tensor.
    """
    words = tf.bitcast(tf.cast(keys, tf.int64), tf.uint64)
    base = mix(words ^ mix(_word(seed)))
    steps = tf.range(1, count + 1, dtype=tf.int64)
    counters = tf.bitcast(steps, tf.uint64) * _word(GOLDEN)
    bits = mix(base[:, None] + counters[None, :])
    top = tf.bitwise.right_shift(bits, _word(11))
    return tf.cast(top, tf.float64) * (2.0 ** -53)


def _uniform(config: Dict[str, Any]) -> Callable:
    low = float(config.get("minval", -0.05))
    high = float(config.get("maxval", 0.05))

    def rows(keys: tf.Tensor, dim: int, seed: int) -> tf.Tensor:
        return low + (high - low) * uniforms(keys, seed, dim)
    return rows


def _normal(config: Dict[str, Any]) -> Callable:
    mean = float(config.get("mean", 0.0))
    stddev = float(config.get("stddev", 0.05))

    def rows(keys: tf.Tensor, dim: int, seed: int) -> tf.Tensor:
        u = uniforms(keys, seed, 2 * dim)
        radius = tf.sqrt(-2.0 * tf.math.log1p(-u[:, :dim]))
        return mean + stddev * radius * tf.cos(2.0 * math.pi * u[:, dim:])
    return rows


def _filled(value: float) -> Callable:
    def rows(keys: tf.Tensor, dim: int, seed: int) -> tf.Tensor:
        return tf.fill(tf.stack([tf.size(keys), dim]),
                       tf.constant(value, tf.float64))
    return rows


_KINDS = {"RandomUniform": _uniform, "RandomNormal": _normal}
SUPPORTED = ("uniform / RandomUniform", "normal / RandomNormal", "zeros",
             "ones", "a scalar Constant")


class KeyInitializer:
    """The initial rows of a dynamic table, a function of (seed, key).

    Args:
        initializer: a Keras 3 or tf_keras initializer instance (what
            ``keras.initializers.get`` returns).
        table: the table's name, for errors.

    Raises:
        ValueError: an initializer with no per-key form (``SUPPORTED``
            lists those that have one), or a non-scalar Constant.
    """

    def __init__(self, initializer: Any, table: str) -> None:
        kind = type(initializer).__name__
        config = initializer.get_config() if hasattr(
            initializer, "get_config") else {}
        seed = config.get("seed")
        # A seedless Keras initializer draws differently in each process:
        # a dynamic table needs the same rows on every rank, so seed 0.
        self.seed = int(seed) if isinstance(seed, int) else 0
        if kind in _KINDS:
            self._rows = _KINDS[kind](config)
        elif kind == "Zeros":
            self._rows = _filled(0.0)
        elif kind == "Ones":
            self._rows = _filled(1.0)
        elif kind == "Constant" and np.size(config.get("value", 0)) == 1:
            self._rows = _filled(float(np.reshape(config.get("value", 0),
                                                  [])))
        else:
            raise ValueError(
                "dynamic embedding table %r: initializer %s has no per-key "
                "form; use one of: %s" % (table, kind, ", ".join(SUPPORTED)))

    def __call__(self, keys: tf.Tensor, dim: int,
                 dtype: tf.DType) -> tf.Tensor:
        """The initial rows of ``keys``.

        Args:
            keys: int64 keys, a vector.
            dim: the row width.
            dtype: the table's dtype.

        Returns:
            A ``[len(keys), dim]`` tensor of ``dtype``.
        """
        return tf.cast(self._rows(keys, dim, self.seed), dtype)
