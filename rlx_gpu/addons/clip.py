"""Global gradient-norm clipping with torch.nn.utils.clip_grad_norm_'s semantics, and two host helpers.

``clip_grad_norm(target, max_norm, norm_type=2.0)`` clips in place and returns the total norm. ``target``: a GPU
optimizer (its device gradient slots, reduced on the GPU: :meth:`rlx_gpu.Optimizer.clip_grads`), a NumPy twin
(its ``grads``; both: the torch tensors' ``.grad`` when built from them), or a dict of NumPy arrays. NaN and overflow behave as torch's: the norm is a float32 reduction
(grads of 1e20 give inf and a factor of 0), and a NaN grad makes the norm and every clipped grad NaN.

The optimizer option ``clip_grad_norm=max_norm`` folds the clip into the step instead: one reduction pass over
the grads, then the step's kernels multiply each grad by the clip factor; the grads are not rewritten.
"""
from __future__ import annotations

import math

import numpy as np

from ..core.lowp import dtype_of
from ..core.numerics import check_max_norm, clip_coef, host_clip_, host_total_norm, norm_kind
from ..engine import Optimizer
from ..reference import ReferenceOptimizer

__all__ = ["clip_grad_norm", "global_grad_clip_scale", "l2_norm"]


def l2_norm(x) -> float:
    """The L2 norm of a NumPy array (any float dtype), sqrt(sum(x**2)) accumulated in float64; a float."""
    return math.sqrt(float(np.sum(np.square(np.asarray(x, np.float64)))))


def global_grad_clip_scale(grads, max_norm) -> float:
    """The factor that brings the global L2 norm of ``grads`` (dict or list of arrays) down to ``max_norm``."""
    check_max_norm(max_norm)
    arrays = list(grads.values()) if isinstance(grads, dict) else list(grads)
    return float(clip_coef(host_total_norm(arrays, 2.0), max_norm))


def clip_grad_norm(target, max_norm, norm_type=2.0) -> float:
    """Clip the gradients of ``target`` in place to a global norm of ``max_norm``; return the total norm."""
    check_max_norm(max_norm)
    norm_kind(norm_type)
    if isinstance(target, (Optimizer, ReferenceOptimizer)):
        return target.clip_grads(max_norm, norm_type)
    if not isinstance(target, dict):
        raise TypeError(f"clip_grad_norm: expected a GPU optimizer, a NumPy twin or a dict of arrays, "
                        f"got {type(target).__name__}")
    for n, g in target.items():
        if not isinstance(g, np.ndarray) or dtype_of(g.dtype) is None:
            raise TypeError(f"clip_grad_norm: grad {n!r} must be a float32 (or float16, bfloat16) numpy array")
    return host_clip_(list(target.values()), max_norm, norm_type)
