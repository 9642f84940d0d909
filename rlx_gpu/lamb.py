"""LAMB on the GPU (``shaders/lamb.wgsl``; the update rule is in :mod:`rlx_gpu.reference.lamb`).

Three passes per step: moments and per-block partial norms, one trust ratio per tensor, the update.
"""
from __future__ import annotations

from .optimizer import Optimizer
from .reference import lamb as ref


class LAMB(Optimizer):
    """Layer-wise adaptive moments for large batches (You et al. 2019), as apex FusedLAMB.

    Args:
        params: dict name -> float32 array, or a list of param-group dicts.
        lr: learning rate. betas: moment decay rates. eps: added to ``sqrt(v^)``. weight_decay: decoupled,
        added to the update direction before the trust ratio. bias_correction: divide the moments by
        ``1 - beta^t``. maximize: ascend. device: adapter selector (see :func:`rlx_gpu.get_device`).
    """
    spec = ref.LAMB
    shader = "lamb.wgsl"
    entries = ("moments", "trust_ratio", "apply")
    per_tensor = ("trust_ratio",)

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-6, weight_decay=0.01, bias_correction=True,
                 maximize=False, *, device=None, lr_scale=None, clip_grad_norm=None,
                 skip_nonfinite=False):
        super().__init__(params, device=device, lr_scale=lr_scale, clip_grad_norm=clip_grad_norm, skip_nonfinite=skip_nonfinite, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay,
                         bias_correction=bias_correction, maximize=maximize)
        self._partials = self.device.buffer(8 * max(1, self.layout.total_blocks), "LAMB.partials")
        self._ratio = self.device.buffer(4 * len(self._names), "LAMB.ratio")

    def _buffers(self, chunk):
        return dict(super()._buffers(chunk), partials=self._partials, ratio=self._ratio)

    def _fill(self, g, t, fresh, rec, sel):
        b1, b2 = g["betas"]
        rec[:, 1] = 1 - b1
        rec[:, 2] = b2
        rec[:, 3] = 1 - b2
        rec[:, 4] = 1 - b1 ** t if g["bias_correction"] else 1.0
        rec[:, 5] = 1 - b2 ** t if g["bias_correction"] else 1.0
        rec[:, 6] = g["eps"]
        rec[:, 7] = g["weight_decay"]
        rec[:, 8] = g["lr"]
        return 0
