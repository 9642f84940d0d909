"""NumPy twin of MARS-AdamW (Yuan et al. 2024, AGI-Arena/MARS, the approximate variant; its order of operations).

2-D tensors:
    c = (g - g_prev)*gamma*b1/(1-b1) + g  (g_prev = 0 at t = 1);  if |c|_F > 1: c = c/|c|_F
    (|c|_F in float32 as the authors' torch.norm: past float32's range it is inf and c/inf is 0)
    m = b1*m + (1-b1)*c;  v = b2*v + (1-b2)*c*c;  denom = (sqrt(v)/sqrt(1-b2^t) + eps)*(1-b1^t)
    p += -lr*(wd*p + m/denom)
Other tensors: AdamW with lr_1d, betas_1d, weight_decay_1d.  Every tensor: g_prev = g.
The ``*_1d`` names are deprecated (a DeprecationWarning when given): ``rlx_gpu.Partition`` routes the tensors that
are not 2-D to AdamW instead (tests/test_partition.py checks that the two agree).
"""
from __future__ import annotations

import math

import numpy as np

from ..core.numerics import norm32
from .base import F32, ReferenceOptimizer

ONE_D = ("lr_1d", "betas_1d", "weight_decay_1d")


def warn_1d(owner: str, params, kwargs: dict) -> None:
    """A DeprecationWarning when the ``*_1d`` hyperparameters are set (as arguments or in a param group, to other
    than their defaults): the vectors' AdamW is better expressed with :class:`rlx_gpu.Partition` (they keep
    working)."""
    import warnings
    groups = params if isinstance(params, list) and params and isinstance(params[0], dict) else []

    def differs(k, v):  # (a default is not a use: checkpoints record every group key, pairs as lists)
        return (tuple(v) if isinstance(v, list) else v) != Mars.defaults[k]

    given = sorted({k for k in ONE_D if k in kwargs and differs(k, kwargs[k])} |
                   {k for g in groups for k in ONE_D if k in g and differs(k, g[k])})
    if given:
        warnings.warn(f"{owner}: {', '.join(given)} are deprecated; route the tensors that are not 2-D to AdamW "
                      "with rlx_gpu.Partition (label by ndim) instead. They still work.", DeprecationWarning,
                      stacklevel=3)


class Mars(ReferenceOptimizer):
    """MARS-AdamW: variance-reduced, normalised momentum for matrices; AdamW for the rest."""
    defaults = dict(lr=3e-3, betas=(0.95, 0.99), eps=1e-8, weight_decay=0.0, gamma=0.025, lr_1d=3e-3,
                    betas_1d=(0.9, 0.95), weight_decay_1d=0.1)
    all_state_names = ("exp_avg", "exp_avg_sq", "last_grad")
    lr_keys = ("lr", "lr_1d")

    def __init__(self, params, *args, **kwargs):
        warn_1d(type(self).__name__, params, kwargs)
        super().__init__(params, *args, **kwargs)

    def _update(self, p, g, st, group, fresh):
        t, eps = st["step"], group["eps"]
        m, v, last = st["exp_avg"], st["exp_avg_sq"], st["last_grad"]
        if p.ndim == 2:
            lr, (b1, b2), wd, gamma = group["lr"], group["betas"], group["weight_decay"], group["gamma"]
            c = (g - last) * F32(gamma * (b1 / (1.0 - b1))) + g
            cn = norm32(c)  # torch.norm in the grad's dtype, as the authors' code (overflows to inf)
            if cn > 1.0:
                c = c / cn
            m[...] = m * F32(b1) + F32(1 - b1) * c
            v[...] = v * F32(b2) + F32(1 - b2) * c * c
            denom = (np.sqrt(v) * F32(1 / math.sqrt(1 - b2 ** t)) + F32(eps)) * F32(1 - b1 ** t)
            p += F32(-lr) * (p * F32(wd) + m / denom)
        else:
            lr, (b1, b2), wd = group["lr_1d"], group["betas_1d"], group["weight_decay_1d"]
            m[...] = m * F32(b1) + F32(1 - b1) * g
            v[...] = v * F32(b2) + F32(1 - b2) * g * g
            denom = np.sqrt(v) / F32(math.sqrt(1 - b2 ** t)) + F32(eps)
            p *= F32(1 - lr * wd)
            p += F32(-lr / (1 - b1 ** t)) * m / denom
        last[...] = g
