"""Data-parallel training of a small two-layer network in plain numpy.

Each rank generates the same synthetic classification problem, trains on its
own shard, and averages gradients with hbcore every step (one async
allreduce per parameter, fused by the core). Rank 0's initial weights are
broadcast first, so every rank holds identical weights throughout; the
script checks that at the end.

    hbrun -np 2 python examples/numpy_training.py --epochs 20
"""
import argparse
import time
from typing import Dict, List, Tuple

import numpy as np

import hbcore as hb

Params = Dict[str, np.ndarray]


def make_data(n: int, dim: int, classes: int, seed: int) -> Tuple[np.ndarray, np.ndarray]:
    """A separable-ish problem: labels from a fixed random linear teacher."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, dim)).astype(np.float32)
    teacher = rng.standard_normal((dim, classes)).astype(np.float32)
    y = np.argmax(x @ teacher + 0.1 * rng.standard_normal((n, classes)), axis=1)
    return x, y


def init_params(dim: int, hidden: int, classes: int, seed: int) -> Params:
    rng = np.random.default_rng(seed)
    return {
        "w1": (rng.standard_normal((dim, hidden)) / np.sqrt(dim)).astype(np.float32),
        "b1": np.zeros(hidden, np.float32),
        "w2": (rng.standard_normal((hidden, classes)) / np.sqrt(hidden)).astype(np.float32),
        "b2": np.zeros(classes, np.float32),
    }


def forward_backward(p: Params, x: np.ndarray, y: np.ndarray) -> Tuple[float, float, Params]:
    """Softmax cross-entropy loss, accuracy and gradients of a 2-layer MLP."""
    h_pre = x @ p["w1"] + p["b1"]
    h = np.maximum(h_pre, 0)
    logits = h @ p["w2"] + p["b2"]
    logits -= logits.max(axis=1, keepdims=True)
    prob = np.exp(logits)
    prob /= prob.sum(axis=1, keepdims=True)
    n = x.shape[0]
    loss = float(-np.log(prob[np.arange(n), y] + 1e-9).mean())
    acc = float((prob.argmax(axis=1) == y).mean())
    d_logits = prob
    d_logits[np.arange(n), y] -= 1
    d_logits /= n
    grads = {"w2": h.T @ d_logits, "b2": d_logits.sum(axis=0)}
    d_h = (d_logits @ p["w2"].T) * (h_pre > 0)
    grads["w1"] = x.T @ d_h
    grads["b1"] = d_h.sum(axis=0)
    return loss, acc, grads


def average_gradients(grads: Params) -> Params:
    """Submits every gradient before waiting on any, so the core fuses them."""
    handles = {k: hb.allreduce_async(g, name="grad." + k) for k, g in grads.items()}
    return {k: hb.synchronize(h) for k, h in handles.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--batch-size", type=int, default=64, help="per rank")
    parser.add_argument("--lr", type=float, default=0.5)
    parser.add_argument("--samples", type=int, default=8192)
    args = parser.parse_args()

    hb.init()
    rank, size = hb.rank(), hb.size()
    x, y = make_data(args.samples, dim=32, classes=4, seed=1234)
    shard = slice(rank, None, size)  # rank r takes rows r, r+size, ...
    x_local, y_local = x[shard], y[shard]

    params = init_params(32, 64, 4, seed=rank)  # deliberately different...
    for k in sorted(params):                      # ...until rank 0's win
        hb.broadcast_(params[k], root_rank=0, name="init." + k)

    steps = len(x_local) // args.batch_size
    start = time.perf_counter()
    for epoch in range(args.epochs):
        order = np.random.default_rng(epoch * 1000 + rank).permutation(len(x_local))
        losses: List[float] = []
        for s in range(steps):
            idx = order[s * args.batch_size:(s + 1) * args.batch_size]
            loss, _, grads = forward_backward(params, x_local[idx], y_local[idx])
            grads = average_gradients(grads)
            for k in params:
                params[k] -= args.lr * grads[k]
            losses.append(loss)
        mean_loss = hb.allreduce(np.array([np.mean(losses)]), name="epoch.loss")[0]
        if rank == 0 and (epoch % 5 == 4 or epoch == args.epochs - 1):
            _, acc, _ = forward_backward(params, x, y)
            print("epoch %3d  loss %.4f  full-data accuracy %.3f" % (epoch + 1, mean_loss, acc))
    elapsed = time.perf_counter() - start

    # Every rank must hold bit-identical weights.
    for k, v in params.items():
        digest = np.array([float(np.sum(v.astype(np.float64) ** 2))])
        spread = hb.allgather(digest, name="check." + k)
        assert np.all(spread == spread[0]), "weights diverged across ranks: " + k
    samples = steps * args.batch_size * size * args.epochs
    if rank == 0:
        print("trained %d epochs on %d ranks: %.0f samples/s, weights identical on all ranks"
              % (args.epochs, size, samples / elapsed))
    hb.shutdown()


if __name__ == "__main__":
    main()
