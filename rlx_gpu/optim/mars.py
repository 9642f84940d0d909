"""MARS-AdamW on the GPU: ``shaders/mars.wgsl``, three passes (per-block sums of |c|^2 for 2-D tensors, one norm
per tensor, the update) on the engine's elementwise and per-tensor drivers."""
from __future__ import annotations

import numpy as np

from ..engine import Optimizer, Pass
from ..reference import mars as ref

STATES = ("exp_avg", "exp_avg_sq", "last_grad")


class Mars(Optimizer):
    """MARS-AdamW (Yuan et al. 2024, AGI-Arena/MARS, approximate variant): for 2-D tensors, AdamW on the
    variance-reduced gradient, normalised to unit Frobenius norm when larger; other tensors take plain AdamW with
    the ``*_1d`` hyperparameters.

        2-D:  c = g + gamma * b1 / (1 - b1) * (g - g_prev);  if |c|_F > 1: c /= |c|_F
              m = b1 * m + (1 - b1) * c;  v = b2 * v + (1 - b2) * c^2
              p -= lr * (weight_decay * p + m / ((sqrt(v) / sqrt(1 - b2^t) + eps) * (1 - b1^t)))
        else: AdamW with lr_1d, betas_1d, weight_decay_1d.   Every tensor: g_prev = g.

    Args:
        params: dict name -> array (float32, float16 or bfloat16), torch tensors (``model.parameters()``), or
            a list of param-group dicts.
        lr (3e-3), betas ((0.95, 0.99)), eps (1e-8), weight_decay (0), gamma (0.025): for 2-D tensors.
        lr_1d (3e-3), betas_1d ((0.9, 0.95)), weight_decay_1d (0.1): AdamW for the others (deprecated when
        given: route those tensors to AdamW with ``rlx_gpu.Partition``; they still work).
    State: step, exp_avg, exp_avg_sq, last_grad.
    """
    spec = ref.Mars
    WIDE = True  # (pairs of vec4s won in float16 too: H200 run, PERF_NOTES 54)
    shader = "mars.wgsl"
    fields = ("k", "b1", "omb1", "b2", "omb2", "c2", "eps", "bc1", "neg_lr", "wd")
    flags = ("matrix",)
    passes = (Pass("norms", fn="norms", reads=("last_grad",), param="", reduce="x", only_if="matrix", signed=False),
              Pass("scale", kind="per_tensor", fn="scale", only_if="matrix"),
              Pass("step", fn="update", reads=STATES, writes=STATES, signed=False))

    def __init__(self, params, *args, **kwargs):
        ref.warn_1d(type(self).__name__, params, kwargs)
        super().__init__(params, *args, **kwargs)

    def fill(self, g, t, fresh, sel):
        mat = np.array([len(self._shapes[self._names[i]]) == 2 for i in sel])
        b1, b2 = np.where(mat, g["betas"][0], g["betas_1d"][0]), np.where(mat, g["betas"][1], g["betas_1d"][1])
        bc1, bc2 = 1 - b1 ** t, 1 - b2 ** t
        cols = dict(k=g["gamma"] * (g["betas"][0] / (1.0 - g["betas"][0])), b1=b1, omb1=1 - b1, b2=b2, omb2=1 - b2,
                    c2=np.where(mat, 1 / np.sqrt(bc2), np.sqrt(bc2)), eps=g["eps"], bc1=bc1,
                    neg_lr=np.where(mat, -g["lr"], -g["lr_1d"] / bc1),
                    wd=np.where(mat, g["weight_decay"], 1 - g["lr_1d"] * g["weight_decay_1d"]))
        return cols, dict(matrix=mat)
