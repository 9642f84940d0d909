"""NAdamW on the GPU: ``shaders/nadam.wgsl``'s update function on the engine's elementwise driver."""
from __future__ import annotations

import numpy as np

from ..engine import Optimizer, Pass
from ..reference import nadam as ref

STATES = ("exp_avg", "exp_avg_sq")


class NAdamW(Optimizer):
    """NAdam (Dozat 2016) with decoupled weight decay: torch.optim.NAdam(decoupled_weight_decay=True).

        g = -g if maximize;  p *= 1 - lr * weight_decay
        mu_t = b1 * (1 - 0.5 * 0.96^(t * momentum_decay));  mu_product *= mu_t (float32, per tensor)
        m = lerp(m, g, 1 - b1);  v = b2 * v + (1 - b2) * g^2;  d = sqrt(v / (1 - b2^t)) + eps
        p -= lr * (1 - mu_t) / (1 - mu_product) * g / d + lr * mu_{t+1} / (1 - mu_product * mu_{t+1}) * m / d

    Args:
        params: dict name -> array (float32, float16 or bfloat16), torch tensors (``model.parameters()``), or
            a list of param-group dicts.
        lr (2e-3), betas ((0.9, 0.999)), eps (1e-8), weight_decay (1e-2, decoupled), momentum_decay (4e-3),
        maximize (False).
    State: step, exp_avg, exp_avg_sq, mu_product (0-d).
    """
    spec = ref.NAdamW
    shader = "nadam.wgsl"
    fields = ("decay", "omb1", "b2", "omb2", "bc2", "eps", "c1", "c2")
    flags = ("decoupled",)
    passes = (Pass("step", fn="update", reads=STATES, writes=STATES),)

    def fill(self, g, t, fresh, sel):
        lr, (b1, b2), wd, psi = g["lr"], g["betas"], g["weight_decay"], g["momentum_decay"]
        mu, mu_next = ref.nadam_mu(b1, psi, t), ref.nadam_mu(b1, psi, t + 1)
        # mu_product advances in float32, as torch keeps it; the coefficients are formed in float64.
        mp = (self._pending["mu_product"][sel] * mu.astype(np.float32)).astype(np.float32)
        self._pending["mu_product"][sel] = mp
        mp = mp.astype(np.float64)
        cols = dict(decay=1 - lr * wd, omb1=1 - b1, b2=b2, omb2=1 - b2, bc2=1 - b2 ** t, eps=g["eps"],
                    c1=-lr * (1 - mu) / (1 - mp), c2=-lr * mu_next / (1 - mp * mu_next))
        return cols, dict(decoupled=wd != 0)
