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
from .qsearch import FOUR, closed_code_fn

__all__ = ["QK", "q_bindings", "q_helpers"]


def q_bindings(states, present, idx, bits: int) -> str:
    return "\n".join(f"@group(0) @binding({next(idx)}) var<storage, read_write> {s}_q: array<u32>;"
                     for s in states if s in present)


QK = 8  # engine blocks per workgroup in a quantized pass (the maps are copied into workgroup memory once for them)


def q_helpers(states, present, signs: dict, bits: int, nwrites: int, ept: int, subgroups: bool = False,
              direct: bool = False, closed: bool = False, form: str = "", redux: bool = False) -> str:
    """Workgroup copies of the maps (``direct``: none, the maps read from the state buffer's header where used),
    per-state loads, the code search (``closed``: in closed form, :mod:`.qsearch`: no guide, and for 4-bit no
    midpoints read; ``form``: :data:`.qsearch.FORMS`), and the block maxima: workgroup atomics on absmax slots, or
    (``subgroups``) :func:`_bmax` (``redux``: by subgroupMax/subgroupAny)."""
    QN, QB = 2 ** bits, BLOCK[bits]
    G = QB // 4
    mine = [s for s in states if s in present and s in signs]
    L = [f"const QN: u32 = {QN}u;", f"const QB: u32 = {QB}u;", f"const QG: u32 = {G}u;  // vec4s per block",
         f"const QH: u32 = {header_words(bits)}u;  // words of map, midpoints and guide",
         f"const QS: u32 = {block_words(bits)}u;  // words per block: codes, then absmax",
         f"const QT: u32 = {GUESS_KEYS}u;  // guide entries per sign", f"const QK: u32 = {QK}u;",
         f"const QW: u32 = {max(1, nwrites)}u;  // quantized states a pass writes"]
    L += _bmax(mine, signs, redux) if subgroups else _slots(mine, signs, bits, ept)
    load = []
    for tag, want in (("s", True), ("u", False)):
        src = next((s for s in mine if signs[s] == want), None)
        if src is not None:
            want = ("m",) if closed and bits == 4 else ("m", "t") if closed else ("m", "t", "g")
            L += _maps(tag, src, direct, want) + _search_fns(tag, bits, closed, form)
            load += [] if direct else _copies(tag, src, want)
            load += [f"    q_load_y_{tag}(lid);"] if closed and bits == 8 and form == "binade" else []
    L += ["fn q_load_maps(lid: u32) {"] + load + ["    workgroupBarrier();", "}",
          "fn q_base(i: u32) -> u32 { return QH + (i / QG) * QS; }  // the first word of vec4 i's block",
          "fn q_word(i: u32) -> u32 { return q_base(i) + " + ("i % QG; }" if bits == 8 else "(i % QG) / 2u; }"),
          "// Block b of the chunk's table, every word NONE past the end or when its tensor has no grad this step.",
          "fn q_block(b: u32) -> Block {",
          "    if (b >= arrayLength(&blocks)) { return Block(NONE, NONE, NONE, NONE); }",
          "    let blk = blocks[b];",
          "    if ((hyper[blk.tensor * REC + REC_FLAGS] & ACTIVE) == 0u) { return Block(NONE, NONE, NONE, NONE); }",
          "    return blk;", "}"]
    L += [f"fn ldq2_{s}(j: u32) -> array<vec4<f32>, 2> {{ return array<vec4<f32>, 2>(ldq_{s}(2u * j), "
          f"ldq_{s}(2u * j + 1u)); }}" for s in mine] if subgroups else []
    for s in mine:
        L += _ldq_fn(s, signs[s], bits)
    return "\n".join(L)


# one sign's map (m), midpoints (t) and guide words (g): (WGSL type, workgroup array length, header offset)
_TABLES = {"m": ("f32", "QN", ""), "t": ("f32", "QN", "QN + "), "g": ("u32", f"{2 * GUESS_KEYS // 4}", "2u * QN + ")}


def _maps(tag: str, src: str, direct: bool, want=("m", "t", "g")) -> list:
    """One sign's tables ``want`` of map, midpoints and guide words as ``q_m_<tag>(k)``, ``q_t_<tag>(k)``,
    ``q_g_<tag>(k)``: from their workgroup copies, or (``direct``) from the header of state ``src``'s buffer (the
    same words: the same bits)."""
    decl, fns = [], []
    for w in want:
        ty, n, off = _TABLES[w]
        word = f"q{w}_{tag}[k]" if not direct else f"{src}_q[{off}k]" if ty == "u32" else f"bitcast<f32>({src}_q[{off}k])"
        decl += [] if direct else [f"var<workgroup> q{w}_{tag}: array<{ty}, {n}>;"]
        fns.append(f"fn q_{w}_{tag}(k: u32) -> {ty} {{ return {word}; }}")
    return decl + fns


