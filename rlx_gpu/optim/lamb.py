"""LAMB on the GPU: ``shaders/lamb.wgsl``, three passes (moments with per-block norms, one trust ratio per
tensor, the update) on the engine's elementwise and per-tensor drivers."""
from __future__ import annotations

from ..engine import Optimizer, Pass, by_step
from ..reference import lamb as ref

STATES = ("exp_avg", "exp_avg_sq")


class LAMB(Optimizer):
    """Layer-wise adaptive moments for large batches (You et al. 2019), as apex's FusedLAMB.

        g = -g if maximize;  g += weight_decay * p unless adam_w_mode
        m = b1 * m + b3 * g (b3 = 1 - b1 with grad_averaging, else 1);  v = b2 * v + (1 - b2) * g^2
        u = (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps) (+ weight_decay * p in adam_w_mode)
        r = |p| / |u| where weight_decay != 0 or use_nvlamb (1 if either norm is 0), else 1;  p -= lr * r * u

    apex clips the global grad norm at ``max_grad_norm=1.0`` first: that is ``clip_grad_norm=`` here, whose default
    for LAMB is 1.0 (``clip_grad_norm=None`` turns it off).

    Args:
        params: dict name -> array (float32, float16 or bfloat16), torch tensors (``model.parameters()``), or
            a list of param-group dicts.
        lr (1e-3), betas ((0.9, 0.999)), eps (1e-6: added to sqrt(v^)), weight_decay (0.01), bias_correction
        (True), maximize (False), adam_w_mode (True: decay inside the update; False: L2 on the grad),
        grad_averaging (True), use_nvlamb (False: the trust ratio only where weight_decay != 0, as apex).
    State: step, exp_avg, exp_avg_sq.
    """
    spec = ref.LAMB
    VPACK = False  # (scalar bfloat16 rounding won: 0.69 vs 0.60-0.67 of copy on the H200, PERF_NOTES 54)
    F16ROUND = True  # (float16 states' round_state by the hardware's conversion, the same bits: 1.125 -> 1.023 ms, PERF_NOTES 65)
    shader = "lamb.wgsl"
    fields = ("b1", "b3", "b2", "omb2", "bc1", "bc2", "eps", "wd", "lr")
    flags = ("trust", "l2")
    passes = (Pass("moments", fn="moments", reads=STATES, writes=STATES, param="r", reduce="xy"),
              Pass("trust_ratio", kind="per_tensor", fn="trust_ratio"),
              Pass("apply", fn="apply", reads=STATES, grad=""))

    @by_step
    def fill(self, g, t, fresh, sel):
        b1, b2 = g["betas"]
        bc = g["bias_correction"]
        cols = dict(b1=b1, b3=1 - b1 if g["grad_averaging"] else 1.0, b2=b2, omb2=1 - b2,
                    bc1=1 - b1 ** t if bc else 1.0, bc2=1 - b2 ** t if bc else 1.0, eps=g["eps"],
                    wd=g["weight_decay"], lr=g["lr"])
        return cols, dict(trust=ref.trusts(g), l2=not g["adam_w_mode"])
