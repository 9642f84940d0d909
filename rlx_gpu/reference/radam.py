"""NumPy twin of RAdam (torch.optim.RAdam).

    g = -g if maximize;  L2: g += wd*p  |  decoupled: p *= 1 - lr*wd
    m = lerp(m, g, 1-b1);  v = b2*v + (1-b2)*g*g;  m^ = m/(1-b1^t)
    rho_inf = 2/(1-b2) - 1;  rho_t = rho_inf - 2t*b2^t/(1-b2^t)
    rho_t > 5: r = sqrt((rho_t-4)(rho_t-2)rho_inf / ((rho_inf-4)(rho_inf-2)rho_t)),
               p -= m^*lr * sqrt(1-b2^t)/(sqrt(v)+eps) * r
    else:      p -= m^*lr
"""
from __future__ import annotations

import math

import numpy as np

from .adam import decay_and_moments
from .base import F32, ReferenceOptimizer


def radam_rect(b2: float, t):
    """(rho_t, rectification r) on the host, in float64; r is meaningful where rho_t > 5."""
    t = np.asarray(t, np.float64)
    rho_inf = 2 / (1 - b2) - 1
    rho_t = rho_inf - 2 * t * b2 ** t / (1 - b2 ** t)
    with np.errstate(invalid="ignore", divide="ignore"):
        r = np.sqrt((rho_t - 4) * (rho_t - 2) * rho_inf / ((rho_inf - 4) * (rho_inf - 2) * rho_t))
    return rho_t, r


class RAdam(ReferenceOptimizer):
    """Rectified Adam (Liu et al. 2020), as torch.optim.RAdam."""
    supports_complex = True  # (a complex param as its view_as_real: how torch steps one)
    defaults = dict(lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, decoupled_weight_decay=False,
                    maximize=False)
    all_state_names = ("exp_avg", "exp_avg_sq")


    def _update(self, p, g, st, group, fresh):
        lr, (b1, b2), eps = group["lr"], group["betas"], group["eps"]
        t = st["step"]
        m, v = decay_and_moments(p, g, st, group, group["decoupled_weight_decay"])
        mhat = m / F32(1 - b1 ** t)
        rho_t, r = radam_rect(b2, t)
        if rho_t > 5.0:
            adaptive = F32(math.sqrt(1 - b2 ** t)) / (np.sqrt(v) + F32(eps))
            p += F32(-1.0) * (mhat * F32(lr) * adaptive * F32(r))
        else:
            p += F32(-1.0) * (mhat * F32(lr))
