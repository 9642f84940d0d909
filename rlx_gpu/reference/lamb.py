"""NumPy twin of LAMB (You et al. 2019), as apex's FusedLAMB (``multi_tensor_lamb``'s two stages).

    g = -g if maximize;  g += wd*p unless adam_w_mode (L2 on the clipped grad)
    m = b1*m + b3*g (b3 = 1-b1 with grad_averaging, else 1);  v = b2*v + (1-b2)*g*g
    bias_correction: m^ = m/(1-b1^t), v^ = v/(1-b2^t)  else m^ = m, v^ = v
    u = m^/(sqrt(v^) + eps) (+ wd*p in adam_w_mode)
    trust ratio only where wd != 0 or use_nvlamb: r = |p|/|u| unless either is 0 (then 1); else r = 1
    p -= (lr*r)*u
apex clips the global grad norm at ``max_grad_norm=1.0`` before stage 1: here that is the shared
``clip_grad_norm=`` option, whose default for LAMB is apex's 1.0 (torch's clip factor, max/(norm + 1e-6), where
apex divides by norm/max: 1e-6 relative apart). The norms are float32 reductions (apex), so they overflow to inf
and a NaN norm gives a NaN ratio (apex tests ``!= 0``). Step counts are per tensor (apex counts per group).
"""
from __future__ import annotations

import numpy as np

from ..core.numerics import norm32
from .base import F32, ReferenceOptimizer


def trusts(group: dict) -> bool:
    """Whether apex applies the trust ratio to this group: weight decay != 0, or use_nvlamb."""
    return bool(group["use_nvlamb"]) or group["weight_decay"] != 0


class LAMB(ReferenceOptimizer):
    """Layer-wise adaptive moments (LAMB) as apex's FusedLAMB: per-tensor trust ratio where weight_decay != 0
    (every tensor with use_nvlamb), decoupled (adam_w_mode) or L2 decay, the global grad-norm clip at 1.0."""
    defaults = dict(lr=1e-3, betas=(0.9, 0.999), eps=1e-6, weight_decay=0.01, bias_correction=True, maximize=False,
                    adam_w_mode=True, grad_averaging=True, use_nvlamb=False)
    all_state_names = ("exp_avg", "exp_avg_sq")
    option_defaults = {"clip_grad_norm": 1.0}

    def _update(self, p, g, st, group, fresh):
        (b1, b2), t, wd = group["betas"], st["step"], F32(group["weight_decay"])
        if group["maximize"]:
            g = -g
        if not group["adam_w_mode"]:
            g = g + wd * p
        m, v = st["exp_avg"], st["exp_avg_sq"]
        m[...] = m * F32(b1) + F32(1 - b1 if group["grad_averaging"] else 1.0) * g
        v[...] = v * F32(b2) + F32(1 - b2) * g * g
        bc1, bc2 = (1 - b1 ** t, 1 - b2 ** t) if group["bias_correction"] else (1.0, 1.0)
        # the GPU's apply pass re-reads the moments it stored: u from their stored values (state_dtype)
        mr, vr = self._round_state(m), self._round_state(v)
        u = (mr / F32(bc1)) / (np.sqrt(vr / F32(bc2)) + F32(group["eps"]))
        if group["adam_w_mode"]:
            u = u + wd * p
        pn, un = norm32(p), norm32(u)
        r = F32(1) if not trusts(group) or pn == 0 or un == 0 else pn / un
        p -= (F32(group["lr"]) * r) * u
