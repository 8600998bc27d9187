"""SavedModel export from a checkpoint of sharded tables
(``hb.train.export``, ``hb.saved_model.export_all``): the serving graph
holds every table whole and loads with stock TensorFlow.
"""
import os
import shutil
import tempfile
import time
from typing import Any, Callable, Dict, Iterable, List, Optional

import hbcore
import tensorflow as tf

from hbcore_tf._base.context import context
from hbcore_tf.embedding.sharding import sharding_suspended

_V1 = tf.compat.v1


# mode -> (meta graph tag, signature key), as TF's export_utils maps Keras
# and Estimator mode keys (HybridBackend passes its modes through those).
_MODES = {"infer": ("serve", "serving_default"),
          "predict": ("serve", "serving_default"),
          "train": ("train", "train"),
          "eval": ("eval", "eval"),
          "test": ("eval", "eval")}
_ALL_MODES = ("predict", "train", "test")


def _check_modes(modes: Iterable[str]) -> List[str]:
    modes = list(modes)
    for mode in modes:
        if mode not in _MODES:
            raise ValueError("export: mode %r is not one of %s" % (
                mode, sorted(_MODES)))
    return modes


def _timestamped_dir(base: str) -> str:
    stamp = int(time.time())
    while True:
        path = os.path.join(base, str(stamp))
        if not tf.io.gfile.exists(path):
            return path
        stamp += 1


def export(export_dir_base: str, checkpoint_path: str,
           signature_def_fn: Callable[[], Any],
           assets_extra: Optional[Dict[str, str]] = None,
           as_text: bool = False, clear_devices: bool = True,
           strip_default_attrs: bool = True, mode: str = "infer") -> str:
    """Builds a SavedModel from a checkpoint (HybridBackend's
    ``hb.train.export``): the serving graph holds every table whole and
    its lookups are plain gathers, so it loads with stock TensorFlow
    (tf.saved_model.load, saved_model_cli) without hbcore or MPI.

    ``signature_def_fn`` builds the serving graph in a fresh graph with
    sharding turned off (tables made inside ``hb.embedding_scope`` are
    plain full-size variables) and returns its SignatureDef (or a dict of
    key -> SignatureDef); the variables are restored from
    ``checkpoint_path`` by name, and the graph's local variables and
    tables are initialized when the SavedModel is loaded. Only rank 0
    writes (it needs memory for the tables it exports); call it on every
    rank when hbcore runs with more than one rank, as every rank then
    waits for rank 0.

    Args:
        export_dir_base: the SavedModel goes to ``<base>/<timestamp>``.
        checkpoint_path: a checkpoint prefix, or a directory (its latest).
        signature_def_fn: builds the serving graph, returns its signature.
        assets_extra: destination (relative to assets.extra) -> source.
        as_text: write saved_model.pbtxt instead of .pb.
        clear_devices: drop device placements from the graph.
        strip_default_attrs: drop attributes at their default values.
        mode: 'infer' or 'predict' (tag serve, key serving_default),
            'eval' or 'test' (tag and key eval), 'train'.

    Returns:
        The export directory (on every rank).

    Raises:
        ValueError: unknown mode, or no checkpoint at ``checkpoint_path``.
    """
    tag, key = _MODES[_check_modes([mode])[0]]

    def build() -> tuple:
        signatures = signature_def_fn()
        if not isinstance(signatures, dict):
            signatures = {key: signatures}
        return signatures, None, [tag]

    return _export_collective(export_dir_base, checkpoint_path, build,
                              assets_extra, as_text, clear_devices,
                              strip_default_attrs)


