"""The tensor-core GEMM on a device: which path runs (subgroup matrices where the device offers them, detected by
its subgroup-matrix configurations, never by its name), the kernel configuration for a problem, and recording.

Paths: ``"subgroup-matrix"`` (Dawn's ``chromium-experimental-subgroup-matrix`` with an f16 16x16x16 configuration
with f32 results: Vulkan's cooperative matrices, the tensor cores on NVIDIA) and ``"emulated"`` (the same kernel
with the fragment operations written out, on any adapter with shader-f16: what CI runs on llvmpipe). The rest of
``rlx_gpu.linalg`` keeps its tiled kernels (``"tiled"``) where neither is asked for.

    tc_gemm(dev, enc, a, b, c, M, N, K, mode=..., ta=, tb=, batch=, alpha=, beta=, d=, out=, sym=, ...)
    tc_gemm_grouped(dev, enc, a, b, c, [Problem(M, N, K, ...), ...], mode=..., ...)   # one dispatch for all
"""
from __future__ import annotations

import functools
import os
from dataclasses import dataclass

import numpy as np

from ..runtime.kernels import get_kernel
from .record import _bind, _prm
from .tcconfig import GEMM_PARAMS, TcConfig
from .tcgen import ENTRY, generate

__all__ = ["SUBGROUP_MATRIX", "subgroup_matrix_configs", "subgroup_matrix_size", "resolve_path", "choose_config",
           "tc_gemm", "tc_gemm_grouped", "Problem", "REQUIRE_ENV", "PATH_ENV", "DEFAULT_SM", "DEFAULT_SM_SMALL",
           "DEFAULT_EMULATED"]

SUBGROUP_MATRIX = "chromium-experimental-subgroup-matrix"
REQUIRE_ENV = "RLX_GPU_REQUIRE_SUBGROUP_MATRIX"
PATH_ENV = "RLX_GPU_GEMM_PATH"  # what "auto" means for float16 work (tests: "emulated" on llvmpipe)
PATHS = ("auto", "subgroup-matrix", "emulated", "tiled")
# The kernels choose_config starts from, from the second H200 run (benchmarks/logs/h200_tc_gemm_bench_second.jsonl):
# on subgroup matrices "s1 h4", the best at 4096^3 (242.5 TF/s robustness off, 184.4 on; "s1" without h4: 221.9 /
# 169.8) and at every batched 768-wide shape and Newton-Schulz GEMM on all three devices: 128 x 128 blocks of 2 x 2
# subgroups with 4 x 4 fragments, K in steps of 32 in one buffer, 8-wide loads into workgroup memory of vec4<f16>
# ("h4"), 8 padding halves per row, blocks in groups of 8 along M. DEFAULT_SM_SMALL: one problem of fewer than
# SMALL_BLOCKS 128 x 128 blocks (768^3: 36) runs 64 x 128 blocks ("64x128 s1": 51.1 TF/s at 768^3 against 37.2 for
# "s1 h4"; at 4096^3, 1024 blocks, 176.5 against 242.5; the threshold lies between those two measured points).
# Emulated: 64 x 64 with the same staging (llvmpipe compiles it faster).
DEFAULT_SM = TcConfig(stages=1, smem="h4")
DEFAULT_SM_SMALL = TcConfig(tm=2, stages=1)
SMALL_BLOCKS = 128
DEFAULT_EMULATED = TcConfig(tm=2, tn=2, stages=1, smem="h4")


def subgroup_matrix_configs(dev) -> list:
    """The device's subgroup-matrix configurations (dicts with ``component_type``, ``result_component_type``,
    ``m``, ``n``, ``k``, ``min_subgroup_size``, ``max_subgroup_size``): ``Device.subgroup_matrix_configs``, empty
    where the device has not the feature (wgpu-native never has it)."""
    if SUBGROUP_MATRIX not in dev.features or "subgroups" not in dev.features:
        return []
    return list(getattr(dev, "subgroup_matrix_configs", None) or [])


