"""RMSprop on the GPU: ``shaders/rmsprop.wgsl``'s update function on the engine's elementwise driver."""
from __future__ import annotations

from ..engine import Optimizer, Pass, by_step
from ..reference import rmsprop as ref

STATES = ("square_avg", "momentum_buffer", "grad_avg")


class RMSprop(Optimizer):
    """RMSprop (Hinton 2012) with eps outside the square root: torch.optim.RMSprop's semantics.

        g = -g if maximize;  g += weight_decay * p;  s = alpha * s + (1 - alpha) * g^2
        centered: a = lerp(a, g, 1 - alpha), d = sqrt(s - a^2) + eps  else d = sqrt(s) + eps
        momentum mu > 0: b = mu * b + g / d, p -= lr * b  else p -= lr * g / d

    Args:
        params: dict name -> array (float32, float16 or bfloat16), torch tensors (``model.parameters()``), or
            a list of param-group dicts.
        lr (1e-2): learning rate.  alpha (0.99): smoothing constant.  eps (1e-8): added to the denominator.
        weight_decay (0): L2 penalty.  momentum (0): momentum factor.  centered (False): normalise by the
        estimated variance of the grad.  maximize (False): ascend.
    State: step, square_avg[, momentum_buffer][, grad_avg].
    """
    spec = ref.RMSprop
    WIDE = {**Optimizer.WIDE, "bfloat16+master": False}  # (as SGD's: one state; PERF_NOTES 54)
    shader = "rmsprop.wgsl"
    fields = ("wd", "alpha", "oma", "eps", "mu", "neg_lr")
    flags = ("centered", "momentum", "l2")
    passes = (Pass("step", fn="update", reads=STATES, writes=STATES),)

    @by_step
    def fill(self, g, t, fresh, sel):
        cols = dict(wd=g["weight_decay"], alpha=g["alpha"], oma=1 - g["alpha"], eps=g["eps"], mu=g["momentum"],
                    neg_lr=-g["lr"])
        return cols, dict(centered=g["centered"], momentum=g["momentum"] > 0, l2=g["weight_decay"] != 0)
