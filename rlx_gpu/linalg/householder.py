"""Blocked Householder QR of batches of float32 matrices, recorded (``shaders/householder.wgsl`` for the panels of
32 reflectors, GEMMs for the rest: compact WY, H_j0 ... H_j1 = I - V T V^T).

    qr(a, s, c, vs, tbuf, work)          A (s, c), s >= c <- R on and above the diagonal, reflectors below
    form_q(q, s, c, nq, vs, tbuf, work)  Q (s, nq) = H_1 ... H_c I[:, :nq] (the thin Q, nq = c; the full one, nq = s)
    positive_r(q, a, s, c)               Q[:, j] *= sign(R_jj): the Q whose R has a positive diagonal (NumPy's
                                         QR's after flipping its columns' signs)

Robust for any matrix (rank-deficient ones too: a zero column's reflector is the identity); float32 throughout, so
Q is orthonormal to float32 rounding whatever the condition number. Work buffers the caller owns: ``vs`` a
:class:`~rlx_gpu.linalg.factor.Mat` of (s, c) (V, explicit), ``tbuf`` ``batch * ceil(c / 32) * 1024`` floats (the
T factors), ``work`` two buffers of ``batch * 32 * max(c, nq)`` floats; with :data:`WIDE` set, ``tbuf`` of
``batch * t_floats(c)`` and ``work`` of ``batch * work_floats(max(c, nq))`` floats. :func:`qr` and :func:`form_q`
(and the sizes' functions) take ``wide=`` a call's own width instead of :data:`WIDE`'s (the same one for a matrix's
``qr`` and ``form_q``: the composed T's are laid out by it); ``None``, the default, is :data:`WIDE` as it is then.

:data:`WIDE` (0: off; 128, the default: SOAP's refresh 1.47 -> 1.25 s on the H200, PERF_NOTES 67): the reflectors
applied outside a panel's own block in blocks of WIDE columns (the 32-wide panels and their updates inside a block
as before, then the block's T composed, T = [[T1, -T1 V1^T V2 T2], [0, T2]], by small GEMMs), so the trailing
updates and the forming of Q are a quarter as many GEMMs with full 128-row tiles. The same reflectors, other rounding (not the same bits).

:data:`PANEL` (1024, the default: the refresh's panels 570 -> 274 ms on the H200; 256): the threads of a panel's
workgroup (one a matrix: 12-24 workgroups on 132 SMs, each column's dot products and update a loop of rows /
(PANEL / 32) dependent loads a thread). 256 is the first version's loops and sums; 1024 has four times the row
groups (the sums in another order: not promised the same bits) where the device allows 1024 invocations a
workgroup (else 256 runs). PERF_NOTES 73.
"""
from __future__ import annotations

from ..runtime.params import Params, declare
from .factor import BLOCK, Mat, Rec, _mm, copy2d

__all__ = ["qr", "form_q", "positive_r", "HH", "SIGN", "WIDE", "PANEL", "panel_constants", "t_floats", "work_floats",
           "dispatches"]

WIDE = 128  # (0 or a multiple of BLOCK: the blocks of the updates outside a panel; module docstring)
PANEL = 1024  # hh_panel's threads a matrix (256 or 1024, at most the device's invocations a workgroup; PERF_NOTES 73)

HH = Params("HhParams", "rows", "j0", "b", "lda", "a_off", "a_bs", "v_off", "v_bs", "ldv", "t_off", "t_bs", "batch", "v0")
SIGN = Params("SignParams", "rows", "cols", "batch", "q_off", "q_bs", "ldq", "r_off", "r_bs", "ldr")
declare("householder.wgsl", HH, SIGN)


def _wide(wide: int | None) -> int:
    """A call's block width: ``wide``, or :data:`WIDE` where that is None (0 or a multiple of BLOCK)."""
    w = WIDE if wide is None else wide
    if w < 0 or w % BLOCK:
        raise ValueError(f"householder: the block width must be 0 or a multiple of {BLOCK}, got {w}")
    return w


