"""Top-k gradient compression with error feedback, in NumPy: the spec of :mod:`rlx_gpu.compression` (whose GPU
kernels, ``shaders/topk.wgsl``, select the same entries bit for bit) and the twin its tests compare against.

Per tensor of ``n`` elements, ``k = min(n, max(1, ceil(ratio * n)))`` entries are sent each step:

    acc  = residual + grad * inv_scale      (error feedback; without it acc = grad * inv_scale, nothing kept;
                                             inv_scale: float32, a GradScaler's 1/scale, else 1)
    sent = the k entries of largest |acc|, ranked by the bits of |acc| as an unsigned integer (so NaN above inf
           above every finite value), ties broken by the lowest index; sent in increasing index order
    residual = acc with the sent entries set to zero

(Stich et al. 2018, "Sparsified SGD with memory"; Lin et al. 2018, "Deep Gradient Compression".) The indices sent
are positions in the model's flat order (the tensors one after another). Every rank's list is gathered and the mean
rebuilt as ``dense = 0; dense[idx_r] += val_r`` for rank r = 0, 1, ... in order, then ``dense * (1/N)``.
"""
from __future__ import annotations

import math

import numpy as np

__all__ = ["topk_count", "topk_indices", "TopKTwin", "average_lists"]


def topk_count(ratio: float, n: int) -> int:
    """How many entries of an ``n``-element tensor are sent at ``ratio``."""
    return min(n, max(1, math.ceil(ratio * n)))


def topk_indices(acc: np.ndarray, k: int) -> np.ndarray:
    """The ``k`` positions of largest |acc| (float32 bits of |acc| as unsigned; ties: lowest index), ascending."""
    flat = np.ascontiguousarray(acc, np.float32).reshape(-1)
    key = (flat.view(np.uint32) & np.uint32(0x7FFFFFFF)).astype(np.int64)
    order = np.lexsort((np.arange(flat.size), -key))[:k]
    return np.sort(order).astype(np.int64)


class TopKTwin:
    """One rank's compressor: ``compress(grads)`` -> (flat indices uint32, values float32), updating the residual."""

    def __init__(self, shapes: dict, ratio: float, error_feedback: bool = True):
        self.shapes, self.ratio, self.error_feedback = dict(shapes), float(ratio), bool(error_feedback)
        self.residual = {n: np.zeros(s, np.float32) for n, s in self.shapes.items()}
        self.offsets, off = {}, 0
        for n, s in self.shapes.items():
            self.offsets[n] = off
            off += int(np.prod(s))

    def compress(self, grads: dict, inv_scale: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
        idx, val = [], []
        for n, s in self.shapes.items():
            g = np.asarray(grads[n], np.float32).reshape(-1) * np.float32(inv_scale)
            acc = (self.residual[n].reshape(-1) + g) if self.error_feedback else g.copy()
            sel = topk_indices(acc, topk_count(self.ratio, acc.size))
            idx.append(sel + self.offsets[n])
            val.append(acc[sel])
            if self.error_feedback:
                acc[sel] = 0.0
                self.residual[n] = acc.reshape(s)
        return np.concatenate(idx).astype(np.uint32), np.concatenate(val).astype(np.float32)


def average_lists(lists, numel: int) -> np.ndarray:
    """The dense mean of N ranks' (indices, values): summed in rank order from zero, times float32(1/N)."""
    dense = np.zeros(numel, np.float32)
    for idx, val in lists:
        dense[idx.astype(np.int64)] += val  # (indices within one list are distinct)
    return dense * np.float32(1.0 / len(lists))
