"""Blocked factorisations and triangular solves of batches of float32 matrices, recorded into a command encoder or
compute pass (``shaders/factor.wgsl`` for the 32-wide blocks, :func:`~rlx_gpu.linalg.record.gemm` for the updates
of everything after a block, so most of the arithmetic is GEMMs).

An operand is a :class:`Mat`: (buffer, element offset, batch stride, row stride), row-major; a block of a larger
matrix is the same matrix at another offset. The panels (``panel``: a work buffer the caller owns, of at least
``batch * rows * 32`` floats) hold a copy of the block just solved, which the GEMM reads, since WebGPU does not let
one dispatch read a buffer that it also writes.

    trsm_right(y, u, r, s)          Y <- Y U^-1 (U upper; or L^T for a lower L stored as is: ``lower_t``)
    trsm_left(x, t, s, q)           X <- T^-1 X (T lower: forward; upper: ``upper``, backward)
    cholesky(a, n)                  A <- its lower Cholesky factor L (A = L L^T; the strict upper triangle is left)
    lu_solve(aug, n, q)             [M | T] -> T <- M^-1 T (partial pivoting), in place in the augmented matrix
    cholesky_qr_encode(...)         the Q of tall matrices by Cholesky-QR twice
"""
from __future__ import annotations

from typing import NamedTuple

from ..runtime.kernels import shipped_kernel
from ..runtime.params import Params, declare
from .record import _bind, _prm, gemm

__all__ = ["Mat", "Rec", "BLOCK", "WIDE", "trsm_right", "trsm_left", "cholesky", "lu_solve", "copy2d", "cholesky_qr_encode",
           "tri_gemm"]

BLOCK = 32  # columns a block (factor.wgsl's BW)
#: trsm_right's outer blocks (0: off; 128, the default: Kron's solves 88.6 -> 72.5 ms on the H200, PERF_NOTES 67):
#: the update of the columns after a block of WIDE once, K = WIDE, not WIDE / 32 times with K = 32. Other sums than
#: without, so not the same bits.
WIDE = 128
TRI = Params("TriParams", "b", "nvec", "batch", "groups", "x_off", "x_bs", "x_sv", "x_sk", "t_off", "t_bs", "t_se",
             "t_sf", "p_off", "p_bs", "p_sv", "p_sk", "flags")
CHOL = Params("CholParams", "n", "b", "j0", "ld", "a_off", "a_bs", "p_off", "p_bs", "groups", "batch")
LU = Params("LuParams", "rows", "cols", "b", "j0", "ld", "a_off", "a_bs", "p_off", "p_bs", "piv_off", "groups",
            "batch")
COPY = Params("CopyParams", "rows", "cols", "batch", "s_off", "s_bs", "s_sr", "s_sc", "d_off", "d_bs", "d_sr",
              "d_sc", "mode")
declare("factor.wgsl", TRI, CHOL, LU, COPY)
UNIT, BACKWARD, PANEL = 1, 2, 4


class Mat(NamedTuple):
    """A batch of row-major matrices in one buffer: matrix z's (i, j) at ``off + z * bs + i * ld + j``."""
    buf: object
    off: int
    bs: int
    ld: int

    def at(self, i: int, j: int) -> "Mat":
        """The same batch from entry (i, j) on (a block)."""
        return Mat(self.buf, self.off + i * self.ld + j, self.bs, self.ld)


class Rec(NamedTuple):
    """Where recording goes: the device, the encoder (or compute pass), the batch, and the buffers' keepers."""
    dev: object
    enc: object
    batch: int
    keep: list
    cache: dict | None


def _run(r: Rec, entry: str, params: Params, name: str, groups: int, label: str, **bufs) -> None:
    k = shipped_kernel(r.dev, "factor.wgsl", entry)
    pbuf = _prm(r.dev, params.pack(**bufs.pop("words")), label, r.keep, r.cache)
    k.dispatch(r.enc, _bind(k, r.cache, {**bufs, name: pbuf}), groups)