def t_floats(c: int, wide: int | None = None) -> int:
    """The T factors' floats a matrix of c columns: ceil(c / 32) slots of 32 x 32, then with a width (``wide``,
    default :data:`WIDE`) ceil(c / width) of width x width (the composed ones)."""
    w = _wide(wide)
    small = -(-c // BLOCK) * BLOCK * BLOCK
    return small + (-(-c // w) * w * w if w else 0)


def work_floats(cols: int, wide: int | None = None) -> int:
    """Each work buffer's floats a matrix, for updates of up to ``cols`` columns."""
    return max(BLOCK, _wide(wide)) * cols


def dispatches(c: int, wide: int | None = None) -> int:
    """The most dispatches :func:`qr` and :func:`form_q` record for c columns."""
    b, w = -(-c // BLOCK), _wide(wide)
    return 4 * b + 1 + 3 * b + 1 + ((5 * b + 7 * -(-c // w)) if w else 0)


def _tmat(tbuf, c: int, j0: int, wide: int) -> Mat:
    """Block j0's T (32 x 32 slots, ceil(c / 32) a matrix)."""
    return Mat(tbuf, (j0 // BLOCK) * BLOCK * BLOCK, t_floats(c, wide), BLOCK)


def _tbig(tbuf, c: int, j0: int, wide: int) -> Mat:
    """Wide block j0's composed T (wide x wide slots after the small ones)."""
    return Mat(tbuf, -(-c // BLOCK) * BLOCK * BLOCK + (j0 // wide) * wide * wide, t_floats(c, wide), wide)


def _hh(r: Rec, entry: str, params: Params, name: str, groups: int, constants=None, **bufs) -> None:
    from ..runtime.kernels import shipped_kernel
    from .record import _bind, _prm
    k = shipped_kernel(r.dev, "householder.wgsl", entry, **(constants or {}))
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


def panel(r: Rec, a: Mat, s: int, c: int, j0: int, vs: Mat, tbuf, v0: int | None = None,
          wide: int | None = None) -> None:
    """The 32 (or fewer) reflectors of A's columns from j0 (``hh_panel``, one workgroup a matrix): T, and V from
    row ``v0`` (default j0; the zeros above the panel from there: a wide block's V is read from its first row)."""
    t = _tmat(tbuf, c, j0, _wide(wide))
    words = dict(rows=s, j0=j0, b=min(BLOCK, c - j0), lda=a.ld, a_off=a.off, a_bs=a.bs, v_off=vs.off, v_bs=vs.bs,
                 ldv=vs.ld, t_off=t.off, t_bs=t.bs, batch=r.batch, v0=j0 if v0 is None else v0)
    _hh(r, "hh_panel", HH, "hp", r.batch, panel_constants(r.dev), X=a.buf, V=vs.buf, Tb=tbuf, words=words)


def panel_constants(dev) -> dict:
    """hh_panel's override constants: PT = :data:`PANEL` threads (256 or 1024), 256 where the device allows fewer
    invocations a workgroup than asked."""
    if PANEL not in (256, 1024):
        raise ValueError(f"householder.PANEL: expected 256 or 1024 threads, got {PANEL!r}")
    lim = int(dev.limits.get("max-compute-invocations-per-workgroup", 256))
    wide = min(lim, int(dev.limits.get("max-compute-workgroup-size-x", 256)))
    return {} if PANEL == 256 or wide < PANEL else {"PT": PANEL}


def _check(r: Rec, c: int, cols: int, tbuf, work, wide: int) -> None:
    """tbuf and work as large as :func:`t_floats` and :func:`work_floats` say for this width (:data:`WIDE` as it
    is now where the call gives none: set it before the buffers are made)."""
    for name, buf, need in (("tbuf", tbuf, t_floats(c, wide)), ("work[0]", work[0], work_floats(cols, wide)),
                            ("work[1]", work[1], work_floats(cols, wide))):
        if buf.size < 4 * r.batch * need:
            raise ValueError(f"householder: {name} holds {buf.size} bytes, {4 * r.batch * need} needed for "
                             f"{r.batch} matrices of {c} columns with WIDE={wide}")


def qr(r: Rec, a: Mat, s: int, c: int, vs: Mat, tbuf, work, wide: int | None = None) -> None:
    """Householder QR of each (s, c) A, s >= c, in place; V into ``vs``, the T factors into ``tbuf`` (``wide``:
    this call's block width, default :data:`WIDE`'s)."""
    wide = _wide(wide)
    _check(r, c, c, tbuf, work, wide)
    step = wide or BLOCK
    for w0 in range(0, c, step):
        w1 = min(c, w0 + step)
        for j0 in range(w0, w1, BLOCK):
            b = min(BLOCK, w1 - j0)
            panel(r, a, s, c, j0, vs, tbuf, w0, wide)
            apply_block(r, vs.at(j0, j0), _tmat(tbuf, c, j0, wide), a.at(j0, j0 + b), s - j0,
                        (w1 if wide else c) - j0 - b, b, True, work)
        if wide:
            compose_t(r, vs, tbuf, s, c, w0, w1, work, wide)
            apply_block(r, vs.at(w0, w0), _tbig(tbuf, c, w0, wide), a.at(w0, w1), s - w0, c - w1, w1 - w0, True,
                        work)


def compose_t(r: Rec, vs: Mat, tbuf, s: int, c: int, w0: int, w1: int, work, wide: int | None = None) -> None:
    """The composed T of reflectors w0..w1 (panels of 32), a block column at a time: T_big[:p + b, p:p + b] =
    [-T_big[:p, :p] (V_:p^T V_k); I] T_k (T_k staged in ``work[0]``: a dispatch may not read and write one
    buffer); zeros below the diagonal blocks."""
    wide = _wide(wide)
    big = _tbig(tbuf, c, w0, wide)
    copy2d(r, big, None, w1 - w0, w1 - w0)
    for j0 in range(w0, w1, BLOCK):
        b, p = min(BLOCK, w1 - j0), j0 - w0
        x, tk = Mat(work[0], 0, p * b + b * b, b), Mat(work[0], p * b, p * b + b * b, b)
        y = Mat(work[1], 0, (p + b) * b, b)
        copy2d(r, tk, _tmat(tbuf, c, j0, wide), b, b)
        if p:
            _mm(r, vs.at(j0, w0), vs.at(j0, j0), x, p, b, s - j0, ta=True, alpha=1.0, beta=0.0)  # V_:p^T V_k
            _mm(r, big, x, y, p, b, p, alpha=-1.0, beta=0.0)
        copy2d(r, y.at(p, 0), None, b, b)
        _mm(r, y, tk, big.at(0, p), p + b, b, b, alpha=1.0, beta=0.0)


def form_q(r: Rec, q: Mat, s: int, c: int, nq: int, vs: Mat, tbuf, work, wide: int | None = None) -> None:
    """Q = H_1 ... H_c applied to the identity's first ``nq`` columns (backward over the blocks), into ``q``
    (``wide``: the width :func:`qr` was given)."""
    wide = _wide(wide)
    _check(r, c, max(c, nq), tbuf, work, wide)
    copy2d(r, q, None, s, nq)
    step = wide or BLOCK
    for j0 in reversed(range(0, c, step)):
        b = min(step, c - j0)
        t = _tbig(tbuf, c, j0, wide) if wide else _tmat(tbuf, c, j0, wide)
        apply_block(r, vs.at(j0, j0), t, q.at(j0, j0), s - j0, nq - j0, b, False, work)


def positive_r(r: Rec, q: Mat, a: Mat, s: int, c: int) -> None:
    """Q's first ``c`` columns times the signs of R's diagonal (on A's diagonal after :func:`qr`)."""
    words = dict(rows=s, cols=c, batch=r.batch, q_off=q.off, q_bs=q.bs, ldq=q.ld, r_off=a.off, r_bs=a.bs, ldr=a.ld)
    _hh(r, "hh_sign", SIGN, "sp", -(-s * c * r.batch // 256), X=q.buf, R=a.buf, words=words)
