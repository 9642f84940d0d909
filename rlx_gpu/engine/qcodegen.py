"""The generated parts of a module for a bucket with block-quantized states (``state_bits``; the maps and the
rounding rule: :mod:`rlx_gpu.core.quant`; the buffer layout: :mod:`rlx_gpu.runtime.qarena`).

Each quantized state ``s`` is one binding ``s_q: array<u32>``: its map and midpoints (QH words), then per block of
QB elements its QW code words and its absmax (QS = QW + 1 words). A pass copies the signed and the unsigned map it
needs into workgroup memory, loads each state as ``map[code] * absmax``, calls the optimizer's update function in
float32 as for any bucket, then per state finds each block's new absmax word in the workgroup (QB/4 threads own a
block: workgroup atomics on a key of the bit pattern; for an unsigned state also a +inf flag), quantizes (a
guess from a table and one step, over ``absmax * midpoint``) and stores codes and absmax word (the rule and the
word's flag: :mod:`rlx_gpu.core.quant`). Quantize and dequantize live in the update's one pass; barriers sit in
uniform control flow (every thread of the workgroup runs the EPT iterations; loads and stores are guarded).
"""
from __future__ import annotations

from ..core.quant import BLOCK, GUESS_BITS, GUESS_KEYS
from ..runtime.qarena import block_words, header_words

__all__ = ["QK", "q_bindings", "q_helpers", "q_elementwise", "param_grad_loads"]


def q_bindings(states, present, idx, bits: int) -> str:
    return "\n".join(f"@group(0) @binding({next(idx)}) var<storage, read_write> {s}_q: array<u32>;"
                     for s in states if s in present)


QK = 8  # engine blocks per workgroup in a quantized pass (the maps are copied into workgroup memory once for them)


