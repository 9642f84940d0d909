"""NumPy twin of Muon (torch.optim.Muon, with its Newton-Schulz run in float32 instead of bfloat16).

    b = lerp(b, g, 1 - momentum);  u = lerp(g, b, momentum) if nesterov else b
    u = NS(u): X = u (transposed when rows > cols) / max(|u|_F, eps); ns_steps times:
        A = X X^T;  B = b_ns A + c_ns A A;  X = a_ns X + B X
    p *= 1 - lr * weight_decay;  p -= adjusted_lr * u, adjusted_lr = lr * sqrt(max(1, rows / cols)) ("original",
    also None) | lr * 0.2 * sqrt(max(rows, cols)) ("match_rms_adamw")

The twin runs Newton-Schulz in float32 whatever ``ns_dtype`` says: it is the spec the float16 path (GPU only) is
measured against.
"""
from __future__ import annotations

import math

import numpy as np

from .adam import lerp
from .base import F32
from .matrix import MatrixTwin


def newton_schulz_np(g: np.ndarray, ns_steps=5, ns_coefficients=(3.4445, -4.775, 2.0315), eps=1e-7) -> np.ndarray:
    """torch's _zeropower_via_newtonschulz in float32 NumPy (the oracle of rlx_gpu.linalg.newton_schulz_orth)."""
    a, b, c = (F32(v) for v in ns_coefficients)
    x = g.astype(F32)
    tall = x.shape[0] > x.shape[1]
    if tall:
        x = x.T
    x = x / max(F32(np.linalg.norm(x)), F32(eps))
    for _ in range(ns_steps):
        A = x @ x.T
        B = b * A + c * (A @ A)
        x = a * x + B @ x
    return np.ascontiguousarray(x.T if tall else x)


def adjusted_lr(lr: float, fn, shape) -> float:
    A, B = shape[:2]
    if fn is None or fn == "original":
        return lr * math.sqrt(max(1, A / B))
    if fn == "match_rms_adamw":
        return lr * 0.2 * math.sqrt(max(A, B))
    return lr


class Muon(MatrixTwin):
    """Muon (Jordan et al. 2024): momentum orthogonalised by Newton-Schulz, as torch.optim.Muon; 2-D tensors only."""
    defaults = dict(lr=1e-3, weight_decay=0.1, momentum=0.95, nesterov=True,
                    ns_coefficients=(3.4445, -4.775, 2.0315), eps=1e-7, ns_steps=5, adjust_lr_fn=None,
                    ns_dtype="float32")
    all_state_names = ("momentum_buffer",)

    @classmethod
    def check(cls, group):
        if group["adjust_lr_fn"] not in (None, "original", "match_rms_adamw"):
            raise ValueError(f"Adjust learning rate function {group['adjust_lr_fn']} is not supported (Muon: "
                             "adjust_lr_fn must be None, 'original' or 'match_rms_adamw')")
        if not isinstance(group["ns_steps"], int) or not 0 <= group["ns_steps"] < 100:
            raise ValueError(f"Muon: ns_steps must be an int in [0, 100), got {group['ns_steps']!r}")
        if len(group["ns_coefficients"]) != 3:
            raise ValueError("Muon: ns_coefficients must be three numbers")
        if group["ns_dtype"] not in ("float32", "float16"):
            raise ValueError(f"Muon: ns_dtype must be 'float32' or 'float16', got {group['ns_dtype']!r}")

    def _update(self, p, g, st, group, fresh):
        mom = group["momentum"]
        b = st["momentum_buffer"]
        b[...] = lerp(b, g, 1 - mom)
        u = lerp(g, b, mom) if group["nesterov"] else b
        u = newton_schulz_np(u, group["ns_steps"], group["ns_coefficients"], group["eps"])
        p *= F32(1 - group["lr"] * group["weight_decay"])
        p += F32(-adjusted_lr(group["lr"], group["adjust_lr_fn"], p.shape)) * u
