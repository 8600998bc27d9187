"""Gradient compression applied around a collective (horovod.tensorflow's
``Compression``).

A compressor turns a tensor into what is sent (``compress``) and the
received result back into the caller's dtype (``decompress``); the context
returned by ``compress`` carries what ``decompress`` needs.
"""
from typing import Any, Tuple

import tensorflow as tf


class Compressor:
    """Interface of a compression algorithm (static methods only)."""

    @staticmethod
    def compress(tensor: tf.Tensor) -> Tuple[tf.Tensor, Any]:
        """Returns (the tensor to send, a context for decompress)."""
        raise NotImplementedError

    @staticmethod
    def decompress(tensor: tf.Tensor, ctx: Any) -> tf.Tensor:
        """Returns the received tensor restored with ``ctx``."""
        raise NotImplementedError


class NoneCompressor(Compressor):
    """Sends tensors unchanged."""

    @staticmethod
    def compress(tensor: tf.Tensor) -> Tuple[tf.Tensor, Any]:
        return tensor, None

    @staticmethod
    def decompress(tensor: tf.Tensor, ctx: Any) -> tf.Tensor:
        return tensor


class FP16Compressor(Compressor):
    """Sends floating-point tensors as float16 (half the bytes of float32)
    and casts the result back to the original dtype. Other dtypes pass
    through unchanged."""

    @staticmethod
    def compress(tensor: tf.Tensor) -> Tuple[tf.Tensor, Any]:
        tensor = tf.convert_to_tensor(tensor)
        if tensor.dtype.is_floating and tensor.dtype != tf.float16:
            return tf.cast(tensor, tf.float16), tensor.dtype
        return tensor, tensor.dtype

    @staticmethod
    def decompress(tensor: tf.Tensor, ctx: Any) -> tf.Tensor:
        if ctx is not None and ctx.is_floating and tensor.dtype != ctx:
            return tf.cast(tensor, ctx)
        return tensor


class Compression:
    """The available compressors: ``Compression.none`` and
    ``Compression.fp16``."""

    none = NoneCompressor
    fp16 = FP16Compressor
