"""The elementwise drivers of a bucket with block-quantized states (:mod:`.qcodegen` has their helpers), on the
shared unit body (:func:`rlx_gpu.engine.drivers.unit`): QK engine blocks per workgroup, so the maps are copied into
workgroup memory once for them; per unit the states load as ``map[code] * absmax``, the update runs in float32 as
for any bucket, and each written state's new codes and absmax word are stored once its block's absmax is known.

Two ways to find a block's absmax:
  - *atomics* (every adapter): every thread updates its EPT vec4s of an engine block and adds its new states' keys
    (and +inf flags) to the block's absmax slots in workgroup memory; one barrier; then codes and words. The slots
    of block kk are set kk % 3, the set of block kk + 1 is cleared during block kk: one barrier per block.
  - *subgroups* (``Emit.subgroups``): a block of QB elements is QB/8 threads, one unit of two vec4s each, and its
    maximum is a few subgroup shuffles (:func:`rlx_gpu.engine.qcodegen._bmax`): no atomics, no barrier where
    subgroups are at least QB/8 wide.
Both give the same codes and words (a maximum is exact). Barriers and shuffles sit in uniform control flow (every
thread runs every iteration; loads and stores are guarded). No reducing passes: the optimizers with quantized
states have none.
"""
from __future__ import annotations

from .drivers import PLAIN, Emit, masked, signature, unit

__all__ = ["q_elementwise"]


def _grad(p, pad: str) -> list:
    return [pad + "let gm = grad_mul();", pad + f"let neg = {'has(r, MAXIMIZE)' if p.signed else 'false'};"] \
        if p.grad else []


def _live(p) -> str:
    return "blk.tensor != NONE" + (f" && has(r, {p.only_if.upper()})" if p.only_if else "")


def q_elementwise(p, present, signs: dict, bits: int, ept: int, emit: Emit = PLAIN) -> str:
    """The driver of one elementwise pass over a quantized bucket (the module docstring says how)."""
    if p.reduce:
        raise ValueError(f"pass {p.entry}: reducing passes have no quantized driver")
    if (bits == 4 or emit.subgroups) and ept % 2:
        raise ValueError("quantized drivers with 4-bit states or subgroups need an even EPT (pairs of vec4s)")
    reads = [s for s in p.reads if s in present]
    writes = [s for s in p.writes if s in present]
    if emit.subgroups:
        return _subgroup(p, reads, writes, signs, bits, emit.qfull, emit.qhoist, emit.qbtab)
    return _atomics(p, reads, writes, signs, bits, ept, any(not signs[s] for s in present if s in signs))


def _code_word(s: str, c: str, bits: int) -> str:
    """A vec4 of codes ``c`` as the bits of its code word (8-bit: the whole word; 4-bit: its half)."""
    w = 8 if bits == 8 else 4
    return " | ".join([f"{c}.x"] + [f"({c}.{x} << {k * w}u)" for k, x in enumerate("yzw", 1)])


def _atomics(p, reads, writes, signs, bits: int, ept: int, inf: bool) -> str:
    clr = "atomicStore(&qamax[{o}j], 0u);" + (" atomicStore(&qinf[{o}j], 0u);" if inf else "")
    L = signature(p.kernel, False) + [
        "    for (var j = lid; j < 3u * QSET; j = j + WG) { " + clr.format(o="") + " }",
        "    q_load_maps(lid);  // (ends in a barrier)",
        "    let zero = vec4<f32>(0.0);",
        "    let w0 = (wid.x + wid.y * nwg.x) * QK;",
        "    for (var kk = 0u; kk < QK; kk++) {",
        "        let next = ((kk + 1u) % 3u) * QSET;",
        "        for (var j = lid; j < QSET; j = j + WG) { " + clr.format(o="next + ") + " }",
        "        let qset = (kk % 3u) * QSET;",
        "        let blk = q_block(w0 + kk);",
        "        let r = rec(select(0u, blk.tensor, blk.tensor != NONE));",
        f"        let live = {_live(p)};"] + _grad(p, "        ")
    for v in range(ept):  # (loads of a vec4 after the stores of the one before: loading all first was slower)
        row = v if bits == 8 else 0
        idx = f"blk.first + {v}u * WG + lid" if bits == 8 else f"blk.first + {ept}u * lid + {v}u"
        L += [f"        let i{v} = {idx};", f"        let inb{v} = live && 4u * i{v} < blk.end;",
              f"        var o{v} = Out();", f"        if (inb{v}) {{", f"            let i = i{v};"]
        L += unit(p, reads, "            ", H=1, elem="elem0(blk, r, i)", keep=lambda a: f"tail({a}, blk.end)",
                  sload=lambda s: f"ldq_{s}(i)", out=lambda k, v=v: f"o{v}", decl="")
        if p.param == "rw":
            L.append(f"            store_p(i, {masked(f'o{v}.p', 1, 0)}, r, e);")
        for j, s_ in enumerate(writes):
            L.append(f"            o{v}.s.{s_} = {masked(f'o{v}.s.{s_}', 1, 0)};")
            slot = f"qset + ({row}u * QW + {j}u) * (WG / QTPB) + lid / QTPB"
            tag = "s" if signs[s_] else "u"
            L.append(f"            atomicMax(&qamax[{slot}], q_key_{tag}(o{v}.s.{s_}));")
            if not signs[s_]:
                L.append(f"            if (any(is_posinf4(o{v}.s.{s_}))) {{ atomicOr(&qinf[{slot}], 1u); }}")
        L.append("        }")
    L.append("        workgroupBarrier();")
    for j, s_ in enumerate(writes):
        L += _atomic_stores(s_, j, signs[s_], bits, ept)
    return "\n".join(L + ["    }", "}"])


