"""The tensor-core GEMM's WGSL, from a :class:`~rlx_gpu.linalg.tcconfig.TcConfig` (what each part does: the
docstring of ``tcconfig.py``). One text for both modes: only the fragment operations (:class:`FragmentOps`) differ.
"""
from __future__ import annotations

from .tcconfig import F, GEMM_PARAMS, TcConfig
from . import tcepi as epi
from .tcfrag import FragmentOps

__all__ = ["generate", "ENTRY"]

ENTRY = "gemm_tc"
_LIM = {"m": "p.M", "n": "p.N", "k": "p.K"}


def generate(cfg: TcConfig) -> str:
    """The WGSL module of ``cfg`` (entry point :data:`ENTRY`)."""
    cfg.check()
    ops = FragmentOps(cfg)
    body = [*_prologue(cfg, ops), *_kloop(cfg, ops), *epi.epilogue(cfg, ops)]
    return "\n".join([*_header(cfg), *body, "}", ""])


def _operand(cfg: TcConfig, x: str):
    """Operand ``x`` ("A"/"B"): (rows along k?, row dim, column dim, row0, col0, leading-dim param, base)."""
    krows = cfg.ta if x == "A" else not cfg.tb
    outer, o0 = ("m", "m0") if x == "A" else ("n", "n0")
    rd, cd = ("k", outer) if krows else (outer, "k")
    ld = "p.lda" if x == "A" else "p.ldb"
    return krows, rd, cd, ld, "abase" if x == "A" else "bbase", o0


def _header(cfg: TcConfig) -> list:
    sm = cfg.mode == "subgroup-matrix"
    vec = cfg.stage == "vec8"
    ot = cfg.out
    lines = ["enable f16;"] + (["enable subgroups;", "enable chromium_experimental_subgroup_matrix;"] if sm else [])
    params = (f"var<storage, read> P: array<GemmParams, {cfg.groups}>;" if cfg.groups > 1
              else "var<storage, read> p: GemmParams;")
    lines += [f"// rlx_gpu tensor-core GEMM ({cfg.mode}): {cfg.name()}", GEMM_PARAMS.wgsl(),
              f"@group(0) @binding(0) var<storage, read> A: array<{'vec4<u32>' if vec else 'f16'}>;",
              f"@group(0) @binding(1) var<storage, read> B: array<{'vec4<u32>' if vec else 'f16'}>;",
              f"@group(0) @binding(2) var<storage, read_write> C: array<{'vec4<u32>' if cfg.cvec else ot}>;",
              f"@group(0) @binding(3) {params}"]
    if cfg.epi == "d":
        lines.append(f"@group(0) @binding(4) var<storage, read> D: array<{cfg.dtype_d}>;")
    if cfg.stage != "direct":
        for x in "AB":
            rows, _, ld = cfg.tiles(x)
            n = cfg.stages * rows * ld
            lines.append(f"var<workgroup> {x}s: array<vec4<f16>, {n // 4}>;" if cfg.smem == "h4"
                         else f"var<workgroup> {x}s: array<f16, {n}>;")
    if cfg.store == "scratch":
        lines.append(f"var<workgroup> Sc: array<f32, {cfg.slots * cfg.wm * cfg.wn * F * F}>;")
    lines += epi.declarations(cfg)
    sg = (", @builtin(subgroup_id) sid: u32, @builtin(subgroup_invocation_id) sil: u32" if sm else "")
    lines += [f"@compute @workgroup_size({cfg.threads})",
              f"fn {ENTRY}(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, "
              f"@builtin(local_invocation_index) lid: u32{sg}) {{"]
    return lines


def _problem(cfg: TcConfig) -> list:
    """The workgroup's problem (``p``) and its index ``g`` among that problem's workgroups."""
    if cfg.groups == 1:
        return ["  let g = wid.x + wid.y * nwg.x;"]
    return ["  let g0 = wid.x + wid.y * nwg.x;", "  var gi = 0u;",
            f"  for (var q = 1u; q < {cfg.groups}u; q++) {{ if (g0 >= P[q].first) {{ gi = q; }} }}",
            "  let p = P[gi];", "  let g = g0 - p.first;"]


def _blocks(cfg: TcConfig) -> list:
    """The block (bm, bn) of C that workgroup ``t`` of its matrix computes."""
    if cfg.sym:  # the blocks on and above the diagonal, row by row
        return ["  var bm = 0u; var left = t;",
                "  loop { let row = p.tiles_n - bm; if (left < row) { break; } left -= row; bm++; }",
                "  let bn = bm + left;"]
    if cfg.swizzle > 1:  # groups of `swizzle` block rows, visited column by column (consecutive blocks share B)
        W = cfg.swizzle
        return ["  let tiles_m = p.tiles_mn / p.tiles_n;",
                f"  let first = (t / ({W}u * p.tiles_n)) * {W}u;",
                f"  let gs = min(tiles_m - first, {W}u);",
                f"  let tg = t % ({W}u * p.tiles_n);",
                "  let bm = first + tg % gs;",
                "  let bn = tg / gs;"]
    return ["  let bm = t / p.tiles_n;", "  let bn = t % p.tiles_n;"]


