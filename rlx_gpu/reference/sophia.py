"""NumPy twin of Sophia-H (Liu et al. 2023, "Sophia: A Scalable Stochastic Second-order Optimizer").

The caller supplies a Hutchinson estimate h^ = u * (H u) of the Hessian diagonal every k steps through
``update_hessian`` (the Hessian-vector product belongs to the caller's autodiff):
    h = b2*h + (1-b2)*h^
Each step:  m = b1*m + (1-b1)*g;  p *= 1 - lr*wd;  p -= lr*sign(m)*min(|m| / max(rho*h, eps), 1)
"""
from __future__ import annotations

import numpy as np

from ..core.groups import check_grads
from ..core.sync import locked
from .base import F32, ReferenceOptimizer


class SophiaH(ReferenceOptimizer):
    """Sophia with a Hutchinson Hessian-diagonal estimate; clipped, preconditioned sign momentum."""
    defaults = dict(lr=1e-4, betas=(0.965, 0.99), rho=0.04, eps=1e-15, weight_decay=0.1, maximize=False)
    all_state_names = ("exp_avg", "hessian")

    @locked
    def update_hessian(self, estimates: dict) -> None:
        """Fold Hutchinson estimates ``{name: u * (H u)}`` into the Hessian EMA: h = b2*h + (1-b2)*estimate.
        Estimates come as grads do (their slot's dtype or float32) and pass through a slot of the grads' dtype."""
        for g in self.param_groups:
            self.validate(g)
        ok = {n: (self._grad_dt[n].np, F32 if self._grad_dt[n].low else self.params[n].dtype) for n in estimates
              if n in self.params}
        check_grads(type(self).__name__, estimates, self._shapes,
                    call="update_hessian", noun="estimate", dtypes=ok)
        for n, e in estimates.items():
            e = np.asarray(e).astype(F32).astype(self._grad_dt[n].np).astype(F32)
            b2 = self.param_groups[self._group_of[n]]["betas"][1]
            st = self.state.setdefault(n, {"step": 0})
            h = st.setdefault("hessian", self._new_state("hessian", self.params[n].shape, None)).astype(F32)
            h = h * F32(b2) + F32(1 - b2) * e
            st["hessian"] = h.astype(self._state_dtype("hessian", n))

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
