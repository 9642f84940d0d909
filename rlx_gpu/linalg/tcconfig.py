"""The tensor-core GEMM's compile-time configuration and fragment operations (``tcgen.py`` writes the kernel).

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
current one is multiplied, with one barrier per step. Epilogue: each fragment through workgroup scratch, then
``alpha acc (+ beta D)`` masked and rounded to the output dtype; or (``store="direct"``, f32, no D, whole blocks) a
fragment store straight into C. The parameters are a :data:`GEMM_PARAMS` struct, read by name (``p.M``).
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from ..runtime.params import Params

__all__ = ["TcConfig", "GEMM_PARAMS", "FragmentOps"]

F = 16  # fragment edge: the f16 16x16x16 configuration
GEMM_PARAMS = Params("GemmParams", "M", "N", "K", "batch", "tiles_n", "tiles_mn",
                     "a_off", "b_off", "c_off", "d_off", "a_bs", "b_bs", "c_bs", "d_bs",
                     "lda", "ldb", "ldc", "ldd", "alpha:f32", "beta:f32")


@dataclass(frozen=True)
class TcConfig:
    """One GEMM kernel's compile-time shape (see the module docstring). ``ta``/``tb``: op(X) = X^T (the operand is
    stored (K, M) / (N, K)); ``out``: C's dtype; ``epi``: "none" or "d" (+ beta D, D of C's dtype, read-only);
    ``edges``: bounds checks (off: M, N, K multiples of the block and of bk); ``swizzle``: blocks along M visited
    in groups of this many (L2 reuse); ``slots``: epilogue scratch fragments per subgroup (2: one barrier per
    fragment instead of two); ``subgroup``: the lanes of a subgroup (the adapter's)."""
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

    @property
    def bm(self) -> int:
        return F * self.tm * self.wm

    @property
    def bn(self) -> int:
        return F * self.tn * self.wn

    @property
    def threads(self) -> int:
        return self.wm * self.wn * self.subgroup

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
        return ops + (self.slots * self.wm * self.wn * F * F * 4 if self.store == "scratch" else 0)

    def check(self) -> "TcConfig":
        """This config, or a ValueError naming what does not fit together."""
        bad = []
        if self.mode not in ("subgroup-matrix", "emulated"):
            bad.append(f"mode {self.mode!r}")
        if self.stage not in ("vec8", "f16", "coop", "direct") or self.smem not in ("h", "h4"):
            bad.append(f"stage {self.stage!r} / smem {self.smem!r}")
        if (self.bk % F or self.pad % 8 or self.stages not in (1, 2) or self.slots not in (1, 2)
                or (F * F) % self.subgroup):
            bad.append(f"bk {self.bk}, pad {self.pad}, stages {self.stages}, slots {self.slots}, "
                       f"subgroup {self.subgroup}")
        if self.out not in ("f32", "f16") or self.epi not in ("none", "d") or self.store not in ("scratch", "direct"):
            bad.append(f"out {self.out!r}, epi {self.epi!r}, store {self.store!r}")
        if self.store == "direct" and (self.out != "f32" or self.epi != "none" or self.edges):
            bad.append("store='direct' needs out='f32', epi='none', edges=False")
        if self.stage in ("coop", "direct") and self.edges:
            bad.append(f"stage={self.stage!r} needs edges=False")
        if bad:
            raise ValueError("TcConfig: " + "; ".join(bad))
        return self

    def name(self) -> str:
        """A short label: block, subgroup grid, staging, the transposes."""
        return (f"{self.bm}x{self.bn}_sg{self.wm}x{self.wn}_bk{self.bk}_s{self.stages}_p{self.pad}_{self.stage}"
                f"{'_h4' if self.smem == 'h4' else ''}_{self.store}{self.slots}{'_e' if self.edges else ''}"
                f"_w{self.swizzle}"
                f"_{'T' if self.ta else 'N'}{'T' if self.tb else 'N'}_{self.out}{'_d' if self.epi == 'd' else ''}")

    def with_(self, **kw) -> "TcConfig":
        """A copy with fields changed."""
        return replace(self, **kw)


class FragmentOps:
    """Fragment operations: the subgroup-matrix builtins, or (``emulated``) their lane-by-lane equivalent, written
    as loops (llvmpipe compiles a kernel at its first dispatch, in time that grows with its length)."""

    def __init__(self, cfg: TcConfig):
        self.sm = cfg.mode == "subgroup-matrix"
        self.e = F * F // cfg.subgroup  # elements a lane owns: row er, columns ec .. ec + e - 1
        self.smem = cfg.smem
        self.frags = {}

    def elem(self, arr: str, idx: str) -> str:
        if arr in ("As", "Bs") and self.smem == "h4":
            return f"{arr}[({idx}) / 4u][({idx}) % 4u]"
        return f"{arr}[{idx}]"

    def _units(self, arr: str, off: str, stride: str):
        """(offset, stride) as the builtins count them: in elements of the array (vec4<f16> for smem "h4": Tint
        sizes the access as (rows - 1) * stride + 16 / 4 of them), where the emulation counts halves."""
        if arr in ("As", "Bs") and self.smem == "h4":
            return f"({off}) / 4u", f"{int(stride.rstrip('u')) // 4}u"
        return off, stride

    def halves(self, word: str) -> str:
        """The two f16 of a u32 (naga has no bitcast to vec2<f16>: the emulated path unpacks through f32, exact)."""
        return f"bitcast<vec2<f16>>({word})" if self.sm else f"vec2<f16>(unpack2x16float({word}))"

    def _lanes(self, body: str) -> str:
        return f"for (var e = 0u; e < {self.e}u; e++) {{ {body} }}"

    def acc(self, name: str) -> str:
        return f"var {name}: subgroup_matrix_result<f32, 16, 16>;" if self.sm else f"var {name}: array<f32, {self.e}>;"

    def load(self, name, kind, arr, off, stride, col_major) -> str:
        """An operand fragment (kind "left"/"right") at element ``off`` of ``arr``."""
        if self.sm:
            lay = "col_major" if col_major else "row_major"
            off, stride = self._units(arr, off, stride)
            return (f"let {name} = subgroupMatrixLoad<subgroup_matrix_{kind}<f16, 16, 16>, {lay}>(&{arr}, {off}, "
                    f"{stride});")
        self.frags[name] = (arr, stride, col_major)
        return f"let {name} = {off};"

    def _at(self, name, row, col) -> str:
        arr, stride, cm = self.frags[name]
        return self.elem(arr, f"{name} + ({col}) * {stride} + {row}" if cm else f"{name} + ({row}) * {stride} + {col}")

    def mma(self, acc, a, b) -> str:
        if self.sm:
            return f"{acc} = subgroupMatrixMultiplyAccumulate({a}, {b}, {acc});"
        inner = self._lanes(f"{acc}[e] = fma(av, f32({self._at(b, 'k', 'ec + e')}), {acc}[e]);")
        return f"for (var k = 0u; k < 16u; k++) {{ let av = f32({self._at(a, 'er', 'k')}); {inner} }}"

    def store(self, arr, off, frag, stride) -> str:
        """A fragment (an accumulator, or a copy register) into ``arr``, row-major."""
        if self.sm:
            off, stride = self._units(arr, off, stride)
            return f"subgroupMatrixStore<row_major>(&{arr}, {off}, {frag}, {stride});"
        return self._lanes(f"{self.elem(arr, f'{off} + er * {stride} + ec + e')} = {frag}[e];")

    def copy_reg(self, name, count: int) -> str:
        """The registers of ``count`` 16x16 blocks in flight (unrolled names ``<name><i>``, or one array)."""
        if self.sm:
            return " ".join(f"var {name}{i}: subgroup_matrix_left<f16, 16, 16>;" for i in range(count))
        return f"var {name}: array<array<f16, {self.e}>, {count}>;"

    def copy_load(self, name, arr, off, stride) -> str:
        """A 16x16 block of ``arr`` (row-major at ``off``) into copy register ``name``."""
        if self.sm:
            return (f"{name} = subgroupMatrixLoad<subgroup_matrix_left<f16, 16, 16>, row_major>(&{arr}, {off}, "
                    f"{stride});")
        return self._lanes(f"{name}[e] = {arr}[{off} + er * {stride} + ec + e];")

    def scale(self, acc, s) -> str:
        if self.sm:
            return f"{acc} = subgroupMatrixScalarMultiply({acc}, {s});"
        return self._lanes(f"{acc}[e] = {acc}[e] * {s};")
