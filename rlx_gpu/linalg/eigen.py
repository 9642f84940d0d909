"""Eigenbases on the GPU, recorded: the eigenvectors of g g^T and g^T g (by descending eigenvalue) from a matrix g
itself, and the pieces a preconditioner's refresh needs (eigenvalue estimates, a stable descending order, columns
gathered in it). ``shaders/basis.wgsl`` (one-sided Jacobi, ordering) on :mod:`.householder` and :mod:`.factor`.

    gram_bases(r, g, m, n, q0, q1, work)   q0 <- the eigenvectors of g g^T (m x m), q1 <- of g^T g (n x n)

How: with L = max(m, n), S = min(m, n) and h = g^T (m <= n) or g (m > n), an (L, S) matrix: Householder QR,
h = Q R (Q of L x L, kept whole); one-sided Jacobi on the rows of F = R^T (S x S, cheap: S <= L) until they are
orthogonal, U F = Sigma W^T with U the rotations' product; the short side's eigenvectors are U's rows, the long side's
Q [W, I] with W's columns F's rows normalised (then re-orthonormalised by a QR, so that a rank-deficient g, whose
vectors for a zero singular value are arbitrary, still gives an orthonormal basis), all ordered by the singular
values. No matrix is squared, so the bases are those of g's SVD to float32 rounding. A g holding inf or NaN gives
NaN bases.

Switches (read when the work buffers are made and when recording; issue 24, PERF_NOTES 71):
:data:`GRAD_WIDE` (None, the default: :data:`.householder.WIDE`'s) the block width of the QR of h and the forming of
its Q (0: the 32-wide panels' updates alone, the code of WIDE 0; the re-orthonormalising QRs and SOAP's refresh keep
WIDE): bit for bit the path of that WIDE. :data:`STOP` (0.0, the default: off) ends a matrix's Jacobi after a sweep
none of whose rotations had |f_p . f_q| above STOP ||F||_F^2 (F's Frobenius norm squared, the trace of g g^T, taken
once before the sweeps: ``jacobi_trace``), an absolute measure of what a pair still adds to the residual
||GQ - QL|| / ||G||, where a relative one (|cos|, TOL's) stays large for the tiny rows of a graded g; off: after a
sweep that rotated nothing, which in float32 a matrix of hundreds of rows may never reach (the last sweeps rotate
a few pairs at TOL, the rounding's level: 768 x 768 Gaussian, all 16 sweeps, the residual at its floor from the
9th). Fewer sweeps, so other rounding.
"""
from __future__ import annotations

from ..runtime.kernels import shipped_kernel
from ..runtime.params import Params, declare
from . import householder
from .factor import Mat, Rec, _mm, copy2d
from .householder import form_q, positive_r, qr
from .record import _bind, _prm

__all__ = ["gram_bases", "gram_work", "gram_dispatches", "qr_dispatches", "order_by", "gather_cols", "orthonormalize",
           "JACOBI", "ORDER", "SWEEPS", "TOL", "GRAD_WIDE", "STOP"]

JACOBI = Params("JacobiParams", "m", "mp", "pairs", "batch", "f_off", "f_bs", "ldf", "u_off", "u_bs", "ldu",
                "cnt_off", "sweeps", "parity", "tol:f32", "stop:f32")
ORDER = Params("OrderParams", "rows", "cols", "batch", "s_off", "s_bs", "s_sr", "s_sk", "t_off", "t_bs", "d_off",
               "d_bs", "ldd", "o_off", "o_bs", "e_off", "e_bs", "nan")
declare("basis.wgsl", JACOBI, ORDER)
SWEEPS = 16   # Jacobi sweeps at most (a sweep that rotates nothing ends a matrix's early; read when recording)
TOL = 2e-7    # rows count as orthogonal when |f_p . f_q| <= TOL |f_p| |f_q|
GRAD_WIDE: int | None = None  # the grad's QR's block width (None: householder.WIDE; the module docstring)
STOP = 0.0    # a sweep whose rotations all had |f_p . f_q| <= STOP ||F||_F^2 ends a matrix's Jacobi (0: off)
NAN = 0x7FC00000


def _k(r: Rec, entry: str, params: Params, name: str, groups: int, words: dict, **bufs) -> None:
    k = shipped_kernel(r.dev, "basis.wgsl", entry)
    pbuf = _prm(r.dev, params.pack(**words), f"basis.{entry}", r.keep, r.cache)
    k.dispatch(r.enc, _bind(k, r.cache, {**bufs, name: pbuf}), groups)