def _atomic_stores(s_: str, j: int, signed: bool, bits: int, ept: int) -> list:
    """One written state's absmax words (from the slots), codes and stores, after the block's barrier."""
    tag, ok, L = "s" if signed else "u", f"has(r, HAS_{s_.upper()})", []
    for row in range(ept) if bits == 8 else (0,):
        slot = f"qset + ({row}u * QW + {j}u) * (WG / QTPB) + lid / QTPB"
        L.append(f"        let a{row}_{s_} = " + (f"q_word_s(atomicLoad(&qamax[{slot}]));" if signed else
                 f"atomicLoad(&qamax[{slot}]) | select(0u, 0x80000000u, atomicLoad(&qinf[{slot}]) != 0u);"))
    for v in range(ept):
        L.append(f"        let c{v}_{s_} = q_codes_{tag}(o{v}.s.{s_}, a{v if bits == 8 else 0}_{s_});")
    if bits == 8:
        for v in range(ept):
            L += [f"        if (inb{v} && {ok}) {{",
                  f"            {s_}_q[q_word(i{v})] = {_code_word(s_, f'c{v}_{s_}', 8)};",
                  f"            if ((lid % QTPB) == 0u) {{ {s_}_q[q_base(i{v}) + QS - 1u] = a{v}_{s_}; }}",
                  "        }"]
        return L
    for v in range(0, ept, 2):
        L += [f"        if (inb{v} && {ok}) {{",
              f"            {s_}_q[q_word(i{v})] = {_code_word(s_, f'c{v}_{s_}', 4)}"
              f" | (({_code_word(s_, f'c{v + 1}_{s_}', 4)}) << 16u);",
              "        }"]
    return L + [f"        if (inb0 && {ok} && (lid % QTPB) == 0u) {{ {s_}_q[q_base(i0) + QS - 1u] = a0_{s_}; }}"]


