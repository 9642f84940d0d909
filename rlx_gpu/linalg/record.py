"""Recording matrix work into a command encoder or compute pass (what ``rlx_gpu.linalg``'s public functions and the
matrix optimizers record): the batched GEMMs (``shaders/gemm.wgsl``, ``shaders/gemm16.wgsl``), copies, Frobenius
scaling, Newton-Schulz in float32 and float16 (Cholesky-QR and the other factorisations: ``factor.py``). Buffers and
element offsets in, dispatches out."""
from __future__ import annotations

import numpy as np

from ..runtime.kernels import shipped_kernel
from ..runtime.params import Params, declare

TILE = 128  # outputs per workgroup along m and n (shaders/gemm.wgsl, gemm16.wgsl)
# The most K one GEMM dispatch sums: its threads' k loops stay short (2,048 tiles of 8 or 1,024 of 16, a few nested
# iterations each: some drivers stop a thread's loops after 65,535 iterations in all, Mesa 22.3.6's lavapipe among
# them, silently); a longer K is split over dispatches that accumulate into C (beta = 1 after the first).
KSPLIT = 16384
THIN, TCH = 64, 4096  # a long K with at most THIN outputs a matrix: chunks of TCH k's summed by many workgroups
# Split K (float32 GEMMs): a GEMM of fewer than SPLIT_BELOW tiles (matrices x 128 x 128 outputs) and a K of at
# least 2 SPLIT_K is summed in chunks of >= SPLIT_K k's by workgroups of their own, as many chunks as bring it
# near SPLIT_WORKGROUPS workgroups, in one dispatch (each chunk's product into a slab of a work buffer of at most
# SPLIT_BYTES), then the chunks added in order (thin_sum): a QR's V^T X with 32 or 128 rows otherwise keeps one
# workgroup a matrix on a K of thousands (the refresh's trailing updates: 0.68x on the H200, PERF_NOTES 74).
# Muon's X X^T of GPT-2's 768 x 3072 matrices (432 tiles) was 4% slower split in two, so it is not (400).
# SPLIT = False: one workgroup a tile, as before (other sums, so not the same bits).
SPLIT = True
SPLIT_BELOW, SPLIT_WORKGROUPS, SPLIT_K, SPLIT_BYTES = 400, 512, 256, 1 << 26
# The float32 GEMM's staging (shaders/gemm.wgsl's PF): 0 each K step's slab loaded and staged, then summed (the
# first version); 1 the next slab's loads held in registers while this one is summed; 2 as 1, without the edge
# checks in slabs inside both operands. The same values staged in the same places: the same bits (PERF_NOTES 76).
# 0 is the H100's choice: 1 and 2 ran 27-35% slower at every shape measured (the held values cost occupancy).
PREFETCH = 0
# Matrices of up to FROB_ONE elements get their Frobenius scaling from one workgroup each (two loops of count/256
# a thread); larger ones in two passes over chunks of FCH (shaders/gemm.wgsl frob_part, frob_apply).
FROB_ONE, FCH = 1 << 22, 16384
#: The parameters of shaders/gemm.wgsl's and gemm16.wgsl's GEMMs (``gp``), by name.
GEMM = Params("Gemm", "M", "N", "K", "ta", "tb", "a_off", "b_off", "c_off", "a_bs", "b_bs", "c_bs", "alpha:f32",
              "beta:f32", "tiles_n", "tiles_m", "batch", "lda", "ldb", "ldc", "chunks", "kc")
#: The parameters of the copies, Frobenius scalings and Newton-Schulz's f16 conversions (``sp``), by name: ``count``
#: elements (a matrix's, or a copy's / a flat conversion's in all), ``x_off`` (into A or X), ``c_off`` (into C),
#: ``stride`` (between matrices), ``eps``, ``batch``, ``parts`` (frob_part's chunks a matrix), ``scale``.
SPAN = Params("Span", "count", "x_off", "c_off", "stride", "eps:f32", "batch", "parts", "scale:f32")
declare("gemm.wgsl", GEMM, SPAN)
declare("gemm16.wgsl", GEMM, SPAN)


