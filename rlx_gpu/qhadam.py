"""QHAdamW on the GPU (``shaders/qhadam.wgsl``; the update rule is in :mod:`rlx_gpu.reference.qhadam`)."""
from __future__ import annotations

from .optimizer import Optimizer
from .reference import qhadam as ref

MIX1, MIX2, DECAY, EPS = 4, 8, 16, 32


class QHAdamW(Optimizer):
    """Quasi-hyperbolic Adam with decoupled weight decay (Ma & Yarats 2019); ``nus=(1, 1)`` is AdamW.

    Args:
        params: dict name -> float32 array, or a list of param-group dicts.
        lr: learning rate. betas: moment decay rates (bias correction folded in). nus: weights of the moments
        against the raw grad (suggested (0.7, 1.0) with betas (0.995, 0.999)). eps: added to the denominator.
        weight_decay: decoupled. device: adapter selector.
    """
    spec = ref.QHAdamW
    shader = "qhadam.wgsl"

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), nus=(1.0, 1.0), eps=1e-8, weight_decay=0.0, *,
                 device=None, lr_scale=None, clip_grad_norm=None,
                 skip_nonfinite=False):
        super().__init__(params, device=device, lr_scale=lr_scale, clip_grad_norm=clip_grad_norm, skip_nonfinite=skip_nonfinite, lr=lr, betas=betas, nus=nus, eps=eps, weight_decay=weight_decay)

    def _fill(self, g, t, fresh, rec, sel):
        lr, (b1, b2), (nu1, nu2), wd, eps = g["lr"], g["betas"], g["nus"], g["weight_decay"], g["eps"]
        b1a, b2a = ref.qh_beta(b1, t), ref.qh_beta(b2, t)
        rec[:, 1] = 1 - lr * wd
        rec[:, 2] = b1a
        rec[:, 3] = 1 - b1a
        rec[:, 4] = b2a
        rec[:, 5] = 1 - b2a
        rec[:, 6] = nu1
        rec[:, 7] = 1 - nu1
        rec[:, 8] = nu2
        rec[:, 9] = 1 - nu2
        rec[:, 10] = eps
        rec[:, 11] = -lr
        return ((MIX1 if nu1 != 1.0 else 0) | (MIX2 if nu2 != 1.0 else 0) | (DECAY if wd != 0 else 0)
                | (EPS if eps != 0.0 else 0))
