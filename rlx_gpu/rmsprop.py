"""RMSprop on the GPU (``shaders/rmsprop.wgsl``; the update rule is in :mod:`rlx_gpu.reference.rmsprop`)."""
from __future__ import annotations

from .optimizer import Optimizer
from .reference import rmsprop as ref

CENTERED, MOMENTUM, L2 = 4, 8, 16


class RMSprop(Optimizer):
    """RMSprop with eps outside the square root (torch.optim.RMSprop semantics).

    Args:
        params: dict name -> float32 array, or a list of param-group dicts.
        lr: learning rate. alpha: smoothing constant of the squared-grad average. eps: added to the
        denominator. weight_decay: L2 penalty added to the grad. momentum: momentum factor.
        centered: normalise by the estimated variance of the grad. maximize: ascend.
        device: adapter selector (see :func:`rlx_gpu.get_device`).
    """
    spec = ref.RMSprop
    shader = "rmsprop.wgsl"

    def __init__(self, params, lr=1e-2, alpha=0.99, eps=1e-8, weight_decay=0.0, momentum=0.0, centered=False,
                 maximize=False, *, device=None, lr_scale=None, clip_grad_norm=None,
                 skip_nonfinite=False):
        super().__init__(params, device=device, lr_scale=lr_scale, clip_grad_norm=clip_grad_norm, skip_nonfinite=skip_nonfinite, lr=lr, alpha=alpha, eps=eps, weight_decay=weight_decay,
                         momentum=momentum, centered=centered, maximize=maximize)

    def _fill(self, g, t, fresh, rec, sel):
        rec[:, 1] = g["weight_decay"]
        rec[:, 2] = g["alpha"]
        rec[:, 3] = 1 - g["alpha"]
        rec[:, 4] = g["eps"]
        rec[:, 5] = g["momentum"]
        rec[:, 6] = -g["lr"]
        return ((CENTERED if g["centered"] else 0) | (MOMENTUM if g["momentum"] > 0 else 0)
                | (L2 if g["weight_decay"] != 0 else 0))