def q_helpers(states, present, signs: dict, bits: int, nwrites: int, ept: int) -> str:
    """Workgroup copies of the maps, per-state loads, the block absmax slots and the code search."""
    QN, QB = 2 ** bits, BLOCK[bits]
    G = QB // 4
    mine = [s for s in states if s in present and s in signs]
    L = [f"const QN: u32 = {QN}u;", f"const QB: u32 = {QB}u;", f"const QG: u32 = {G}u;  // threads (vec4s) per block",
         f"const QH: u32 = {header_words(bits)}u;  // words of map, midpoints and guide",
         f"const QS: u32 = {block_words(bits)}u;  // words per block: codes, then absmax",
         f"const QT: u32 = {GUESS_KEYS}u;  // guide entries per sign", f"const QK: u32 = {QK}u;",
         f"const QW: u32 = {max(1, nwrites)}u;  // quantized states a pass writes",
         # 8-bit: a thread's EPT vec4s are rows k*WG + lid (QG threads per block per row); 4-bit: EPT consecutive
         # vec4s (so one thread writes whole words; QG/EPT threads per block, one row)
         f"const QROWS: u32 = {ept if bits == 8 else 1}u;",
         f"const QTPB: u32 = {G if bits == 8 else G // ept}u;  // threads per block in a row",
         "override QSET: u32 = QROWS * QW * (WG / QTPB);  // absmax slots of one block set",
         "// three sets of slots (block kk uses set kk % 3), per row, written state and block: the key of the",
         "// largest finite |v| (its bits: u32 order is float order for non-negative floats; signed states: shifted",
         "// up one, the low bit set when that value is positive); unsigned states: in qinf, whether it holds +inf",
         "var<workgroup> qamax: array<atomic<u32>, 3u * QSET>;"]
    if any(not signs[s] for s in mine):
        L.append("var<workgroup> qinf: array<atomic<u32>, 3u * QSET>;")
    load = []
    for tag, want in (("s", True), ("u", False)):
        src = next((s for s in mine if signs[s] == want), None)
        if src is None:
            continue
        L += [f"var<workgroup> qm_{tag}: array<f32, QN>;", f"var<workgroup> qt_{tag}: array<f32, QN>;",
              f"var<workgroup> qg_{tag}: array<u32, {2 * GUESS_KEYS // 4}>;"]
        load.append(f"    for (var j = lid; j < QN; j = j + WG) {{ qm_{tag}[j] = bitcast<f32>({src}_q[j]); "
                    f"qt_{tag}[j] = bitcast<f32>({src}_q[QN + j]); }}")
        load.append(f"    for (var j = lid; j < {2 * GUESS_KEYS // 4}u; j = j + WG) {{ qg_{tag}[j] = {src}_q[2u * QN + j]; }}")
        L += [f"fn q_search_{tag}(v: f32, sc: f32) -> u32 {{  // the count of sc * midpoint < v by bisection",
              "    var c = 0u;",
              "    for (var st = QN / 2u; st > 0u; st = st / 2u) {",
              f"        if (sc * qt_{tag}[c + st - 1u] < v) {{ c = c + st; }}", "    }", "    return c;", "}",
              f"fn q_code_{tag}(v: f32, a: f32, inv: f32) -> u32 {{",
              "    // the guide's guess from the float bits of v / a is within one code of the count of",
              "    // a * midpoint < v (core/quant.py checks it for every key): one step up or down, both loads at once",
              "    let x = bitcast<u32>(v * inv);",
              "    let m = x & 0x7fffffffu;",
              "    var key = 0u;",
              f"    if (m >= 0x33800000u) {{ key = min((m >> {23 - GUESS_BITS}u) - (103u << {GUESS_BITS}u) + 1u, QT - 1u); }}",
              "    let idx = select(0u, QT, (x >> 31u) == 1u) + key;",
              f"    let c = (qg_{tag}[idx >> 2u] >> (8u * (idx & 3u))) & 255u;",
              "    let sc = select(a, 1.0, a == 0.0);",
              f"    let up = c < QN - 1u && sc * qt_{tag}[min(c, QN - 2u)] < v;",
              f"    let down = c > 0u && !(sc * qt_{tag}[max(c, 1u) - 1u] < v);",
              "    let near = select(select(c, c - 1u, down), c + 1u, up);",
              "    if (m >= 0x7f800000u) {  // x inf or NaN: v inf or NaN (code 0), or 1/a overflowed: bisect",
              f"        return select(q_search_{tag}(v, sc), 0u, is_nan(v));",
              "    }",
              "    return near;", "}",
              ] + _codes_fns(tag, bits)
    L += ["fn q_load_maps(lid: u32) {"] + load + ["    workgroupBarrier();", "}",
          "fn q_base(i: u32) -> u32 { return QH + (i / QG) * QS; }  // the first word of vec4 i's block",
          "fn q_word(i: u32) -> u32 { return q_base(i) + " + ("i % QG; }" if bits == 8 else "(i % QG) / 2u; }"),
          "// Block b of the chunk's table, x = NONE past the end or when its tensor has no grad this step.",
          "fn q_block(b: u32) -> vec4<u32> {",
          "    if (b >= arrayLength(&blocks)) { return vec4<u32>(NONE); }",
          "    let blk = blocks[b];",
          "    if ((hyper[blk.x * REC + REC_FLAGS] & ACTIVE) == 0u) { return vec4<u32>(NONE); }",
          "    return blk;", "}"]
    shifts = (0, 8, 16, 24) if bits == 8 else (0, 4, 8, 12)
    for s in mine:
        tag = "s" if signs[s] else "u"
        word = f"{s}_q[q_word(i)]" if bits == 8 else f"({s}_q[q_word(i)] >> (16u * (i & 1u)))"
        codes = ", ".join(f"(w >> {k}u) & {QN - 1}u" for k in shifts)
        L += [f"fn ldq_{s}(i: u32) -> vec4<f32> {{", f"    let w = {word};", f"    let c = vec4<u32>({codes});",
              f"    let aw = {s}_q[q_base(i) + QS - 1u];",
              f"    let v = vec4<f32>(qm_{tag}[c.x], qm_{tag}[c.y], qm_{tag}[c.z], qm_{tag}[c.w]) * "
              + ("bitcast<f32>(aw);  // (a negated block: the word's sign)" if signs[s] else
                 "bitcast<f32>(aw & ABS_BITS);")]
        if not signs[s]:
            L += ["    if (aw > ABS_BITS) {  // the block holds +inf: code 0 reads +inf",
                  "        let inf = bitcast<f32>((aw >> 31u) * EXP_BITS);  // (+inf, not a constant expression)",
                  "        return select(v, vec4<f32>(inf), c == vec4<u32>(0u));", "    }"]
        L += ["    return v;", "}"]
    return "\n".join(L)


