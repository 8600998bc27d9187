"""Checkpoints of sharded embedding tables: one logical variable each.

A checkpoint holds every sharded table, and each of its optimizer slots, as
the full ``[num_rows, dim]`` tensor in id order under the table's own name,
whatever the world size. Each rank's rows are a TF *slice* of that tensor
(``SaveSliceInfo``, set by hbcore_tf.embedding.table; v1 optimizer slots
inherit slices of their own through TF's slot_creator), so TF's own
machinery does the rest:

- ``tf.train.load_variable``, ``NewCheckpointReader`` and a plain
  ``Saver.restore`` of a full variable assemble the slices (BundleReader);
- ``Saver.restore`` of a slice reads just that slice from any checkpoint
  holding the full tensor or slices of it, so a checkpoint written at N
  ranks restores at M ranks, at one process with plain variables, and a
  plain model's checkpoint restores into a sharded one.

What TF lacks is a save in which several processes write one checkpoint.
Collective save protocol (``tf.compat.v1.train.Saver.save`` when its
variables include sharded tables and the world has more than one rank;
the Saver and tf.train.Checkpoint adapters are in checkpoint_savers.py,
which hbcore_tf._patches.saver / trackable_saver install into TF):

1. Every rank calls ``saver.save`` with the same arguments (HybridBackend's
   rule; Horovod scripts that save on rank 0 only must call it on every
   rank). Each rank computes the checkpoint prefix ``path`` as TF does.
2. Rank r > 0 saves its slices (tables and slots only) with a companion
   Saver to ``path + "_hbpart-r-of-n"``, next to ``path``.
3. Handshake 1 (``allgather_object`` named after the tables): every rank's
   prefix and status. A failure or a prefix mismatch on any rank is an
   error on every rank. A save called on rank 0 alone waits here, and the
   stall check reports the tables by name (HB_STALL_CHECK_TIME_SECONDS);
   HB_STALL_SHUTDOWN_TIME_SECONDS turns it into an error.
4. Rank 0 runs the user's Saver unchanged (dense variables once, its own
   slices, the checkpoint state file, max_to_keep, the meta graph), then
   merges the parts into ``path`` with TF's MergeV2Checkpoints (which
   merges slices of one tensor across bundles and renames the parts' data
   files into ``path``'s: no rank ever holds the whole table), and
   rewrites the result into its canonical form (canonical.py: one data
   file, every table and slot in id order as one tensor, or as fixed row
   blocks when larger than ``emb_checkpoint_block_bytes``; streamed, so
   again no rank holds a whole table).
5. Handshake 2 (``broadcast_object``): rank 0's result; every rank returns
   ``path`` or raises rank 0's error, and removes a part left over.

The checkpoint directory must therefore be one directory that every rank
can reach (a shared filesystem, as for TF's parameter-server training);
restoring needs that anyway, since every rank reads its own rows. The
checkpoint's files (index and data) are the same bytes whatever the world
size that wrote them; the Saver's .meta file is not (it is the writing
rank's graph, whose table variables are that rank's shards).

The companion Saver is built when the user's Saver is built, because
MonitoredTrainingSession finalizes the graph right after.

tf.train.Checkpoint (eager) follows the same protocol: a sharded table
serializes itself as its slice of the full tensor (table.py), rank r > 0
writes only its tables' slices with TF's MultiDeviceSaver, rank 0 writes
the whole object checkpoint and merges. Every rank's Checkpoint.save also
updates the ``checkpoint`` state file, with identical contents.

This module holds steps 2-5 (``collective_write``) and the merge and
canonical rewrite of step 4.
"""
import os
from typing import Any, Callable, List

import hbcore
import tensorflow as tf

from hbcore_tf._base.context import context
from hbcore_tf._base.options import options
from hbcore_tf.embedding.canonical import canonicalize

_PART = "_hbpart-%05d-of-%05d"
_V1 = tf.compat.v1


def part_prefix(path: str, rank: int, size: int) -> str:
    """Where rank ``rank`` writes its slices of the checkpoint ``path``.

    Args:
        path: the checkpoint prefix.
        rank: the writing rank.
        size: the world size.

    Returns:
        The part's prefix, ``path + "_hbpart-<rank>-of-<size>"`` (numbers
        written with five digits).
    """
    return path + _PART % (rank, size)


def _run_raw(build: Callable[[], Any]) -> None:
    """Runs an op built by ``build`` in a private graph and session (the
    caller's graph may be finalized; works in eager processes too)."""
    with tf.Graph().as_default():
        op = build()
        with _V1.Session() as session:
            session.run(op)