def subgroup_matrix_size(dev) -> int | None:
    """The subgroup size of the adapter's f16 x f16 -> f32 16x16x16 configuration (one fixed size), or None."""
    for c in subgroup_matrix_configs(dev):
        if ((c.get("component_type"), c.get("result_component_type"), c.get("m"), c.get("n"), c.get("k"))
                == ("f16", "f32", 16, 16, 16) and c.get("min_subgroup_size") == c.get("max_subgroup_size")):
            return int(c["max_subgroup_size"])
    return None


def resolve_path(dev, path: str, who: str) -> str:
    """The path that runs for ``path`` ("auto": ``RLX_GPU_GEMM_PATH`` if set, else subgroup matrices where the device
    has them, else "tiled")."""
    if path not in PATHS:
        raise ValueError(f"{who}: path must be one of {PATHS}, got {path!r}")
    env = os.environ.get(PATH_ENV, "").strip()
    if path == "auto" and env not in ("", "auto"):
        if env not in PATHS:
            raise ValueError(f"{who}: {PATH_ENV}={env!r}: expected one of {PATHS}")
        path = env
    if path in ("auto", "subgroup-matrix"):
        if subgroup_matrix_size(dev) is not None:
            return "subgroup-matrix"
        if path == "subgroup-matrix" or os.environ.get(REQUIRE_ENV, "") not in ("", "0"):
            raise ValueError(f"{who}: {dev.name} offers no subgroup matrices (feature {SUBGROUP_MATRIX} with an f16 "
                             "16x16x16 configuration with f32 results, on a device that asked for it)"
                             + (f"; {REQUIRE_ENV} is set" if path == "auto" else ""))
        return "tiled"
    if path == "emulated" and "shader-f16" not in dev.features:
        raise ValueError(f"{who}: the emulated path needs shader-f16; {dev.name} has none")
    return path


@dataclass(frozen=True)
class Problem:
    """One GEMM of a grouped dispatch: C = alpha op(A) op(B) (+ beta D) for ``batch`` matrices; ``offsets`` (A, B,
    C, D) and ``strides`` (batch strides of A, B, C; D's is C's) in elements; ``lds``: row strides of A, B, C (D's
    is C's; default: packed)."""
    M: int
    N: int
    K: int
    batch: int = 1
    alpha: float = 1.0
    beta: float = 0.0
    offsets: tuple = (0, 0, 0, 0)
    strides: tuple | None = None
    lds: tuple | None = None

    def dims(self, ta: bool, tb: bool) -> tuple:
        """(lda, ldb, ldc, a stride, b stride, c stride)."""
        lda, ldb, ldc = self.lds or ((self.M if ta else self.K), (self.K if tb else self.N), self.N)
        return (lda, ldb, ldc, *(self.strides or (self.M * self.K, self.K * self.N, self.M * self.N)))


def _aligned(*xs) -> bool:
    return all(int(x) % 8 == 0 for x in xs)


