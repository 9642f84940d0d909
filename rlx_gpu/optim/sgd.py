"""SGD on the GPU: ``shaders/sgd.wgsl``'s update function on the engine's elementwise driver."""
from __future__ import annotations

import numpy as np

from ..engine import Optimizer, Pass, by_step
from ..reference import sgd as ref


class SGD(Optimizer):
    """Stochastic gradient descent with optional (Nesterov) momentum: torch.optim.SGD's semantics.

        g = -g if maximize;  g += weight_decay * p
        momentum mu: b = g at the first step, else b = mu * b + (1 - dampening) * g;  g = g + mu * b if nesterov else b
        p -= lr * g

    Args:
        params: dict name -> array (float32, float16 or bfloat16), torch tensors (``model.parameters()``), or
            a list of param-group dicts.
        lr (1e-3): learning rate.  momentum (0): momentum factor.  dampening (0): dampening of the momentum.
        weight_decay (0): L2 penalty added to the grad.  nesterov (False): Nesterov momentum (needs momentum > 0
        and dampening 0).  maximize (False): ascend.
    State: step[, momentum_buffer].
    """
    spec = ref.SGD
    WIDE = {**Optimizer.WIDE, "float16": True, "bfloat16+master": False}  # (H200 run, PERF_NOTES 54)
    shader = "sgd.wgsl"
    fields = ("wd", "mu", "omd", "neg_lr")
    flags = ("momentum", "nesterov", "l2", "seed")
    passes = (Pass("step", fn="update", reads=("momentum_buffer",), writes=("momentum_buffer",)),)

    @by_step
    def fill(self, g, t, fresh, sel):
        cols = dict(wd=g["weight_decay"], mu=g["momentum"], omd=1 - g["dampening"], neg_lr=-g["lr"])
        return cols, dict(momentum=g["momentum"] != 0, nesterov=g["nesterov"], l2=g["weight_decay"] != 0,
                          seed=np.array(["momentum_buffer" in f for f in fresh]))
