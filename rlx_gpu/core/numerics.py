"""Reductions with the float32 semantics of the reference implementations, for the NumPy twins and the host clip.

torch (``torch.linalg.vector_norm``, ``Tensor.norm``) and apex reduce float32 tensors in float32: each square
is rounded to float32 (so 1e-30 squares to 0 and 1e20 to inf) and a sum past the float32 range is inf. The GPU
kernels do the same. Here the float32 squares are summed in float64 (the order of a GPU's or torch's sum is
not reproducible anyway) and a total above float32's range becomes inf, so that overflow and underflow come
out as the reference implementations give them: the norm of [1e20, 1e20] is inf, of [1e-30] is 0.
"""
from __future__ import annotations

import math
import numbers

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


# -- torch.nn.utils.clip_grad_norm_ on the host (the twins' fused clip and rlx_gpu.clip_grad_norm on NumPy) -------
#: The norm kinds of the clip, as the reduction kernels number them (shaders/clip.wgsl).
NORM_KINDS = {"l2": 0, "l1": 1, "inf": 2, "p": 3}


def norm_kind(norm_type) -> tuple[int, float]:
    """(kernel norm kind, p) for torch's ``norm_type`` (2, 1, inf or any p > 0)."""
    p = float(norm_type)
    if math.isinf(p) and p > 0:
        return NORM_KINDS["inf"], 0.0
    if not (p > 0) or math.isnan(p):
        raise ValueError(f"clip_grad_norm: norm_type must be > 0 or inf, got {norm_type}")
    return {2.0: (NORM_KINDS["l2"], 2.0), 1.0: (NORM_KINDS["l1"], 1.0)}.get(p, (NORM_KINDS["p"], p))


def check_numbers(owner: str, positive: tuple = (), nonnegative: tuple = (), **values) -> tuple:
    """``values`` (name -> value), in order, each checked to be a finite real number (> 0 where its name is in
    ``positive``, >= 0 in ``nonnegative``): a ValueError naming ``owner``, the argument and what was expected
    otherwise."""
    for name, v in values.items():
        bound = " > 0" if name in positive else " >= 0" if name in nonnegative else ""
        ok = isinstance(v, numbers.Real) and not isinstance(v, bool)  # (as resolve_lr_scale: Fraction too)
        try:
            ok = ok and math.isfinite(v) and (v > 0 if name in positive else v >= 0 if name in nonnegative else True)
        except OverflowError:  # (an int past float's range)
            ok = False
        if not ok:
            raise ValueError(f"{owner}: {name} must be a finite number{bound}, got {v!r}")
    return tuple(values.values())


def check_max_norm(max_norm) -> None:
    if isinstance(max_norm, bool) or not isinstance(max_norm, (int, float, np.floating)) \
            or not math.isfinite(max_norm) or max_norm < 0:
        raise ValueError(f"clip_grad_norm: max_norm must be a finite number >= 0, got {max_norm!r}")


def vector_norm32(a, kind: int, p: float) -> np.float32:
    """torch.linalg.vector_norm of a float32 vector: terms rounded to float32, inf past float32's range, NaN
    propagated (a max over a NaN is NaN)."""
    a = np.abs(np.asarray(a, F32)).ravel()
    if kind == NORM_KINDS["inf"]:
        return F32(np.max(a, initial=0.0))
    with np.errstate(over="ignore", under="ignore", invalid="ignore"):
        terms = a if kind == NORM_KINDS["l1"] else (np.square(a) if kind == NORM_KINDS["l2"] else np.power(a, F32(p)))
        return F32(sum32(terms) ** (1.0 / p))


def host_total_norm(grads, norm_type=2.0) -> np.float32:
    """torch's total norm in float32: the norm of the per-tensor norms, each a float32 reduction (so grads of
    1e20 give inf and 1e-30 gives 0, as torch's do; a NaN grad gives NaN). Grads of any float dtype are widened."""
    kind, p = norm_kind(norm_type)
    norms = np.array([vector_norm32(np.asarray(g).astype(F32), kind, p) for g in grads], F32)
    return vector_norm32(norms, kind, p)


def host_clip_(grads, max_norm, norm_type=2.0) -> float:
    """torch's clip_grad_norm_ on host arrays, in place (each scaled in float32, stored in its dtype); the total
    norm."""
    total = host_total_norm(grads, norm_type)
    c = clip_coef(total, max_norm)
    with np.errstate(invalid="ignore", over="ignore"):
        for g in grads:
            g[...] = (g.astype(F32) * c).astype(g.dtype)
    return float(total)


def clip_coef(total, max_norm) -> np.float32:
    """min(max_norm / (total + 1e-6), 1), in float32 as torch computes it (NaN for a NaN total, 0 for inf)."""
    with np.errstate(invalid="ignore", divide="ignore"):
        q = F32(max_norm) / (F32(total) + F32(1e-6))
    return q if np.isnan(q) else min(q, F32(1.0))


def host_loss_scale(owner: str, loss_scale) -> float:
    """The twins' ``step(loss_scale=)``: 1 / scale as float64 (1.0 without one); a scale that is not a finite
    number > 0 is a ValueError (TypeError for a non-number) before anything changes."""
    if loss_scale is None:
        return 1.0
    if isinstance(loss_scale, (bool, np.bool_)) or not isinstance(loss_scale, (int, float, np.integer, np.floating)):
        raise TypeError(f"{owner}.step: loss_scale must be a number, got {type(loss_scale).__name__}")
    if not (math.isfinite(loss_scale) and loss_scale > 0):
        raise ValueError(f"{owner}.step: loss_scale must be finite and > 0, got {loss_scale}")
    return float(1.0 / np.float64(loss_scale))


def check_device_loss_scale(owner: str, loss_scale) -> None:
    """The GPU classes' ``step(loss_scale=)``: a device loss scale (what rlx_gpu.GradScaler passes: ``buffer``,
    ``encode_pending``, ``committed``), or a TypeError saying so."""
    if loss_scale is not None and not all(hasattr(loss_scale, a) for a in ("buffer", "encode_pending", "committed")):
        raise TypeError(f"{owner}.step: loss_scale must be a device loss scale (rlx_gpu.GradScaler passes itself: "
                        f"scaler.step(opt)), got {type(loss_scale).__name__}; a float scale is the NumPy twins' "
                        "(rlx_gpu.reference)")
