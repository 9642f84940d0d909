"""LAMB on the GPU: ``shaders/lamb.wgsl``, three passes (moments with per-block norms, one trust ratio per
tensor, the update) on the engine's elementwise and per-tensor drivers."""
from __future__ import annotations

from ..engine import Optimizer, Pass
from ..reference import lamb as ref

STATES = ("exp_avg", "exp_avg_sq")


class LAMB(Optimizer):
    """Layer-wise adaptive moments for large batches (You et al. 2019), as apex FusedLAMB (adam_w_mode).

        g = -g if maximize;  m = lerp(m, g, 1 - b1);  v = b2 * v + (1 - b2) * g^2
        u = (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps) + weight_decay * p   (no bias correction: m, v)
        r = |p| / |u| unless either is 0 (then 1);  p -= lr * r * u

    Args:
        params: dict name -> array (float32, float16 or bfloat16), torch tensors (``model.parameters()``), or
            a list of param-group dicts.
        lr (1e-3), betas ((0.9, 0.999)), eps (1e-6: added to sqrt(v^)), weight_decay (0.01: inside the trust
        ratio), bias_correction (True), maximize (False).
    State: step, exp_avg, exp_avg_sq.
    """
    spec = ref.LAMB
    shader = "lamb.wgsl"
    fields = ("omb1", "b2", "omb2", "bc1", "bc2", "eps", "wd", "lr")
    passes = (Pass("moments", fn="moments", reads=STATES, writes=STATES, param="r", reduce="xy"),
              Pass("trust_ratio", kind="per_tensor", fn="trust_ratio"),
              Pass("apply", fn="apply", reads=STATES, grad=""))

    def fill(self, g, t, fresh, sel):
        b1, b2 = g["betas"]
        bc = g["bias_correction"]
        cols = dict(omb1=1 - b1, b2=b2, omb2=1 - b2, bc1=1 - b1 ** t if bc else 1.0, bc2=1 - b2 ** t if bc else 1.0,
                    eps=g["eps"], wd=g["weight_decay"], lr=g["lr"])
        return cols, {}
