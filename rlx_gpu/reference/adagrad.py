"""NumPy twin of Adagrad (torch.optim.Adagrad).

    g = -g if maximize;  g += wd*p;  clr = lr / (1 + (t-1)*lr_decay)
    sum += g*g;  p -= clr * g / (sqrt(sum) + eps);  sum starts at initial_accumulator_value
"""
from __future__ import annotations

import numpy as np

from .base import F32, ReferenceOptimizer


class Adagrad(ReferenceOptimizer):
    """Adagrad (Duchi et al. 2011), as torch.optim.Adagrad."""
    supports_complex = True  # (a complex param as its view_as_real: how torch steps one)
    defaults = dict(lr=1e-2, lr_decay=0.0, weight_decay=0.0, initial_accumulator_value=0.0, eps=1e-10,
                    maximize=False)
    all_state_names = ("sum",)
    eager_state = ("sum",)
    sparse_kind, sparse_states = "adagrad", ("sum",)  # RowSparse grads: torch's sparse branch

    @classmethod
    def check_sparse(cls, name, group):
        if group["weight_decay"] != 0:
            raise RuntimeError(f"Adagrad.step: sparse grad for {name!r}: weight_decay option is not compatible "
                               "with sparse gradients (torch)")

    @classmethod
    def sparse_scalars(cls, group, step, scale):
        return dict(rate=-(group["lr"] * scale / (1 + (step - 1) * group["lr_decay"])), eps=group["eps"])


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
