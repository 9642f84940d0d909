"""Adagrad on the GPU (``shaders/adagrad.wgsl``; the update rule is in :mod:`rlx_gpu.reference.adagrad`)."""
from __future__ import annotations

from .optimizer import Optimizer
from .reference import adagrad as ref

L2 = 16


class Adagrad(Optimizer):
    """Adagrad (torch.optim.Adagrad semantics).

    Args:
        params: dict name -> float32 array, or a list of param-group dicts.
        lr: learning rate. lr_decay: the step size is lr / (1 + (t-1)*lr_decay). weight_decay: L2 penalty
        added to the grad. initial_accumulator_value: start value of ``sum``. eps: added to the
        denominator. maximize: ascend. device: adapter selector (see :func:`rlx_gpu.get_device`).
    """
    spec = ref.Adagrad
    shader = "adagrad.wgsl"

    def __init__(self, params, lr=1e-2, lr_decay=0.0, weight_decay=0.0, initial_accumulator_value=0.0, eps=1e-10,
                 maximize=False, *, device=None, lr_scale=None, clip_grad_norm=None,
                 skip_nonfinite=False):
        super().__init__(params, device=device, lr_scale=lr_scale, clip_grad_norm=clip_grad_norm, skip_nonfinite=skip_nonfinite, lr=lr, lr_decay=lr_decay, weight_decay=weight_decay,
                         initial_accumulator_value=initial_accumulator_value, eps=eps, maximize=maximize)

    def _fill(self, g, t, fresh, rec, sel):
        rec[:, 1] = g["weight_decay"]
        rec[:, 2] = -(g["lr"] / (1 + (t - 1) * g["lr_decay"]))
        rec[:, 3] = g["eps"]
        return L2 if g["weight_decay"] != 0 else 0
