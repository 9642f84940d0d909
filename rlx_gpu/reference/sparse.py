"""Row-sparse grads (:class:`rlx_gpu.RowSparse`) in the twins, and what each optimizer declares about them: which
kernel applies them on the GPU (``sparse_kind``), the scalars it takes, what torch refuses, and the NumPy update in
torch's order of float32 operations (``param.add_(sparse, alpha)`` on the CPU is one fused multiply-add per entry:
NumPy computes it in float64 and rounds once)."""
from __future__ import annotations

import math

import numpy as np

from ..core.sparse import check_use, coalesce, grouped, refuse_dense, route, storage_error

F32 = np.float32


def fma32(a, x, p):
    """float32 ``a * x + p`` rounded once (a product of two float32 is exact in float64)."""
    return (np.float64(F32(a)) * x.astype(np.float64) + p.astype(np.float64)).astype(F32)


class SparseSpec:
    """The declarations (class attributes and classmethods) the GPU class reads through ``spec``."""

    #: The kernel of ``shaders/sparse.wgsl`` that applies a sparse grad ("adam", "adagrad", "sgd"), or None.
    sparse_kind = None
    #: The param-shaped states that kernel reads and writes, in its binding order.
    sparse_states: tuple = ()
    #: What torch says when it is given a sparse grad it refuses.
    sparse_refusal = "does not support sparse gradients"
    #: What torch says when it is given a dense grad it refuses (SparseAdam), or None.
    dense_refusal = None

    @classmethod
    def check_sparse(cls, name: str, group: dict) -> None:
        """RuntimeError (torch's type) where torch refuses a sparse grad for this group's settings."""

    @classmethod
    def sparse_dense(cls, group: dict) -> bool:
        """Whether a sparse grad goes through the dense step (torch's semantics touch every row)."""
        return False

    @classmethod
    def sparse_scalars(cls, group: dict, step: int, scale: float) -> dict:
        """The sparse update's scalars by name (``rate``: the signed step size; ``eps``, ``omb1``, ``omb2``: 1 -
        beta): the GPU kernel reads the same names (``rlx_gpu/engine/sparse.py``'s ``SPARSE_META``)."""
        return {}


class SparseTwin:
    """``step`` with RowSparse grads in the twins."""

    def _refuse_dense(self, grads) -> None:
        refuse_dense(type(self).__name__, self.dense_refusal, grads)

    def _split_sparse(self, sparse: dict, check: bool) -> tuple[dict, dict]:
        """(grads for the dense step, {name: (rows, values)} for the sparse one), everything checked first."""
        name = type(self).__name__
        check_use(name, self, sparse, self.param_groups, check, self.clip_grad_norm)
        dense, out = {}, {}
        for n, g in sparse.items():
            if n not in self.params:
                raise KeyError(f"{name}.step: grad for unknown tensor {n!r}")
            if self.params[n].dtype != F32 or self._state_dt.name != "float32" or self._qbits(n):
                raise storage_error(name, n)
            route(name, self, n, g, self.param_groups[self._group_of[n]], self._shapes[n], dense, out)
        return dense, out

    def _sparse_step(self, sparse: dict) -> None:
        for n, (idx, vals) in sparse.items():
            group = self.param_groups[self._group_of[n]]
            st = self.state.setdefault(n, {"step": 0})
            for s in self.sparse_states:
                if s not in st:
                    st[s] = np.zeros(self._shapes[n], F32)
            st["step"] = min(st["step"] + 1, 2 ** 53)
            if idx.size and vals.shape[1]:
                if group.get("maximize", False):
                    vals = -vals
                p = self.params[n].reshape(-1, vals.shape[1])  # (rows over the grad's sparse dims)
                self._sparse_update(p, idx, vals, st, group, self.sparse_scalars(group, st["step"], self.lr_scale[n]))

    def _sparse_update(self, p, idx, vals, st, group, scal) -> None:
        kind = self.sparse_kind
        if kind == "sgd":  # entry by entry, each row's entries in the order given
            rows, starts, counts, v = grouped(idx, vals)
            for k in range(int(counts.max())):
                sel = counts > k
                p[rows[sel]] = fma32(scal["rate"], v[starts[sel] + k], p[rows[sel]])
            return
        rows, g = coalesce(idx, vals)
        L = g.shape[1]
        if kind == "adagrad":
            s = st["sum"].reshape(-1, L)
            s[rows] = s[rows] + g * g
            p[rows] = fma32(scal["rate"], g / (np.sqrt(s[rows]) + F32(scal["eps"])), p[rows])
            return
        m, v = st["exp_avg"].reshape(-1, L), st["exp_avg_sq"].reshape(-1, L)
        m0, v0 = m[rows], v[rows]
        m[rows] = m0 + (g - m0) * F32(scal["omb1"])
        v[rows] = v0 + (g * g - v0) * F32(scal["omb2"])
        p[rows] = p[rows] + F32(scal["rate"]) * (m[rows] / (np.sqrt(v[rows]) + F32(scal["eps"])))


def adam_scalars(group: dict, step: int, scale: float) -> dict:
    """SparseAdam's: omb1 = 1 - b1, omb2 = 1 - b2, rate = -step_size (lr * sqrt(1 - b2^t) / (1 - b1^t)), eps."""
    (b1, b2), lr = group["betas"], group["lr"] * scale
    return dict(omb1=1 - b1, omb2=1 - b2, rate=-(lr * math.sqrt(1 - b2 ** step) / (1 - b1 ** step)), eps=group["eps"])