def _copies(tag: str, src: str, want) -> list:
    """The workgroup copies of one sign's tables ``want`` (:func:`_maps`), in ``q_load_maps``."""
    f32 = [f"q{w}_{tag}[j] = bitcast<f32>({src}_q[{_TABLES[w][2]}j]);" for w in want if w != "g"]
    L = [f"    for (var j = lid; j < QN; j = j + WG) {{ {' '.join(f32)} }}"]
    if "g" in want:
        L.append(f"    for (var j = lid; j < {_TABLES['g'][1]}u; j = j + WG) {{ qg_{tag}[j] = {src}_q[2u * QN + j]; }}")
    return L


def _search_fns(tag: str, bits: int, closed: bool = False, form: str = "") -> list:
    """One sign's code search (``q_code_<tag>``) over its midpoints (``closed``: :mod:`.qsearch`'s ``form``), and its codes
    (:func:`_codes_fns`)."""
    bisect = [f"fn q_search_{tag}(v: f32, sc: f32) -> u32 {{  // the count of sc * midpoint < v by bisection",
              "    var c = 0u;",
              "    for (var st = QN / 2u; st > 0u; st = st / 2u) {",
              f"        if (sc * q_t_{tag}(c + st - 1u) < v) {{ c = c + st; }}", "    }", "    return c;", "}"]
    if closed:
        return (bisect if bits == 8 else []) + closed_code_fn(tag, bits, form) + _codes_fns(tag, bits,
                                                                                          form in FOUR)
    return bisect + [
            f"fn q_code_{tag}(v: f32, a: f32, inv: f32) -> u32 {{",
            "    // the guide's guess from the float bits of v / a is within one code of the count of",
            "    // a * midpoint < v (core/quant.py checks it for every key): one step up or down, both loads at once",
            "    let x = bitcast<u32>(v * inv);",
            "    let m = x & 0x7fffffffu;",
            "    var key = 0u;",
            f"    if (m >= 0x33800000u) {{ key = min((m >> {23 - GUESS_BITS}u) - (103u << {GUESS_BITS}u) + 1u, QT - 1u); }}",
            "    let idx = select(0u, QT, (x >> 31u) == 1u) + key;",
            f"    let c = (q_g_{tag}(idx >> 2u) >> (8u * (idx & 3u))) & 255u;",
            "    let sc = select(a, 1.0, a == 0.0);",
            f"    let up = c < QN - 1u && sc * q_t_{tag}(min(c, QN - 2u)) < v;",
            f"    let down = c > 0u && !(sc * q_t_{tag}(max(c, 1u) - 1u) < v);",
            "    let near = select(select(c, c - 1u, down), c + 1u, up);",
            "    if (m >= 0x7f800000u) {  // x inf or NaN: v inf or NaN (code 0), or 1/a overflowed: bisect",
            f"        return select(q_search_{tag}(v, sc), 0u, is_nan(v));",
            "    }",
            "    return near;", "}",
            ] + _codes_fns(tag, bits)


def _ldq_fn(s: str, signed: bool, bits: int) -> list:
    """``ldq_<s>(i)``: vec4 ``i`` of quantized state ``s`` (map[code] * absmax; unsigned: +inf where flagged)."""
    tag = "s" if signed else "u"
    shifts = (0, 8, 16, 24) if bits == 8 else (0, 4, 8, 12)
    word = f"{s}_q[q_word(i)]" if bits == 8 else f"({s}_q[q_word(i)] >> (16u * (i & 1u)))"
    codes = ", ".join(f"(w >> {k}u) & {2 ** bits - 1}u" for k in shifts)
    L = [f"fn ldq_{s}(i: u32) -> vec4<f32> {{", f"    let w = {word};", f"    let c = vec4<u32>({codes});",
         f"    let aw = {s}_q[q_base(i) + QS - 1u];",
         f"    let v = vec4<f32>(q_m_{tag}(c.x), q_m_{tag}(c.y), q_m_{tag}(c.z), q_m_{tag}(c.w)) * "
         + ("bitcast<f32>(aw);  // (a negated block: the word's sign)" if signed else "bitcast<f32>(aw & ABS_BITS);")]
    if not signed:
        L += ["    if (aw > ABS_BITS) {  // the block holds +inf: code 0 reads +inf",
              "        let inf = bitcast<f32>((aw >> 31u) * EXP_BITS);  // (+inf, not a constant expression)",
              "        return select(v, vec4<f32>(inf), c == vec4<u32>(0u));", "    }"]
    return L + ["    return v;", "}"]