def _prm(dev, words, label, keep, cache):
    """A parameter buffer holding ``words`` (from ``cache`` when the same words were made before: an optimizer that
    runs the same GEMMs every step makes them once)."""
    prm = np.array(words, np.uint32)
    key = (label, prm.tobytes())
    if cache is not None and key in cache:
        return cache[key]
    buf = dev.buffer(prm.nbytes, label, data=prm)
    if cache is not None:
        cache[key] = buf
    if keep is not None:
        keep.append(buf)
    return buf


def _span(dev, label, keep, cache, **words):
    """A ``Span`` parameter buffer (the fields not given are 0)."""
    return _prm(dev, SPAN.pack(**{**dict.fromkeys(SPAN.names, 0), **words}), label, keep, cache)


def _bind(k, cache, buffers: dict):
    """A bind group; kept by the kernel when the caller keeps a ``cache`` (work recorded every step), made afresh
    otherwise (one-off calls with buffers of their own, which a kept group would hold alive)."""
    return k.cached_bind(buffers) if cache is not None else k.bind(buffers)


def gemm(dev, enc, a, b, c, M, N, K, *, ta=False, tb=False, offsets=(0, 0, 0), strides=None, alpha=1.0, beta=0.0,
         batch=1, keep=None, cache=None, f16=False, lds=None) -> None:
    """Record C = alpha * op(A) @ op(B) + beta * C for ``batch`` matrices (buffers ``a``, ``b``, ``c``; element
    offsets and batch strides; ``lds``: the row strides of A, B, C as stored (default packed: A (M, K) or (K, M)
    with ``ta``, B (K, N) or (N, K) with ``tb``, C (M, N)), so sub-blocks of larger matrices are operands too;
    ``c`` must not be ``a`` or ``b``). ``keep``: a list that holds the parameter buffer until the work is
    submitted. ``f16``: the buffers hold float16 (``shaders/gemm16.wgsl``: packed f16 products summed 16 at a time,
    those partial sums added in float32; the caller scales its inputs so that they stay in range)."""
    strides = strides or (M * K, K * N, M * N)
    lda, ldb, ldc = lds or ((M if ta else K), (K if tb else N), N)
    tn, tm = -(-N // TILE), -(-M // TILE)
    if K > KSPLIT and M * N <= THIN and not f16:
        return _gemm_thin(dev, enc, a, b, c, M, N, K, ta, tb, offsets, strides, alpha, beta, batch, keep, cache,
                          (lda, ldb, ldc))
    chunks, kc = (1, K) if f16 else split_k(M, N, K, batch)
    if chunks > 1:
        return _gemm_split(dev, enc, a, b, c, M, N, K, ta, tb, offsets, strides, alpha, beta, batch, keep, cache,
                           (lda, ldb, ldc), chunks, kc)
    k = shipped_kernel(dev, "gemm16.wgsl", "gemm16") if f16 else _gemm_kernel(dev)
    for k0 in range(0, max(K, 1), KSPLIT):  # (one dispatch unless K > KSPLIT)
        oa, ob = offsets[0] + (k0 * lda if ta else k0), offsets[1] + (k0 if tb else k0 * ldb)
        words = GEMM.pack(M=M, N=N, K=min(KSPLIT, K - k0), ta=int(ta), tb=int(tb), a_off=oa, b_off=ob,
                          c_off=offsets[2], a_bs=strides[0], b_bs=strides[1], c_bs=strides[2], alpha=alpha,
                          beta=beta if k0 == 0 else 1.0, tiles_n=tn, tiles_m=tm, batch=batch, lda=lda, ldb=ldb,
                          ldc=ldc, chunks=0, kc=0)
        pbuf = _prm(dev, words, "gemm.prm", keep, cache)
        k.dispatch(enc, _bind(k, cache, {"A": a, "B": b, "C": c, "gp": pbuf}), tn * tm * batch)


def _gemm_thin(dev, enc, a, b, c, M, N, K, ta, tb, offsets, strides, alpha, beta, batch, keep, cache, lds) -> None:
    """:func:`gemm` for few outputs (M N <= THIN) and a long K: partial sums over chunks of TCH k's, then their sum
    (``shaders/gemm.wgsl`` gemm_thin, thin_sum)."""
    chunks = -(-K // TCH)
    words = GEMM.pack(M=M, N=N, K=K, ta=int(ta), tb=int(tb), a_off=offsets[0], b_off=offsets[1], c_off=offsets[2],
                      a_bs=strides[0], b_bs=strides[1], c_bs=strides[2], alpha=alpha, beta=beta, tiles_n=0,
                      tiles_m=0, batch=batch, lda=lds[0], ldb=lds[1], ldc=lds[2], chunks=chunks, kc=0)
    pbuf = _prm(dev, words, "gemm.prm", keep, cache)
    part = _scratch(dev, 4 * batch * chunks * M * N, "gemm.thin", keep, cache)
    for entry, groups in (("gemm_thin", batch * chunks), ("thin_sum", -(-batch * M * N // 256))):
        k = shipped_kernel(dev, "gemm.wgsl", entry)
        k.dispatch(enc, _bind(k, cache, {"A": a, "B": b, "C": c, "P": part, "gp": pbuf}), groups)


def _gemm_kernel(dev):
    if PREFETCH not in (0, 1, 2):
        raise ValueError(f"linalg.record.PREFETCH: expected 0, 1 or 2, got {PREFETCH!r}")
    return shipped_kernel(dev, "gemm.wgsl", "gemm", **({"PF": PREFETCH} if PREFETCH else {}))


def split_k(M: int, N: int, K: int, batch: int) -> tuple[int, int]:
    """(chunks, k a chunk) of a float32 GEMM's split K (:data:`SPLIT`): (1, K) where it is not split."""
    tiles = -(-M // TILE) * -(-N // TILE) * batch
    if not SPLIT or K < 2 * SPLIT_K or tiles >= SPLIT_BELOW:
        return 1, K
    chunks = min(-(-SPLIT_WORKGROUPS // tiles), K // SPLIT_K, max(1, SPLIT_BYTES // (4 * batch * M * N)))
    per = -(-K // max(chunks, 1))
    kc = -(-per // 8) * 8  # (a multiple of the tiles' k step)
    chunks = -(-K // kc)
    return (chunks, kc) if chunks > 1 and kc <= KSPLIT else (1, K)


def _gemm_split(dev, enc, a, b, c, M, N, K, ta, tb, offsets, strides, alpha, beta, batch, keep, cache, lds, chunks,
                kc) -> None:
    """:func:`gemm` split K: gemm's workgroups (matrix, chunk, tile) each sum ``kc`` k's into the chunk's slab of a
    work buffer (M x N packed, slab = matrix chunks + chunk), then thin_sum adds a matrix's slabs in order into C."""
    tn, tm = -(-N // TILE), -(-M // TILE)
    need = 4 * batch * chunks * M * N
    part = _scratch(dev, 1 << max(need - 1, 1).bit_length(), "gemm.split", keep, cache)  # (sizes rounded to powers
    #                                                                                    of two: few buffers kept)
    words = GEMM.pack(M=M, N=N, K=K, ta=int(ta), tb=int(tb), a_off=offsets[0], b_off=offsets[1], c_off=0,
                      a_bs=strides[0], b_bs=strides[1], c_bs=M * N, alpha=1.0, beta=0.0, tiles_n=tn, tiles_m=tm,
                      batch=batch * chunks, lda=lds[0], ldb=lds[1], ldc=N, chunks=chunks, kc=kc)
    k = _gemm_kernel(dev)
    k.dispatch(enc, _bind(k, cache, {"A": a, "B": b, "C": part, "gp": _prm(dev, words, "gemm.prm", keep, cache)}),
               tn * tm * batch * chunks)
    words = GEMM.pack(M=M, N=N, K=K, ta=int(ta), tb=int(tb), a_off=0, b_off=0, c_off=offsets[2], a_bs=0, b_bs=0,
                      c_bs=strides[2], alpha=alpha, beta=beta, tiles_n=0, tiles_m=0, batch=batch, lda=lds[0],
                      ldb=lds[1], ldc=lds[2], chunks=chunks, kc=kc)
    k = shipped_kernel(dev, "gemm.wgsl", "thin_sum")
    k.dispatch(enc, _bind(k, cache, {"C": c, "P": part, "gp": _prm(dev, words, "gemm.prm", keep, cache)}),
               -(-batch * M * N // 256))


def _scratch(dev, nbytes, label, keep, cache):
    """A work buffer of at least ``nbytes`` (from ``cache`` when one was made before), held by ``keep``."""
    buf = cache.get((label, nbytes)) if cache is not None else None
    if buf is None:
        buf = dev.buffer(nbytes, label)
        if cache is not None:
            cache[(label, nbytes)] = buf
    if keep is not None:
        keep.append(buf)
    return buf


def copy_range(dev, enc, src, src_off, dst, dst_off, count, keep=None, cache=None) -> None:
    """Record a copy of ``count`` float32 elements as a dispatch (so it can sit inside a compute pass)."""
    pbuf = _span(dev, "copy.prm", keep, cache, count=count, x_off=src_off, c_off=dst_off)
    k = shipped_kernel(dev, "gemm.wgsl", "copy_range")
    k.dispatch(enc, _bind(k, cache, {"A": src, "C": dst, "sp": pbuf}), -(-count // 256))


def frob_scale(dev, enc, x, count, offset, stride, eps, batch, keep=None, cache=None) -> None:
    """Record: each of ``batch`` matrices of ``count`` elements divided by max(its Frobenius norm, eps) (one
    dispatch; two for matrices past FROB_ONE elements)."""
    parts = 0 if count <= FROB_ONE else -(-count // FCH)
    pbuf = _span(dev, "frob.prm", keep, cache, count=count, c_off=offset, stride=stride, eps=eps, batch=batch,
                 parts=parts)
    if not parts:
        k = shipped_kernel(dev, "gemm.wgsl", "frob_scale")
        k.dispatch(enc, _bind(k, cache, {"C": x, "sp": pbuf}), batch)
        return
    part = _scratch(dev, 4 * batch * parts, "frob.parts", keep, cache)
    for entry in ("frob_part", "frob_apply"):
        k = shipped_kernel(dev, "gemm.wgsl", entry)
        k.dispatch(enc, _bind(k, cache, {"C": x, "P": part, "sp": pbuf}), batch * parts)


def ns_dispatches(ns_steps: int) -> int:
    return 1 + 5 * ns_steps + 1


def ns_encode(dev, enc, x, offset, batch, m, n, ns_steps, coeffs, eps, keep, cache=None, capacity=None,
              f16=False) -> None:
    """Record Newton-Schulz on ``batch`` (m, n) matrices at element ``offset`` of buffer ``x``, in place, as
    dispatches only (``enc``: a command encoder or a :class:`~rlx_gpu.runtime.kernels.ComputePass`):
    X /= max(|X|, eps); then ns_steps times A = X X^T, B = b A + c A A, X = a X + B X (for m > n on X^T, as
    X^T X and X B: torch.optim.Muon's _zeropower_via_newtonschulz, in float32). ``cache``: a dict kept by the caller
    from step to step, so the work buffers (sized for ``capacity`` matrices: the most a caller batches) and the
    parameter buffers are made once. ``f16``: the iteration in float16 (:func:`ns_encode16`)."""
    if f16:
        return ns_encode16(dev, enc, x, offset, batch, m, n, ns_steps, coeffs, eps, keep, cache, capacity)
    a, b, c = (float(v) for v in coeffs)
    s = min(m, n)
    tall = m > n
    size = batch * m * n
    cap = max(batch, capacity or batch)
    work = cache.get(("ns", m, n)) if cache is not None else None
    if work is None or work[0].size < 4 * batch * s * s:
        work = (dev.buffer(4 * cap * s * s, "ns.A"), dev.buffer(4 * cap * s * s, "ns.B"), dev.buffer(4 * cap * m * n,
                                                                                                  "ns.Y"))
        if cache is not None:
            cache[("ns", m, n)] = work
    amat, bmat, y = work
    keep += list(work)
    frob_scale(dev, enc, x, m * n, offset, m * n, eps, batch, keep, cache)
    cur, cur_off, other = x, offset, y
    for _ in range(ns_steps):
        # A = X X^T (s x s): wide: (m,n)(n,m); tall: X^T X = (n,m)(m,n)
        gemm(dev, enc, cur, cur, amat, s, s, m if tall else n, ta=tall, tb=not tall, offsets=(cur_off, cur_off, 0),
             strides=(m * n, m * n, s * s), batch=batch, keep=keep, cache=cache)
        copy_range(dev, enc, amat, 0, bmat, 0, batch * s * s, keep, cache)
        gemm(dev, enc, amat, amat, bmat, s, s, s, alpha=c, beta=b, batch=batch, keep=keep, cache=cache)  # B = cAA + bA
        o_off = 0 if other is y else offset
        copy_range(dev, enc, cur, cur_off, other, o_off, size, keep, cache)
        if tall:  # X = a X + X B   (B symmetric)
            gemm(dev, enc, cur, bmat, other, m, n, n, offsets=(cur_off, 0, o_off), strides=(m * n, s * s, m * n),
                 alpha=1.0, beta=a, batch=batch, keep=keep, cache=cache)
        else:  # X = a X + B X
            gemm(dev, enc, bmat, cur, other, m, n, m, offsets=(0, cur_off, o_off), strides=(s * s, m * n, m * n),
                 alpha=1.0, beta=a, batch=batch, keep=keep, cache=cache)
        cur, cur_off, other = other, o_off, cur
    if cur is not x:  # (an odd number of steps ended in the scratch buffer)
        copy_range(dev, enc, cur, 0, x, offset, size, keep, cache)


def ns_encode16(dev, enc, x, offset, batch, m, n, ns_steps, coeffs, eps, keep, cache=None, capacity=None,
                mm=None) -> None:
    """:func:`ns16_stages`, all recorded at once."""
    for _ in ns16_stages(dev, enc, x, offset, batch, m, n, ns_steps, coeffs, eps, keep, cache, capacity, mm):
        pass


def ns16_stages(dev, enc, x, offset, batch, m, n, ns_steps, coeffs, eps, keep, cache=None, capacity=None, mm=None):
    """:func:`ns_encode` with the iteration in float16 (the float32 matrices in ``x`` converted in and out). Every
    f16 matrix is kept scaled so that its entries are O(1) and sums of 16 products neither underflow nor
    overflow: with s = min(m, n) and L = max(m, n), X~ = sqrt(L) X, A~ = sqrt(s) A, B~ = sqrt(s) B (the GEMMs'
    alpha undo the products' factors), so the spectral norms below ~1.5 that Newton-Schulz keeps bound every
    partial sum by Cauchy-Schwarz well inside f16's range. ``mm(enc, A, B, C, M, N, K, alpha, beta, D, ta, tb,
    strides)``: the GEMM C = alpha op(A) op(B) + beta D of float16 buffers (default: ``gemm16.wgsl``, D copied into C
    first; the tensor-core GEMM reads D itself: ``rlx_gpu.linalg.tc``). A generator: it records one stage (the
    conversion in, then each GEMM; the conversion out with the last) per step, so a caller can interleave the
    independent iterations of several batches."""
    a, b, c = (float(v) for v in coeffs)
    s, L = min(m, n), max(m, n)
    tall = m > n
    cap = max(batch, capacity or batch)
    work = cache.get(("ns16", m, n)) if cache is not None else None
    if work is None or work[0].size < 2 * batch * m * n:
        work = tuple(dev.buffer(4 * (-(-cap * k // 2)), f"ns16.{w}") for w, k in
                     (("X", m * n), ("Y", m * n), ("A", s * s), ("B", s * s)))
        if cache is not None:
            cache[("ns16", m, n)] = work
    xa, xb, amat, bmat = work
    keep += list(work)
    rs, rl = float(np.sqrt(s)), float(np.sqrt(L))
    flat = m * n > FROB_ONE  # (large matrices: normalised in place by frob_scale's two passes, converted flat)
    kin, kout = (shipped_kernel(dev, "gemm16.wgsl", e) for e in
                 (("ns16_in_flat", "ns16_out_flat") if flat else ("ns16_in", "ns16_out")))
    if flat:
        frob_scale(dev, enc, x, m * n, offset, m * n, eps, batch, keep, cache)
        prm = _span(dev, "ns16.prm", keep, cache, count=batch * m * n, x_off=offset, scale=rl)
    else:
        prm = _span(dev, "ns16.prm", keep, cache, count=m * n, x_off=offset, eps=eps, batch=batch, scale=rl)
    groups = -(-batch * m * n // 256) if flat else batch
    kin.dispatch(enc, _bind(kin, cache, {"X": x, "C": xa, "sp": prm}), groups)
    yield
    mm = mm or _tiled16(dev, batch, keep, cache)
    sq, mn = s * s, m * n
    cur, other = xa, xb
    for _ in range(ns_steps):
        mm(enc, cur, cur, amat, s, s, L, rs / L, 0.0, None, tall, not tall, (mn, mn, sq))  # A~ = X~ X~^T
        yield
        mm(enc, amat, amat, bmat, s, s, s, c / rs, b, amat, False, False, (sq, sq, sq))  # B~ = b A~ + c A~A~/sqrt(s)
        yield
        if tall:  # X~ = a X~ + X~ B~ / sqrt(s)
            mm(enc, cur, bmat, other, m, n, n, 1.0 / rs, a, cur, False, False, (mn, sq, mn))
        else:
            mm(enc, bmat, cur, other, m, n, m, 1.0 / rs, a, cur, False, False, (sq, mn, mn))
        yield
        cur, other = other, cur
    prm = _span(dev, "ns16.prm", keep, cache, count=batch * m * n if flat else m * n, x_off=offset, batch=batch,
                scale=rl)
    kout.dispatch(enc, _bind(kout, cache, {"X": x, "C": cur, "sp": prm}), groups)


def _tiled16(dev, batch, keep, cache):
    """Newton-Schulz's GEMM on ``gemm16.wgsl``: D copied into C (``copy_range``), then C = alpha AB + beta C."""
    kcp = shipped_kernel(dev, "gemm16.wgsl", "copy_range")

    def mm(enc, A, B, C, M, N, K, alpha, beta, D, ta, tb, strides):
        if D is not None:
            count = batch * strides[2]
            p = _span(dev, "copy16.prm", keep, cache, count=count)
            kcp.dispatch(enc, _bind(kcp, cache, {"A": D, "C": C, "sp": p}), -(-count // 256))
        gemm(dev, enc, A, B, C, M, N, K, alpha=alpha, beta=beta if D is not None else 0.0, batch=batch, keep=keep,
             cache=cache, f16=True, ta=ta, tb=tb, strides=strides)
    return mm
