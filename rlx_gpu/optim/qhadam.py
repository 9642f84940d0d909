"""QHAdamW on the GPU: ``shaders/qhadam.wgsl``'s update function on the engine's elementwise driver."""
from __future__ import annotations

from ..engine import Optimizer, Pass, by_step
from ..reference import qhadam as ref

STATES = ("exp_avg", "exp_avg_sq")


class QHAdamW(Optimizer):
    """Quasi-hyperbolic Adam with decoupled weight decay (Ma & Yarats 2019, qhoptim's QHAdamW); nus (1, 1) is AdamW.

        p *= 1 - lr * weight_decay;  bias correction folded into the betas: w_i <- 1 + b_i * w_i, b_i' = 1 - 1/w_i
        m = b1' * m + (1 - b1') * g;  v = b2' * v + (1 - b2') * g^2
        p -= lr * (nu1 * m + (1 - nu1) * g) / (sqrt(nu2 * v + (1 - nu2) * g^2) + eps)

    Args:
        params: dict name -> array (float32, float16 or bfloat16), torch tensors (``model.parameters()``), or
            a list of param-group dicts.
        lr (1e-3), betas ((0.9, 0.999)), nus ((1.0, 1.0); suggested (0.7, 1.0) with betas (0.995, 0.999)),
        eps (1e-8), weight_decay (0, decoupled).
    State: step, exp_avg, exp_avg_sq.
    """
    spec = ref.QHAdamW
    shader = "qhadam.wgsl"
    fields = ("decay", "b1", "omb1", "b2", "omb2", "nu1", "omnu1", "nu2", "omnu2", "eps", "neg_lr")
    flags = ("mix1", "mix2", "decay", "eps")
    passes = (Pass("step", fn="update", reads=STATES, writes=STATES),)

    @by_step
    def fill(self, g, t, fresh, sel):
        lr, (b1, b2), (nu1, nu2), wd, eps = g["lr"], g["betas"], g["nus"], g["weight_decay"], g["eps"]
        b1a, b2a = ref.qh_beta(b1, t), ref.qh_beta(b2, t)
        cols = dict(decay=1 - lr * wd, b1=b1a, omb1=1 - b1a, b2=b2a, omb2=1 - b2a, nu1=nu1, omnu1=1 - nu1, nu2=nu2,
                    omnu2=1 - nu2, eps=eps, neg_lr=-lr)
        return cols, dict(mix1=nu1 != 1.0, mix2=nu2 != 1.0, decay=wd != 0, eps=eps != 0.0)
