"""Blocked Householder QR of batches of float32 matrices, recorded (``shaders/householder.wgsl`` for the panels of
32 reflectors, GEMMs for the rest: compact WY, H_j0 ... H_j1 = I - V T V^T).

    qr(a, s, c, vs, tbuf, work)          A (s, c), s >= c <- R on and above the diagonal, reflectors below
    form_q(q, s, c, nq, vs, tbuf, work)  Q (s, nq) = H_1 ... H_c I[:, :nq] (the thin Q, nq = c; the full one, nq = s)
    positive_r(q, a, s, c)               Q[:, j] *= sign(R_jj): the Q whose R has a positive diagonal (NumPy's
                                         QR's after flipping its columns' signs)

Robust for any matrix (rank-deficient ones too: a zero column's reflector is the identity); float32 throughout, so
Q is orthonormal to float32 rounding whatever the condition number. Work buffers the caller owns: ``vs`` a
:class:`~rlx_gpu.linalg.factor.Mat` of (s, c) (V, explicit), ``tbuf`` ``batch * ceil(c / 32) * 1024`` floats (the
T factors), ``work`` two buffers of ``batch * 32 * max(c, nq)`` floats.
"""
from __future__ import annotations

from ..runtime.params import Params, declare
from .factor import BLOCK, Mat, Rec, _mm, copy2d

__all__ = ["qr", "form_q", "positive_r", "HH", "SIGN"]

HH = Params("HhParams", "rows", "j0", "b", "lda", "a_off", "a_bs", "v_off", "v_bs", "ldv", "t_off", "t_bs", "batch")
SIGN = Params("SignParams", "rows", "cols", "batch", "q_off", "q_bs", "ldq", "r_off", "r_bs", "ldr")
declare("householder.wgsl", HH, SIGN)


def _tmat(tbuf, c: int, j0: int) -> Mat:
    """Block j0's T (32 x 32 slots, ceil(c / 32) a matrix)."""
    return Mat(tbuf, (j0 // BLOCK) * BLOCK * BLOCK, -(-c // BLOCK) * BLOCK * BLOCK, BLOCK)


def _hh(r: Rec, entry: str, params: Params, name: str, groups: int, **bufs) -> None:
    from ..runtime.kernels import shipped_kernel
    from .record import _bind, _prm
    k = shipped_kernel(r.dev, "householder.wgsl", entry)
    pbuf = _prm(r.dev, params.pack(**bufs.pop("words")), f"householder.{entry}", r.keep, r.cache)
    k.dispatch(r.enc, _bind(k, r.cache, {**bufs, name: pbuf}), groups)


def apply_block(r: Rec, v: Mat, t: Mat, x: Mat, rows: int, cols: int, b: int, transpose: bool, work) -> None:
    """X <- (I - V T' V^T) X for (rows, cols) X, (rows, b) V, T' = T^T (``transpose``: Q^T applied) or T."""
    if not cols:
        return
    w1, w2 = Mat(work[0], 0, b * cols, cols), Mat(work[1], 0, b * cols, cols)
    _mm(r, v, x, w1, b, cols, rows, ta=True, alpha=1.0, beta=0.0)
    _mm(r, t, w1, w2, b, cols, b, ta=transpose, alpha=1.0, beta=0.0)
    _mm(r, v, w2, x, rows, cols, b)


def qr(r: Rec, a: Mat, s: int, c: int, vs: Mat, tbuf, work) -> None:
    """Householder QR of each (s, c) A, s >= c, in place; V into ``vs``, the T factors into ``tbuf``."""
    for j0 in range(0, c, BLOCK):
        b = min(BLOCK, c - j0)
        t = _tmat(tbuf, c, j0)
        words = dict(rows=s, j0=j0, b=b, lda=a.ld, a_off=a.off, a_bs=a.bs, v_off=vs.off, v_bs=vs.bs, ldv=vs.ld,
                     t_off=t.off, t_bs=t.bs, batch=r.batch)
        _hh(r, "hh_panel", HH, "hp", r.batch, X=a.buf, V=vs.buf, Tb=tbuf, words=words)
        apply_block(r, vs.at(j0, j0), t, a.at(j0, j0 + b), s - j0, c - j0 - b, b, True, work)


def form_q(r: Rec, q: Mat, s: int, c: int, nq: int, vs: Mat, tbuf, work) -> None:
    """Q = H_1 ... H_c applied to the identity's first ``nq`` columns (backward over the blocks), into ``q``."""
    copy2d(r, q, None, s, nq)
    for j0 in reversed(range(0, c, BLOCK)):
        b = min(BLOCK, c - j0)
        apply_block(r, vs.at(j0, j0), _tmat(tbuf, c, j0), q.at(j0, j0), s - j0, nq - j0, b, False, work)


def positive_r(r: Rec, q: Mat, a: Mat, s: int, c: int) -> None:
    """Q's first ``c`` columns times the signs of R's diagonal (on A's diagonal after :func:`qr`)."""
    words = dict(rows=s, cols=c, batch=r.batch, q_off=q.off, q_bs=q.bs, ldq=q.ld, r_off=a.off, r_bs=a.bs, ldr=a.ld)
    _hh(r, "hh_sign", SIGN, "sp", -(-s * c * r.batch // 256), X=q.buf, R=a.buf, words=words)
