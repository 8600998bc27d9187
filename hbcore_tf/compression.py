"""Gradient compression applied around a collective (horovod.tensorflow's
``Compression``).

A compressor turns a tensor into what is sent (``compress``) and the
received result back into the caller's dtype (``decompress``); the context
returned by ``compress`` carries what ``decompress`` needs.
"""
from typing import Any, Tuple

import tensorflow as tf


# Kept as they are: tf.cast casts their values and keeps the structure (as
# Horovod's compressor does); tf.convert_to_tensor would densify
# IndexedSlices and reject SparseTensor.
_COMPOSITE = (tf.IndexedSlices, tf.SparseTensor)


def _as_tensor(value: Any) -> Any:
    """Returns ``value`` as a tensor, leaving IndexedSlices and
    SparseTensor as they are."""
    if isinstance(value, _COMPOSITE):
        return value
    return tf.convert_to_tensor(value)


class Compressor:
    """Interface of a compression algorithm (static methods only)."""

    @staticmethod
    def compress(tensor: tf.Tensor) -> Tuple[tf.Tensor, Any]:
        """Returns (the tensor to send, a context for decompress).

        Args:
            tensor: the tensor the caller passed to the collective.

        Returns:
            A pair: the tensor handed to the collective and a context
            (anything) that :meth:`decompress` needs to restore it.

        Raises:
            NotImplementedError: always; subclasses override it.
        """
        raise NotImplementedError

    @staticmethod
    def decompress(tensor: tf.Tensor, ctx: Any) -> tf.Tensor:
        """Returns the received tensor restored with ``ctx``.

        Args:
            tensor: the collective's result.
            ctx: the context :meth:`compress` returned for the input.

        Returns:
            The result in the form the caller expects (e.g. its dtype).

        Raises:
            NotImplementedError: always; subclasses override it.
        """
        raise NotImplementedError


class NoneCompressor(Compressor):
    """Sends tensors unchanged."""

    @staticmethod
    def compress(tensor: tf.Tensor) -> Tuple[tf.Tensor, Any]:
        """Returns ``(tensor, None)``: the tensor is sent as it is.

        Args:
            tensor: the tensor to send.
        """
        return tensor, None

    @staticmethod
    def decompress(tensor: tf.Tensor, ctx: Any) -> tf.Tensor:
        """Returns ``tensor`` unchanged.

        Args:
            tensor: the collective's result.
            ctx: the context from :meth:`compress` (None; ignored).
        """
        return tensor


class FP16Compressor(Compressor):
    """Sends floating-point tensors as float16 (half the bytes of float32)
    and casts the result back to the original dtype. Other dtypes pass
    through unchanged."""

    @staticmethod
    def compress(tensor: tf.Tensor) -> Tuple[tf.Tensor, Any]:
        """Casts a floating-point tensor to float16.

        Args:
            tensor: the tensor to send: a tf.IndexedSlices or
                tf.SparseTensor (kept as such, its values cast), or
                anything tf.convert_to_tensor accepts.

        Returns:
            The tensor to send (float16 for floating dtypes, else the input
            converted to a tensor) and the original dtype as the context.
        """
        tensor = _as_tensor(tensor)
        if tensor.dtype.is_floating and tensor.dtype != tf.float16:
            return tf.cast(tensor, tf.float16), tensor.dtype
        return tensor, tensor.dtype

    @staticmethod
    def decompress(tensor: tf.Tensor, ctx: Any) -> tf.Tensor:
        """Casts ``tensor`` back to ``ctx``, the original floating dtype.

        Args:
            tensor: the collective's result.
            ctx: the original dtype, as :meth:`compress` returned it.

        Returns:
            ``tensor`` cast to ``ctx`` when that is a floating dtype other
            than the tensor's; otherwise ``tensor`` unchanged.
        """
        if ctx is not None and ctx.is_floating and tensor.dtype != ctx:
            return tf.cast(tensor, ctx)
        return tensor


class Compression:
    """The available compressors: ``Compression.none`` and
    ``Compression.fp16``."""

    none = NoneCompressor
    fp16 = FP16Compressor
