"""The generated parts of a module for a bucket with block-quantized states (``state_bits``; the maps and the
rounding rule: :mod:`rlx_gpu.core.quant`; the buffer layout: :mod:`rlx_gpu.runtime.qarena`).

Each quantized state ``s`` is one binding ``s_q: array<u32>``: its map and midpoints (QH words), then per block of
QB elements its QW code words and its absmax (QS = QW + 1 words). A pass copies the signed and the unsigned map it
needs into workgroup memory, loads each state as ``map[code] * absmax``, calls the optimizer's update function in
float32 as for any bucket, then per state finds each block's new absmax in the workgroup (QB/4 threads own a
block: a tree of ``nan_max`` in workgroup memory), quantizes (a branchless binary search over ``absmax *
midpoint``) and stores codes and absmax. Quantize and dequantize live in the update's one pass; barriers sit in
uniform control flow (every thread of the workgroup runs the EPT iterations; loads and stores are guarded).
"""
from __future__ import annotations

from ..core.quant import BLOCK
from ..runtime.qarena import block_words, header_words

__all__ = ["q_bindings", "q_helpers", "q_elementwise", "param_grad_loads"]


def q_bindings(states, present, idx, bits: int) -> str:
    return "\n".join(f"@group(0) @binding({next(idx)}) var<storage, read_write> {s}_q: array<u32>;"
                     for s in states if s in present)


def q_helpers(states, present, signs: dict, bits: int) -> str:
    """Workgroup copies of the maps, per-state loads, the block absmax and the code search."""
    QN, QB = 2 ** bits, BLOCK[bits]
    G = QB // 4
    mine = [s for s in states if s in present and s in signs]
    L = [f"const QN: u32 = {QN}u;", f"const QB: u32 = {QB}u;", f"const QG: u32 = {G}u;  // threads (vec4s) per block",
         f"const QH: u32 = {header_words(bits)}u;  // words of map and midpoints",
         f"const QS: u32 = {block_words(bits)}u;  // words per block: codes, then absmax",
         "var<workgroup> qred: array<f32, WG>;"]
    if bits == 4:
        L.append("var<workgroup> qword: array<u32, WG>;")
    load = []
    for tag, want in (("s", True), ("u", False)):
        src = next((s for s in mine if signs[s] == want), None)
        if src is None:
            continue
        L += [f"var<workgroup> qm_{tag}: array<f32, QN>;", f"var<workgroup> qt_{tag}: array<f32, QN>;"]
        load.append(f"        qm_{tag}[j] = bitcast<f32>({src}_q[j]); qt_{tag}[j] = bitcast<f32>({src}_q[QN + j]);")
        L += [f"fn q_code_{tag}(v: f32, a: f32) -> u32 {{",
              "    let sc = select(a, 1.0, a == 0.0);", "    var c = 0u;",
              "    for (var st = QN / 2u; st > 0u; st = st / 2u) {",
              f"        if (sc * qt_{tag}[c + st - 1u] < v) {{ c = c + st; }}", "    }", "    return c;", "}",
              f"fn q_codes_{tag}(v: vec4<f32>, a: f32) -> vec4<u32> {{",
              f"    return vec4<u32>(q_code_{tag}(v.x, a), q_code_{tag}(v.y, a), q_code_{tag}(v.z, a), "
              f"q_code_{tag}(v.w, a));", "}"]
    L += ["fn q_load_maps(lid: u32) {", "    for (var j = lid; j < QN; j = j + WG) {"] + load + \
         ["    }", "    workgroupBarrier();", "}",
         "fn q_base(i: u32) -> u32 { return QH + (i / QG) * QS; }  // the first word of vec4 i's block",
         "fn q_word(i: u32) -> u32 { return q_base(i) + " + ("i % QG; }" if bits == 8 else "(i % QG) / 2u; }")]
    shifts = (0, 8, 16, 24) if bits == 8 else (0, 4, 8, 12)
    for s in mine:
        tag = "s" if signs[s] else "u"
        word = f"{s}_q[q_word(i)]" if bits == 8 else f"({s}_q[q_word(i)] >> (16u * (i & 1u)))"
        lanes = ", ".join(f"qm_{tag}[(w >> {k}u) & {QN - 1}u]" for k in shifts)
        L += [f"fn ldq_{s}(i: u32) -> vec4<f32> {{", f"    let w = {word};",
              f"    return vec4<f32>({lanes}) * bitcast<f32>({s}_q[q_base(i) + QS - 1u]);", "}"]
    L += ["// The absmax of the QB-element block lane `lid` is in: every thread of the workgroup calls it.",
          "fn q_absmax(lid: u32, v: vec4<f32>) -> f32 {",
          "    let m = abs(v);",
          "    qred[lid] = nan_max(nan_max(m.x, m.y), nan_max(m.z, m.w));",
          "    for (var s = QG / 2u; s > 0u; s = s / 2u) {",
          "        workgroupBarrier();",
          "        if ((lid & (QG - 1u)) < s) { qred[lid] = nan_max(qred[lid], qred[lid + s]); }",
          "    }",
          "    workgroupBarrier();",
          "    let a = qred[lid & ~(QG - 1u)];",
          "    workgroupBarrier();",
          "    return a;", "}"]
    return "\n".join(L)


