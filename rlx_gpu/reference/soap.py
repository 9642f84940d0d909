"""NumPy twin of SOAP (Vyas et al. 2024, "SOAP: Improving and Stabilizing Shampoo using Adam"): Adam run in the
eigenbasis of Shampoo's two preconditioners, as ``pytorch_optimizer.SOAP`` (4.1.0) on 2-D tensors, in float32 with
the decompositions in float64 on the host.

    first step of a tensor: GG_0 = lerp(GG_0, g g^T, 1 - shampoo_beta); GG_1 = lerp(GG_1, g^T g, 1 - shampoo_beta);
        Q_i = the eigenvectors of GG_i, by descending eigenvalue (eigh); nothing else (no update, no decay)
    later steps, s = step - 1:
        step_size = lr * sqrt(1 - beta2^s) / (1 - beta1^s)   (lr when correct_bias is False)
        exp_avg = lerp(exp_avg, g, 1 - beta1)                      (in the original space)
        exp_avg_sq = lerp(exp_avg_sq, (Q_0^T g Q_1)^2, 1 - beta2)  (in the rotated space)
        u = Q_0 ((Q_0^T exp_avg Q_1) / (sqrt(exp_avg_sq) + eps)) Q_1^T
        u /= sqrt(mean(u^2)) + eps                                 (normalize_gradient only)
        p += -step_size * u;  p *= 1 - lr * weight_decay
        the GG_i updated with g as above; every precondition_frequency-th s: refresh (below)
    refresh of side i (one power iteration): M = GG_i Q_i (float32); est = diag(Q_i^T M); order = argsort(-est);
        exp_avg_sq's axis i permuted by order; Q_i = the Q of QR(M[:, order]) (float64)

2-D float32 tensors only (route others to AdamW with rlx_gpu.Partition); both sides are always preconditioned
(pytorch_optimizer's ``max_precondition_dim``, ``merge_dims`` and ``precondition_1d`` are not offered: its defaults
precondition both sides of every matrix up to 10,000 rows). The column signs of the Q_i are arbitrary (eigenvectors,
QR) and cancel in the update; here R's diagonal is made positive. The twin decomposes in float64 whatever
``decompositions`` says (the GPU class's float32 device path is measured against it).
"""
from __future__ import annotations

import math

import numpy as np

from .adam import lerp
from .base import F32
from .matrix import MatrixTwin, check_matmul_dtype

SIDES = (("GG_0", "Q_0"), ("GG_1", "Q_1"))


def eigenbasis(gg: np.ndarray) -> np.ndarray:
    """The eigenvectors of the symmetric ``gg`` by descending eigenvalue (float64 eigh, float32 result); a GG holding
    inf or NaN (an unchecked step with such grads) gives NaN, as the params already are, instead of LAPACK's
    error after the step was taken."""
    if not np.isfinite(gg).all():
        return np.full(gg.shape, np.nan, F32)
    _, q = np.linalg.eigh(gg.astype(np.float64))
    return np.ascontiguousarray(q[:, ::-1]).astype(F32)


def refresh_side(m: np.ndarray, q: np.ndarray):
    """A side's refresh from the power iteration's product ``m`` = GG Q (float32, as the GPU's GEMM makes it): the
    eigenvalue estimates diag(Q^T M), the column order by them, and the Q of QR(M reordered), in float64 on the host:
    (new Q, the order of the old columns)."""
    m = m.astype(np.float64)
    est = (q.astype(np.float64) * m).sum(axis=0)
    order = np.argsort(-est, kind="stable")
    qq, r = np.linalg.qr(m[:, order])
    qq = qq * np.where(np.diag(r) < 0, -1.0, 1.0)[None, :]
    return qq.astype(F32), order


def project(x: np.ndarray, q0: np.ndarray, q1: np.ndarray) -> np.ndarray:
    return (q0.T @ x) @ q1


def project_back(x: np.ndarray, q0: np.ndarray, q1: np.ndarray) -> np.ndarray:
    return (q0 @ x) @ q1.T


def update_gg(st: dict, g: np.ndarray, shampoo_beta: float) -> None:
    w = 1 - shampoo_beta
    st["GG_0"][...] = lerp(st["GG_0"], g @ g.T, w)
    st["GG_1"][...] = lerp(st["GG_1"], g.T @ g, w)


def step_size(group: dict, s: int) -> float:
    if not group["correct_bias"]:
        return group["lr"]
    b1, b2 = group["betas"]
    return group["lr"] * math.sqrt(1 - b2 ** s) / (1 - b1 ** s)


def shampoo_beta_of(group: dict) -> float:
    return group["betas"][1] if group["shampoo_beta"] is None else group["shampoo_beta"]