def _slots(mine, signs: dict, bits: int, ept: int) -> list:
    """The workgroup atomics' absmax slots (the driver without subgroups: :mod:`.qdrivers`)."""
    # 8-bit: a thread's EPT vec4s are rows k*WG + lid (QG threads per block per row); 4-bit: EPT consecutive vec4s
    # (so one thread writes whole words; QG/EPT threads per block, one row)
    L = [f"const QROWS: u32 = {ept if bits == 8 else 1}u;",
         f"const QTPB: u32 = {BLOCK[bits] // 4 if bits == 8 else BLOCK[bits] // 4 // ept}u;  // threads per block in a row",
         "override QSET: u32 = QROWS * QW * (WG / QTPB);  // absmax slots of one block set",
         "// three sets of slots (block kk uses set kk % 3), per row, written state and block: the key of the",
         "// largest finite |v| (its bits: u32 order is float order for non-negative floats; signed states: shifted",
         "// up one, the low bit set when that value is positive); unsigned states: in qinf, whether it holds +inf",
         "var<workgroup> qamax: array<atomic<u32>, 3u * QSET>;"]
    if any(not signs[s] for s in mine):
        L.append("var<workgroup> qinf: array<atomic<u32>, 3u * QSET>;")
    return L


def _bmax(mine, signs: dict, redux: bool = False) -> list:
    """``q_bmax``: a block's largest (key, +inf flag) over its QTPB threads (one unit of eight elements each),
    found with subgroup shuffles (a block's threads are consecutive places of one subgroup where subgroups are that
    large), and where subgroups are smaller, their results combined through workgroup memory (two slot sets used in
    turn: one barrier a call; WebGPU's subgroups have at least 4 invocations). ``redux`` (``Emit.qredux``): where
    a subgroup lies within one block (at most QTPB wide), its part by one ``subgroupMax`` of the key and one
    ``subgroupAny`` of the flag instead of the shuffles (the same maximum). Where a subgroup holds several blocks
    (4-bit's 16-thread blocks on NVIDIA's 32 lanes) the shuffles stay: one masked reduction a block in turn was 9%
    slower on an H100 and gave other params in one driver variant there (PERF_NOTES 83)."""
    shuffles = "for (var o = 1u; o < min(sgs, QTPB); o = o * 2u) { k = max(k, subgroupShuffleXor(k, o)); }"
    own = ["    if (sgs <= QTPB) {  // (a subgroup within one block: sgs is uniform)",
           "        k = vec2<u32>(subgroupMax(k0.x), select(0u, 1u, subgroupAny(k0.y != 0u)));",
           f"    }} else {{ {shuffles} }}"] if redux else [f"    {shuffles}"]
    return ["const QTPB: u32 = QB / 8u;  // threads per block",
            "var<workgroup> qpart: array<vec2<u32>, 2u * (WG / 4u)>;",
            "fn q_bmax(k0: vec2<u32>, turn: u32, v: u32, sgl: u32, sgs: u32, sgi: u32) -> vec2<u32> {",
            "    var k = k0;", *own,
            "    if (sgs >= QTPB) { return k; }",
            "    let base = (turn % 2u) * (WG / 4u);",
            "    if (sgl == 0u) { qpart[base + sgi] = k; }",
            "    workgroupBarrier();",
            "    let per = QTPB / sgs;  // subgroups per block",
            "    for (var q = 0u; q < per; q++) { k = max(k, qpart[base + (v / QTPB) * per + q]); }",
            "    return k;", "}"]


def _codes_fns(tag: str, bits: int, four: bool = False) -> list:
    """The block key, absmax word and codes of a signed (``s``) or unsigned (``u``) state (core/quant.py's rule;
    ``four``: by ``q_code4_<tag>``, four values a call)."""
    codes = f"q_code4_{tag}(x, a, inv)" if four else ", ".join(f"q_code_{tag}(x.{c}, a, inv)" for c in "xyzw")
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
                f"    return {codes};" if four else f"    return vec4<u32>({codes});", "}"]
    zero = ["    c = select(c, max(c, vec4<u32>(1u)), v > vec4<f32>(0.0));  // a positive value never reads back as 0"]
    return ["fn q_key_u(v: vec4<f32>) -> u32 {  // the largest finite |v|",
            "    let m = bitcast<vec4<u32>>(v) & vec4<u32>(ABS_BITS);",
            "    let k = select(m, vec4<u32>(0u), m >= vec4<u32>(EXP_BITS));",
            "    return max(max(k.x, k.y), max(k.z, k.w));", "}",
            *head, "    let x = v;", f"    var c = {codes};" if four else f"    var c = vec4<u32>({codes});",
            *(zero if bits == 8 else []),
            "    if (aw > ABS_BITS) {  // the block holds +inf: code 0 for it, >= 1 for every other value",
            "        c = select(max(c, vec4<u32>(1u)), vec4<u32>(0u), is_posinf4(v));", "    }",
            "    return c;", "}"]