def _order_words(r: Rec, rows=0, cols=0, **kw) -> dict:
    base = dict(rows=rows, cols=cols, batch=r.batch, s_off=0, s_bs=0, s_sr=0, s_sk=0, t_off=0, t_bs=0, d_off=0,
                d_bs=0, ldd=0, o_off=0, o_bs=0, e_off=0, e_bs=0, nan=NAN)
    return {**base, **kw}


def jacobi(r: Rec, f: Mat, u: Mat, m: int, cnt, sweeps: int | None = None, tol: float = TOL,
           stop: float | None = None) -> None:
    """One-sided Jacobi on the rows of each (m, m) F, the rotations applied to U's rows too (``cnt``: a buffer of
    ``2 + batch * (sweeps + 1)`` u32; ``sweeps`` default :data:`SWEEPS` as it is then). ``sweeps * (mp - 1)`` rounds
    of one dispatch each, whatever converges early (a matrix's rounds after its last sweep read nothing): after a
    sweep that rotated nothing or, with ``stop`` (default :data:`STOP`) > 0, none of whose rotations had
    |f_p . f_q| above stop ||F||_F^2 (the norm taken first, into ``cnt``)."""
    mp = m + (m % 2)
    if mp < 2:
        return
    stop, sweeps = STOP if stop is None else stop, SWEEPS if sweeps is None else sweeps
    if not stop >= 0.0:
        raise ValueError(f"jacobi: stop must be a number >= 0, got {stop!r}")
    words = dict(m=m, mp=mp, pairs=mp // 2, batch=r.batch, f_off=f.off, f_bs=f.bs, ldf=f.ld, u_off=u.off, u_bs=u.bs,
                 ldu=u.ld, cnt_off=0, sweeps=sweeps, parity=0, tol=tol, stop=stop)
    if cnt.size < 4 * (2 + r.batch * (sweeps + 1)):
        raise ValueError(f"jacobi: cnt holds {cnt.size} bytes, {4 * (2 + r.batch * (sweeps + 1))} needed")
    _k(r, "jacobi_reset", JACOBI, "jp", -(-(2 + r.batch * sweeps) // 256), words, cnt=cnt)
    if stop > 0.0:
        _k(r, "jacobi_trace", JACOBI, "jp", r.batch, words, F=f.buf, cnt=cnt)
    ks = shipped_kernel(r.dev, "basis.wgsl", "jacobi_round")
    groups = [_bind(ks, r.cache, {"F": f.buf, "U": u.buf, "cnt": cnt, "jp": _prm(
        r.dev, JACOBI.pack(**dict(words, parity=par)), "basis.jacobi", r.keep, r.cache)}) for par in (0, 1)]
    for i in range(sweeps * (mp - 1)):
        ks.dispatch(r.enc, groups[i % 2], r.batch * (mp // 2))


def order_by(r: Rec, a: Mat, b: Mat, rows: int, cols: int, est, order, *, columns=True, at: int = 0) -> None:
    """est[j] = sum_r a[r][j] b[r][j] (``columns``; else along rows: a[j][r] b[j][r]), then order = the indices by
    descending est, ties by index (NumPy's ``argsort(-est, kind="stable")``). ``est`` and ``order``: ``batch *
    cols`` floats / u32 from element ``at`` on."""
    sr, sk = (a.ld, 1) if columns else (1, a.ld)
    words = _order_words(r, rows, cols, s_off=a.off, s_bs=a.bs, s_sr=sr, s_sk=sk, t_off=b.off, t_bs=b.bs,
                         o_off=at, o_bs=cols, e_off=at, e_bs=cols)
    groups = -(-cols * r.batch // 256)
    _k(r, "col_dots", ORDER, "op", groups, words, A=a.buf, B=b.buf, est=est)
    _k(r, "rank_order", ORDER, "op", groups, words, est=est, order=order)


def gather_cols(r: Rec, dst: Mat, src: Mat, rows: int, cols: int, order, est=None, *, columns=True,
                at: int = 0) -> None:
    """dst[:, k] = src[:, order[k]] (``columns``) or src[order[k], :]^T, divided by sqrt(est[order[k]]) if ``est``
    is given (0 where that is 0); ``order`` and ``est`` from element ``at`` on."""
    sr, sk = (src.ld, 1) if columns else (1, src.ld)
    words = _order_words(r, rows, cols, s_off=src.off, s_bs=src.bs, s_sr=sr, s_sk=sk, d_off=dst.off, d_bs=dst.bs,
                         ldd=dst.ld, o_off=at, o_bs=cols, e_off=at, e_bs=cols)
    bufs = dict(F=dst.buf, A=src.buf, order=order, **({"est": est} if est is not None else {}))
    _k(r, "gather_norm" if est is not None else "gather", ORDER, "op", -(-rows * cols * r.batch // 256), words, **bufs)


def orthonormalize(r: Rec, src: Mat, dst: Mat, s: int, vs: Mat, tbuf, work) -> None:
    """dst <- the Q of src's QR with R's diagonal positive (src, (s, s), is overwritten): for a nearly orthonormal
    src the nearest such matrix to rounding, its columns in order."""
    qr(r, src, s, s, vs, tbuf, work)
    form_q(r, dst, s, s, s, vs, tbuf, work)
    positive_r(r, dst, src, s, s)


def gram_work(dev, batch: int, m: int, n: int, label: str, **given) -> dict:
    """The work buffers :func:`gram_bases` needs for ``batch`` (m, n) matrices (``given``: buffers of the caller's
    to use instead, by name: h and vs of L S floats a matrix, qf of L^2, fs, us, ws of S^2)."""
    L, S = max(m, n), min(m, n)
    f = 4 * batch
    t = max(householder.t_floats(L), householder.t_floats(S, GRAD_WIDE))  # (SOAP's refresh: QRs of L columns)
    wk = max(householder.work_floats(L), householder.work_floats(L, GRAD_WIDE))
    sizes = dict(h=L * S, vs=L * S, qf=L * L, fs=S * S, us=S * S, ws=S * S, t=t, w1=wk, w2=wk, est=L, order=L)
    out = {k: given.get(k) or dev.buffer(f * v, f"{label}.{k}") for k, v in sizes.items()}
    out["cnt"] = dev.buffer(4 * (2 + batch * (SWEEPS + 1)), f"{label}.cnt")
    out["flag"] = dev.buffer(f, f"{label}.flag")
    return out


def qr_dispatches(s: int, c: int, wide: int | None = None) -> int:
    """The most dispatches :func:`~.householder.qr` and :func:`~.householder.form_q` record for c columns."""
    return householder.dispatches(c, wide)


def gram_dispatches(m: int, n: int) -> int:
    """The most dispatches :func:`gram_bases` records."""
    L, S = max(m, n), min(m, n)
    return 13 + qr_dispatches(L, S, GRAD_WIDE) + 2 * qr_dispatches(S, S) + SWEEPS * (S + S % 2) + 1


def gram_bases(r: Rec, g: Mat, m: int, n: int, q0: Mat, q1: Mat, w: dict) -> None:
    """q0 <- the eigenvectors of g g^T, q1 <- those of g^T g, each by descending eigenvalue (the module's method),
    for each (m, n) g of the batch; ``w``: :func:`gram_work`'s buffers. g is not changed."""
    L, S = max(m, n), min(m, n)
    wide = m <= n
    qs, ql = (q0, q1) if wide else (q1, q0)
    h, vs, qf = Mat(w["h"], 0, L * S, S), Mat(w["vs"], 0, L * S, S), Mat(w["qf"], 0, L * L, L)
    fs, us, ws = (Mat(w[k], 0, S * S, S) for k in ("fs", "us", "ws"))
    work = (w["w1"], w["w2"])
    flags = _order_words(r, m, n, s_off=g.off, s_bs=g.bs, s_sr=g.ld)
    _k(r, "flag_reset", ORDER, "op", -(-r.batch // 256), flags, order=w["flag"])
    _k(r, "nonfinite", ORDER, "op", -(-m * n * r.batch // 256), flags, A=g.buf, order=w["flag"])
    copy2d(r, h, g, L, S, transpose=wide)
    qr(r, h, L, S, vs, w["t"], work, GRAD_WIDE)
    form_q(r, qf, L, S, L, vs, w["t"], work, GRAD_WIDE)
    copy2d(r, fs, h, S, S, transpose=True, lower=True)   # F = R^T
    copy2d(r, us, None, S, S)
    jacobi(r, fs, us, S, w["cnt"])
    order_by(r, fs, fs, S, S, w["est"], w["order"], columns=False)
    gather_cols(r, ws, fs, S, S, w["order"], w["est"], columns=False)   # W: F's rows normalised, ordered
    gather_cols(r, fs, us, S, S, w["order"], columns=False)             # the short side: U's rows, ordered
    orthonormalize(r, fs, qs, S, vs, w["t"], work)  # (the rotations' rounding, and W's arbitrary vectors)
    orthonormalize(r, ws, us, S, vs, w["t"], work)
    _mm(r, qf, us, ql, L, S, S, alpha=1.0, beta=0.0)                    # the long side: Q [W, I]
    if L > S:
        copy2d(r, ql.at(0, S), qf.at(0, S), L, L - S)
    for q, s in ((q0, m), (q1, n)):
        words = _order_words(r, s, s, d_off=q.off, d_bs=q.bs, ldd=q.ld)
        _k(r, "nan_where", ORDER, "op", -(-s * s * r.batch // 256), words, F=q.buf, order=w["flag"])