def _subgroup(p, reads, writes, signs, bits: int, full: bool = False, hoist: bool = False, btab: bool = False) -> str:
    """Rounds of one unit per thread: QTPB = QB/8 consecutive places (``v``, subgroup-ordered) per block, EPT/2
    rounds per engine block. ``full`` (``Emit.qfull``): an engine block wholly inside its tensor takes a copy of the
    unit without tail masks (the same operations on every element it keeps, so the same bits). ``hoist``
    (``Emit.qhoist``): the grads' multiplier read once before the rounds, a tensor's record once per run of its
    blocks (the same words: nothing in a quantized pass writes the hyper buffer) where each round read both.
    ``btab`` (``Emit.qbtab``): the workgroup's QK rows of :func:`q_block` read by its first QK threads into
    workgroup memory before the maps' barrier, each round's from there (the same words, read-only in the pass);
    with ``hoist`` the first block's record and the multiplier are read before that barrier too."""
    first = ["    let gm = grad_mul();"] if hoist and p.grad else []
    rec = ["        let t = select(0u, blk.tensor, blk.tensor != NONE);",
           "        if (t != rt) { r = rec(t); rt = t; }  // (no barrier or shuffle under it)"] \
        if hoist else ["        let r = rec(select(0u, blk.tensor, blk.tensor != NONE));"]
    grad = [x for x in _grad(p, "        ") if not (hoist and "grad_mul()" in x)]
    tab = f"qbt_{p.kernel}"
    state = ["    var rt = NONE;", "    var r = Rec();"] if hoist else []
    if btab and hoist:  # (the first block's record read before the barrier too: r as the first round leaves it)
        state = ["    let b0 = q_block(w0);", "    var rt = select(0u, b0.tensor, b0.tensor != NONE);",
                 "    var r = rec(rt);"]
    pre = first + state  # (with btab before the maps' barrier, after the table's reads; else after it)
    L = ([f"var<workgroup> {tab}: array<Block, QK>;"] if btab else []) + signature(p.kernel, True) + [
        "    let w0 = (wid.x + wid.y * nwg.x) * QK;"] + (
        [f"    if (lid < QK) {{ {tab}[lid] = q_block(w0 + lid); }}"] + pre if btab else []) + [
        "    q_load_maps(lid);  // (ends in a barrier)",
        "    let zero = vec4<f32>(0.0);",
        "    let v = sgi * sgs + sgl;  // this thread's place: QTPB consecutive places are one block's"] + (
        [] if btab else pre) + [
        "    for (var it = 0u; it < QK * (EPT / 2u); it++) {",
        f"        let blk = {tab + '[it / (EPT / 2u)]' if btab else 'q_block(w0 + it / (EPT / 2u))'};"] + rec + [
        f"        let live = {_live(p)};"] + grad + [
        "        let j = blk.first / 2u + (it % (EPT / 2u)) * WG + v;",
        "        let inb = live && 8u * j < blk.end;",
        "        var o_0 = Out();", "        var o_1 = Out();"]
    for whole in (True, False) if full else (False,):
        if whole:
            L.append("        if (live && 4u * blk.first + WG * EPT * 4u <= blk.end) {  // no tail mask")
        else:
            L.append("        } else if (inb) {" if full else "        if (inb) {")
        keep = (lambda a: "vec4<bool>(false)") if whole else (lambda a: f"tail({a}, blk.end)")
        L += unit(p, reads, "            ", H=2, elem="elem0(blk, r, 2u * j)", keep=keep,
                  sload=lambda s: f"ldq2_{s}(j)", out=lambda k: f"o_{k}", decl="")
        if p.param == "rw":
            L.append(f"            store_p2(j, {masked('o_0.p', 2, 0)}, {masked('o_1.p', 2, 1)}, r, e0);")
        for s_ in writes:
            L += [f"            o_{k}.s.{s_} = {masked(f'o_{k}.s.{s_}', 2, k)};" for k in (0, 1)]
    L.append("        }")
    for j, s_ in enumerate(writes):
        L += _subgroup_stores(s_, j, signs[s_], bits)
    return "\n".join(L + ["    }", "}"])


def _subgroup_stores(s_: str, j: int, signed: bool, bits: int) -> list:
    tag, a, c0, c1 = "s" if signed else "u", f"a_{s_}", f"c0_{s_}", f"c1_{s_}"
    key = f"max(q_key_{tag}(o_0.s.{s_}), q_key_{tag}(o_1.s.{s_}))"
    flag = "0u" if signed else f"select(0u, 1u, any(is_posinf4(o_0.s.{s_})) || any(is_posinf4(o_1.s.{s_})))"
    word = f"q_word_s(k_{s_}.x)" if signed else f"k_{s_}.x | select(0u, 0x80000000u, k_{s_}.y != 0u)"
    L = [f"        let k_{s_} = q_bmax(vec2<u32>({key}, {flag}), it * QW + {j}u, v, sgl, sgs, sgi);",
         f"        let {a} = {word};",
         f"        let {c0} = q_codes_{tag}(o_0.s.{s_}, {a});", f"        let {c1} = q_codes_{tag}(o_1.s.{s_}, {a});",
         f"        if (inb && has(r, HAS_{s_.upper()})) {{"]
    if bits == 8:
        L += [f"            {s_}_q[q_word(2u * j)] = {_code_word(s_, c0, 8)};",
              f"            {s_}_q[q_word(2u * j) + 1u] = {_code_word(s_, c1, 8)};"]
    else:
        L.append(f"            {s_}_q[q_word(2u * j)] = {_code_word(s_, c0, 4)} | (({_code_word(s_, c1, 4)}) << 16u);")
    return L + [f"            if ((v % QTPB) == 0u) {{ {s_}_q[q_base(2u * j) + QS - 1u] = {a}; }}", "        }"]
