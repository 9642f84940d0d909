"""NumPy twin of Lion (Chen et al. 2023, "Symbolic Discovery of Optimization Algorithms"; lion-pytorch's order).

    p *= 1 - lr*wd;  p -= lr*sign(b1*m + (1-b1)*g)  (sign(0) = 0);  m = b2*m + (1-b2)*g
"""
from __future__ import annotations

import numpy as np

from .base import F32, ReferenceOptimizer


class Lion(ReferenceOptimizer):
    """EvoLved Sign Momentum (Lion)."""
    defaults = dict(lr=1e-4, betas=(0.9, 0.99), weight_decay=0.0)
    all_state_names = ("exp_avg",)
    quantizable = {"exp_avg": True}

    def _update(self, p, g, st, group, fresh):
        lr, (b1, b2), wd = group["lr"], group["betas"], group["weight_decay"]
        if wd != 0:
            p *= F32(1 - lr * wd)
        m = st["exp_avg"]
        p += F32(-lr) * np.sign(m * F32(b1) + F32(1 - b1) * g)
        m[...] = m * F32(b2) + F32(1 - b2) * g
