"""Global gradient-norm clipping with torch.nn.utils.clip_grad_norm_'s semantics, and the seed's host helpers.

``clip_grad_norm(target, max_norm, norm_type=2.0)`` clips in place and returns the total norm. ``target``: a GPU
optimizer (its device gradient slots, reduced on the GPU by ``shaders/clip.wgsl``: per-block partial sums, then
one workgroup; no float atomics), a NumPy twin (its ``grads``), or a dict of float32 NumPy arrays.

The optimizer option ``clip_grad_norm=max_norm`` folds the clip into the step instead: one reduction pass over
the grads, then the ordinary kernels multiply each grad by the clip factor; the grads are not rewritten.
"""
from __future__ import annotations

import math

import numpy as np

from ._numerics import sum32

__all__ = ["clip_grad_norm", "global_grad_clip_scale", "l2_norm"]

F32 = np.float32


def _kind(norm_type) -> tuple[int, float]:
    p = float(norm_type)
    if math.isinf(p) and p > 0:
        return 2, 0.0
    if not (p > 0) or math.isnan(p):
        raise ValueError(f"clip_grad_norm: norm_type must be > 0 or inf, got {norm_type}")
    return {2.0: (0, 2.0), 1.0: (1, 1.0)}.get(p, (3, p))


def _check_max_norm(max_norm):
    if isinstance(max_norm, bool) or not isinstance(max_norm, (int, float, np.floating)) \
            or not math.isfinite(max_norm) or max_norm < 0:
        raise ValueError(f"clip_grad_norm: max_norm must be a finite number >= 0, got {max_norm!r}")


def l2_norm(x) -> float:
    """The L2 norm of a NumPy array, accumulated in float64."""
    return math.sqrt(float(np.sum(np.square(np.asarray(x), dtype=np.float64))))


def _vector_norm32(a: np.ndarray, kind: int, p: float) -> np.float32:
    """torch.linalg.vector_norm of a float32 vector: terms rounded to float32, inf past float32's range, NaN
    propagated (a max over a NaN is NaN)."""
    a = np.abs(np.asarray(a, F32)).ravel()
    if kind == 2:
        return F32(np.max(a, initial=0.0))
    with np.errstate(over="ignore", under="ignore", invalid="ignore"):
        terms = a if kind == 1 else (np.square(a) if kind == 0 else np.power(a, F32(p)))
        return F32(sum32(terms) ** (1.0 / p))


def host_total_norm(grads, norm_type=2.0) -> np.float32:
    """torch's total norm in float32: the norm of the per-tensor norms, each a float32 reduction (so grads of
    1e20 give inf and 1e-30 gives 0, as torch's do; a NaN grad gives NaN)."""
    kind, p = _kind(norm_type)
    norms = np.array([_vector_norm32(g, kind, p) for g in grads], F32)
    return _vector_norm32(norms, kind, p)


def clip_coef(total: np.float32, max_norm) -> np.float32:
    """min(max_norm / (total + 1e-6), 1), in float32 as torch computes it (NaN for a NaN total, 0 for inf)."""
    with np.errstate(invalid="ignore", divide="ignore"):
        q = F32(max_norm) / (F32(total) + F32(1e-6))
    return q if np.isnan(q) else min(q, F32(1.0))


def global_grad_clip_scale(grads, max_norm) -> float:
    """The factor that brings the global L2 norm of ``grads`` (dict or list of arrays) down to ``max_norm``."""
    _check_max_norm(max_norm)
    arrays = list(grads.values()) if isinstance(grads, dict) else list(grads)
    return float(clip_coef(host_total_norm(arrays, 2.0), max_norm))


def clip_grad_norm(target, max_norm, norm_type=2.0) -> float:
    """Clip the gradients of ``target`` in place to a global norm of ``max_norm``; return the total norm."""
    _check_max_norm(max_norm)
    kind, p = _kind(norm_type)
    from .optimizer import Optimizer
    if isinstance(target, Optimizer):
        return target._clip_on_device(float(max_norm), kind, p, scale_grads=True)
    grads = target.grads if hasattr(target, "grads") and not isinstance(target, dict) else target
    if not isinstance(grads, dict):
        raise TypeError(f"clip_grad_norm: expected a GPU optimizer, a NumPy twin or a dict of arrays, "
                        f"got {type(target).__name__}")
    for n, g in grads.items():
        if not isinstance(g, np.ndarray) or g.dtype != np.float32:
            raise TypeError(f"clip_grad_norm: grad {n!r} must be a float32 numpy array")
    total = host_total_norm(list(grads.values()), norm_type)
    c = clip_coef(total, max_norm)
    with np.errstate(invalid="ignore"):
        for g in grads.values():
            g *= c
    return float(total)
