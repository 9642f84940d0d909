"""NumPy twin of QHAdamW (Ma & Yarats 2019; facebookresearch/qhoptim QHAdamW, its order of operations).

    p *= 1 - lr*wd;  w_i <- 1 + b_i*w_i (w_i = 0 before step 1), b_i' = 1 - 1/w_i  (bias correction in the betas)
    m = b1'*m + (1-b1')*g;  v = b2'*v + (1-b2')*g*g
    p -= lr * (nu1*m + (1-nu1)*g) / (sqrt(nu2*v + (1-nu2)*g*g) + eps)
"""
from __future__ import annotations

import numpy as np

from .base import F32, ReferenceOptimizer


def qh_beta(b: float, t):
    """b' at step t: w_t = sum_{k<t} b^k, b' = 1 - 1/w_t (0 at t = 1)."""
    t = np.asarray(t, np.float64)
    w = (1 - b ** t) / (1 - b) if b != 1 else t
    return 1 - 1 / w


class QHAdamW(ReferenceOptimizer):
    """Quasi-hyperbolic Adam with decoupled weight decay (QHAdamW); nus (1, 1) is AdamW."""
    defaults = dict(lr=1e-3, betas=(0.9, 0.999), nus=(1.0, 1.0), eps=1e-8, weight_decay=0.0)
    all_state_names = ("exp_avg", "exp_avg_sq")


    def _update(self, p, g, st, group, fresh):
        lr, (b1, b2), (nu1, nu2), eps, wd = (group[k] for k in ("lr", "betas", "nus", "eps", "weight_decay"))
        t = st["step"]
        if wd != 0:
            p *= F32(1 - lr * wd)
        g2 = g * g
        b1a, b2a = float(qh_beta(b1, t)), float(qh_beta(b2, t))
        m, v = st["exp_avg"], st["exp_avg_sq"]
        m[...] = m * F32(b1a) + F32(1 - b1a) * g
        v[...] = v * F32(b2a) + F32(1 - b2a) * g2
        avg = m * F32(nu1)
        if nu1 != 1.0:
            avg = avg + F32(1 - nu1) * g
        rms = v * F32(nu2)
        if nu2 != 1.0:
            rms = rms + F32(1 - nu2) * g2
        rms = np.sqrt(rms)
        if eps != 0.0:
            rms = rms + F32(eps)
        p += F32(-lr) * avg / rms
