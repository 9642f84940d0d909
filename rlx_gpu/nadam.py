"""NAdamW on the GPU (``shaders/nadam.wgsl``; the update rule is in :mod:`rlx_gpu.reference.nadam`)."""
from __future__ import annotations

import numpy as np

from .optimizer import Optimizer
from .reference import nadam as ref

DECOUPLED = 8


class NAdamW(Optimizer):
    """NAdam with decoupled weight decay (torch.optim.NAdam with ``decoupled_weight_decay=True``).

    Args:
        params: dict name -> float32 array, or a list of param-group dicts.
        lr: learning rate. betas: moment decay rates. eps: added to the denominator. weight_decay: decoupled,
        ``p *= 1 - lr*wd``. momentum_decay: psi in mu_t = b1*(1 - 0.5*0.96^(t*psi)). maximize: ascend.
        device: adapter selector (see :func:`rlx_gpu.get_device`).
    """
    spec = ref.NAdamW
    shader = "nadam.wgsl"

    def __init__(self, params, lr=2e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2, momentum_decay=4e-3,
                 maximize=False, *, device=None, lr_scale=None, clip_grad_norm=None,
                 skip_nonfinite=False):
        super().__init__(params, device=device, lr_scale=lr_scale, clip_grad_norm=clip_grad_norm, skip_nonfinite=skip_nonfinite, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay,
                         momentum_decay=momentum_decay, maximize=maximize)

    def _fill(self, g, t, fresh, rec, sel):
        lr, (b1, b2), wd, psi = g["lr"], g["betas"], g["weight_decay"], g["momentum_decay"]
        mu, mu_next = ref.nadam_mu(b1, psi, t), ref.nadam_mu(b1, psi, t + 1)
        # mu_product advances in float32, as torch keeps it; the coefficients are formed in float64.
        mp = (self._pending["mu_product"][sel] * mu.astype(np.float32)).astype(np.float32)
        self._pending["mu_product"][sel] = mp
        mp = mp.astype(np.float64)
        rec[:, 1] = 1 - lr * wd
        rec[:, 2] = 1 - b1
        rec[:, 3] = b2
        rec[:, 4] = 1 - b2
        rec[:, 5] = 1 - b2 ** t
        rec[:, 6] = g["eps"]
        rec[:, 7] = -lr * (1 - mu) / (1 - mp)
        rec[:, 8] = -lr * mu_next / (1 - mp * mu_next)
        return DECOUPLED if wd != 0 else 0
