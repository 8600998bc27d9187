"""The sharded lookup's id bookkeeping kernels (HbcoreShardRoute,
HbcoreShardReceive; csrc/tf/shard_route.cc) against a numpy model of their
contract, written here from the row partition's definition: random ids
with duplicates and out-of-range ids, 1-4 shards, uneven blocks, with and
without deduplication, eagerly, in a tf.function and in a tf.compat.v1
graph; malformed exchange outputs raise typed errors naming the problem.
The kernels are local to a rank (every rank runs the same checks); their
composition with the alltoalls is tested at 2 and 3 ranks by
sharded_embedding.py. Run by tests/tf/test_shard_route.py.
"""
from typing import List, Tuple

import numpy as np

from train_common import (Checker, check, expect_raises, report, run_table,
                          splitmix64, tf)

import hbcore_tf as hvd  # noqa: E402
from hbcore_tf._ops.library import lib as _lib  # noqa: E402

CASES = [
    "route/eager", "route/function", "route/graph", "route/no-unique",
    "route/empty", "receive/eager", "receive/function", "receive/graph",
    "receive/no-unique", "receive/bad-splits", "receive/foreign-id",
    "route/hash", "receive/hash",
]
# (num_rows, num_shards): even, uneven, one shard, fewer rows than ids.
LAYOUTS = [(10, 3), (1000, 4), (7, 1), (5, 2)]


def block_start(num_rows: int, num_shards: int, shard: int) -> int:
    q, rem = divmod(num_rows, num_shards)
    return shard * q + min(shard, rem)


def owner_of(num_rows: int, num_shards: int, row: int) -> int:
    for shard in range(num_shards - 1, -1, -1):
        if row >= block_start(num_rows, num_shards, shard):
            return shard
    raise AssertionError(row)


def expected_route(ids: np.ndarray, num_rows: int, num_shards: int,
                   flag: int, unique: bool, hashed: bool = False
                   ) -> Tuple[np.ndarray, ...]:
    """(send, send_splits, restore, invalid) as the contract states; with
    ``hashed`` (a dynamic table's keys) no id is invalid and the owner is
    splitmix64(id) % num_shards."""
    def owner(key: int) -> int:
        if hashed:
            return splitmix64(int(key)) % num_shards
        return owner_of(num_rows, num_shards, key)

    invalid = [] if hashed else [i for i in ids if not 0 <= i < num_rows]
    safe = [i if hashed or 0 <= i < num_rows else 0 for i in ids]
    keys: List[int] = []
    for i in safe:
        if not unique or i not in keys:
            keys.append(i)
    segments = [[k for k in keys if owner(k) == s]
                for s in range(num_shards)]
    send = sum((seg + [flag] for seg in segments), [])
    rows = sum(segments, [])   # the rows' layout on the way back
    if unique:
        restore = [rows.index(i) for i in safe]
    else:
        # Every id is its own key: the j-th occurrence of an owner's ids
        # keeps its place among that owner's ids.
        order = sorted(range(len(safe)), key=lambda j: (
            owner(safe[j]), j))
        restore = [order.index(j) for j in range(len(safe))]
    return (np.array(send, np.int64),
            np.array([len(seg) + 1 for seg in segments], np.int64),
            np.array(restore, np.int64), np.array(invalid, np.int64))


def random_ids(rng: np.random.Generator, num_rows: int, n: int) -> np.ndarray:
    ids = rng.integers(0, num_rows, size=n)
    ids[rng.random(n) < 0.3] = ids[0]           # duplicates
    bad = rng.random(n) < 0.1                    # out of range both ways
    ids[bad] = rng.choice([-3, num_rows, num_rows + 11], size=bad.sum())
    return ids.astype(np.int64)


def equal(actual, expected, what: str) -> None:
    actual = np.asarray(actual)
    check(actual.shape == expected.shape and np.array_equal(actual, expected),
          "%s: got %s, expected %s" % (what, actual.tolist(),
                                        expected.tolist()))