def _prologue(cfg: TcConfig, ops: FragmentOps) -> list:
    sm, S, E = cfg.mode == "subgroup-matrix", cfg.subgroup, ops.e
    L = [*_problem(cfg),
         "  if (g >= p.tiles_mn * p.batch) { return; }",
         "  let bt = g / p.tiles_mn;",
         "  let t = g % p.tiles_mn;", *_blocks(cfg)]
    L += [f"  let m0 = bm * {cfg.bm}u;", f"  let n0 = bn * {cfg.bn}u;",
          f"  let sg = {'sid' if sm else f'lid / {S}u'};", f"  let lane = {'sil' if sm else f'lid % {S}u'};",
          f"  let er = lane * {E}u / 16u;", f"  let ec = (lane * {E}u) % 16u;",
          f"  let sm0 = (sg / {cfg.wn}u) * {F * cfg.tm}u;", f"  let sn0 = (sg % {cfg.wn}u) * {F * cfg.tn}u;"]
    L += [f"  let {x}base = p.{x}_off + bt * p.{x}_bs;" for x in "abcd"]
    if ops.sm:
        L += ["  " + ops.acc(f"c{i}_{j}") for i in range(cfg.tm) for j in range(cfg.tn)]
    else:
        L.append(f"  var acc: array<array<f32, {ops.e}>, {cfg.tm * cfg.tn}>;")
    return L + epi.d_prologue(cfg, ops)


