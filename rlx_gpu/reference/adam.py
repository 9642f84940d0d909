"""NumPy twins of Adam and AdamW (torch.optim semantics, torch's order of float32 operations).

    g = -g if maximize;  Adam: g += wd*p  |  AdamW: p *= 1 - lr*wd
    m = lerp(m, g, 1-b1);  v = b2*v + (1-b2)*g*g;  amsgrad: vmax = max(vmax, v), v := vmax
    p -= lr/(1-b1^t) * m / (sqrt(v)/sqrt(1-b2^t) + eps)
"""
from __future__ import annotations

import math

import numpy as np

from .base import F32, ReferenceOptimizer


def lerp(a: np.ndarray, b: np.ndarray, w: float) -> np.ndarray:
    """torch.lerp with a scalar weight, in float32 (torch switches formula at w = 0.5)."""
    w = F32(w)
    return a + w * (b - a) if w < 0.5 else b - (b - a) * (F32(1) - w)


def decay_and_moments(p, g, st, group, decoupled: bool):
    """The block Adam, AdamW and RAdam share (shaders/adam_moments.wgsl is the kernels'), in place on ``p`` and the
    moments: g negated for maximize; weight decay decoupled (p *= 1 - lr*wd) or L2 (g += wd*p);
    m = lerp(m, g, 1-b1); v = b2*v + (1-b2)*g*g. Returns (m, v)."""
    lr, (b1, b2), wd = group["lr"], group["betas"], group["weight_decay"]
    if group["maximize"]:
        g = -g
    if wd != 0:
        if decoupled:
            p *= F32(1 - lr * wd)
        else:
            g = g + F32(wd) * p
    m, v = st["exp_avg"], st["exp_avg_sq"]
    m[...] = lerp(m, g, 1 - b1)
    v[...] = v * F32(b2) + F32(1 - b2) * g * g
    return m, v


class Adam(ReferenceOptimizer):
    """Adam (Kingma & Ba 2014) with L2 weight decay, as torch.optim.Adam."""
    supports_complex = True  # (a complex param as its view_as_real: how torch steps one)
    defaults = dict(lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, amsgrad=False, maximize=False)
    all_state_names = ("exp_avg", "exp_avg_sq", "max_exp_avg_sq")
    quantizable = {"exp_avg": True, "exp_avg_sq": False, "max_exp_avg_sq": False}
    sparse_refusal = "Adam does not support sparse gradients, please consider SparseAdam instead"
    decoupled = False

    @classmethod
    def state_names(cls, group):
        return cls.all_state_names if group["amsgrad"] else cls.all_state_names[:2]

    def _update(self, p, g, st, group, fresh):
        lr, (b1, b2), eps = group["lr"], group["betas"], group["eps"]
        t = st["step"]
        m, v = decay_and_moments(p, g, st, group, self.decoupled)
        if group["amsgrad"]:
            np.maximum(st["max_exp_avg_sq"], v, out=st["max_exp_avg_sq"])
            v = st["max_exp_avg_sq"]
        step_size = lr / (1 - b1 ** t)
        denom = np.sqrt(v) / F32(math.sqrt(1 - b2 ** t)) + F32(eps)
        p += F32(-step_size) * m / denom


class AdamW(Adam):
    """AdamW (Loshchilov & Hutter 2019): Adam with decoupled weight decay, as torch.optim.AdamW."""
    defaults = dict(Adam.defaults, weight_decay=1e-2)
    decoupled = True
    torch_group_keys = {"decoupled_weight_decay": True}  # (in torch's groups and state dicts, as torch's AdamW has it)
    torch_forced_keys = ("decoupled_weight_decay",)