def run_kernel(mode: str, kernel, *inputs: np.ndarray) -> List[np.ndarray]:
    """``kernel`` (int64 tensors -> tensors) on ``inputs``: eagerly, in a
    tf.function, or in a tf.compat.v1 graph fed through placeholders."""
    if mode == "graph":
        with tf.Graph().as_default():
            holders = [tf.compat.v1.placeholder(tf.int64, None)
                       for _ in inputs]
            out = kernel(*holders)
            with tf.compat.v1.Session() as sess:
                return sess.run(list(out), dict(zip(holders, inputs)))
    fn = tf.function(kernel) if mode == "function" else kernel
    return [t.numpy() for t in fn(*[tf.constant(x, tf.int64)
                                    for x in inputs])]


def run_route(mode: str, ids: np.ndarray, flag: int, num_rows: int,
              num_shards: int, unique: bool,
              hashed: bool = False) -> List[np.ndarray]:
    return run_kernel(mode, lambda ids_t, flag_t: _lib.hbcore_shard_route(
        ids_t, flag_t, num_rows=num_rows, num_shards=num_shards,
        unique=unique, hash_partition=hashed), ids, np.int64(flag))


def case_route(mode: str, unique: bool = True) -> None:
    rng = np.random.default_rng(7)
    for num_rows, num_shards in LAYOUTS:
        for flag in (1, 0):
            ids = random_ids(rng, num_rows, 40)
            got = run_route(mode, ids, flag, num_rows, num_shards, unique)
            want = expected_route(ids, num_rows, num_shards, flag, unique)
            for name, g, w in zip(("send", "send_splits", "restore",
                                   "invalid"), got, want):
                equal(g, w, "%s (%d rows, %d shards, flag %d)" % (
                    name, num_rows, num_shards, flag))


def case_route_hash() -> None:
    """Keys of any int64 value (a dynamic table's) go to splitmix64(key) %
    num_shards; none is invalid."""
    rng = np.random.default_rng(9)
    for num_shards in (1, 3, 4):
        for unique in (True, False):
            keys = rng.integers(-2 ** 63, 2 ** 63 - 1, size=30,
                                dtype=np.int64)
            keys[rng.random(30) < 0.3] = keys[0]
            got = run_route("function", keys, 1, 1, num_shards, unique,
                            hashed=True)
            want = expected_route(keys, 1, num_shards, 1, unique,
                                  hashed=True)
            for name, g, w in zip(("send", "send_splits", "restore",
                                   "invalid"), got, want):
                equal(g, w, "hashed %s (%d shards, unique %s)" % (
                    name, num_shards, unique))


def case_receive_hash() -> None:
    """The owner of a dynamic table gets the keys themselves (no offset,
    no range check), deduplicated."""
    received = np.array([-5, 2 ** 62, -5, 1, 7, 2 ** 62, 0], np.int64)
    splits = np.array([4, 3], np.int64)
    got = run_kernel("eager", lambda r, s: _lib.hbcore_shard_receive(
        r, s, offset=0, rows=1, hash_partition=True), received, splits)
    want = expected_receive(received, splits, 0, True)
    for name, g, w in zip(("distinct", "index", "received_counts",
                           "senders_with_data"), got, want):
        equal(g, np.asarray(w), "hashed receive " + name)


def case_route_empty() -> None:
    """A rank with no ids still sends every owner its flag."""
    got = run_route("eager", np.zeros([0], np.int64), 0, 10, 3, True)
    want = (np.zeros(3, np.int64), np.ones(3, np.int64),
            np.zeros(0, np.int64), np.zeros(0, np.int64))
    for name, g, w in zip(("send", "send_splits", "restore", "invalid"),
                          got, want):
        equal(g, w, "empty batch " + name)


