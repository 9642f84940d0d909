"""The tensor-core GEMM on a device: which path runs (subgroup matrices where the adapter offers them, detected by
its subgroup-matrix configurations, never by its name), the kernel configuration for a problem, and recording.

Paths: ``"subgroup-matrix"`` (Dawn's ``chromium-experimental-subgroup-matrix`` with an f16 16x16x16 configuration
with f32 results: Vulkan's cooperative matrices, the tensor cores on NVIDIA) and ``"emulated"`` (the same kernel
with the fragment operations written out, on any adapter with shader-f16: what CI runs on llvmpipe). The rest of
``rlx_gpu.linalg`` keeps its tiled kernels (``"tiled"``) where neither is asked for.
"""
from __future__ import annotations

import functools
import os

import numpy as np

from ..runtime.kernels import get_kernel
from .record import _bind, _prm
from .tcconfig import GEMM_PARAMS, TcConfig
from .tcgen import ENTRY, generate

__all__ = ["SUBGROUP_MATRIX", "subgroup_matrix_configs", "subgroup_matrix_size", "resolve_path", "choose_config",
           "tc_gemm", "REQUIRE_ENV"]

SUBGROUP_MATRIX = "chromium-experimental-subgroup-matrix"
REQUIRE_ENV = "RLX_GPU_REQUIRE_SUBGROUP_MATRIX"
PATHS = ("auto", "subgroup-matrix", "emulated", "tiled")


def subgroup_matrix_configs(dev) -> list:
    """The adapter's subgroup-matrix configurations (dicts with ``component_type``, ``result_component_type``,
    ``m``, ``n``, ``k``, ``min_subgroup_size``, ``max_subgroup_size``), empty where the device has not the feature
    (wgpu-native has none; Dawn lists them through ``extras.get_adapter_properties``)."""
    if SUBGROUP_MATRIX not in dev.features or "subgroups" not in dev.features:
        return []
    known = getattr(dev, "subgroup_matrix_configs", None)
    if known is not None:
        return list(known)
    try:
        from wgpudawn.backends.dawn import extras
        return list(extras.get_adapter_properties(dev.adapter).get("subgroup_matrix_configs", []))
    except Exception:  # not a Dawn adapter, or a wgpudawn without the query: no configuration known
        return []


def subgroup_matrix_size(dev) -> int | None:
    """The subgroup size of the adapter's f16 x f16 -> f32 16x16x16 configuration (one fixed size), or None."""
    for c in subgroup_matrix_configs(dev):
        if ((c.get("component_type"), c.get("result_component_type"), c.get("m"), c.get("n"), c.get("k"))
                == ("f16", "f32", 16, 16, 16) and c.get("min_subgroup_size") == c.get("max_subgroup_size")):
            return int(c["max_subgroup_size"])
    return None


def resolve_path(dev, path: str, who: str) -> str:
    """The path that runs for ``path`` ("auto": subgroup matrices where the adapter has them, else "tiled")."""
    if path not in PATHS:
        raise ValueError(f"{who}: path must be one of {PATHS}, got {path!r}")
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


def _aligned(*xs) -> bool:
    return all(int(x) % 8 == 0 for x in xs)


def choose_config(dev, mode, M, N, K, *, ta=False, tb=False, out="f32", epi="none", offsets=(0, 0, 0, 0),
                  strides=None, lds=None, base: TcConfig | None = None) -> TcConfig:
    """The kernel configuration for one problem: ``base`` (default: 128 x 128 blocks of 2 x 2 subgroups with 4 x 4
    fragments on subgroup matrices; 64 x 64 emulated) with bounds checks only where the shape needs them, 8-wide
    loads where the operands' rows and offsets allow them, and the fragment store into C where nothing else is
    asked; K steps and double buffering reduced until the workgroup memory fits the device."""
    sm = mode == "subgroup-matrix"
    cfg = base or (TcConfig() if sm else TcConfig(tm=2, tn=2))
    cfg = cfg.with_(mode=mode, ta=ta, tb=tb, out=out, epi=epi,
                    subgroup=(subgroup_matrix_size(dev) or cfg.subgroup) if sm else 32)
    lda, ldb = lds or ((M if ta else K), (K if tb else N))
    edges = bool(M % cfg.bm or N % cfg.bn or K % cfg.bk)
    cfg = cfg.with_(edges=edges)
    if cfg.stage in ("coop", "direct") and edges:
        cfg = cfg.with_(stage="vec8")
    sa, sb = (strides or (M * K, K * N))[:2]
    if cfg.stage == "vec8" and not _aligned(lda, ldb, offsets[0], offsets[1], sa, sb, M if ta else K,
                                            K if tb else N):
        cfg = cfg.with_(stage="f16")
    store = base.store if base is not None else "direct"
    if store == "direct" and (out != "f32" or epi != "none" or edges):
        store = "scratch"
    cfg = fit(cfg.with_(store=store), int(dev.limits.get("max-compute-workgroup-storage-size", 16384)))
    return cfg.with_(edges=cfg.edges or bool(K % cfg.bk)).check()


