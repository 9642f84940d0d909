"""RAdam on the GPU: ``shaders/radam.wgsl``'s update function on the engine's elementwise driver."""
from __future__ import annotations

import numpy as np

from ..engine import Optimizer, Pass, by_step
from ..reference import radam as ref

STATES = ("exp_avg", "exp_avg_sq")


class RAdam(Optimizer):
    """Rectified Adam (Liu et al. 2020): torch.optim.RAdam's semantics; the rectification term and its
    rho_t > 5 switch are computed per tensor on the host.

        g = -g if maximize;  L2: g += weight_decay * p  |  decoupled: p *= 1 - lr * weight_decay
        m = lerp(m, g, 1 - b1);  v = b2 * v + (1 - b2) * g^2;  m^ = m / (1 - b1^t)
        rho_t > 5: p -= lr * m^ * r_t * sqrt(1 - b2^t) / (sqrt(v) + eps)  else  p -= lr * m^

    Args:
        params: dict name -> array (float32, float16 or bfloat16), torch tensors (``model.parameters()``), or
            a list of param-group dicts.
        lr (1e-3), betas ((0.9, 0.999)), eps (1e-8), weight_decay (0), decoupled_weight_decay (False),
        maximize (False).
    State: step, exp_avg, exp_avg_sq.
    """
    spec = ref.RAdam
    shader = "radam.wgsl"
    fields = ("decay", "wd", "omb1", "b2", "omb2", "bc1", "lr", "bc2_sqrt", "eps", "rect")
    flags = ("rectified", "decoupled", "l2")
    passes = (Pass("step", fn="update", reads=STATES, writes=STATES),)

    @by_step
    def fill(self, g, t, fresh, sel):
        lr, (b1, b2), wd = g["lr"], g["betas"], g["weight_decay"]
        rho_t, r = ref.radam_rect(b2, t)
        rect = rho_t > 5.0
        cols = dict(decay=1 - lr * wd, wd=wd, omb1=1 - b1, b2=b2, omb2=1 - b2, bc1=1 - b1 ** t, lr=lr,
                    bc2_sqrt=np.sqrt(1 - b2 ** t), eps=g["eps"], rect=np.where(rect, r, 0.0))
        decoupled = g["decoupled_weight_decay"]
        return cols, dict(rectified=rect, decoupled=wd != 0 and decoupled, l2=wd != 0 and not decoupled)
