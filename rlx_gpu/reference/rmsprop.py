"""NumPy twin of RMSprop (torch.optim.RMSprop; eps outside the square root).

    g = -g if maximize;  g += wd*p;  s = alpha*s + (1-alpha)*g*g
    centered: a = lerp(a, g, 1-alpha), d = sqrt(s - a*a) + eps  else d = sqrt(s) + eps
    (s - a*a is +inf where s is +inf and a finite, as torch's fused addcmul gives it, even when a*a overflows)
    momentum mu > 0: b = mu*b + g/d, p -= lr*b  else p -= lr*g/d
"""
from __future__ import annotations

import numpy as np

from .adam import lerp
from .base import F32, ReferenceOptimizer


class RMSprop(ReferenceOptimizer):
    """RMSprop (Hinton 2012), as torch.optim.RMSprop."""
    supports_complex = True  # (a complex param as its view_as_real: how torch steps one)
    defaults = dict(lr=1e-2, alpha=0.99, eps=1e-8, weight_decay=0.0, momentum=0.0, centered=False, maximize=False)
    all_state_names = ("square_avg", "momentum_buffer", "grad_avg")
    quantizable = {"square_avg": False, "momentum_buffer": True, "grad_avg": True}

    @classmethod
    def state_names(cls, group):
        return ("square_avg",) + (("momentum_buffer",) if group["momentum"] > 0 else ()) \
            + (("grad_avg",) if group["centered"] else ())

    def _update(self, p, g, st, group, fresh):
        lr, alpha, eps, wd, mu = (group[k] for k in ("lr", "alpha", "eps", "weight_decay", "momentum"))
        if group["maximize"]:
            g = -g
        if wd != 0:
            g = g + F32(wd) * p
        s = st["square_avg"]
        s[...] = s * F32(alpha) + F32(1 - alpha) * g * g
        if group["centered"]:
            a = st["grad_avg"]
            a[...] = lerp(a, g, 1 - alpha)
            with np.errstate(invalid="ignore", over="ignore"):
                # torch's addcmul fuses s - a*a into one FMA: where s is +inf and a finite the exact
                # difference is +inf, where rounding a*a first would give inf - inf = NaN
                avg = np.sqrt(np.where(np.isposinf(s) & np.isfinite(a), s, s + F32(-1) * a * a))
        else:
            avg = np.sqrt(s)
        avg = avg + F32(eps)
        if mu > 0:
            b = st["momentum_buffer"]
            b[...] = b * F32(mu) + g / avg
            p += F32(-lr) * b
        else:
            p += F32(-lr) * g / avg
