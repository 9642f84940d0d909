"""Reductions with the float32 semantics of the reference implementations, for the NumPy twins and the host clip.

torch (``torch.linalg.vector_norm``, ``Tensor.norm``) and apex reduce float32 tensors in float32: each square
is rounded to float32 (so 1e-30 squares to 0 and 1e20 to inf) and a sum past the float32 range is inf. The GPU
kernels do the same. Here the float32 squares are summed in float64 (the order of a GPU's or torch's sum is
not reproducible anyway) and a total above float32's range becomes inf, so that overflow and underflow come
out as the reference implementations give them: the norm of [1e20, 1e20] is inf, of [1e-30] is 0.
"""
from __future__ import annotations

import numpy as np

F32 = np.float32
F32_MAX = float(np.finfo(np.float32).max)


def _overflow(total):
    return np.where(total > F32_MAX, np.inf, total)


def sum32(values, axis=None, keepdims=False):
    """Sum of float32 values (already rounded to float32), in float64, inf past float32's range."""
    with np.errstate(over="ignore", invalid="ignore"):
        return _overflow(np.sum(np.asarray(values, F32), axis=axis, keepdims=keepdims, dtype=np.float64))


def sumsq32(x, axis=None, keepdims=False):
    """Sum of squares with each square rounded to float32 (float64 result, inf past float32's range)."""
    with np.errstate(over="ignore", under="ignore", invalid="ignore"):
        return sum32(np.square(np.asarray(x, F32)), axis=axis, keepdims=keepdims)


def norm32(x) -> np.float32:
    """The L2 norm as torch computes it for a float32 tensor (see the module docstring)."""
    return F32(np.sqrt(sumsq32(x)))


def py_max(a, b):
    """Python's ``max(a, b)`` (as torch's Adafactor uses on ``.item()`` values): ``b`` if ``b > a`` else ``a``,
    so a NaN ``b`` gives ``a``."""
    return b if b > a else a
