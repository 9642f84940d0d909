"""The tensor-core GEMM's fragment operations: Dawn's subgroup-matrix builtins, or (``"emulated"``) the same operation
written out for the lanes of a subgroup, each lane owning ``e`` consecutive elements of one row of a 16x16 fragment
(row ``er``, columns ``ec`` .. ``ec + e - 1``)."""
from __future__ import annotations

from .tcconfig import F, TcConfig

__all__ = ["FragmentOps"]


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

    def store(self, arr, off, frag, stride, col_major=False) -> str:
        """A fragment (an accumulator, or a copy register) into ``arr``, row-major (``col_major``: transposed)."""
        if self.sm:
            off, stride = self._units(arr, off, stride)
            lay = "col_major" if col_major else "row_major"
            return f"subgroupMatrixStore<{lay}>(&{arr}, {off}, {frag}, {stride});"
        at = f"{off} + (ec + e) * {stride} + er" if col_major else f"{off} + er * {stride} + ec + e"
        return self._lanes(f"{self.elem(arr, at)} = {frag}[e];")

    def d_init(self, acc, arr, off, stride, dtype, ratio) -> str:
        """Accumulator ``acc`` = ``ratio`` times the fragment of D at ``off`` (an f32 D as a result fragment; an
        f16 D through its product with the identity ``idm``, exact in f32)."""
        if not self.sm:
            return self._lanes(f"{acc}[e] = f32({arr}[{off} + er * {stride} + ec + e]) * {ratio};")
        if dtype == "f32":
            frag = f"subgroupMatrixLoad<subgroup_matrix_result<f32, 16, 16>, row_major>(&{arr}, {off}, {stride})"
        else:
            frag = (f"subgroupMatrixMultiply<f32>(subgroupMatrixLoad<subgroup_matrix_left<f16, 16, 16>, row_major>("
                    f"&{arr}, {off}, {stride}), idm)")
        return f"{acc} = subgroupMatrixScalarMultiply({frag}, {ratio});"

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