def choose_config(dev, mode, M, N, K, *, ta=False, tb=False, out="f32", epi="none", offsets=(0, 0, 0, 0),
                  strides=None, lds=None, base: TcConfig | None = None, sym=False, alpha=1.0,
                  problems=None) -> TcConfig:
    """The kernel configuration for one problem (or for all of ``problems``, one dispatch): ``base`` (default:
    :data:`DEFAULT_SM`, :data:`DEFAULT_SM_SMALL` for one small problem, :data:`DEFAULT_EMULATED`) with bounds
    checks only where a shape needs them, 8-wide loads and packed float16 stores where rows and offsets allow them,
    D loaded before the K loop (whole blocks, alpha != 0), the fragment store into C for float32 results (with a
    ``base``: where it asks for it); the steps of :func:`fit` until the workgroup memory fits the device. ``sym``:
    C is symmetric (kept for square blocks). The second H200 run confirmed each epilogue choice at Newton-Schulz's
    shapes: D before the loop and packed stores (B: 236 TF/s against 119 with D at the end, scalar stores), one
    scratch slot (2 or 4: 117-171, but for B's bk16 kernel 241 against 240), symmetric blocks (152 whole)."""
    sm = mode == "subgroup-matrix"
    probs = problems or [Problem(M, N, K, alpha=alpha, offsets=offsets, strides=strides, lds=lds)]
    cfg = base or (_default_sm(probs, sym) if sm else DEFAULT_EMULATED)
    cfg = cfg.with_(mode=mode, ta=ta, tb=tb, out=out, epi=epi, groups=len(probs), sym=sym and cfg.bm == cfg.bn,
                    subgroup=(subgroup_matrix_size(dev) or cfg.subgroup) if sm else 32)
    edges = any(p.M % cfg.bm or p.N % cfg.bn or p.K % cfg.bk for p in probs)
    cfg = cfg.with_(edges=edges)
    if cfg.stage in ("coop", "direct") and edges:
        cfg = cfg.with_(stage="vec8")
    if cfg.stage == "vec8" and not all(_aligned(*p.dims(ta, tb)[:2], *p.offsets[:2], *p.dims(ta, tb)[3:5],
                                                p.M if ta else p.K, p.K if tb else p.N) for p in probs):
        cfg = cfg.with_(stage="f16")
    d_start = epi == "d" and not edges and all(p.alpha != 0 for p in probs)
    cvec = (out == "f16" and not edges and cfg.subgroup == 32
            and all(_aligned(p.dims(ta, tb)[2], p.offsets[2], p.dims(ta, tb)[5]) for p in probs))
    can_direct = out == "f32" and not edges and (epi == "none" or d_start)
    store = "direct" if can_direct and (base is None or base.store == "direct") else "scratch"
    cfg = cfg.with_(d_at="start" if d_start else "end", d_type=out if d_start else cfg.d_type, store=store,
                    cvec=cvec and store == "scratch")
    cfg = fit(cfg, int(dev.limits.get("max-compute-workgroup-storage-size", 16384)))
    return cfg.with_(edges=cfg.edges or any(p.K % cfg.bk for p in probs)).check()


