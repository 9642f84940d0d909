"""Typed storage bindings: float32, float16 or bfloat16 elements behind float32 accessors (``shaders/lowp.wgsl``
converts 16-bit values with integer operations, bit for bit as :mod:`rlx_gpu.core.lowp`; float16 uses WGSL's
``f16`` where the adapter has ``shader-f16``).

Every binding gets ``ld_<name>(i) -> vec4<f32>`` (the four elements of vec4 index ``i``), ``ld1_<name>(e) -> f32``
(element ``e``) and, when writable, ``st_<name>(i, v)`` (rounded to nearest even) and ``sts_<name>(i, v, bits)``
(stochastically rounded). A *wide* binding (:func:`typed_array` with ``wide=True``) also has pair accessors over
unit ``j`` = vec4s ``2j`` and ``2j + 1`` (eight elements): ``ld2_<name>(j) -> array<vec4<f32>, 2>``,
``st2_<name>(j, a, b)`` and ``sts2_<name>(j, a, b, bits_a, bits_b)``; its 16-bit elements are then bound as
``array<vec4<u32>>`` (native float16: ``array<mat2x4<f16>>``), so a pair is one 16-byte load or store (a float32
pair is two adjacent ones).
"""
from __future__ import annotations

__all__ = ["typed_array"]

_ARRAY2 = "array<vec4<f32>, 2>"


def _half(w: str, h: int) -> str:
    return f"{w}.{'xy' if h == 0 else 'zw'}"


def _codec(dtype, vpack: bool) -> tuple:
    """(unpack, pack, stochastic pack) of a packed 16-bit dtype as functions of WGSL expressions (vec2<u32> <->
    vec4<f32>); ``vpack``: bfloat16 rounded by ``pack4v_bf16`` (the same bits from vector operations)."""
    tag = "f16" if dtype.name == "float16" else "bf16"
    pack = "pack4v" if vpack and tag == "bf16" else "pack4"
    return (lambda w: f"unpack4_{tag}({w})", lambda v: f"{pack}_{tag}({v})",
            lambda v, b: f"sr4_{tag}({v}, {b})")


def _narrow(name: str, dtype, native_f16: bool, vpack: bool) -> tuple:
    """(element declaration, ld, ld1, st, sts bodies) of the vec4-granular accessors."""
    d = dtype.name
    if d == "float32":
        return "vec4<f32>", f"{name}[i]", f"{name}[e / 4u][e % 4u]", f"{name}[i] = v;", f"{name}[i] = v;"
    if d == "float16" and native_f16:
        return ("vec4<f16>", f"vec4<f32>({name}[i])", f"f32({name}[e / 4u][e % 4u])", f"{name}[i] = vec4<f16>(v);",
                f"{name}[i] = vec4<f16>(unpack4_f16(sr4_f16(v, bits)));")  # (exact: the value is a float16)
    unpack, pack, sr = _codec(dtype, vpack)
    tag = "f16" if d == "float16" else "bf16"
    return ("vec2<u32>", unpack(f"{name}[i]"), f"unpack1_{tag}({name}[e / 4u], e % 4u)",
            f"{name}[i] = {pack('v')};", f"{name}[i] = {sr('v', 'bits')};")


def _wide_f16(name: str, read_only: bool) -> list:
    """The accessors of a wide native-f16 binding (``array<mat2x4<f16>>``: a pair of vec4<f16> an element)."""
    out = [f"fn ld_{name}(i: u32) -> vec4<f32> {{ return vec4<f32>({name}[i / 2u][i & 1u]); }}",
           f"fn ld1_{name}(e: u32) -> f32 {{ return f32({name}[e / 8u][(e / 4u) & 1u][e % 4u]); }}",
           f"fn ld2_{name}(j: u32) -> {_ARRAY2} {{ let m = {name}[j]; "
           f"return {_ARRAY2}(vec4<f32>(m[0]), vec4<f32>(m[1])); }}"]
    if read_only:
        return out
    exact = "vec4<f16>(unpack4_f16(sr4_f16({v}, {b})))"  # (exact: the value is a float16)
    return out + [f"fn st_{name}(i: u32, v: vec4<f32>) {{ {name}[i / 2u][i & 1u] = vec4<f16>(v); }}",
                  f"fn sts_{name}(i: u32, v: vec4<f32>, bits: vec4<u32>) {{ {name}[i / 2u][i & 1u] = "
                  f"{exact.format(v='v', b='bits')}; }}",
                  f"fn st2_{name}(j: u32, a: vec4<f32>, b: vec4<f32>) {{ {name}[j] = mat2x4<f16>(vec4<f16>(a), "
                  "vec4<f16>(b)); }",
                  f"fn sts2_{name}(j: u32, a: vec4<f32>, b: vec4<f32>, ra: vec4<u32>, rb: vec4<u32>) {{ "
                  f"{name}[j] = mat2x4<f16>({exact.format(v='a', b='ra')}, {exact.format(v='b', b='rb')}); }}"]


