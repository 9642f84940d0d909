"""NumPy twin of NAdamW (torch.optim.NAdam with decoupled_weight_decay=True).

    g = -g if maximize;  p *= 1 - lr*wd
    mu_t = b1*(1 - 0.5*0.96^(t*psi)),  mu_{t+1} likewise;  mu_product *= mu_t  (float32, per tensor)
    m = lerp(m, g, 1-b1);  v = b2*v + (1-b2)*g*g;  d = sqrt(v/(1-b2^t)) + eps
    p += -lr*(1-mu_t)/(1-mu_product) * g/d;  p += -lr*mu_{t+1}/(1-mu_product*mu_{t+1}) * m/d
"""
from __future__ import annotations

import numpy as np

from .adam import lerp
from .base import F32, ReferenceOptimizer


def nadam_mu(b1: float, psi: float, t):
    return b1 * (1.0 - 0.5 * 0.96 ** (t * psi))


class NAdamW(ReferenceOptimizer):
    """NAdam (Dozat 2016) with decoupled weight decay, as torch.optim.NAdam(decoupled_weight_decay=True)."""
    supports_complex = True  # (a complex param as its view_as_real: how torch steps one)
    defaults = dict(lr=2e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2, momentum_decay=4e-3, maximize=False)
    torch_group_keys = {"decoupled_weight_decay": True}
    all_state_names = ("exp_avg", "exp_avg_sq", "mu_product")
    scalar_states = ("mu_product",)


    @classmethod
    def init_value(cls, state, group):
        return 1.0 if state == "mu_product" else 0.0

    def _update(self, p, g, st, group, fresh):
        lr, (b1, b2), eps, wd, psi = (group[k] for k in ("lr", "betas", "eps", "weight_decay", "momentum_decay"))
        t = st["step"]
        if group["maximize"]:
            g = -g
        if wd != 0:
            p *= F32(1 - lr * wd)
        mu, mu_next = nadam_mu(b1, psi, t), nadam_mu(b1, psi, t + 1)
        st["mu_product"] = np.array(st["mu_product"] * F32(mu), F32)
        mp = float(st["mu_product"])
        m, v = st["exp_avg"], st["exp_avg_sq"]
        m[...] = lerp(m, g, 1 - b1)
        v[...] = v * F32(b2) + F32(1 - b2) * g * g
        d = np.sqrt(v / F32(1 - b2 ** t)) + F32(eps)
        p += F32(-lr * (1 - mu) / (1 - mp)) * g / d
        p += F32(-lr * mu_next / (1 - mp * mu_next)) * m / d
