"""NumPy twin of Adafactor (torch.optim.Adafactor semantics, torch >= 2.5; torch's order of operations but for v^'s
division: rlx_gpu.Adafactor.CSCALE's, within torch's tolerance; ``AdafactorDivided`` keeps torch's).

Per tensor, in this order: t += 1;  w = t^beta2_decay (the lerp weight);  rho = min(lr, 1/sqrt(t));
alpha = max(eps2, RMS(p)) * rho  (p before decay);  p *= 1 - lr*wd;  g = -g if maximize
>= 2 dims (factored over the last two, shape [..., m, n]):
    R = lerp(R, mean_n(g*g), w)  [..., m, 1];  C = lerp(C, mean_m(g*g), w)  [..., 1, n]
    v^ = R (C / max(mean_m(R), eps1))  (AdafactorDivided: (R C) / max(mean_m(R), eps1))
< 2 dims: v = lerp(v, g*g, w);  v^ = v
u = g * rsqrt(max(v^, eps1^2));  p += -alpha / max(1, RMS(u)/d) * u
eps1 None means float32's machine epsilon.
"""
from __future__ import annotations

import math

import numpy as np

from ..core.numerics import norm32, py_max, sum32, sumsq32
from .adam import lerp
from .base import F32, ReferenceOptimizer

EPS32 = float(np.finfo(np.float32).eps)


def eps1_of(group) -> float:
    return EPS32 if group["eps"][0] is None else float(group["eps"][0])


def factored(shape) -> bool:
    return len(shape) >= 2


def rms(x: np.ndarray) -> float:
    """torch's ``x.norm(2).item() / numel ** 0.5``: a float32 norm (inf past float32's range, 0 below it)."""
    return float(norm32(x)) / math.sqrt(max(1, x.size))


class Adafactor(ReferenceOptimizer):
    """Adafactor (Shazeer & Stern 2018), as torch.optim.Adafactor: factored second moments for matrices,
    relative step size capped by lr, update clipping at RMS d."""
    defaults = dict(lr=1e-2, beta2_decay=-0.8, eps=(None, 1e-3), d=1.0, weight_decay=0.0, maximize=False)
    all_state_names = ("row_var", "col_var", "variance")
    CSCALE = True  # v^ = R (C / max(mean_m(R), eps1)), the rounding of rlx_gpu.Adafactor.CSCALE (its default since
    #                the H200 measured it, PERF_NOTES 70); False: torch's (R C) / max(...), AdafactorDivided below
    RSQRT = False  # (AdafactorRsqrt below: rlx_gpu.Adafactor.RSQRT's arithmetic)
    aux_states = all_state_names  # kept in float32 whatever state_dtype says: they are O(rows + cols), or the unfactored
    #                               second moment, which the GPU class keeps beside the factored ones


    @classmethod
    def check(cls, group):
        if not group["beta2_decay"] <= 0:
            raise ValueError(f"beta2_decay should be <= 0 but is: {group['beta2_decay']}")
        if not 1.0 <= group["d"]:
            raise ValueError(f"Clipping threshold d should be >= 1 but is: {group['d']}")

    @classmethod
    def state_shape(cls, state, shape):
        if state == "row_var":
            return tuple(shape[:-1]) + (1,)
        if state == "col_var":
            return tuple(shape[:-2]) + (1, shape[-1])
        return tuple(shape)

    def _states_for(self, shape):
        return ("row_var", "col_var") if factored(shape) else ("variance",)

    def _before_update(self, grads):
        # Adafactor's states depend on each tensor's rank; make them before the per-tensor updates run.
        for n in grads:
            p = self.params[n]
            st = self.state.setdefault(n, {"step": 0})
            for s in self._states_for(p.shape):
                st.setdefault(s, np.zeros(self.state_shape(s, p.shape), F32))

    @classmethod
    def state_names(cls, group):
        return ()

    def _update(self, p, g, st, group, fresh):
        t = st["step"]
        lr, wd, d = group["lr"], group["weight_decay"], group["d"]
        eps1, eps2 = eps1_of(group), group["eps"][1]
        w = t ** group["beta2_decay"]
        rho = min(lr, 1 / math.sqrt(t))
        alpha = py_max(eps2, rms(p)) * rho  # Python's max on .item() values, as torch: a NaN RMS gives eps2
        if wd != 0:
            p *= F32(1 - lr * wd)
        if group["maximize"]:
            g = -g
        if factored(p.shape):  # torch: norm(g, dim).square() / size, float32 norms (inf past the range)
            R, C = st["row_var"], st["col_var"]
            R[...] = lerp(R, (sumsq32(g, -1, keepdims=True) / g.shape[-1]).astype(F32), w)
            C[...] = lerp(C, (sumsq32(g, -2, keepdims=True) / g.shape[-2]).astype(F32), w)
            rowmean = np.maximum((sum32(R, -2, keepdims=True) / R.shape[-2]).astype(F32), F32(eps1))
            vhat = None if self.RSQRT else R * (C / rowmean) if self.CSCALE else (R * C) / rowmean
        else:
            v = st["variance"]
            v[...] = lerp(v, g * g, w)
            vhat = v.copy()
        if vhat is None:  # RSQRT: min(rsq(R) rsq(C / rowmean), 1 / eps1) for rsqrt(max(R CN, eps1^2))
            with np.errstate(divide="ignore", invalid="ignore"):
                x = (F32(1) / np.sqrt(R)) * (F32(1) / np.sqrt(C / rowmean))
            u = np.minimum(x, F32(1 / eps1)) * g
        else:
            u = F32(1) / np.sqrt(np.maximum(vhat, F32(eps1 * eps1))) * g
        denom = py_max(1.0, rms(u) / d)
        p += F32(-alpha / denom) * u


class AdafactorCScale(Adafactor):
    """Adafactor with v^ = R * (C / max(mean_m(R), eps1)): each column factor divided by the row mean once, then one
    multiply an element (rlx_gpu.Adafactor.CSCALE's arithmetic, the default; torch divides R C by the mean, element
    by element: the two differ by rounding only, within tests/test_reference.py's torch tolerance)."""
    CSCALE = True


class AdafactorDivided(Adafactor):
    """Adafactor with torch's v^ = (R * C) / max(mean_m(R), eps1), element by element: the spec of
    rlx_gpu.Adafactor with CSCALE off (its rounding before PERF_NOTES 70)."""
    CSCALE = False


class AdafactorRsqrt(Adafactor):
    """Adafactor with rsqrt(max(v^, eps1^2)) of a factored tensor as min(rsq(R) rsq(C / max(mean_m(R), eps1)),
    1 / eps1), rsq(x) = 1 / sqrt(x) (inf at 0): rlx_gpu.Adafactor.RSQRT's arithmetic (the factors' reciprocal
    square roots taken once a row and a column, not once an element); the same value but for rounding (and for a
    product past float32's range, which the clamp no longer meets)."""
    RSQRT = True
