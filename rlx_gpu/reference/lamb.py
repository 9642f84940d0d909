"""NumPy twin of LAMB (You et al. 2019, as apex FusedLAMB in adam_w_mode).

    g = -g if maximize;  m = lerp(m, g, 1-b1);  v = b2*v + (1-b2)*g*g
    bias_correction: m^ = m/(1-b1^t), v^ = v/(1-b2^t)  else m^ = m, v^ = v
    u = m^/(sqrt(v^) + eps) + wd*p;  r = |p|/|u| unless either is 0 (then 1);  p -= (lr*r)*u
The norms are float32 reductions (apex), so they overflow to inf and a NaN norm gives a NaN ratio (apex tests
``!= 0``).
"""
from __future__ import annotations

import numpy as np

from ..core.numerics import norm32
from .adam import lerp
from .base import F32, ReferenceOptimizer


class LAMB(ReferenceOptimizer):
    """Layer-wise adaptive moments (LAMB), per-tensor trust ratio, decoupled decay."""
    defaults = dict(lr=1e-3, betas=(0.9, 0.999), eps=1e-6, weight_decay=0.01, bias_correction=True, maximize=False)
    all_state_names = ("exp_avg", "exp_avg_sq")


    def _update(self, p, g, st, group, fresh):
        (b1, b2), t = group["betas"], st["step"]
        if group["maximize"]:
            g = -g
        m, v = st["exp_avg"], st["exp_avg_sq"]
        m[...] = lerp(m, g, 1 - b1)
        v[...] = v * F32(b2) + F32(1 - b2) * g * g
        bc1, bc2 = (1 - b1 ** t, 1 - b2 ** t) if group["bias_correction"] else (1.0, 1.0)
        # the GPU's apply pass re-reads the moments it stored: u from their stored values (state_dtype)
        mr, vr = self._round_state(m), self._round_state(v)
        u = (mr / F32(bc1)) / (np.sqrt(vr / F32(bc2)) + F32(group["eps"])) + F32(group["weight_decay"]) * p
        pn, un = norm32(p), norm32(u)
        r = F32(1) if pn == 0 or un == 0 else pn / un
        p -= (F32(group["lr"]) * r) * u