def fit(cfg: TcConfig, limit: int) -> TcConfig:
    """``cfg`` with one epilogue slot, then one stage, then K steps of 16, until its workgroup memory fits."""
    for shrink in ({"slots": 1}, {"stages": 1}, {"bk": 16}):
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
            cache=None) -> TcConfig:
    """Record ``C = alpha op(A) op(B) (+ beta D)`` for ``batch`` matrices on the tensor-core GEMM (``mode``:
    "subgroup-matrix" or "emulated"). ``a``, ``b``: buffers of float16 (op(A) is M x K, op(B) K x N; ``ta``/``tb``:
    stored transposed); ``c``: float32 or float16 (``out``); ``d``: an optional read-only buffer of C's dtype
    (``beta`` applies to it; it may be ``a`` or ``b`` but not ``c``); ``offsets``, ``strides``: element offsets and
    batch strides of A, B, C, D; ``lds``: row strides (default: packed). ``config``: a kernel configuration to use
    (else :func:`choose_config`). Returns the configuration that was recorded."""
    epi = "none" if d is None else "d"
    if d is not None and d is c:
        raise ValueError("rlx_gpu.linalg: tc_gemm's D must not be C (a buffer is bound read-only or writable)")
    if config is None:
        config = choose_config(dev, mode, M, N, K, ta=ta, tb=tb, out=out, epi=epi, offsets=offsets,
                               strides=strides, lds=lds)
    cfg = config.check()
    lda, ldb, ldc = lds or ((M if ta else K), (K if tb else N), N)
    sa, sb, sc = strides or (M * K, K * N, M * N)
    tiles_n, tiles_m = -(-N // cfg.bn), -(-M // cfg.bm)
    words = GEMM_PARAMS.pack(M=M, N=N, K=K, batch=batch, tiles_n=tiles_n, tiles_mn=tiles_n * tiles_m,
                             a_off=offsets[0], b_off=offsets[1], c_off=offsets[2], d_off=offsets[3], a_bs=sa, b_bs=sb,
                             c_bs=sc, d_bs=sc, lda=lda, ldb=ldb, ldc=ldc, ldd=ldc, alpha=alpha, beta=beta)
    pbuf = _prm(dev, words, "gemm_tc.prm", keep, cache)
    k = get_kernel(dev, f"gemm_tc:{cfg.name()}", source(cfg), ENTRY)
    bufs = {"A": a, "B": b, "C": c, "p": pbuf}
    if d is not None:
        bufs["D"] = d
    k.dispatch(enc, _bind(k, cache, bufs), tiles_n * tiles_m * batch)
    return cfg


def as_f16_buffer(dev, x: np.ndarray, label: str):
    """A storage buffer holding ``x`` as float16 (padded to whole 4-byte words)."""
    flat = np.ascontiguousarray(x, np.float16).reshape(-1)
    if flat.size % 2:
        flat = np.append(flat, np.float16(0))
    return dev.buffer(max(4, flat.nbytes), label, data=flat)


def tc_mm(dev, mode: str, batch: int, keep, cache=None, configs: dict | None = None):
    """Newton-Schulz's GEMM (:func:`~rlx_gpu.linalg.record.ns_encode16`'s ``mm``) on the tensor-core GEMM, float16
    in and out, f32 accumulation, D read by the epilogue. ``configs``: (M, N, K, ta, tb) -> a kernel
    configuration, where one is wanted other than :func:`choose_config`'s."""

    def mm(enc, A, B, C, M, N, K, alpha, beta, D, ta, tb, strides):
        cfg = (configs or {}).get((M, N, K, ta, tb))
        if cfg is not None:
            cfg = choose_config(dev, mode, M, N, K, ta=ta, tb=tb, out="f16", epi="none" if D is None else "d",
                                strides=strides, base=cfg)
        tc_gemm(dev, enc, A, B, C, M, N, K, mode=mode, ta=ta, tb=tb, batch=batch, alpha=alpha, beta=beta, d=D,
                out="f16", strides=strides, config=cfg, keep=keep, cache=cache)
    return mm

