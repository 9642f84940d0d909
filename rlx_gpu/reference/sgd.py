"""NumPy twin of SGD (torch.optim.SGD).

    g = -g if maximize;  g += wd*p
    momentum mu: b = g at the first step, else b = mu*b + (1-dampening)*g;  g = g + mu*b (nesterov) else b
    p -= lr*g
"""
from __future__ import annotations

from .base import F32, ReferenceOptimizer


class SGD(ReferenceOptimizer):
    """Stochastic gradient descent with optional (Nesterov) momentum, as torch.optim.SGD."""
    supports_complex = True  # (a complex param as its view_as_real: how torch steps one)
    defaults = dict(lr=1e-3, momentum=0.0, dampening=0.0, weight_decay=0.0, nesterov=False, maximize=False)
    all_state_names = ("momentum_buffer",)
    quantizable = {"momentum_buffer": True}
    sparse_kind = "sgd"  # RowSparse grads without momentum: entry by entry, as torch's param.add_(sparse)

    @classmethod
    def check_sparse(cls, name, group):
        if group["weight_decay"] != 0:
            raise RuntimeError(f"SGD.step: sparse grad for {name!r} with weight_decay: torch refuses it "
                               "(add(sparse, dense) is not supported)")

    @classmethod
    def sparse_dense(cls, group):
        return group["momentum"] != 0  # torch decays the whole momentum buffer: the dense step

    @classmethod
    def sparse_scalars(cls, group, step, scale):
        return dict(rate=-group["lr"] * scale)

    @classmethod
    def check(cls, group):
        if group["nesterov"] and (group["momentum"] <= 0 or group["dampening"] != 0):
            raise ValueError("Nesterov momentum requires a momentum and zero dampening")

    @classmethod
    def state_names(cls, group):
        return cls.all_state_names if group["momentum"] != 0 else ()

    def _update(self, p, g, st, group, fresh):
        lr, mu, damp, wd = group["lr"], group["momentum"], group["dampening"], group["weight_decay"]
        if group["maximize"]:
            g = -g
        if wd != 0:
            g = g + F32(wd) * p
        if mu != 0:
            b = st["momentum_buffer"]
            if "momentum_buffer" in fresh:
                b[...] = g
            else:
                b[...] = b * F32(mu) + F32(1 - damp) * g
            g = g + F32(mu) * b if group["nesterov"] else b
        p += F32(-lr) * g