def _mm(r: Rec, a: Mat, b: Mat, c: Mat, M, N, K, *, ta=False, tb=False, alpha=-1.0, beta=1.0) -> None:
    """C = alpha op(A) op(B) + beta C on :class:`Mat` operands."""
    if M and N and K:
        gemm(r.dev, r.enc, a.buf, b.buf, c.buf, M, N, K, ta=ta, tb=tb, offsets=(a.off, b.off, c.off),
             strides=(a.bs, b.bs, c.bs), lds=(a.ld, b.ld, c.ld), alpha=alpha, beta=beta, batch=r.batch, keep=r.keep,
             cache=r.cache)


def _tri(r: Rec, x: Mat, t: Mat, b: int, nvec: int, vec_rows: bool, coeff_rows: bool, flags: int, panel: Mat):
    """One block of substitutions (:func:`trsm_right`/:func:`trsm_left`): vectors are x's rows (``vec_rows``) or
    columns; coefficient c(e, f) is t[e][f] (``coeff_rows``) or t[f][e]."""
    xs = (x.ld, 1) if vec_rows else (1, x.ld)
    ts = (t.ld, 1) if coeff_rows else (1, t.ld)
    ps = (panel.ld, 1) if vec_rows else (1, panel.ld)
    groups = -(-nvec // 256)
    words = dict(b=b, nvec=nvec, batch=r.batch, groups=groups, x_off=x.off, x_bs=x.bs, x_sv=xs[0], x_sk=xs[1],
                 t_off=t.off, t_bs=t.bs, t_se=ts[0], t_sf=ts[1], p_off=panel.off, p_bs=panel.bs, p_sv=ps[0],
                 p_sk=ps[1], flags=flags | PANEL)
    _run(r, "tri_block", TRI, "tp", groups * r.batch, "factor.tri", X=x.buf, T=t.buf, P=panel.buf, words=words)


def trsm_right(r: Rec, y: Mat, u: Mat, rows: int, s: int, panel, *, lower_t=False, unit=False) -> None:
    """Y <- Y U^-1 for (rows, s) matrices Y and upper-triangular (s, s) U (``lower_t``: U = L^T, L lower as stored);
    forward over 32-column blocks: solve the block's columns (a thread a row), then Y[:, after] -= Y_block U[block,
    after] by GEMM. ``panel``: a buffer of ``batch * rows * 32`` floats (with :data:`WIDE`, ``batch * rows *
    min(WIDE, s)``: the columns after a WIDE block are updated once, with K = WIDE, from the block's solved columns
    gathered there; inside the block, by 32 as without)."""
    step = WIDE or BLOCK
    if panel.size < 4 * r.batch * rows * min(step, s):
        raise ValueError(f"trsm_right: panel holds {panel.size} bytes, {4 * r.batch * rows * min(step, s)} needed "
                         f"for {r.batch} matrices of {rows} rows (WIDE={WIDE})")
    for w0 in range(0, s, step):
        w1 = min(s, w0 + step)
        wb = w1 - w0
        for j0 in range(w0, w1, BLOCK):
            b, j1 = min(BLOCK, w1 - j0), min(w1, j0 + BLOCK)
            pan = Mat(panel, j0 - w0, rows * wb, wb)
            _tri(r, y.at(0, j0), u.at(j0, j0), b, rows, True, lower_t, UNIT if unit else 0, pan)
            _trsm_update(r, pan, u, y, rows, j0, j1, (w1 if WIDE else s) - j1, b, lower_t)
        if WIDE:
            _trsm_update(r, Mat(panel, 0, rows * wb, wb), u, y, rows, w0, w1, s - w1, wb, lower_t)


def _trsm_update(r: Rec, pan: Mat, u: Mat, y: Mat, rows: int, j0: int, j1: int, cols: int, k: int, lower_t: bool):
    """Y[:, j1:j1 + cols] -= Y[:, j0:j1] (solved, in ``pan``) U[j0:j1, j1:j1 + cols]."""
    if lower_t:  # U[block, after] = L[after, block]^T
        _mm(r, pan, u.at(j1, j0), y.at(0, j1), rows, cols, k, tb=True)
    else:
        _mm(r, pan, u.at(j0, j1), y.at(0, j1), rows, cols, k)


def trsm_left(r: Rec, x: Mat, t: Mat, s: int, q: int, panel, *, upper=False, unit=False) -> None:
    """X <- T^-1 X for (s, q) matrices X and triangular (s, s) T: lower (forward over 32-row blocks) or ``upper``
    (backward); the block's rows solved a thread a column, then the rows still to solve updated by GEMM.
    ``panel``: a buffer of ``batch * q * 32`` floats. T and X must be different buffers."""
    blocks = list(range(0, s, BLOCK))
    for j0 in (reversed(blocks) if upper else blocks):
        b = min(BLOCK, s - j0)
        pan = Mat(panel, 0, q * b, q)
        _tri(r, x.at(j0, 0), t.at(j0, j0), b, q, False, True, (BACKWARD if upper else 0) | (UNIT if unit else 0),
             pan)
        if upper:  # X[:j0] -= T[:j0, block] X_block
            _mm(r, t.at(0, j0), pan, x, j0, q, b)
        else:
            _mm(r, t.at(j0 + b, j0), pan, x.at(j0 + b, 0), s - j0 - b, q, b)


def cholesky(r: Rec, a: Mat, n: int, panel) -> None:
    """A <- L, the lower Cholesky factor of each symmetric positive definite (n, n) A (the strict upper triangle
    is left as it was): per 32-column block, the block's factor and the rows below it (``chol_panel``), then the
    trailing matrix less their product (a GEMM, on both triangles). ``panel``: ``batch * n * 32`` floats. A matrix
    that is not positive definite gives NaN."""
    for j0 in range(0, n, BLOCK):
        b = min(BLOCK, n - j0)
        below = n - j0 - b
        groups = max(1, -(-below // 256))
        words = dict(n=n, b=b, j0=j0, ld=a.ld, a_off=a.off, a_bs=a.bs, p_off=0, p_bs=n * b, groups=groups,
                     batch=r.batch)
        _run(r, "chol_panel", CHOL, "cp", groups * r.batch, "factor.chol", X=a.buf, P=panel, words=words)
        pan = Mat(panel, 0, n * b, b)
        _mm(r, pan, pan, a.at(j0 + b, j0 + b), below, below, b, tb=True)


def lu_solve(r: Rec, aug: Mat, n: int, q: int, panels: tuple, piv, ucopy) -> None:
    """T <- M^-1 T for the augmented (n, n + q) matrices [M | T] (row stride ``aug.ld``), in place: LU with
    partial pivoting per 32-column block (``lu_panel``; the row swaps and U12 for every column on the right,
    ``lu_rows``; the trailing update by GEMM), so T becomes L^-1 P T, then the backward solve with U (copied into
    ``ucopy``: ``batch * n * n`` floats). ``panels``: two buffers of ``batch * (n + q) * 32`` floats; ``piv``: at
    least ``batch * 32`` u32."""
    width = n + q
    p1, p2 = panels
    for j0 in range(0, n, BLOCK):
        b = min(BLOCK, n - j0)
        j1 = j0 + b
        base = dict(rows=n, cols=width, b=b, j0=j0, ld=aug.ld, a_off=aug.off, a_bs=aug.bs, piv_off=0,
                    batch=r.batch)
        _run(r, "lu_panel", LU, "lp", r.batch, "factor.lu",
             X=aug.buf, P=p1, piv=piv, words=dict(base, p_off=0, p_bs=(n - j1) * b, groups=1))
        groups = -(-(width - j1) // 256)
        _run(r, "lu_rows", LU, "lp", groups * r.batch, "factor.lu",
             X=aug.buf, P=p2, piv=piv, words=dict(base, p_off=0, p_bs=b * (width - j1), groups=groups))
        _mm(r, Mat(p1, 0, (n - j1) * b, b), Mat(p2, 0, b * (width - j1), width - j1), aug.at(j1, j1), n - j1,
            width - j1, b)
    u = Mat(ucopy, 0, n * n, n)
    copy2d(r, u, aug, n, n)
    trsm_left(r, aug.at(0, n), u, n, q, p1, upper=True)


def copy2d(r: Rec, dst: Mat, src: Mat | None, rows: int, cols: int, *, transpose=False, lower=False) -> None:
    """dst = src (or src^T: dst[i][j] = src[j][i]; or the identity where ``src`` is None), (rows, cols) each;
    ``lower``: zeros above the diagonal."""
    ss = (1, src.ld) if transpose else (src.ld, 1) if src is not None else (0, 0)
    words = dict(rows=rows, cols=cols, batch=r.batch, s_off=src.off if src else 0, s_bs=src.bs if src else 0,
                 s_sr=ss[0], s_sc=ss[1], d_off=dst.off, d_bs=dst.bs, d_sr=dst.ld, d_sc=1, mode=1 if src is None else 2 if lower else 0)
    bufs = dict(X=dst.buf) if src is None else dict(X=dst.buf, S=src.buf)
    _run(r, "eye2d" if src is None else "copy2d", COPY, "yp", -(-rows * cols * r.batch // 256), "factor.copy",
         words=words, **bufs)


def cholesky_qr_encode(dev, enc, y, z, small, n, p, batch, keep, cache=None) -> None:
    """Record, in place in buffer ``y``, the Q of each of ``batch`` (n, p) matrices (n >= p) with R's diagonal
    positive: Cholesky-QR twice (G = Y^T Y by GEMM, its blocked Cholesky factor L, Y <- Y L^-T by the blocked
    triangular solve). ``z`` (``batch * n * p`` floats: the panels) and ``small`` (``batch * p * p``) are work
    buffers. float32; accurate while Y is well conditioned (kappa(Y)^2 well below 1/eps, as X + a step on the
    Stiefel manifold is), the second pass restoring orthogonality to float32 rounding."""
    r = Rec(dev, enc, batch, keep, cache)
    ym, g = Mat(y, 0, n * p, p), Mat(small, 0, p * p, p)
    for _ in range(2):
        _mm(r, ym, ym, g, p, p, n, ta=True, alpha=1.0, beta=0.0)
        cholesky(r, g, p, z)
        trsm_right(r, ym, g, n, p, z, lower_t=True)


def _splits(s: int, pieces: int) -> list:
    """Block bounds [0, .., s] for ``pieces`` blocks, on multiples of 128 (the GEMM's tile) where s allows."""
    q = 128 if s >= 128 * pieces else BLOCK
    cuts = sorted({min(s, -(-(s * k // pieces) // q) * q) for k in range(1, pieces)} | {s})
    return [0] + [c for c in cuts if c > 0]


def tri_gemm(r: Rec, a: Mat, b: Mat, c: Mat, M, N, K, *, ta=False, tb=False, tri="a_upper", pieces=4, alpha=1.0,
             beta=0.0, mm=None) -> None:
    """C = alpha op(A) op(B) + beta C where op(A) (``tri`` "a_upper"/"a_lower", square) or op(B) ("b_upper"/
    "b_lower") is triangular, or both are upper ("both_upper", whose product is upper too: C below its diagonal is
    not written), as ``pieces`` GEMMs over blocks of rows (or columns) whose K stops where the triangle's zeros begin
    (about (pieces + 1) / (2 pieces) of the products). ``mm``: the GEMM (default: :func:`_mm`'s)."""
    mm = mm or (lambda *x, **k: _mm(r, *x, **k))
    s = M if tri.startswith(("a", "both")) else N
    bounds = _splits(s, pieces if s >= 256 else 1)
    for x0, x1 in zip(bounds, bounds[1:]):
        w = x1 - x0
        if tri in ("a_upper", "both_upper"):
            aa = a.at(x0, x0)
            bb = b.at(0, x0) if tb else b.at(x0, 0)
            col = x0 if tri == "both_upper" else 0
            bb = (bb.at(col, 0) if tb else bb.at(0, col))
            mm(aa, bb, c.at(x0, col), w, N - col, K - x0, ta=ta, tb=tb, alpha=alpha, beta=beta)
        elif tri == "a_lower":
            mm(a.at(0, x0) if ta else a.at(x0, 0), b, c.at(x0, 0), w, N, x1, ta=ta, tb=tb, alpha=alpha, beta=beta)
        elif tri == "b_upper":
            mm(a, b.at(x0, 0) if tb else b.at(0, x0), c.at(0, x0), M, w, x1, ta=ta, tb=tb, alpha=alpha, beta=beta)
        elif tri == "b_lower":
            mm(a.at(x0, 0) if ta else a.at(0, x0), b.at(x0, x0), c.at(0, x0), M, w, K - x0, ta=ta, tb=tb,
               alpha=alpha, beta=beta)
        else:
            raise ValueError(f"tri_gemm: tri must be a_upper, a_lower, b_upper, b_lower or both_upper, got {tri!r}")
