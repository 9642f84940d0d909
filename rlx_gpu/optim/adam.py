"""Adam and AdamW on the GPU: ``shaders/adam.wgsl``'s update function on the engine's elementwise driver."""
from __future__ import annotations

import numpy as np

from ..engine import Optimizer, Pass, by_step
from ..reference import adam as ref

STATES = ("exp_avg", "exp_avg_sq", "max_exp_avg_sq")


class Adam(Optimizer):
    """Adam (Kingma & Ba 2014) with L2 weight decay: torch.optim.Adam's semantics, names and defaults.

        g = -g if maximize;  g += weight_decay * p
        m = lerp(m, g, 1 - b1);  v = b2 * v + (1 - b2) * g^2;  amsgrad: v_max = max(v_max, v), v := v_max
        p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)

    Args:
        params: dict name -> array (float32, float16 or bfloat16), torch tensors (``model.parameters()``), or a
            list of param-group dicts ``{"params": {...}, "lr": ...}`` whose keys override the defaults.
        lr (1e-3): learning rate.  betas ((0.9, 0.999)): decay rates of the first and second moments.
        eps (1e-8): added to the denominator after the bias correction of sqrt(v).
        weight_decay (0): L2 penalty added to the grad.  amsgrad (False): use the running maximum of v.
        maximize (False): ascend instead of descend.
    State (torch's names): step, exp_avg, exp_avg_sq[, max_exp_avg_sq].
    """
    spec = ref.Adam
    shader = "adam.wgsl"
    fields = ("decay", "wd", "omb1", "b2", "omb2", "neg_step", "bc2_sqrt", "eps")
    flags = ("amsgrad", "decoupled", "l2")
    passes = (Pass("step", fn="update", reads=STATES, writes=STATES),)

    @by_step
    def fill(self, g, t, fresh, sel):
        lr, (b1, b2), wd = g["lr"], g["betas"], g["weight_decay"]
        cols = dict(decay=1 - lr * wd, wd=wd, omb1=1 - b1, b2=b2, omb2=1 - b2, neg_step=-lr / (1 - b1 ** t),
                    bc2_sqrt=np.sqrt(1 - b2 ** t), eps=g["eps"])
        return cols, dict(amsgrad=g["amsgrad"], decoupled=wd != 0 and self.spec.decoupled,
                          l2=wd != 0 and not self.spec.decoupled)


class AdamW(Adam):
    """AdamW (Loshchilov & Hutter 2019): Adam with decoupled weight decay, torch.optim.AdamW's semantics.

        p *= 1 - lr * weight_decay;  then Adam's update with no L2 term

    Args:
        params: dict name -> array (float32, float16 or bfloat16), torch tensors (``model.parameters()``), or a
            list of param-group dicts.
        lr (1e-3): learning rate.  betas ((0.9, 0.999)): decay rates of the first and second moments.
        eps (1e-8): added to the denominator after the bias correction of sqrt(v).
        weight_decay (1e-2): decoupled: p *= 1 - lr * weight_decay before the update.
        amsgrad (False): use the running maximum of v.  maximize (False): ascend instead of descend.
    State: step, exp_avg, exp_avg_sq[, max_exp_avg_sq].
    """
    spec = ref.AdamW