def export_all(export_dir_base: str, checkpoint_path: str,
               signature_defs_and_main_op_fn: Callable[[], Any],
               assets_extra: Optional[Dict[str, str]] = None,
               as_text: bool = False, clear_devices: bool = True,
               strip_default_attrs: bool = True,
               modes: Optional[Iterable[str]] = None) -> str:
    """A SavedModel of several signatures from a checkpoint
    (HybridBackend's ``hb.saved_model.export_all``); as ``export``, with
    one meta graph tagged for every mode it serves.

    Args:
        export_dir_base, checkpoint_path, assets_extra, as_text,
            clear_devices, strip_default_attrs: as ``export``.
        signature_defs_and_main_op_fn: builds the graph; returns a dict
            signature key -> SignatureDef, or ``(that dict, main_op)``
            (main_op None: initialize local variables and tables).
        modes: the modes to export (default predict, train and test).
            The signatures kept are those whose key is one of these
            modes' keys (serving_default, train, eval); the meta graph
            gets the tags of the modes found.

    Returns:
        The export directory (on every rank).

    Raises:
        ValueError: unknown mode, none of the modes' signatures returned,
            or no checkpoint at ``checkpoint_path``.
    """
    modes = _check_modes(_ALL_MODES if modes is None else modes)

    def build() -> tuple:
        signatures, main_op = signature_defs_and_main_op_fn(), None
        if isinstance(signatures, (tuple, list)):
            if len(signatures) > 1:
                main_op = signatures[1]
            signatures = signatures[0]
        found = [m for m in modes if _MODES[m][1] in signatures]
        if not found:
            raise ValueError(
                "export_all: no signature for modes %s (keys %s; got %s)" % (
                    modes, sorted({_MODES[m][1] for m in modes}),
                    sorted(signatures)))
        keys = {_MODES[m][1] for m in found}
        tags = sorted({_MODES[m][0] for m in found})
        return ({k: v for k, v in signatures.items() if k in keys},
                main_op, tags)

    return _export_collective(export_dir_base, checkpoint_path, build,
                              assets_extra, as_text, clear_devices,
                              strip_default_attrs)


def _export_collective(export_dir_base, checkpoint_path, build,
                       assets_extra, as_text, clear_devices,
                       strip_default_attrs) -> str:
    """Rank 0 writes the export; every rank returns its directory or
    raises rank 0's error."""
    result = None
    if context.rank == 0:
        try:
            result = ("ok", _export_rank0(
                export_dir_base, checkpoint_path, build, assets_extra,
                as_text, clear_devices, strip_default_attrs))
        except Exception as exc:  # noqa: BLE001 - reported on every rank
            result = ("error", exc)
    if context.world_size > 1:
        result = hbcore.broadcast_object(
            result if context.rank == 0 else None, 0, name="hbcore.export")
    outcome, value = result
    if outcome == "error":
        raise value
    return value


def _export_rank0(export_dir_base, checkpoint_path, build, assets_extra,
                  as_text, clear_devices, strip_default_attrs) -> str:
    if tf.io.gfile.isdir(checkpoint_path):
        found = _V1.train.latest_checkpoint(checkpoint_path)
        if found is None:
            raise ValueError("export: no checkpoint in %s" % checkpoint_path)
        checkpoint_path = found
    export_dir = _timestamped_dir(export_dir_base)
    tf.io.gfile.makedirs(export_dir_base)
    staging = tempfile.mkdtemp(prefix=".tmp-export-", dir=export_dir_base)
    shutil.rmtree(staging)
    with tf.Graph().as_default() as graph:
        with sharding_suspended():
            signatures, main_op, tags = build()
        if main_op is None:
            # As HybridBackend (and a MonitoredSession): local variables
            # and tables are initialized when the model is loaded.
            main_op = _V1.train.Scaffold.default_local_init_op()
        saver = _V1.train.Saver(sharded=True, allow_empty=True)
        with _V1.Session(graph=graph) as session:
            saver.restore(session, checkpoint_path)
            builder = _V1.saved_model.Builder(staging)
            builder.add_meta_graph_and_variables(
                session, tags, signature_def_map=signatures,
                assets_collection=_V1.get_collection(
                    _V1.GraphKeys.ASSET_FILEPATHS),
                main_op=main_op, clear_devices=clear_devices,
                strip_default_attrs=strip_default_attrs)
            builder.save(as_text=as_text)
    if assets_extra:
        extra = os.path.join(staging, "assets.extra")
        for dest, source in assets_extra.items():
            target = os.path.join(extra, dest)
            tf.io.gfile.makedirs(os.path.dirname(target))
            tf.io.gfile.copy(source, target, overwrite=True)
    tf.io.gfile.rename(staging, export_dir)
    return export_dir