def _codes_fns(tag: str, bits: int) -> list:
    """The block key, absmax word and codes of a signed (``s``) or unsigned (``u``) state (core/quant.py's rule)."""
    codes = ", ".join(f"q_code_{tag}(x.{c}, a, inv)" for c in "xyzw")
    head = [f"fn q_codes_{tag}(v: vec4<f32>, aw: u32) -> vec4<u32> {{", "    let a = bitcast<f32>(aw & ABS_BITS);",
            "    let inv = 1.0 / select(a, 1.0, a == 0.0);"]
    if tag == "s":
        return ["fn q_key_s(v: vec4<f32>) -> u32 {  // the largest finite |v|, shifted up one; low bit: it is positive",
                "    let b = bitcast<vec4<u32>>(v);", "    let m = b & vec4<u32>(ABS_BITS);",
                "    let f = select(m, vec4<u32>(0u), m >= vec4<u32>(EXP_BITS));",
                "    let k = (f << vec4<u32>(1u)) | (~b >> vec4<u32>(31u));",
                "    return max(max(k.x, k.y), max(k.z, k.w));", "}",
                "fn q_word_s(k: u32) -> u32 {  // the absmax word: sign bit set when the largest magnitude is negative",
                "    return (k >> 1u) | select(0u, 0x80000000u, (k & 1u) == 0u && k > 1u);", "}",
                *head, "    let x = select(v, -v, vec4<bool>(aw > ABS_BITS));  // a negated block",
                f"    return vec4<u32>({codes});", "}"]
    zero = ["    c = select(c, max(c, vec4<u32>(1u)), v > vec4<f32>(0.0));  // a positive value never reads back as 0"]
    return ["fn q_key_u(v: vec4<f32>) -> u32 {  // the largest finite |v|",
            "    let m = bitcast<vec4<u32>>(v) & vec4<u32>(ABS_BITS);",
            "    let k = select(m, vec4<u32>(0u), m >= vec4<u32>(EXP_BITS));",
            "    return max(max(k.x, k.y), max(k.z, k.w));", "}",
            *head, "    let x = v;", f"    var c = vec4<u32>({codes});", *(zero if bits == 8 else []),
            "    if (aw > ABS_BITS) {  // the block holds +inf: code 0 for it, >= 1 for every other value",
            "        c = select(max(c, vec4<u32>(1u)), vec4<u32>(0u), is_posinf4(v));", "    }",
            "    return c;", "}"]


def param_grad_loads(p, pad: str) -> tuple[list, str]:
    """An elementwise driver's loads of ``p0`` (the param, or its master copy) and ``g`` (scaled, padding lanes
    zero, negated for maximize), and the name of the grad argument."""
    L = [pad + "let p0 = load_p(i, r);"] if p.param else []
    if not p.grad:
        return L, "zero"
    return L + [pad + f"var g = select(ld_{p.grad}(i) * gm, zero, keep);", pad + "if (neg) { g = -g; }"], "g"


