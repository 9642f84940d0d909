"""NumPy twin of Riemannian SGD on the Stiefel manifold: geoopt's ``RiemannianSGD`` on ``geoopt.EuclideanStiefel``
(``manifold="euclidean"``: QR retraction) or ``geoopt.CanonicalStiefel`` (``"canonical"``: Cayley retraction), in
float32. A parameter is an (n, p) matrix, n >= p, with orthonormal columns (X^T X = I). geoopt's ``Stiefel()`` is
its ``CanonicalStiefel``: pass ``manifold="canonical"`` to match it; the default here is ``EuclideanStiefel``.

    momentum buffer at the first step: the raw grad (geoopt clones it before the weight decay)
    g = g + weight_decay * X;  r = proj(X, g)
        euclidean: proj(X, u) = u - X sym(X^T u), sym(A) = (A + A^T) / 2;   canonical: u - X u^T X
    momentum mu: b = mu * b + (1 - dampening) * r;  d = r + mu * b if nesterov else b;  else d = r
    X, b = retr_transp(X, -lr * d, b)   (without momentum X = retr(X, -lr * r))
        euclidean: X' = Q of QR(X + u) with R's diagonal made positive; b' = proj(X', b)
        canonical: A = u X^T - X u^T;  [X', b'] = solve(I - A/2, [X, b] + A/2 [X, b])
"""
from __future__ import annotations

import numpy as np

from .base import F32, ReferenceOptimizer
from .matrix import check_matmul_dtype

MANIFOLDS = ("euclidean", "canonical")


def sym(a: np.ndarray) -> np.ndarray:
    return F32(0.5) * (a + a.T)


def proj(x: np.ndarray, u: np.ndarray, manifold: str) -> np.ndarray:
    if manifold == "euclidean":
        return u - x @ sym(x.T @ u)
    return u - x @ u.T @ x


def retr_transp(x: np.ndarray, u: np.ndarray, v, manifold: str):
    """(X', v') after moving X along tangent ``u`` (``v``: None, or a tangent vector to carry along)."""
    if manifold == "euclidean":
        q, r = np.linalg.qr(x + u)
        q = q * np.sign(np.sign(np.diag(r)) + F32(0.5))[None, :]
        return q.astype(F32), (None if v is None else proj(q, v, manifold))
    a = u @ x.T - x @ u.T
    cols = x if v is None else np.concatenate([x, v], axis=1)
    rhs = cols + F32(0.5) * (a @ cols)
    lhs = F32(-0.5) * a
    lhs[np.diag_indices(a.shape[0])] += F32(1.0)
    out = np.linalg.solve(lhs, rhs).astype(F32)
    p = x.shape[1]
    return out[:, :p], (None if v is None else out[:, p:])


def off_manifold(x: np.ndarray) -> float:
    """max |X^T X - I| (float64)."""
    x = x.astype(np.float64)
    return float(np.abs(x.T @ x - np.eye(x.shape[1])).max())


class StiefelSGD(ReferenceOptimizer):
    """Riemannian SGD with optional (Nesterov) momentum on the Stiefel manifold, as geoopt's RiemannianSGD.
    Hyperparameters as ``rlx_gpu.StiefelSGD``'s (lr, momentum, dampening, weight_decay, nesterov, manifold,
    matmul_dtype: float32 here whatever it says)."""
    defaults = dict(lr=1e-3, momentum=0.0, dampening=0.0, weight_decay=0.0, nesterov=False, manifold="euclidean",
                    matmul_dtype="float32")
    all_state_names = ("momentum_buffer",)
    #: How far from orthonormal a param may start (max |X^T X - I|).
    tolerance = 1e-4

    @classmethod
    def check(cls, group):
        if group["manifold"] not in MANIFOLDS:
            raise ValueError(f"StiefelSGD: manifold must be 'euclidean' (QR retraction) or 'canonical' (Cayley), "
                             f"got {group['manifold']!r}")
        check_matmul_dtype("StiefelSGD", group)
        if group["nesterov"] and (group["momentum"] <= 0 or group["dampening"] != 0):
            raise ValueError("StiefelSGD: Nesterov momentum requires a momentum and zero dampening")

    @classmethod
    def state_names(cls, group: dict) -> tuple:
        return ("momentum_buffer",) if group["momentum"] > 0 else ()

    @classmethod
    def check_points(cls, owner: str, params: dict) -> None:
        """2-D float32 (n, p) with n >= p and orthonormal columns, else ValueError naming the tensor."""
        for n, x in params.items():
            shape = tuple(x.shape)
            if len(shape) != 2 or shape[0] < shape[1]:
                raise ValueError(f"{owner}: {n!r} has shape {shape}; the Stiefel manifold needs an (n, p) matrix "
                                 "with n >= p (route other tensors to another optimizer)")
            if x.dtype != F32:
                raise ValueError(f"{owner}: {n!r} is {x.dtype}; StiefelSGD keeps float32 params")
            err = off_manifold(np.asarray(x))
            if not err <= cls.tolerance:
                raise ValueError(f"{owner}: {n!r} is not on the Stiefel manifold: max |X^T X - I| = {err:.3g} "
                                 f"(> {cls.tolerance}); start from orthonormal columns (e.g. the Q of a QR)")

    #: write_params, load_state_dict(params=) and restore refuse points off the manifold too (issue 21 item 6).
    check_param_values = check_points

    def __init__(self, params, *args, **kwargs):
        super().__init__(params, *args, **kwargs)
        self.check_points(type(self).__name__, self.params)

    def _update(self, p, g, st, group, fresh):
        man, mu = group["manifold"], group["momentum"]
        raw = g
        g = g + F32(group["weight_decay"]) * p
        r = proj(p, g, man)
        if mu > 0:
            b = st["momentum_buffer"]
            if "momentum_buffer" in fresh:
                b[...] = raw
            b[...] = F32(mu) * b + F32(1 - group["dampening"]) * r
            d = r + F32(mu) * b if group["nesterov"] else b
            x, v = retr_transp(p, F32(-group["lr"]) * d, b, man)
            b[...] = v
        else:
            x, _ = retr_transp(p, F32(-group["lr"]) * r, None, man)
        p[...] = x