def param_grad_loads(p, pad: str) -> tuple[list, str]:
    """An elementwise driver's loads of ``p0`` (the param, or its master copy) and ``g`` (scaled, padding lanes
    zero, negated for maximize), and the name of the grad argument."""
    L = [pad + "let p0 = load_p(i, r);"] if p.param else []
    if not p.grad:
        return L, "zero"
    return L + [pad + f"var g = select(ld_{p.grad}(i) * gm, zero, keep);", pad + "if (neg) { g = -g; }"], "g"


def q_elementwise(p, present, signs: dict, bits: int) -> str:
    """The driver of one elementwise pass over a quantized bucket (no reducing passes: the optimizers with
    quantized states have none)."""
    if p.reduce:
        raise ValueError(f"pass {p.entry}: reducing passes have no quantized driver")
    reads = [s for s in p.reads if s in present]
    writes = [s for s in p.writes if s in present]
    L = ["@compute @workgroup_size(WG)",
         f"fn {p.kernel}(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,",
         "        @builtin(local_invocation_index) lid: u32) {",
         "    q_load_maps(lid);",
         "    let blk = active_block(wid, nwg);",
         "    let r = rec(select(0u, blk.x, blk.x != NONE));"]
    cond = "blk.x != NONE" + (f" && has(r, {p.only_if.upper()})" if p.only_if else "")
    L += [f"    let live = {cond};"]
    if p.grad:
        L += ["    let gm = grad_mul();", f"    let neg = {'has(r, MAXIMIZE)' if p.signed else 'false'};"]
    L += ["    let zero = vec4<f32>(0.0);",
          "    for (var k = 0u; k < EPT; k++) {",
          "        let i = blk.y + k * WG + lid;",
          "        let inb = live && 4u * i < blk.z;",
          "        let keep = tail(i, blk.z);",
          "        var o: Out;",
          "        if (inb) {",
          "            let e = elem0(blk, r, i);"]
    lines, gv = param_grad_loads(p, "            ")
    L += lines
    L.append("            var s: State;")
    for s in reads:
        L.append(f"            if (has(r, HAS_{s.upper()})) {{ s.{s} = select(ldq_{s}(i), zero, keep); }}")
    L.append(f"            o = {p.fn}(r, e, {'select(p0, zero, keep)' if p.param else 'zero'}, {gv}, s);")
    if p.param == "rw":
        L.append("            store_p(i, select(o.p, zero, keep), r, e);")
    L.append("        }")
    for s in writes:
        tag = "s" if signs[s] else "u"
        L += [f"        let v_{s} = select(select(o.s.{s}, zero, keep), zero, !inb);",
              f"        let a_{s} = q_absmax(lid, v_{s});",
              f"        let c_{s} = q_codes_{tag}(v_{s}, a_{s});",
              f"        let ok_{s} = inb && has(r, HAS_{s.upper()});"]
        if bits == 8:
            L.append(f"        if (ok_{s}) {{ {s}_q[q_word(i)] = c_{s}.x | (c_{s}.y << 8u) | (c_{s}.z << 16u) | "
                     f"(c_{s}.w << 24u); }}")
        else:
            L += [f"        qword[lid] = c_{s}.x | (c_{s}.y << 4u) | (c_{s}.z << 8u) | (c_{s}.w << 12u);",
                  "        workgroupBarrier();",
                  f"        if (ok_{s} && (lid & 1u) == 0u) {{ {s}_q[q_word(i)] = qword[lid] | (qword[lid + 1u] << 16u); }}"]
        L.append(f"        if (ok_{s} && (lid & (QG - 1u)) == 0u) {{ {s}_q[q_base(i) + QS - 1u] = bitcast<u32>(a_{s}); }}")
    L += ["    }", "}"]
    return "\n".join(L)
