"""MARS-AdamW on the GPU (``shaders/mars.wgsl``; the update rule is in :mod:`rlx_gpu.reference.mars`).

Three passes per step: per-block sums of |c|^2 for 2-D tensors, one norm per tensor, the update.
"""
from __future__ import annotations

import numpy as np

from .optimizer import Optimizer
from .reference import mars as ref

MATRIX = 4


class Mars(Optimizer):
    """MARS-AdamW (Yuan et al. 2024, approximate variant): for 2-D tensors, AdamW on the variance-reduced
    gradient c = g + gamma*b1/(1-b1)*(g - g_prev), normalised to unit Frobenius norm when larger; other
    tensors take plain AdamW with the ``*_1d`` hyperparameters.

    Args:
        params: dict name -> float32 array, or a list of param-group dicts.
        lr, betas, eps, weight_decay: for 2-D tensors. gamma: the variance-reduction scale.
        lr_1d, betas_1d, weight_decay_1d: AdamW for tensors that are not 2-D. device: adapter selector.
    """
    spec = ref.Mars
    shader = "mars.wgsl"
    entries = ("norms", "scale", "step")
    per_tensor = ("scale",)

    def __init__(self, params, lr=3e-3, betas=(0.95, 0.99), eps=1e-8, weight_decay=0.0, gamma=0.025, lr_1d=3e-3,
                 betas_1d=(0.9, 0.95), weight_decay_1d=0.1, *, device=None, lr_scale=None, clip_grad_norm=None,
                 skip_nonfinite=False):
        super().__init__(params, device=device, lr_scale=lr_scale, clip_grad_norm=clip_grad_norm, skip_nonfinite=skip_nonfinite, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, gamma=gamma,
                         lr_1d=lr_1d, betas_1d=betas_1d, weight_decay_1d=weight_decay_1d)
        self._matrix = np.array([len(self._shapes[n]) == 2 for n in self._names])
        self._scratch = self.device.buffer(4 * (self.layout.total_blocks + len(self._names)), "Mars.scratch")

    def _buffers(self, chunk):
        return dict(super()._buffers(chunk), scratch=self._scratch)

    def _fill(self, g, t, fresh, rec, sel):
        mat = self._matrix[sel]
        b1, b2 = np.where(mat, g["betas"][0], g["betas_1d"][0]), np.where(mat, g["betas"][1], g["betas_1d"][1])
        bc1, bc2 = 1 - b1 ** t, 1 - b2 ** t
        rec[:, 1] = g["gamma"] * (g["betas"][0] / (1.0 - g["betas"][0]))
        rec[:, 2] = b1
        rec[:, 3] = 1 - b1
        rec[:, 4] = b2
        rec[:, 5] = 1 - b2
        rec[:, 6] = np.where(mat, 1 / np.sqrt(bc2), np.sqrt(bc2))
        rec[:, 7] = g["eps"]
        rec[:, 8] = bc1
        rec[:, 9] = np.where(mat, -g["lr"], -g["lr_1d"] / bc1)
        rec[:, 10] = np.where(mat, g["weight_decay"], 1 - g["lr_1d"] * g["weight_decay_1d"])
        return np.where(mat, MATRIX, 0).astype(np.uint32)
