"""NumPy twin of Sophia-H (Liu et al. 2023, "Sophia: A Scalable Stochastic Second-order Optimizer").

The caller supplies a Hutchinson estimate h^ = u * (H u) of the Hessian diagonal every k steps through
``update_hessian`` (the Hessian-vector product belongs to the caller's autodiff):
    h = b2*h + (1-b2)*h^
Each step:  m = b1*m + (1-b1)*g;  p *= 1 - lr*wd;  p -= lr*sign(m)*min(|m| / max(rho*h, eps), 1)
"""
from __future__ import annotations

import numpy as np

from .._groups import check_grads
from .._sync import locked
from .base import F32, ReferenceOptimizer


class SophiaH(ReferenceOptimizer):
    """Sophia with a Hutchinson Hessian-diagonal estimate; clipped, preconditioned sign momentum."""
    defaults = dict(lr=1e-4, betas=(0.965, 0.99), rho=0.04, eps=1e-15, weight_decay=0.1, maximize=False)
    all_state_names = ("exp_avg", "hessian")

    def __init__(self, params, lr=1e-4, betas=(0.965, 0.99), rho=0.04, eps=1e-15, weight_decay=0.1, maximize=False, lr_scale=None, clip_grad_norm=None,
                 skip_nonfinite=False):
        super().__init__(params, lr_scale=lr_scale, clip_grad_norm=clip_grad_norm, skip_nonfinite=skip_nonfinite, lr=lr, betas=betas, rho=rho, eps=eps, weight_decay=weight_decay, maximize=maximize)

    @locked
    def update_hessian(self, estimates: dict) -> None:
        """Fold Hutchinson estimates ``{name: u * (H u)}`` into the Hessian EMA: h = b2*h + (1-b2)*estimate."""
        for g in self.param_groups:
            self.validate(g)
        check_grads(type(self).__name__, estimates, {n: p.shape for n, p in self.params.items()},
                    call="update_hessian", noun="estimate")
        for n, e in estimates.items():
            b2 = self.param_groups[self._group_of[n]]["betas"][1]
            st = self.state.setdefault(n, {"step": 0})
            h = st.setdefault("hessian", np.zeros_like(self.params[n]))
            h[...] = h * F32(b2) + F32(1 - b2) * np.asarray(e, F32)

    def _update(self, p, g, st, group, fresh):
        lr, (b1, _), rho, eps, wd = (group[k] for k in ("lr", "betas", "rho", "eps", "weight_decay"))
        if group["maximize"]:
            g = -g
        m, h = st["exp_avg"], st["hessian"]
        m[...] = m * F32(b1) + F32(1 - b1) * g
        if wd != 0:
            p *= F32(1 - lr * wd)
        ratio = np.minimum(np.abs(m) / np.maximum(F32(rho) * h, F32(eps)), F32(1))
        p += F32(-lr) * np.sign(m) * ratio