def _default_sm(probs, sym) -> TcConfig:
    """:data:`DEFAULT_SM`, or :data:`DEFAULT_SM_SMALL` for one non-symmetric problem of few blocks."""
    bm, bn = DEFAULT_SM.bm, DEFAULT_SM.bn
    blocks = sum(-(-p.M // bm) * -(-p.N // bn) * p.batch for p in probs)
    return DEFAULT_SM_SMALL if len(probs) == 1 and not sym and blocks < SMALL_BLOCKS else DEFAULT_SM


def fit(cfg: TcConfig, limit: int) -> TcConfig:
    """``cfg`` with one epilogue slot, then one stage, then K steps of 16, until its workgroup memory fits."""
    for shrink in ({"slots": 1}, {"stages": 1, "prefetch": False}, {"bk": 16}):
        if cfg.smem_bytes() <= limit:
            break
        cfg = cfg.with_(**shrink)
    return cfg


@functools.lru_cache(maxsize=256)
def source(cfg: TcConfig) -> str:
    """:func:`generate`, cached."""
    return generate(cfg)


def tc_gemm(dev, enc, a, b, c, M, N, K, *, mode, ta=False, tb=False, batch=1, alpha=1.0, beta=0.0, d=None,
            out="f32", offsets=(0, 0, 0, 0), strides=None, lds=None, config: TcConfig | None = None, keep=None,
            cache=None, sym=False) -> TcConfig:
    """Record ``C = alpha op(A) op(B) (+ beta D)`` for ``batch`` matrices on the tensor-core GEMM (``mode``:
    "subgroup-matrix" or "emulated"). ``a``, ``b``: buffers of float16 (op(A) is M x K, op(B) K x N; ``ta``/``tb``:
    stored transposed); ``c``: float32 or float16 (``out``); ``d``: an optional read-only buffer (of C's dtype; it
    may be ``a`` or ``b`` but not ``c``; ``beta`` applies to it); ``offsets``, ``strides``: element offsets (A, B,
    C, D) and batch strides (A, B, C); ``lds``: row strides (A, B, C; default: packed). ``sym``: the caller knows C
    is symmetric (op(A) op(B) and D are): half the blocks are computed. ``config``: the kernel configuration (else
    :func:`choose_config`'s). Returns the configuration that was recorded."""
    p = Problem(M, N, K, batch, alpha, beta, tuple(offsets), strides, lds)
    return tc_gemm_grouped(dev, enc, a, b, c, [p], mode=mode, ta=ta, tb=tb, d=d, out=out, config=config, keep=keep,
                           cache=cache, sym=sym)


def tc_gemm_grouped(dev, enc, a, b, c, problems, *, mode, ta=False, tb=False, d=None, out="f32",
                    config: TcConfig | None = None, keep=None, cache=None, sym=False) -> TcConfig:
    """:func:`tc_gemm` for several :class:`Problem`\\ s on the same buffers, in one dispatch (at most 64)."""
    problems = [q for q in problems if q.batch > 0]
    if not problems:
        return config
    if d is not None and d is c:
        raise ValueError("rlx_gpu.linalg: tc_gemm's D must not be C (a buffer is bound read-only or writable)")
    if sym and any(q.M != q.N for q in problems):
        raise ValueError("rlx_gpu.linalg: tc_gemm(sym=True) needs square results")
    epi = "none" if d is None else "d"
    cfg = (config or choose_config(dev, mode, 0, 0, 0, ta=ta, tb=tb, out=out, epi=epi, sym=sym,
                                   problems=problems)).check()
    if cfg.groups != len(problems) or (cfg.sym and not sym):
        raise ValueError(f"rlx_gpu.linalg: config {cfg.name()} is for {cfg.groups} problem(s), sym={cfg.sym}; "
                         f"given {len(problems)}, sym={sym}")
    pbuf, first = _grouped_params(dev, problems, cfg, ta, tb, keep, cache)
    k = cache.get(("gemm_tc", cfg)) if cache is not None else None
    if k is None:  # (get_kernel hashes the source text: a caller's cache skips that from the second call)
        k = get_kernel(dev, f"gemm_tc:{cfg.name()}", source(cfg), ENTRY)
        if cache is not None:
            cache[("gemm_tc", cfg)] = k
    bufs = {"A": a, "B": b, "C": c, "p": pbuf, "P": pbuf}
    if d is not None:
        bufs["D"] = d
    k.dispatch(enc, _bind(k, cache, bufs), first)
    return cfg


def _grouped_params(dev, problems, cfg: TcConfig, ta, tb, keep, cache) -> tuple:
    """The grouped dispatch's parameter buffer (a table of the problems) and its workgroup count; from ``cache``
    when the same problems were packed before (Newton-Schulz's, every step: packed once)."""
    key = ("gemm_tc.table", tuple(problems), cfg, ta, tb)
    try:
        hit = cache.get(key) if cache is not None else None
    except TypeError:  # (a problem given lists, not tuples: packed every time)
        cache = None
        hit = None
    if hit is not None:
        return hit
    words, first = [], 0
    for q in problems:
        lda, ldb, ldc, sa, sb, sc = q.dims(ta, tb)
        tiles_n, tiles_m = -(-q.N // cfg.bn), -(-q.M // cfg.bm)
        tiles = tiles_n * (tiles_n + 1) // 2 if cfg.sym else tiles_n * tiles_m
        o = tuple(q.offsets) + (0,) * (4 - len(q.offsets))
        words.append(GEMM_PARAMS.pack(M=q.M, N=q.N, K=q.K, batch=q.batch, tiles_n=tiles_n, tiles_mn=tiles,
                                      a_off=o[0], b_off=o[1], c_off=o[2], d_off=o[3], a_bs=sa, b_bs=sb, c_bs=sc,
                                      d_bs=sc, lda=lda, ldb=ldb, ldc=ldc, ldd=ldc, alpha=q.alpha, beta=q.beta,
                                      first=first))
        first += tiles * q.batch
    hit = (_prm(dev, np.concatenate(words), "gemm_tc.prm", keep, cache), first)
    if cache is not None:
        cache[key] = hit
    return hit


def as_f16_buffer(dev, x: np.ndarray, label: str):
    """A storage buffer holding ``x`` as float16 (padded to whole 4-byte words)."""
    flat = np.ascontiguousarray(x, np.float16).reshape(-1)
    if flat.size % 2:
        flat = np.append(flat, np.float16(0))
    return dev.buffer(max(4, flat.nbytes), label, data=flat)
