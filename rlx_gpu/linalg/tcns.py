"""Newton-Schulz on the tensor-core GEMM, for many batches of matrices at once (Muon's: every shape of a model in one
set of dispatches): the float32 matrices in and out of float16 (``shaders/tcns.wgsl``), and per step three grouped
GEMMs (``tc.tc_gemm_grouped``: one dispatch each for every batch), so a whole orthogonalisation is 3 dispatches per
batch to enter, 3 per step for all batches, 1 per batch to leave.

Every matrix is iterated wide (s = min(m, n) rows, L = max(m, n) columns): a tall one is transposed on the way in and
back on the way out. The float16 matrices are kept scaled so that their entries are O(1) (X~ = sqrt(L) X, A~ =
sqrt(s) A, B~ = sqrt(s) B; the GEMMs' alpha undo the products' factors), with f32 sums:

    A~ = (sqrt(s) / L) X~ X~^T                      symmetric: only the blocks on and above the diagonal computed
    B~ = b A~ + (c / sqrt(s)) A~ A~                 symmetric, A~ loaded as D before the K loop
    X~ = a X~ + B~ X~ / sqrt(s)                     X~ loaded as D before the K loop
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..runtime import source as src
from ..runtime.kernels import get_kernel
from ..runtime.params import Params
from .record import _bind, _prm
from .tc import DEFAULT_SM, Problem, choose_config, tc_gemm_grouped

__all__ = ["NS_IO", "Job", "ns_tc", "ns_tc_dispatches", "stage_configs", "to_f16", "MAX_GROUPS", "SM_BASES"]

NS_IO = Params("NsIo", "rows", "cols", "count", "batch", "x_off", "w_off", "p_off", "chunks", "ch", "trans",
               "tiles_c", "tiles", "eps:f32", "scale:f32")
MAX_GROUPS = 64  # problems per grouped GEMM dispatch (tcconfig's limit)
_TILE = 32
# Each stage's kernel on subgroup matrices where the caller gives none (else choose_config's): the second H200 run's
# "grouped, best per stage" (benchmarks/logs/h200_tc_gemm_bench_second.jsonl): A and X' on tc.DEFAULT_SM, B on it
# with K steps of 16: 5 steps on GPT-2's 48 matrices in 6.73 ms robustness off, 8.93 on (choose_config's "s1" kernels
# of the first run everywhere: 7.22 / 9.58; per shape 7.73 / 10.21; A and B whole 9.10 / 11.96)
SM_BASES = {"B": DEFAULT_SM.with_(bk=16)}


@dataclass(frozen=True)
class Job:
    """``batch`` float32 (m, n) matrices at element ``offset`` of buffer ``x``, orthogonalised in place;
    ``capacity``: the most matrices a caller gives this job (its work space is made for that many)."""
    x: object
    offset: int
    batch: int
    m: int
    n: int
    capacity: int = 0


def ns_tc_dispatches(jobs: int, ns_steps: int) -> int:
    """The most dispatches :func:`ns_tc` records for ``jobs`` batches."""
    return 4 * jobs + 3 * ns_steps * -(-jobs // MAX_GROUPS)


def _kernel(dev, entry):
    return get_kernel(dev, "tcns.wgsl", src.load_source("tcns.wgsl") + "\n" + NS_IO.wgsl() + "\n", entry)


def to_f16(dev, enc, x, x_off: int, w, w_off: int, count: int, scale: float = 1.0, keep=None, cache=None) -> None:
    """Record ``w[w_off + i] = f16(x[x_off + i] * scale)`` for ``count`` float32 elements (element offsets): the
    float16 operands of the tensor-core GEMM from float32 data (values past 65504 after ``scale`` become inf)."""
    words = NS_IO.pack(rows=1, cols=count, count=count, batch=1, x_off=x_off, w_off=w_off, p_off=0, chunks=0, ch=0,
                       trans=0, tiles_c=0, tiles=0, eps=0.0, scale=scale)
    k = _kernel(dev, "to_f16")
    k.dispatch(enc, _bind(k, cache, {"X": x, "W": w, "p": _prm(dev, words, "tcns.prm", keep, cache)}),
               -(-count // 256))


def _layout(jobs):
    """Element offsets of each job in the X, A and partial-sum work buffers, and their sizes."""
    xo = ao = po = 0
    out = []
    for j in jobs:
        cap = max(j.batch, j.capacity)
        s = min(j.m, j.n)
        chunks, ch = _chunks(j.m * j.n)
        out.append((xo, ao, po, chunks, ch))
        xo += -(-cap * j.m * j.n // 8) * 8
        ao += -(-cap * s * s // 8) * 8
        po += cap * (chunks + 1)
    return out, (xo, ao, po)


def _chunks(count: int):
    """(chunks, elements per chunk) of a matrix's sum of squares: at most 256 chunks, of at least 4096."""
    ch = max(4096, -(-count // (256 * 256)) * 256)
    return -(-count // ch), ch


def _work(dev, jobs, cache, keep):
    key = ("tcns", tuple((j.m, j.n, max(j.batch, j.capacity)) for j in jobs))
    work = cache.get(key) if cache is not None else None
    if work is None:
        lay, (xs, as_, ps) = _layout(jobs)
        work = (lay, dev.buffer(2 * xs, "tcns.X"), dev.buffer(2 * xs, "tcns.Y"), dev.buffer(2 * as_, "tcns.A"),
                dev.buffer(2 * as_, "tcns.B"), dev.buffer(4 * ps, "tcns.P"))
        if cache is not None:
            cache[key] = work
    keep += list(work[1:])
    return work


def ns_tc(dev, enc, jobs, ns_steps, coeffs, eps, keep, mode, cache=None, bases=None, sym=True, mark=None,
          vec4=True, no_out=()):
    """Record Newton-Schulz (``ns_steps`` of torch.optim.Muon's quintic with ``coeffs`` = (a, b, c), after X /=
    max(|X|_F, eps)) on every :class:`Job`, in place, as dispatches only (``enc``: a command encoder or a
    ``ComputePass``), on the tensor-core GEMM in ``mode`` ("subgroup-matrix" or "emulated"). ``cache``: a dict the
    caller keeps from step to step (work buffers, parameter buffers, bind groups made once). ``bases``: the kernel
    configuration to start from per stage ("A", "B", "X"), where not :data:`SM_BASES`' / ``tc.choose_config``'s;
    ``sym=False``: A and B computed whole (an experiment's switch). ``mark(enc, name)``: called where each phase
    begins ("ns_norm", "ns_in", "ns<i>.A" / ".B" / ".X", "ns_out"), for a profiler (``benchmarks/muon_phases.py``).
    ``vec4``: the conversions of batches that are not transposed by vec4s (ns_in4, ns_out4: the same values; False:
    through 32 x 32 tiles, as the transposed ones; a benchmark's switch). ``no_out``: jobs left in float16 (no
    ns_out: the caller reads their result, X = f32(W) / sqrt(n), from the returned buffer at :func:`_layout`'s
    offset; not transposed jobs only). Returns that buffer (None without jobs)."""
    mark = mark or (lambda enc, name: None)
    jobs = [j for j in jobs if j.batch > 0]
    if not jobs:
        return None
    if any(j.m > j.n for j in no_out):
        raise ValueError("rlx_gpu.linalg.ns_tc: no_out holds a tall job (its float16 result is transposed)")
    a, b, c = (float(v) for v in coeffs)
    lay, xa, xb, amat, bmat, part = _work(dev, jobs, cache, keep)
    io = [_io(dev, j, at, eps, keep, cache, vec4) for j, at in zip(jobs, lay)]
    _convert(dev, enc, jobs, io, ("ns_part", "ns_norm"), xa, part, cache, lambda: mark(enc, "ns_norm"))
    _convert(dev, enc, jobs, io, ("ns_in",), xa, part, cache, lambda: mark(enc, "ns_in"))
    bases = bases or {}
    for k0 in range(0, len(jobs), MAX_GROUPS):
        sl = slice(k0, k0 + MAX_GROUPS)
        key = ("tcns.stages", tuple((j.m, j.n, j.batch, j.capacity) for j in jobs[sl]), (a, b, c), mode, sym,
               tuple(sorted(bases.items())))
        stages = cache.get(key) if cache is not None else None
        if stages is None:
            stages = _stages(dev, jobs[sl], lay[sl], (a, b, c), mode, bases, sym)
            if cache is not None:
                cache[key] = stages
        _iterate(dev, enc, stages, (xa, xb, amat, bmat), ns_steps, dict(mode=mode, out="f16", keep=keep, cache=cache),
                 mark)
    cur = xa if ns_steps % 2 == 0 else xb
    out = [(j, e) for j, e in zip(jobs, io) if j not in no_out]
    _convert(dev, enc, [j for j, _ in out], [e for _, e in out], ("ns_out",), cur, part, cache,
             lambda: mark(enc, "ns_out"))
    return cur


def _convert(dev, enc, jobs, io, steps, w, part, cache, mark) -> None:
    """The conversion kernels ``steps`` (each on every job in turn; :func:`_io`'s entry points) after ``mark()``,
    between the jobs' float32 matrices and the float16 work buffer ``w``."""
    mark()
    kernels: dict = {}
    for step in steps:
        for j, (prm, entries) in zip(jobs, io):
            entry, groups = entries[step]
            k = kernels.get(entry) or kernels.setdefault(entry, _kernel(dev, entry))
            k.dispatch(enc, _bind(k, cache, {"X": j.x, "W": w, "X4": j.x, "W4": w, "P": part, "p": prm}), groups)


def _io(dev, j: Job, at, eps, keep, cache, vec4=True):
    """The conversion kernels' parameter buffer for job ``j`` and per step (ns_part, ns_norm, ns_in, ns_out) the
    entry point and its workgroup count (kept in ``cache``)."""
    key = ("tcns.io", j, tuple(at), eps, vec4)
    hit = cache.get(key) if cache is not None else None
    if hit is None:
        hit = _io_new(dev, j, at, eps, keep, cache, vec4)
        if cache is not None:
            cache[key] = hit
    return hit


def _io_new(dev, j: Job, at, eps, keep, cache, vec4):
    xo, _, po, chunks, ch = at
    tall = j.m > j.n
    tiles_r, tiles_c = -(-j.m // _TILE), -(-j.n // _TILE)
    words = NS_IO.pack(rows=j.m, cols=j.n, count=j.m * j.n, batch=j.batch, x_off=j.offset, w_off=xo, p_off=po,
                       chunks=chunks, ch=ch, trans=int(tall), tiles_c=tiles_c, tiles=tiles_r * tiles_c, eps=eps,
                       scale=float(np.sqrt(max(j.m, j.n))))
    tiles = j.batch * tiles_r * tiles_c
    flat = vec4 and not tall and j.m * j.n % 4 == 0 and j.offset % 4 == 0  # (xo: a multiple of 8)
    conv = {e: (e + "4", -(-j.batch * j.m * j.n // 1024)) if flat else (e, tiles) for e in ("ns_in", "ns_out")}
    return (_prm(dev, words, "tcns.prm", keep, cache),
            {"ns_part": ("ns_part", j.batch * chunks), "ns_norm": ("ns_norm", j.batch), **conv})


def _stages(dev, jobs, lay, coeffs, mode, bases, sym=True) -> list:
    """The three grouped GEMMs of a step on up to MAX_GROUPS jobs (see the module docstring): (stage, problems,
    tc_gemm_grouped's options, config)."""
    a, b, c = coeffs
    pa, pb, px = [], [], []
    for j, (xo, ao, _, _, _) in zip(jobs, lay):
        s, L = min(j.m, j.n), max(j.m, j.n)
        rs, sq, sl = float(np.sqrt(s)), s * s, s * L
        pa.append(Problem(s, s, L, j.batch, rs / L, 0.0, (xo, xo, ao, 0), (sl, sl, sq), (L, L, s)))
        pb.append(Problem(s, s, s, j.batch, c / rs, b, (ao, ao, ao, ao), (sq, sq, sq)))  # (B~ where A~ is)
        px.append(Problem(s, L, s, j.batch, 1.0 / rs, a, (ao, xo, xo, xo), (sq, sl, sl)))
    out = []
    for stage, probs, opts in (("A", pa, dict(tb=True, sym=sym)), ("B", pb, dict(epi="d", sym=sym)),
                               ("X", px, dict(epi="d"))):
        base = (bases or {}).get(stage) or (SM_BASES.get(stage) if mode == "subgroup-matrix" else None)
        cfg = choose_config(dev, mode, 0, 0, 0, out="f16", problems=probs, base=base, **opts)
        out.append((stage, probs, {k: v for k, v in opts.items() if k != "epi"}, cfg))
    return out


def stage_configs(dev, jobs, mode, bases=None, sym=True) -> dict:
    """The kernel configuration of each stage ("A", "B", "X") that :func:`ns_tc` runs for ``jobs`` (the first
    MAX_GROUPS)."""
    jobs = [j for j in jobs if j.batch > 0][:MAX_GROUPS]
    lay, _ = _layout(jobs)
    return {st: cfg for st, _, _, cfg in _stages(dev, jobs, lay, (1.0, 1.0, 1.0), mode, bases, sym)}


def _iterate(dev, enc, stages, bufs, ns_steps, gemm, mark) -> None:
    """The ``ns_steps`` steps, each stage one grouped GEMM (:func:`_stages`)."""
    xa, xb, amat, bmat = bufs
    (_, pa, oa, ca), (_, pb, ob, cb), (_, px, ox, cx) = stages
    cur, other = xa, xb
    for i in range(ns_steps):
        mark(enc, f"ns{i}.A")
        tc_gemm_grouped(dev, enc, cur, cur, amat, pa, config=ca, **oa, **gemm)
        mark(enc, f"ns{i}.B")
        tc_gemm_grouped(dev, enc, amat, amat, bmat, pb, d=amat, config=cb, **ob, **gemm)
        mark(enc, f"ns{i}.X")
        tc_gemm_grouped(dev, enc, bmat, cur, other, px, d=cur, config=cx, **ox, **gemm)
        cur, other = other, cur
