"""The float16 path of the matrix optimizers' products (their ``matmul_dtype="float16"``): float32 matrices into
float16 with a power-of-two scale per matrix chosen on the device (the largest |entry| in [1, 2): exact, far from
f16's range whatever the data's magnitude), the GEMM on the device's fastest float16 kernel (the tensor-core GEMM on
subgroup matrices, ``"subgroup-matrix"``; the same kernel written out, ``"emulated"``; or ``gemm16.wgsl``,
``"tiled"``: :func:`rlx_gpu.linalg.gemm_path`) with float32 sums, and the scales' inverses applied to the float32
results (``shaders/half.wgsl``).

    to_half(r, src, dst16, rows, cols, inv)   dst16 = f16(src * s), inv[z] = 1 / s (s = 1 when inv is None)
    mm16(r, path, a16, b16, c, M, N, K)       c = op(a16) op(b16), float32 (or float16: ``out="f16"``)
    unscale(r, c, rows, cols, invs)           c *= the product of the given inverses, per matrix

Buffers: a float16 :class:`~rlx_gpu.linalg.factor.Mat` counts offsets, strides and row strides in float16 elements.
``inv`` and each of ``invs``: (buffer, element offset) of one float32 per matrix (and its u32 maximum: a second
buffer, ``Scales``).
"""
from __future__ import annotations

from typing import NamedTuple

from ..runtime.kernels import shipped_kernel
from ..runtime.params import Params, declare
from .factor import Mat, Rec
from .record import _bind, _prm, gemm
from .tc import choose_config, tc_gemm

__all__ = ["Scales", "to_half", "mm16", "unscale", "sub_scaled", "HalfProducts", "FloatProducts", "HALF"]

HALF = Params("HalfParams", "rows", "cols", "batch", "s_off", "s_bs", "s_ld", "d_off", "d_bs", "d_ld", "m_off",
              "groups", "nk", "k1", "k2", "k3")
declare("half.wgsl", HALF)


class Scales(NamedTuple):
    """Per-matrix scales of ``slots`` kinds for ``batch`` matrices: ``inv`` (float32 1/s) and ``mx`` (u32 maxima);
    slot k of matrix z at element k * batch + z."""
    inv: object
    mx: object
    batch: int

    @classmethod
    def make(cls, dev, batch: int, slots: int, label: str) -> "Scales":
        return cls(dev.buffer(4 * batch * slots, f"{label}.inv"), dev.buffer(4 * batch * slots, f"{label}.mx"), batch)

    def at(self, slot: int, z0: int = 0) -> int:
        """The element offset of kind ``slot``'s scale of matrix ``z0``."""
        return slot * self.batch + z0


def _words(r: Rec, rows, cols, **kw) -> dict:
    base = dict(rows=rows, cols=cols, batch=r.batch, s_off=0, s_bs=0, s_ld=cols, d_off=0, d_bs=0, d_ld=cols, m_off=0,
                groups=1, nk=0, k1=0, k2=0, k3=0)
    return {**base, **kw}


def _k(r: Rec, entry: str, groups: int, words: dict, **bufs) -> None:
    k = shipped_kernel(r.dev, "half.wgsl", entry)
    pbuf = _prm(r.dev, HALF.pack(**words), f"half.{entry}", r.keep, r.cache)
    k.dispatch(r.enc, _bind(k, r.cache, {**bufs, "hp": pbuf}), groups)