def _wide16(name: str, dtype, read_only: bool, vpack: bool) -> list:
    """The accessors of a wide packed 16-bit binding (``array<vec4<u32>>``: eight elements a word group)."""
    unpack, pack, sr = _codec(dtype, vpack)
    half = f"select({name}[i / 2u].xy, {name}[i / 2u].zw, (i & 1u) == 1u)"
    lane = f"select({name}[e / 8u].xy, {name}[e / 8u].zw, ((e / 4u) & 1u) == 1u)"
    ld1 = f"unpack1_{'f16' if dtype.name == 'float16' else 'bf16'}({lane}, e % 4u)"
    out = [f"fn ld_{name}(i: u32) -> vec4<f32> {{ return {unpack(half)}; }}",
           f"fn ld1_{name}(e: u32) -> f32 {{ return {ld1}; }}",
           f"fn ld2_{name}(j: u32) -> {_ARRAY2} {{ let w = {name}[j]; "
           f"return {_ARRAY2}({unpack(_half('w', 0))}, {unpack(_half('w', 1))}); }}"]
    if read_only:
        return out
    put = (f"if ((i & 1u) == 0u) {{ {name}[i / 2u].x = w.x; {name}[i / 2u].y = w.y; }} "
           f"else {{ {name}[i / 2u].z = w.x; {name}[i / 2u].w = w.y; }}")
    return out + [f"fn st_{name}(i: u32, v: vec4<f32>) {{ let w = {pack('v')}; {put} }}",
                  f"fn sts_{name}(i: u32, v: vec4<f32>, bits: vec4<u32>) {{ let w = {sr('v', 'bits')}; {put} }}",
                  f"fn st2_{name}(j: u32, a: vec4<f32>, b: vec4<f32>) {{ {name}[j] = vec4<u32>({pack('a')}, "
                  f"{pack('b')}); }}",
                  f"fn sts2_{name}(j: u32, a: vec4<f32>, b: vec4<f32>, ra: vec4<u32>, rb: vec4<u32>) {{ "
                  f"{name}[j] = vec4<u32>({sr('a', 'ra')}, {sr('b', 'rb')}); }}"]


def _pairs(name: str, read_only: bool) -> list:
    """Pair accessors over a vec4-granular binding (float32: two adjacent 16-byte words)."""
    out = [f"fn ld2_{name}(j: u32) -> {_ARRAY2} {{ return {_ARRAY2}(ld_{name}(2u * j), ld_{name}(2u * j + 1u)); }}"]
    if read_only:
        return out
    return out + [f"fn st2_{name}(j: u32, a: vec4<f32>, b: vec4<f32>) {{ st_{name}(2u * j, a); "
                  f"st_{name}(2u * j + 1u, b); }}",
                  f"fn sts2_{name}(j: u32, a: vec4<f32>, b: vec4<f32>, ra: vec4<u32>, rb: vec4<u32>) {{ "
                  f"sts_{name}(2u * j, a, ra); sts_{name}(2u * j + 1u, b, rb); }}"]


def typed_array(name: str, index: int, dtype, read_only: bool, native_f16: bool, wide: bool = False,
                vpack: bool = False) -> str:
    """A storage binding of ``dtype`` elements and its float32 accessors (the module docstring lists them;
    ``vpack``: bfloat16 stores round with ``pack4v_bf16``)."""
    mode = "read" if read_only else "read_write"
    if wide and dtype.name != "float32":
        native = dtype.name == "float16" and native_f16
        return "\n".join([f"@group(0) @binding({index}) var<storage, {mode}> {name}: "
                          f"array<{'mat2x4<f16>' if native else 'vec4<u32>'}>;"]
                         + (_wide_f16(name, read_only) if native else _wide16(name, dtype, read_only, vpack)))
    decl, ld, ld1, st, sts = _narrow(name, dtype, native_f16, vpack)
    out = [f"@group(0) @binding({index}) var<storage, {mode}> {name}: array<{decl}>;",
           f"fn ld_{name}(i: u32) -> vec4<f32> {{ return {ld}; }}",
           f"fn ld1_{name}(e: u32) -> f32 {{ return {ld1}; }}"]
    if not read_only:
        out += [f"fn st_{name}(i: u32, v: vec4<f32>) {{ {st} }}",
                f"fn sts_{name}(i: u32, v: vec4<f32>, bits: vec4<u32>) {{ {sts} }}"]
    return "\n".join(out + (_pairs(name, read_only) if wide else []))