def merge_parts(path: str, parts: List[str]) -> None:
    """Merges the bundles ``parts`` into the checkpoint ``path`` in place
    (TF's MergeV2Checkpoints: slices of one tensor are merged into one
    entry; every data file is renamed, never read whole).

    Args:
        path: a V2 checkpoint prefix, written.
        parts: further V2 checkpoint prefixes in the same directory.

    Raises:
        tf.errors.OpError: the merge failed (e.g. a part is missing).
    """
    if not parts:
        return
    # MergeV2Checkpoints deletes the index of every input, the destination
    # included when it is one of them: merge into a staging prefix, then
    # rename (a bundle's data files are found by name, never recorded in
    # its index), the index last so that a reader sees a complete bundle.
    staging = path + "_hbmerge"
    _run_raw(lambda: tf.raw_ops.MergeV2Checkpoints(
        checkpoint_prefixes=[path] + list(parts), destination_prefix=staging,
        delete_old_dirs=False))
    for name in sorted(tf.io.gfile.glob(staging + ".data-*")):
        tf.io.gfile.rename(name, path + name[len(staging):], overwrite=True)
    tf.io.gfile.rename(staging + ".index", path + ".index", overwrite=True)


def write_canonical(path: str) -> None:
    """Rewrites the checkpoint ``path`` (written by this process alone)
    into the form whose bytes do not depend on the world size
    (canonical.py): called by rank 0 after the merge, and at world size 1
    after TensorFlow's own save.

    Row blocks are at most the ``emb_checkpoint_block_bytes`` option.

    Args:
        path: a V2 checkpoint prefix.

    Raises:
        ValueError: the bundle is malformed or uses a feature canonical.py
            does not read (compressed index blocks).
        tf.errors.OpError: its files cannot be read or written.
    """
    canonicalize(path, int(options.emb_checkpoint_block_bytes))


def _remove_bundle(prefix: str) -> None:
    for name in tf.io.gfile.glob(prefix + ".*"):
        try:
            tf.io.gfile.remove(name)
        except tf.errors.OpError:
            pass



class ShardedSaveError(RuntimeError):
    """A collective save of sharded tables failed on some rank."""



# What a write_part that had nothing to write returns (collective_write).
NOTHING_WRITTEN = object()


def collective_write(path: str, tables: List[str],
                     write_part: Callable[[str], Any],
                     write_main: Callable[[], Any]) -> Any:
    """Steps 2-5 of the protocol, for any writer. Called on every rank.

    Args:
        path: the checkpoint prefix (the same on every rank).
        tables: names of the sharded tables (for messages and the stall
            report).
        write_part: writes this rank's slices to the prefix it is given
            (run on ranks > 0); returns ``NOTHING_WRITTEN`` when the rank
            has no slices (a dynamic table with fewer keys than ranks),
            and rank 0 then merges no part of it.
        write_main: writes the checkpoint at ``path`` (run on rank 0).

    Returns:
        What ``write_main`` returned on rank 0, on every rank.

    Raises:
        ShardedSaveError: see collective_save.
    """
    rank, size = context.rank, context.world_size
    tables = ",".join(tables)
    status, wrote = None, rank > 0
    if rank > 0:
        try:
            directory = os.path.dirname(path)
            if directory:
                tf.io.gfile.makedirs(directory)
            wrote = write_part(part_prefix(path, rank, size)) \
                is not NOTHING_WRITTEN
        except Exception as exc:  # noqa: BLE001 - reported on every rank
            status = "%s: %s" % (type(exc).__name__, exc)
    try:
        gathered = hbcore.allgather_object(
            (path, status, wrote), name="hbcore.sharded_save[%s]" % tables)
    except Exception as exc:  # noqa: BLE001 - the stall shutdown, mostly
        raise ShardedSaveError(
            "collective save of sharded tables %s to %s did not complete: "
            "every rank must call save (a save on rank 0 alone waits here "
            "for the others): %s" % (tables, path, exc)) from exc
    problems = ["rank %d: %s" % (r, s) for r, (_, s, _) in
                enumerate(gathered) if s is not None]
    if len({p for p, _, _ in gathered}) != 1:
        problems.append("ranks disagree on the checkpoint prefix: %s" % (
            [p for p, _, _ in gathered]))
    result = None
    if not problems and rank == 0:
        try:
            value = write_main()
            merge_parts(path, [part_prefix(path, r, size)
                               for r in range(1, size) if gathered[r][2]])
            write_canonical(path)
            result = ("ok", value)
        except Exception as exc:  # noqa: BLE001 - reported on every rank
            result = ("error", "rank 0: %s: %s" % (type(exc).__name__, exc))
    if not problems:
        outcome, value = hbcore.broadcast_object(
            result, 0, name="hbcore.sharded_save_done[%s]" % tables)
        if outcome == "error":
            problems.append(value)
    if rank > 0:
        _remove_bundle(part_prefix(path, rank, size))  # only after a failure
    if problems:
        raise ShardedSaveError(
            "collective save of sharded tables %s to %s failed: %s" % (
                tables, path, "; ".join(problems)))
    return value