def q_elementwise(p, present, signs: dict, bits: int, ept: int) -> str:
    """The driver of one elementwise pass over a quantized bucket: QK engine blocks per workgroup; per block, every
    thread loads and updates its EPT vec4s and adds its new states' keys (and +inf flags) to the block absmax
    slots (workgroup atomics), one barrier, then codes and absmax words are stored. The slots of block kk are set kk % 3, the set of block
    kk + 1 is cleared during block kk: one barrier per block. No reducing passes: the optimizers with quantized
    states have none."""
    if p.reduce:
        raise ValueError(f"pass {p.entry}: reducing passes have no quantized driver")
    if bits == 4 and ept % 2:
        raise ValueError("4-bit states need an even EPT (a thread writes whole words of eight codes)")
    reads = [s for s in p.reads if s in present]
    writes = [s for s in p.writes if s in present]
    inf = any(not signs[s] for s in present if s in signs)
    clr = "atomicStore(&qamax[{o}j], 0u);" + (" atomicStore(&qinf[{o}j], 0u);" if inf else "")
    L = ["@compute @workgroup_size(WG)",
         f"fn {p.kernel}(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,",
         "        @builtin(local_invocation_index) lid: u32) {",
         "    for (var j = lid; j < 3u * QSET; j = j + WG) { " + clr.format(o="") + " }",
         "    q_load_maps(lid);  // (ends in a barrier)",
         "    let zero = vec4<f32>(0.0);",
         "    let w0 = (wid.x + wid.y * nwg.x) * QK;",
         "    for (var kk = 0u; kk < QK; kk++) {",
         "        let next = ((kk + 1u) % 3u) * QSET;",
         "        for (var j = lid; j < QSET; j = j + WG) { " + clr.format(o="next + ") + " }",
         "        let qset = (kk % 3u) * QSET;",
         "        let blk = q_block(w0 + kk);",
         "        let r = rec(select(0u, blk.x, blk.x != NONE));",
         "        let live = blk.x != NONE" + (f" && has(r, {p.only_if.upper()})" if p.only_if else "") + ";"]
    if p.grad:
        L += ["        let gm = grad_mul();", f"        let neg = {'has(r, MAXIMIZE)' if p.signed else 'false'};"]
    for v in range(ept):  # (loads of a vec4 after the stores of the one before: loading all first was slower)
        row = v if bits == 8 else 0
        idx = f"blk.y + {v}u * WG + lid" if bits == 8 else f"blk.y + {ept}u * lid + {v}u"
        L += [f"        let i{v} = {idx};",
              f"        let inb{v} = live && 4u * i{v} < blk.z;",
              f"        var o{v}: Out;",
              f"        if (inb{v}) {{",
              f"            let i = i{v};", f"            let keep = tail(i, blk.z);",
              "            let e = elem0(blk, r, i);"]
        lines, gv = param_grad_loads(p, "            ")
        L += lines
        L.append("            var s: State;")
        for s_ in reads:
            L.append(f"            if (has(r, HAS_{s_.upper()})) {{ s.{s_} = select(ldq_{s_}(i), zero, keep); }}")
        L.append(f"            o{v} = {p.fn}(r, e, {'select(p0, zero, keep)' if p.param else 'zero'}, {gv}, s);")
        if p.param == "rw":
            L.append(f"            store_p(i, select(o{v}.p, zero, keep), r, e);")
        for j, s_ in enumerate(writes):
            L.append(f"            o{v}.s.{s_} = select(o{v}.s.{s_}, zero, keep);")
            slot = f"qset + ({row}u * QW + {j}u) * (WG / QTPB) + lid / QTPB"
            tag = "s" if signs[s_] else "u"
            L.append(f"            atomicMax(&qamax[{slot}], q_key_{tag}(o{v}.s.{s_}));")
            if not signs[s_]:
                L.append(f"            if (any(is_posinf4(o{v}.s.{s_}))) {{ atomicOr(&qinf[{slot}], 1u); }}")
        L.append("        }")
    L.append("        workgroupBarrier();")
    for j, s_ in enumerate(writes):
        tag = "s" if signs[s_] else "u"
        ok = f"has(r, HAS_{s_.upper()})"
        rows = range(ept) if bits == 8 else (0,)
        for row in rows:  # the absmax words
            slot = f"qset + ({row}u * QW + {j}u) * (WG / QTPB) + lid / QTPB"
            L.append(f"        let a{row}_{s_} = " + (f"q_word_s(atomicLoad(&qamax[{slot}]));" if signs[s_] else
                     f"atomicLoad(&qamax[{slot}]) | select(0u, 0x80000000u, atomicLoad(&qinf[{slot}]) != 0u);"))
        for v in range(ept):
            a = f"a{v if bits == 8 else 0}_{s_}"
            L.append(f"        let c{v}_{s_} = q_codes_{tag}(o{v}.s.{s_}, {a});")
        if bits == 8:
            for v in range(ept):
                c = f"c{v}_{s_}"
                L += [f"        if (inb{v} && {ok}) {{",
                      f"            {s_}_q[q_word(i{v})] = {c}.x | ({c}.y << 8u) | ({c}.z << 16u) | ({c}.w << 24u);",
                      f"            if ((lid % QTPB) == 0u) {{ {s_}_q[q_base(i{v}) + QS - 1u] = a{v}_{s_}; }}",
                      "        }"]
        else:
            for v in range(0, ept, 2):
                c0, c1 = f"c{v}_{s_}", f"c{v + 1}_{s_}"
                L += [f"        if (inb{v} && {ok}) {{",
                      f"            {s_}_q[q_word(i{v})] = {c0}.x | ({c0}.y << 4u) | ({c0}.z << 8u) | ({c0}.w << 12u)"
                      f" | ({c1}.x << 16u) | ({c1}.y << 20u) | ({c1}.z << 24u) | ({c1}.w << 28u);",
                      "        }"]
            L.append(f"        if (inb0 && {ok} && (lid % QTPB) == 0u) {{ {s_}_q[q_base(i0) + QS - 1u] = a0_{s_}; }}")
    L += ["    }", "}"]
    return "\n".join(L)