def needs_host(step: int, frequency: int) -> str | None:
    """What the host does after a tensor's ``step``-th applied step: "init" (eigh), "refresh" (QR) or None."""
    if step == 1:
        return "init"
    return "refresh" if step > 1 and (step - 1) % frequency == 0 else None


class SOAP(MatrixTwin):
    """SOAP: Adam in the eigenbasis of Shampoo's preconditioners (pytorch_optimizer.SOAP's semantics), 2-D tensors.
    Hyperparameters as ``rlx_gpu.SOAP``'s (lr, betas, shampoo_beta, weight_decay, precondition_frequency,
    correct_bias, normalize_gradient, eps; decompositions and matmul_dtype: float64 decompositions and float32
    products here whatever they say)."""
    defaults = dict(lr=3e-3, betas=(0.95, 0.95), shampoo_beta=None, weight_decay=1e-2, precondition_frequency=10,
                    correct_bias=True, normalize_gradient=False, eps=1e-8, decompositions="device",
                    matmul_dtype="float32")
    all_state_names = ("exp_avg", "exp_avg_sq", "GG_0", "GG_1", "Q_0", "Q_1")
    aux_states = ("GG_0", "GG_1", "Q_0", "Q_1")  # (their own shapes, float32; the GPU class keeps them per shape)

    @classmethod
    def check(cls, group):
        sb = group["shampoo_beta"]
        if sb is not None and not (isinstance(sb, (int, float)) and 0.0 <= sb < 1.0):
            raise ValueError(f"SOAP: shampoo_beta must be None or a number in [0, 1), got {sb!r}")
        f = group["precondition_frequency"]
        if not isinstance(f, int) or isinstance(f, bool) or f < 1:
            raise ValueError(f"SOAP: precondition_frequency must be a positive int, got {f!r}")
        if not group["eps"] >= 0:
            raise ValueError(f"SOAP: eps must be >= 0, got {group['eps']!r}")
        check_matmul_dtype("SOAP", group)
        if group["decompositions"] not in ("device", "host"):
            raise ValueError(f"SOAP: decompositions must be 'device' (float32 on the GPU) or 'host' (float64 on the "
                             f"host), got {group['decompositions']!r}")

    @classmethod
    def state_shape(cls, state, shape):
        if state in ("GG_0", "Q_0"):
            return (shape[0], shape[0])
        if state in ("GG_1", "Q_1"):
            return (shape[1], shape[1])
        return tuple(shape)

    def __init__(self, params, *args, **kwargs):
        super().__init__(params, *args, **kwargs)
        if self.precision["state_dtype"] != "float32":
            raise ValueError(f"SOAP: state_dtype must be float32, got {self.precision['state_dtype']!r}")

    def _update(self, p, g, st, group, fresh):
        t = st["step"]
        if t > 1:
            s = t - 1
            b1, b2 = group["betas"]
            ea, ev = st["exp_avg"], st["exp_avg_sq"]
            gp = project(g, st["Q_0"], st["Q_1"])
            ea[...] = lerp(ea, g, 1 - b1)
            ev[...] = lerp(ev, gp * gp, 1 - b2)
            u = project_back(project(ea, st["Q_0"], st["Q_1"]) / (np.sqrt(ev) + F32(group["eps"])), st["Q_0"],
                             st["Q_1"])
            if group["normalize_gradient"]:
                u = u / (np.sqrt(np.mean(u * u, dtype=F32)) + F32(group["eps"]))
            p += F32(-step_size(group, s)) * u
            p *= F32(1 - group["lr"] * group["weight_decay"])
        update_gg(st, g, shampoo_beta_of(group))
        self._host(st, needs_host(t, group["precondition_frequency"]))

    @staticmethod
    def _host(st: dict, what) -> None:
        """The decompositions after a step (shared with the GPU class through :func:`host_work`)."""
        if what is None:
            return
        mats = [st["GG_0"], st["GG_1"]] if what == "init" else [st["GG_0"] @ st["Q_0"], st["GG_1"] @ st["Q_1"]]
        new = host_work(what, mats, [st["Q_0"], st["Q_1"]])
        for i, (q, order) in enumerate(new):
            st[SIDES[i][1]][...] = q
            if order is not None:
                st["exp_avg_sq"][...] = np.take(st["exp_avg_sq"], order, axis=i)


def host_work(what: str, mats: list, qs: list) -> list:
    """Per side, (new Q, the permutation of exp_avg_sq's axis or None): "init" = eigh of GG (``mats``), "refresh" =
    QR of the power iteration's product GG Q (``mats``)."""
    if what == "init":
        return [(eigenbasis(gg), None) for gg in mats]
    return [refresh_side(m, q) for m, q in zip(mats, qs)]
