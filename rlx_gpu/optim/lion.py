"""Lion on the GPU: ``shaders/lion.wgsl``'s update function on the engine's elementwise driver."""
from __future__ import annotations

from ..engine import Optimizer, Pass, by_step
from ..reference import lion as ref


class Lion(Optimizer):
    """Lion (Chen et al. 2023, "Symbolic Discovery of Optimization Algorithms"; lion-pytorch's order).

        p *= 1 - lr * weight_decay;  p -= lr * sign(b1 * m + (1 - b1) * g)  (sign(0) = 0);  m = b2 * m + (1 - b2) * g

    Args:
        params: dict name -> array (float32, float16 or bfloat16), torch tensors (``model.parameters()``), or
            a list of param-group dicts.
        lr (1e-4; typically 3-10x smaller than AdamW's), betas ((0.9, 0.99)), weight_decay (0, decoupled).
    State: step, exp_avg.
    """
    spec = ref.Lion
    WIDE = False  # (pairs of vec4s lost in bfloat16 and float16, tied with master copies: PERF_NOTES 54)
    shader = "lion.wgsl"
    fields = ("decay", "b1", "omb1", "b2", "omb2", "neg_lr")
    flags = ("decay",)
    passes = (Pass("step", fn="update", reads=("exp_avg",), writes=("exp_avg",)),)

    @by_step
    def fill(self, g, t, fresh, sel):
        lr, (b1, b2), wd = g["lr"], g["betas"], g["weight_decay"]
        return dict(decay=1 - lr * wd, b1=b1, omb1=1 - b1, b2=b2, omb2=1 - b2, neg_lr=-lr), dict(decay=wd != 0)