def expected_receive(received: np.ndarray, splits: np.ndarray, offset: int,
                     unique: bool) -> Tuple[np.ndarray, ...]:
    ids, flags, at = [], 0, 0
    for n in splits:
        ids += [int(i) - offset for i in received[at:at + n - 1]]
        flags += int(received[at + n - 1])
        at += n
    distinct: List[int] = []
    for i in ids:
        if not unique or i not in distinct:
            distinct.append(i)
    index = ([distinct.index(i) for i in ids] if unique
             else list(range(len(ids))))
    return (np.array(distinct, np.int64), np.array(index, np.int64),
            np.array(splits, np.int64) - 1, np.float32(flags))


def receive_inputs(rng: np.random.Generator, offset: int, rows: int,
                   senders: int) -> Tuple[np.ndarray, np.ndarray]:
    received, splits = [], []
    for s in range(senders):
        n = int(rng.integers(0, 6))             # a sender may send no ids
        received += list(rng.integers(offset, offset + rows, size=n))
        received.append(int(s % 2))             # its step flag
        splits.append(n + 1)
    return np.array(received, np.int64), np.array(splits, np.int64)


def run_receive(mode: str, received: np.ndarray, splits: np.ndarray,
                offset: int, rows: int, unique: bool) -> List[np.ndarray]:
    return run_kernel(mode, lambda received_t, splits_t:
                      _lib.hbcore_shard_receive(
                          received_t, splits_t, offset=offset, rows=rows,
                          unique=unique), received, splits)


def case_receive(mode: str, unique: bool = True) -> None:
    rng = np.random.default_rng(11)
    for offset, rows, senders in ((0, 4, 1), (40, 3, 3), (100, 50, 4)):
        received, splits = receive_inputs(rng, offset, rows, senders)
        got = run_receive(mode, received, splits, offset, rows, unique)
        want = expected_receive(received, splits, offset, unique)
        for name, g, w in zip(("distinct", "index", "received_counts",
                               "senders_with_data"), got, want):
            equal(g, np.asarray(w), "%s (offset %d, %d senders)" % (
                name, offset, senders))


def case_receive_bad_splits() -> None:
    received = tf.constant([1, 2, 1], tf.int64)
    expect_raises(lambda: _lib.hbcore_shard_receive(
        received, tf.constant([2, 0], tf.int64), offset=0, rows=5),
        tf.errors.InvalidArgumentError, "sender 1's segment has 0 elements")
    expect_raises(lambda: _lib.hbcore_shard_receive(
        received, tf.constant([2, 2], tf.int64), offset=0, rows=5),
        tf.errors.InvalidArgumentError, "add up to 4, but 3 ids arrived")


def case_receive_foreign_id() -> None:
    expect_raises(lambda: _lib.hbcore_shard_receive(
        tf.constant([3, 9, 1], tf.int64), tf.constant([3], tf.int64),
        offset=2, rows=5),
        tf.errors.InternalError,
        "sender 0 sent id 9, which this shard (rows 2 to 6) does not own")


def main() -> None:
    hvd.init()
    rank = hvd.rank()
    checker = Checker(rank)
    table = {
        "route/eager": lambda: case_route("eager"),
        "route/function": lambda: case_route("function"),
        "route/graph": lambda: case_route("graph"),
        "route/no-unique": lambda: case_route("function", unique=False),
        "route/empty": case_route_empty,
        "receive/eager": lambda: case_receive("eager"),
        "receive/function": lambda: case_receive("function"),
        "receive/graph": lambda: case_receive("graph"),
        "receive/no-unique": lambda: case_receive("eager", unique=False),
        "receive/bad-splits": case_receive_bad_splits,
        "receive/foreign-id": case_receive_foreign_id,
        "route/hash": case_route_hash,
        "receive/hash": case_receive_hash,
    }
    run_table(checker, table, CASES)
    report({"rank": rank, "ok": checker.all_ok})
    hvd.shutdown()


if __name__ == "__main__":
    main()
