"""The tensor-core GEMM's compile-time configuration and fragment operations (``tcgen.py`` and ``tcepi.py`` write
the kernel).

The GEMM: C = alpha op(A) op(B) (+ beta D), f16 operands, f32 accumulation, batched, written
by one generator in two modes with the same tiling and index arithmetic:

* ``"subgroup-matrix"``: Dawn's ``chromium_experimental_subgroup_matrix`` (16x16x16 f16 fragments, f32 results: the
  tensor cores through Vulkan's cooperative matrices);
* ``"emulated"``: each fragment operation written out for the 32 lanes of a subgroup (a lane owns 8 consecutive
  elements of a row of each 16x16 result), so adapters without subgroup matrices (llvmpipe in CI) run exactly the
  staging, double buffering, fragment offsets, swizzle, masks and epilogues of the fast path.

A workgroup of ``wm x wn`` subgroups computes a (16 tm wm) x (16 tn wn) block of C; each subgroup owns tm x tn
fragments. K runs in steps of ``bk``: the operands' block slices are copied to workgroup memory (``stage``: "vec8",
8 f16 per load; "f16", one per load, any alignment; "coop", fragment loads and stores) in the layout they have in
memory (rows + ``pad``), so a transposed operand is a column-major fragment load, never a copy; "direct" loads the
fragments straight from storage. ``stages=2`` double-buffers: the next slice is loaded into registers while the
current one is multiplied, with one barrier per step; ``stages=1`` with ``prefetch`` loads the next slice into
registers before multiplying the current one, in one buffer (two barriers a step). D (``epi="d"``) is added at the
end through workgroup scratch (``d_at="end"``, D of C's dtype) or loaded as fragments before the K loop
(``d_at="start"``: an f32 D as a result fragment, an f16 D through a product with the identity; scaled by
beta/alpha, so alpha * (acc) gives alpha AB + beta D and the fragment store stays possible). Epilogue: each fragment
through workgroup scratch (``slots`` fragments per subgroup between barriers), then ``alpha acc (+ beta D)`` masked
and rounded to the output dtype (``cvec``: a lane's 8 float16 in one 16-byte store); or (``store="direct"``, f32,
whole blocks) a fragment store straight into C. ``sym``: C is symmetric (M = N, square blocks): only the blocks on
and above the diagonal are computed, each written also transposed below it. ``groups`` > 1: one dispatch runs that
many problems (a table of parameter structs; each problem's workgroups start at its ``first``). The parameters are
:data:`GEMM_PARAMS` structs, read by name (``p.M``).
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from ..runtime.params import Params

__all__ = ["TcConfig", "GEMM_PARAMS", "F"]

F = 16  # fragment edge: the f16 16x16x16 configuration
GEMM_PARAMS = Params("GemmParams", "M", "N", "K", "batch", "tiles_n", "tiles_mn",
                     "a_off", "b_off", "c_off", "d_off", "a_bs", "b_bs", "c_bs", "d_bs",
                     "lda", "ldb", "ldc", "ldd", "alpha:f32", "beta:f32", "first")


@dataclass(frozen=True)
class TcConfig:
    """One GEMM kernel's compile-time shape (see the module docstring). ``ta``/``tb``: op(X) = X^T (the operand is
    stored (K, M) / (N, K)); ``out``: C's dtype; ``epi``: "none" or "d" (+ beta D, read-only); ``d_at``: where D
    comes in ("end": in the scratch epilogue, of C's dtype; "start": as fragments before the K loop, of dtype
    ``d_type``, needing whole blocks and alpha != 0); ``edges``: bounds checks (off: M, N, K multiples of the block
    and of bk); ``swizzle``: blocks along M visited in groups of this many (L2 reuse); ``slots``: epilogue scratch
    fragments per subgroup between two barriers (a divisor of tm tn); ``cvec``: packed float16 stores (C's rows,
    offsets and strides multiples of 8, no edges); ``sym``, ``groups``, ``prefetch``: see the module docstring;
    ``subgroup``: the lanes of a subgroup (the adapter's)."""
    mode: str = "subgroup-matrix"
    wm: int = 2
    wn: int = 2
    tm: int = 4
    tn: int = 4
    bk: int = 32
    stages: int = 2
    pad: int = 8
    stage: str = "vec8"
    smem: str = "h"
    ta: bool = False
    tb: bool = False
    out: str = "f32"
    epi: str = "none"
    store: str = "scratch"
    edges: bool = True
    swizzle: int = 8
    slots: int = 1
    subgroup: int = 32
    d_at: str = "end"
    d_type: str = "f16"
    cvec: bool = False
    sym: bool = False
    groups: int = 1
    prefetch: bool = False

    @property
    def bm(self) -> int:
        return F * self.tm * self.wm

    @property
    def bn(self) -> int:
        return F * self.tn * self.wn

    @property
    def threads(self) -> int:
        return self.wm * self.wn * self.subgroup

    @property
    def dtype_d(self) -> str:
        """D's dtype: C's when D is added at the end, else ``d_type``."""
        return self.out if self.d_at == "end" else self.d_type

    def tiles(self, which: str) -> tuple[int, int, int]:
        """(rows, row length, smem row stride) of operand ``which``'s block slice, as it lies in memory."""
        outer = self.bm if which == "A" else self.bn
        krows = self.ta if which == "A" else not self.tb
        rows, width = (self.bk, outer) if krows else (outer, self.bk)
        return rows, width, width + self.pad

    def smem_bytes(self) -> int:
        """Workgroup memory the kernel declares."""
        if self.stage == "direct":
            ops = 0
        else:
            ops = sum(self.stages * r * ld * 2 for r, _, ld in (self.tiles("A"), self.tiles("B")))
        ident = 2 * F * F if self._identity() else 0
        return ops + ident + (self.slots * self.wm * self.wn * F * F * 4 if self.store == "scratch" else 0)

    def _identity(self) -> bool:
        return self.mode == "subgroup-matrix" and self.epi == "d" and self.d_at == "start" and self.d_type == "f16"

    def check(self) -> "TcConfig":
        """This config, or a ValueError naming what does not fit together."""
        bad = [why for bad, why in self._rules() if bad]
        if bad:
            raise ValueError("TcConfig: " + "; ".join(bad))
        return self

    def _rules(self):
        frags = self.tm * self.tn
        return [
            (self.mode not in ("subgroup-matrix", "emulated"), f"mode {self.mode!r}"),
            (self.stage not in ("vec8", "f16", "coop", "direct") or self.smem not in ("h", "h4"),
             f"stage {self.stage!r} / smem {self.smem!r}"),
            (self.bk % F or self.pad % 8 or self.stages not in (1, 2) or self.slots < 1 or frags % self.slots
             or (F * F) % self.subgroup,
             f"bk {self.bk}, pad {self.pad}, stages {self.stages}, slots {self.slots} (a divisor of tm tn = {frags}), "
             f"subgroup {self.subgroup}"),
            (self.out not in ("f32", "f16") or self.epi not in ("none", "d") or self.store not in ("scratch", "direct"),
             f"out {self.out!r}, epi {self.epi!r}, store {self.store!r}"),
            (self.store == "direct" and (self.out != "f32" or (self.epi == "d" and self.d_at == "end") or self.edges),
             "store='direct' needs out='f32', no D at the end, edges=False"),
            (self.stage in ("coop", "direct") and self.edges, f"stage={self.stage!r} needs edges=False"),
            (self.d_at not in ("end", "start") or self.d_type not in ("f16", "f32"),
             f"d_at {self.d_at!r}, d_type {self.d_type!r}"),
            (self.epi == "d" and self.d_at == "start" and self.edges, "d_at='start' needs edges=False"),
            (self.cvec and (self.out != "f16" or self.store != "scratch" or self.edges),
             "cvec needs out='f16', store='scratch', edges=False"),
            (self.sym and self.bm != self.bn, f"sym needs square blocks, not {self.bm}x{self.bn}"),
            (self.groups < 1 or self.groups > 64, f"groups {self.groups} (1 to 64)"),
            (self.prefetch and self.stages != 1, "prefetch needs stages=1"),
        ]

    def name(self) -> str:
        """A short label: block, subgroup grid, staging, the transposes, D, the options."""
        d = "" if self.epi != "d" else ("_d" if self.d_at == "end" else f"_d{self.d_type}")
        opts = "".join(f"_{k}" for k, on in (("cvec", self.cvec), ("sym", self.sym), ("pf", self.prefetch)) if on)
        return (f"{self.bm}x{self.bn}_sg{self.wm}x{self.wn}_bk{self.bk}_s{self.stages}_p{self.pad}_{self.stage}"
                f"{'_h4' if self.smem == 'h4' else ''}_{self.store}{self.slots}{'_e' if self.edges else ''}"
                f"_w{self.swizzle}"
                f"_{'T' if self.ta else 'N'}{'T' if self.tb else 'N'}_{self.out}{d}{opts}"
                f"{f'_g{self.groups}' if self.groups > 1 else ''}")

    def with_(self, **kw) -> "TcConfig":
        """A copy with fields changed."""
        return replace(self, **kw)