def to_half(r: Rec, src: Mat, dst: Mat, rows: int, cols: int, scales: Scales | None = None, slot: int = 0,
            z0: int = 0) -> None:
    """dst (float16) = src * s per matrix; with ``scales``, s is the power of two that brings the matrix's
    largest |entry| into [1, 2) and 1 / s goes to ``scales.inv`` at ``scales.at(slot, z0) + z``."""
    per = rows * cols
    w = _words(r, rows, cols, s_off=src.off, s_bs=src.bs, s_ld=src.ld, d_off=dst.off, d_bs=dst.bs, d_ld=dst.ld)
    if scales is None:
        _k(r, "half_copy", -(-per * r.batch // 256), w, src=src.buf, dst=dst.buf)
        return
    groups = -(-per // 1024)
    w.update(m_off=scales.at(slot, z0), groups=groups)
    _k(r, "half_reset", -(-r.batch // 256), w, mx=scales.mx)
    _k(r, "half_absmax", groups * r.batch, w, src=src.buf, mx=scales.mx)
    _k(r, "half_to", -(-per * r.batch // 256), w, src=src.buf, dst=dst.buf, mx=scales.mx, inv=scales.inv)


def unscale(r: Rec, c: Mat, rows: int, cols: int, scales: Scales, ks: list) -> None:
    """c *= the product over ``ks`` = [(slot, z0)] of scales.inv[slot, z0 + z], for each matrix z."""
    if not ks:
        return
    offs = [scales.at(s, z0) for s, z0 in ks] + [0, 0]
    w = _words(r, rows, cols, d_off=c.off, d_bs=c.bs, d_ld=c.ld, nk=len(ks), k1=offs[0], k2=offs[1], k3=offs[2])
    _k(r, "unscale", -(-rows * cols * r.batch // 256), w, c32=c.buf, inv=scales.inv)


def mm16(r: Rec, path: str, a: Mat, b: Mat, c: Mat, M, N, K, *, ta=False, tb=False, out="f32", scratch=None) -> None:
    """C = op(A) op(B) for float16 A, B (f32 sums), C float32 (``out="f16"``: float16) on ``path``'s GEMM;
    ``scratch``: a float16 buffer of ``batch * M * N`` elements for the tiled path's float32 results."""
    if path == "tiled":
        if out == "f16":
            gemm(r.dev, r.enc, a.buf, b.buf, c.buf, M, N, K, ta=ta, tb=tb, offsets=(a.off, b.off, c.off),
                 strides=(a.bs, b.bs, c.bs), lds=(a.ld, b.ld, c.ld), batch=r.batch, keep=r.keep, cache=r.cache,
                 f16=True)
            return
        gemm(r.dev, r.enc, a.buf, b.buf, scratch, M, N, K, ta=ta, tb=tb, offsets=(a.off, b.off, 0),
             strides=(a.bs, b.bs, M * N), lds=(a.ld, b.ld, N), batch=r.batch, keep=r.keep, cache=r.cache, f16=True)
        w = _words(r, M, N, s_bs=M * N, d_off=c.off, d_bs=c.bs, d_ld=c.ld)
        _k(r, "half_from", -(-M * N * r.batch // 256), w, s16=scratch, c32=c.buf)
        return
    offsets, strides = (a.off, b.off, c.off, 0), (a.bs, b.bs, c.bs)
    cfg = choose_config(r.dev, path, M, N, K, ta=ta, tb=tb, out=out, offsets=offsets, strides=strides,
                        lds=(a.ld, b.ld, c.ld))  # (the configuration from the operands' own row strides)
    tc_gemm(r.dev, r.enc, a.buf, b.buf, c.buf, M, N, K, mode=path, ta=ta, tb=tb, batch=r.batch, out=out,
            offsets=offsets, strides=strides, lds=(a.ld, b.ld, c.ld), config=cfg, keep=r.keep, cache=r.cache)


def sub_scaled(r: Rec, c: Mat, src: Mat, rows: int, cols: int, scales: Scales, ks: list) -> None:
    """c -= (the product over ``ks`` of the inverses, as for :func:`unscale`: at most two) * src."""
    offs = [scales.at(s, z0) for s, z0 in ks] + [0, 0]
    w = _words(r, rows, cols, s_off=src.off, s_bs=src.bs, s_ld=src.ld, d_off=c.off, d_bs=c.bs, d_ld=c.ld,
               nk=len(ks), k1=offs[0], k2=offs[1])
    _k(r, "sub_scaled", -(-rows * cols * r.batch // 256), w, c32=c.buf, src=src.buf, inv=scales.inv)


class HalfProducts:
    """float32 products of one run of matrices through float16: each input converted once under a name (into the
    float16 buffer of that name, at the run's offsets, with a scale slot of its own), then each product on
    :func:`mm16` into float32 and its inputs' scales undone (:func:`unscale`, or :func:`sub_scaled` for
    C -= product). ``h16``: name -> float16 buffer (and "scratch" for the tiled path); ``scales``: their
    :class:`Scales`; ``z0``: the run's first matrix in them."""

    def __init__(self, r: Rec, path: str, h16: dict, scales: Scales, z0: int):
        self.r, self.path, self.h16, self.scales, self.z0 = r, path, h16, scales, z0
        self.slot: dict = {}
        self.mats: dict = {}
        self.plain: set = set()

    def half(self, name: str, src: Mat, rows: int, cols: int, scaled: bool = True) -> Mat:
        """src in float16 under ``name`` (its scale slot the name's, in order of first use; ``scaled`` False:
        as it is, for entries known to be at most ~1)."""
        slot = self.slot.setdefault(name, len(self.slot))
        dst = Mat(self.h16[name], self.z0 * rows * cols, rows * cols, cols)
        to_half(self.r, src, dst, rows, cols, self.scales if scaled else None, slot, self.z0)
        (self.plain.add if not scaled else self.plain.discard)(name)
        self.mats[name] = dst
        return dst

    def mm(self, a: str, b: str, c: Mat, M, N, K, *, ta=False, tb=False, tri=None, sub: Mat | None = None) -> None:
        """c = op(a) op(b) for converted inputs ``a``, ``b`` (``tri``: :func:`~.factor.tri_gemm`'s triangle);
        ``sub``: instead, sub -= that product (c is then the float32 scratch it goes through)."""
        from .factor import tri_gemm
        ks = [(self.slot[x], self.z0) for x in (a, b) if x not in self.plain]

        def run(aa, bb, cc, MM, NN, KK, ta=False, tb=False, **_):
            mm16(self.r, self.path, aa, bb, cc, MM, NN, KK, ta=ta, tb=tb, scratch=self.h16["scratch"])
        if tri:
            tri_gemm(self.r, self.mats[a], self.mats[b], c, M, N, K, ta=ta, tb=tb, tri=tri, mm=run)
        else:
            run(self.mats[a], self.mats[b], c, M, N, K, ta=ta, tb=tb)
        if sub is not None:
            sub_scaled(self.r, sub, c, M, N, self.scales, ks)
        else:
            unscale(self.r, c, M, N, self.scales, ks)


class FloatProducts:
    """:class:`HalfProducts`' interface in float32: inputs kept as they are, products by the float32 GEMM."""

    def __init__(self, r: Rec):
        self.r, self.mats = r, {}

    def half(self, name: str, src: Mat, rows: int, cols: int, scaled: bool = True) -> Mat:
        self.mats[name] = src
        return src

    def mm(self, a: str, b: str, c: Mat, M, N, K, *, ta=False, tb=False, tri=None, sub: Mat | None = None) -> None:
        from .factor import _mm, tri_gemm
        out, alpha, beta = (sub, -1.0, 1.0) if sub is not None else (c, 1.0, 0.0)
        if tri:
            tri_gemm(self.r, self.mats[a], self.mats[b], out, M, N, K, ta=ta, tb=tb, tri=tri, alpha=alpha, beta=beta)
        else:
            _mm(self.r, self.mats[a], self.mats[b], out, M, N, K, ta=ta, tb=tb, alpha=alpha, beta=beta)