def _copy(cfg: TcConfig, ops: FragmentOps, x: str, what: str, arg: str) -> list:
    """Moving operand ``x``'s block slice: ``what`` = "decl" (the registers), "load" (memory -> registers, for the
    slice at k0 = ``arg``) or "store" (registers -> the workgroup buffer number ``arg``). Unrolled on subgroup
    matrices, a loop over the registers (an array) emulated."""
    krows, rd, cd, ld, base, o0 = _operand(cfg, x)
    rows, width, lds = cfg.tiles(x)
    unit = {"vec8": 8, "f16": 1, "coop": F * F}[cfg.stage]
    total = rows * width // unit
    workers = cfg.wm * cfg.wn if cfg.stage == "coop" else cfg.threads
    count = -(-total // workers)
    if what == "decl":
        if cfg.stage == "coop":
            return ["  " + ops.copy_reg(f"r{x}", count)]
        reg = {"vec8": "vec4<u32>", "f16": "f16"}[cfg.stage]
        if ops.sm:
            return [f"  var r{x}{it}: {reg};" for it in range(count)]
        return [f"  var r{x}: array<{reg}, {count}>;"]
    who = "sg" if cfg.stage == "coop" else "lid"
    per = width // F if cfg.stage == "coop" else width // unit
    scale = "16u" if cfg.stage == "coop" else "1u"
    csc = "16u" if cfg.stage == "coop" else f"{unit}u"
    if ops.sm:
        iters = [(f"{it * workers}u", f"r{x}{it}") for it in range(count)]
    else:
        iters = [(f"it * {workers}u", f"r{x}[it]")]
    L = []
    for first, name in iters:
        guard = f"if ({who} + {first} < {total}u) " if total % workers else ""
        idx = (f"let v = {who} + {first}; let r = (v / {per}u) * {scale}; let c = (v % {per}u) * {csc};")
        if what == "load":
            r0, c0 = ("kk0", o0) if krows else (o0, "kk0")
            body = f"let kk0 = {arg}; {idx} " + _load_reg(cfg, ops, x, name, base, ld, rd, cd, r0, c0)
        else:
            body = idx + " " + _store_reg(cfg, ops, x, name, f"({arg}) * {rows * lds}u + r * {lds}u + c", lds)
        L.append(f"  {guard}{{ {body} }}")
    if not ops.sm:
        L = [f"  for (var it = 0u; it < {count}u; it++) {{", *L, "  }"]
    return L


def _load_reg(cfg, ops, x, name, base, ld, rd, cd, r0, c0) -> str:
    at = f"{base} + ({r0} + r) * {ld} + {c0} + c"
    if cfg.stage == "coop":
        return ops.copy_load(name, x, at, ld)
    zero, src = ("vec4<u32>()", f"{x}[({at}) / 8u]") if cfg.stage == "vec8" else ("f16(0.0)", f"{x}[{at}]")
    if not cfg.edges:
        return f"{name} = {src};"
    return (f"{name} = {zero}; if ({r0} + r < {_LIM[rd]} && {c0} + c < {_LIM[cd]}) {{ {name} = {src}; }}")


def _store_reg(cfg, ops, x, name, o, lds) -> str:
    xs = f"{x}s"
    if cfg.stage == "coop":
        return ops.store(xs, f"({o})", name, f"{lds}u")
    if cfg.stage == "f16":
        return f"{ops.elem(xs, o)} = {name};"
    h = [ops.halves(f"{name}.{w}") for w in "xyzw"]
    if cfg.smem == "h4":
        return (f"let o = {o}; {xs}[o / 4u] = vec4<f16>({h[0]}, {h[1]}); "
                f"{xs}[o / 4u + 1u] = vec4<f16>({h[2]}, {h[3]});")
    parts = [f"let h{q} = {h[q]};" for q in range(4)]
    parts += [f"{xs}[o + {2 * q + s}u] = h{q}.{'xy'[s]};" for q in range(4) for s in range(2)]
    return f"let o = {o}; " + " ".join(parts)


def _frag(cfg: TcConfig, ops: FragmentOps, x: str, name: str, i: str, kk: str, buf: str) -> str:
    """The load of operand ``x``'s fragment ``name`` at outer offset ``i`` and K offset ``kk`` (WGSL expressions,
    in elements) within the slice in workgroup buffer ``buf`` (or, "direct", in storage at k0)."""
    krows, _, _, ld, base, o0 = _operand(cfg, x)
    outer = f"{'sm0' if x == 'A' else 'sn0'} + {i}"
    if cfg.stage == "direct":
        arr, stride, outer, k, start = x, ld, f"{o0} + {outer}", f"k0 + {kk}", base + " + "
    else:
        rows, _, lds = cfg.tiles(x)
        arr, stride, k, start = f"{x}s", f"{lds}u", kk, f"({buf}) * {rows * lds}u + "
    off = f"{start}({k}) * {stride} + {outer}" if krows else f"{start}({outer}) * {stride} + {k}"
    col_major = krows if x == "A" else not krows
    return ops.load(name, "left" if x == "A" else "right", arr, off, stride, col_major)


def _compute(cfg: TcConfig, ops: FragmentOps, buf: str) -> list:
    """The fragment products of one K slice: unrolled on subgroup matrices; loops over the fragments emulated."""
    if not ops.sm:
        return [f"  for (var kk = 0u; kk < {cfg.bk}u; kk += 16u) {{",
                f"  for (var i = 0u; i < {cfg.tm}u; i++) {{ {_frag(cfg, ops, 'A', 'fA', 'i * 16u', 'kk', buf)}",
                f"  for (var j = 0u; j < {cfg.tn}u; j++) {{ {_frag(cfg, ops, 'B', 'fB', 'j * 16u', 'kk', buf)}",
                f"  {ops.mma(f'acc[i * {cfg.tn}u + j]', 'fA', 'fB')}", "  } } }"]
    L = []
    for kk in range(cfg.bk // F):
        L.append("  {")
        L += [f"    {_frag(cfg, ops, 'A', f'fA{i}', f'{F * i}u', f'{F * kk}u', buf)}" for i in range(cfg.tm)]
        L += [f"    {_frag(cfg, ops, 'B', f'fB{j}', f'{F * j}u', f'{F * kk}u', buf)}" for j in range(cfg.tn)]
        L += [f"    {ops.mma(f'c{i}_{j}', f'fA{i}', f'fB{j}')}" for i in range(cfg.tm) for j in range(cfg.tn)]
        L.append("  }")
    return L


def _kloop(cfg: TcConfig, ops: FragmentOps) -> list:
    bk = cfg.bk
    if cfg.stage == "direct":
        return [f"  for (var k0 = 0u; k0 < p.K; k0 += {bk}u) {{", *_compute(cfg, ops, ""), "  }"]
    L = [f"  let nk = (p.K + {bk - 1}u) / {bk}u;", *_copy(cfg, ops, "A", "decl", ""), *_copy(cfg, ops, "B", "decl", "")]
    load = lambda k: _copy(cfg, ops, "A", "load", k) + _copy(cfg, ops, "B", "load", k)  # noqa: E731
    store = lambda b: _copy(cfg, ops, "A", "store", b) + _copy(cfg, ops, "B", "store", b)  # noqa: E731
    if cfg.stages == 1 and cfg.prefetch:  # the next slice's loads in flight while this one is multiplied
        return L + [*load("0u"), "  for (var kt = 0u; kt < nk; kt++) {", *store("0u"), "  workgroupBarrier();",
                    "  if (kt + 1u < nk) {", *load(f"(kt + 1u) * {bk}u"), "  }",
                    *_compute(cfg, ops, "0u"), "  workgroupBarrier();", "  }"]
    if cfg.stages == 1:
        return L + ["  for (var kt = 0u; kt < nk; kt++) {", *load(f"kt * {bk}u"), *store("0u"), "  workgroupBarrier();",
                    *_compute(cfg, ops, "0u"), "  workgroupBarrier();", "  }"]
    return L + [*load("0u"), *store("0u"), "  workgroupBarrier();",
                "  for (var kt = 0u; kt < nk; kt++) {", "  let cur = kt % 2u;",
                "  if (kt + 1u < nk) {", *load(f"(kt + 1u) * {bk}u"), "  }",
                *_compute(cfg, ops, "cur"),
                "  if (kt + 1u < nk) {", *store("1u - cur"), "  }",
                "  workgroupBarrier();", "  }"]
