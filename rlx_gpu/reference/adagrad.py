"""NumPy twin of Adagrad (torch.optim.Adagrad).

    g = -g if maximize;  g += wd*p;  clr = lr / (1 + (t-1)*lr_decay)
    sum += g*g;  p -= clr * g / (sqrt(sum) + eps);  sum starts at initial_accumulator_value
"""
from __future__ import annotations

import numpy as np

from .base import F32, ReferenceOptimizer


class Adagrad(ReferenceOptimizer):
    """Adagrad (Duchi et al. 2011), as torch.optim.Adagrad."""
    defaults = dict(lr=1e-2, lr_decay=0.0, weight_decay=0.0, initial_accumulator_value=0.0, eps=1e-10,
                    maximize=False)
    all_state_names = ("sum",)
    eager_state = ("sum",)

    def __init__(self, params, lr=1e-2, lr_decay=0.0, weight_decay=0.0, initial_accumulator_value=0.0, eps=1e-10,
                 maximize=False, lr_scale=None, clip_grad_norm=None,
                 skip_nonfinite=False):
        super().__init__(params, lr_scale=lr_scale, clip_grad_norm=clip_grad_norm, skip_nonfinite=skip_nonfinite, lr=lr, lr_decay=lr_decay, weight_decay=weight_decay,
                         initial_accumulator_value=initial_accumulator_value, eps=eps, maximize=maximize)

    @classmethod
    def init_value(cls, state, group):
        return group["initial_accumulator_value"]

    def _update(self, p, g, st, group, fresh):
        if group["maximize"]:
            g = -g
        if group["weight_decay"] != 0:
            g = g + F32(group["weight_decay"]) * p
        clr = group["lr"] / (1 + (st["step"] - 1) * group["lr_decay"])
        s = st["sum"]
        s += g * g
        p += F32(-clr) * g / (np.sqrt(s) + F32(group["eps"]))
