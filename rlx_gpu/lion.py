"""Lion on the GPU (``shaders/lion.wgsl``; the update rule is in :mod:`rlx_gpu.reference.lion`)."""
from __future__ import annotations

from .optimizer import Optimizer
from .reference import lion as ref

DECAY = 16


class Lion(Optimizer):
    """Lion (Chen et al. 2023): the sign of an interpolated momentum, decoupled weight decay.

    Args:
        params: dict name -> float32 array, or a list of param-group dicts.
        lr: learning rate (typically 3-10x smaller than AdamW's). betas: interpolation (b1) and momentum
        (b2) rates. weight_decay: decoupled. device: adapter selector.
    """
    spec = ref.Lion
    shader = "lion.wgsl"

    def __init__(self, params, lr=1e-4, betas=(0.9, 0.99), weight_decay=0.0, *, device=None, lr_scale=None, clip_grad_norm=None,
                 skip_nonfinite=False):
        super().__init__(params, device=device, lr_scale=lr_scale, clip_grad_norm=clip_grad_norm, skip_nonfinite=skip_nonfinite, lr=lr, betas=betas, weight_decay=weight_decay)

    def _fill(self, g, t, fresh, rec, sel):
        lr, (b1, b2), wd = g["lr"], g["betas"], g["weight_decay"]
        rec[:, 1] = 1 - lr * wd
        rec[:, 2] = b1
        rec[:, 3] = 1 - b1
        rec[:, 4] = b2
        rec[:, 5] = 1 - b2
        rec[:, 6] = -lr
        return DECAY if wd != 0 else 0
