"""Adagrad on the GPU: ``shaders/adagrad.wgsl``'s update function on the engine's elementwise driver."""
from __future__ import annotations

from ..engine import Optimizer, Pass, by_step
from ..reference import adagrad as ref


class Adagrad(Optimizer):
    """Adagrad (Duchi et al. 2011): torch.optim.Adagrad's semantics.

        g = -g if maximize;  g += weight_decay * p;  clr = lr / (1 + (t - 1) * lr_decay)
        sum += g^2;  p -= clr * g / (sqrt(sum) + eps)

    Args:
        params: dict name -> array (float32, float16 or bfloat16), torch tensors (``model.parameters()``), or
            a list of param-group dicts.
        lr (1e-2): learning rate.  lr_decay (0): the step size decay.  weight_decay (0): L2 penalty.
        initial_accumulator_value (0): where ``sum`` starts.  eps (1e-10): added to the denominator.
        maximize (False): ascend.
    State: step, sum.
    """
    spec = ref.Adagrad
    WIDE = {**Optimizer.WIDE, "bfloat16+master": False}  # (as SGD's: one state; PERF_NOTES 54)
    shader = "adagrad.wgsl"
    fields = ("wd", "neg_clr", "eps")
    flags = ("l2",)
    passes = (Pass("step", fn="update", reads=("sum",), writes=("sum",)),)

    @by_step
    def fill(self, g, t, fresh, sel):
        cols = dict(wd=g["weight_decay"], neg_clr=-(g["lr"] / (1 + (t - 1) * g["lr_decay"])), eps=g["eps"])
        return cols, dict(l2=g["weight_decay"] != 0)
