"""The generated drivers of a module's passes: the block loop, written once (:func:`unit` is the body every
elementwise driver shares: loads, the optimizer's update, stores).

An elementwise driver calls the optimizer's ``fn <name>(r: Rec, e: u32, p: vec4<f32>, g: vec4<f32>, s: State) ->
Out`` on each vec4 of every active tensor: it loads the param (its master copy where it has one), the grad (scaled,
negated for maximize) and the states the tensor has (an absent state buffer is a zero the compiler sees, with no
binding, load or store), zeroes the padding lanes past a tensor's end, and stores (rounding to 16 bits where a
buffer is 16-bit, stochastically where asked). Padding lanes are stored as zero (they are zero: arenas are
zero-filled and only tensor ranges are written), so no old value stays live in a register across the update: the
kernels are bound by memory, and registers are occupancy (PERF_NOTES 31). A reducing pass sums the per-lane terms
``Out.sum_a``/``sum_b`` per block into ``partials``; it ends in workgroup barriers, so everything before them stays
in uniform control flow (no early return or break on values read from read-write storage: Tint checks this, and
it is what WGSL requires); the others return early.

How a driver walks its vec4s is an :class:`Emit` choice (none changes a result bit but a reduction's sums):
*wide* units of two vec4s (eight elements, a 16-byte load of a 16-bit buffer), *full* blocks (wholly inside their
tensor) through a copy of the loop without tail masks, and *subgroup* sums at the end of a reduction. Wide units and
subgroups sum in another order; full blocks in the same order, yet on the H200 LAMB's float32 norms come out a last
bit apart from the plain driver's (the unmasked loop is compiled differently; putting the masks back into it does
not remove the difference, so the dropped select is not the cause: not diagnosed further). Every variant is
deterministic: fixed trees, a fixed order over the blocks' partials, no float atomics. The ``qat=`` export's
update driver walks runs of whole rows instead (:func:`rlx_gpu.engine.qat.driver_lines`); the quantized drivers are :mod:`rlx_gpu.engine.qcodegen`'s, on the same :func:`unit`.
"""
from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Emit", "PRECISIONS", "SWITCHES", "switch", "elementwise", "per_tensor", "unit", "signature", "param_helpers"]


@dataclass(frozen=True)
class Emit:
    """How the drivers of one module walk and reduce. ``wide``: each thread takes pairs of vec4s (the module's typed
    arrays get pair accessors; 16-bit ones are bound as ``array<vec4<u32>>``); ``full``: blocks wholly inside their
    tensor run the loop without tail masks; ``subgroups``: reductions (and the quantized drivers' block maxima) use
    subgroup operations; ``directive``: the module says ``enable subgroups;`` (Tint asks for it, naga refuses it);
    ``vpack``: bfloat16 stores round with ``pack4v_bf16`` (the same bits from vector operations); ``qdirect``
    (quantized buckets): maps, midpoints and guides read from the state buffers' headers, not first copied into
    workgroup memory behind a barrier (the same words); ``qclosed`` (quantized buckets): the code search in closed
    form (:mod:`rlx_gpu.engine.qsearch`: the same codes); ``qform``: which closed form the state width takes
    (``Optimizer.QFORM8`` / ``QFORM4``, one of :data:`rlx_gpu.engine.qsearch.FORMS`; "": the width's default);
    ``hround`` (float16 states): ``round_state`` (a pass's value as the next pass re-reads it: LAMB's norms) by
    the hardware's conversion (``pack2x16float``, overflow to inf guarded) instead of integer rounding (the same
    bits where the conversion rounds to nearest even, as Vulkan's and llvmpipe's do);
    ``ptloads``: a per-tensor pass's threads load 8 block partials before adding them (in the same order);
    ``qfull`` (quantized buckets, the subgroup driver): ``full`` for the quantized drivers, an engine block wholly
    inside its tensor run by a copy of the unit without tail masks (the same bits); ``qhoist`` (the same driver):
    the grads' multiplier and a tensor's record read once, not every round (the same words); ``qredux`` (the same
    driver): a subgroup's part of a block's maximum by one ``subgroupMax`` (its +inf flag by ``subgroupAny``)
    where the subgroup lies within one block, not log2(subgroup size) shuffles; ``qbtab`` (the same driver): the
    workgroup's QK block-table rows (and their tensors' ACTIVE flags) read once into workgroup memory before the
    maps' barrier, so a round's loads do not wait on two dependent loads of its block (the same words)."""
    wide: bool = False
    full: bool = False
    subgroups: bool = False
    directive: bool = False
    vpack: bool = False
    qdirect: bool = False
    qclosed: bool = False
    qform: str = ""
    hround: bool = False
    ptloads: bool = False
    qfull: bool = False
    qhoist: bool = False
    qredux: bool = False
    qbtab: bool = False


PLAIN = Emit()
PRECISIONS = ("float32", "bfloat16", "float16", "bfloat16+master", "float16+master")
SWITCHES = ("WIDE", "FULL", "SUBGROUPS", "VPACK", "QDIRECT", "QCLOSED", "F16ROUND",
            "PTLOADS", "QFULL", "QHOIST", "QREDUX", "QBTAB")  # the Optimizer class attributes that pick an Emit


def switch(value, precision: str, name: str = "switch", qbits: int = 0) -> bool:
    """One class switch (``Optimizer.WIDE`` ...) for a bucket of ``precision`` (``Signature.precision``): a bool,
    a dict from some of :data:`PRECISIONS` to bools (a ``+master`` one not named: as without; others: on), or
    (the quantized buckets' switches) a dict from state widths ``4``/``8`` to bools (a width not named: off)."""
    if not isinstance(value, dict):
        return bool(value)
    if value and all(isinstance(k, int) for k in value):
        if set(value) - {4, 8}:
            raise ValueError(f"{name}: unknown state widths {sorted(set(value) - {4, 8})}; expected 4 and/or 8")
        return bool(value.get(qbits, False))
    bad = sorted(set(value) - set(PRECISIONS), key=str)
    if bad:
        raise ValueError(f"{name}: unknown precision keys {bad}; expected some of {list(PRECISIONS)}")
    return bool(value.get(precision, value.get(precision.removesuffix("+master"), True)))
_SG = ("@builtin(subgroup_invocation_id) sgl: u32, @builtin(subgroup_size) sgs: u32, "
       "@builtin(subgroup_id) sgi: u32, @builtin(num_subgroups) nsg: u32")


def signature(name: str, subgroups: bool) -> list:
    """The first lines of an entry point over the engine's blocks (with the subgroup builtins where used)."""
    extra = f",\n        {_SG}" if subgroups else ""
    return ["@compute @workgroup_size(WG)",
            f"fn {name}(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,",
            f"        @builtin(local_invocation_index) lid: u32{extra}) {{"]


def param_helpers(master: bool, low: bool, wide: bool) -> str:
    """``load_p``: the value updates start from (the float32 master copy where the tensor has one); ``store_p``:
    the new value into the master copy and the parameter (rounded), or stochastically rounded; with ``wide`` also
    ``load_p2``/``store_p2`` over a pair of vec4s."""
    out = []
    for sfx, arg, vals, typ in (("", "i", "v", "vec4<f32>"), ("2", "j", "a, b", "array<vec4<f32>, 2>"))[:2 if wide else 1]:
        load = f"return ld{sfx}_param({arg});"
        if master:
            load = f"if (has(r, MASTER)) {{ return ld{sfx}_master({arg}); }} " + load
        params = ", ".join(f"{v}: vec4<f32>" for v in vals.split(", "))
        body = [f"fn load_p{sfx}({arg}: u32, r: Rec) -> {typ} {{ {load} }}",
                f"fn store_p{sfx}({arg}: u32, {params}, r: Rec, e0: u32) {{"]
        if master:
            body.append(f"    if (has(r, MASTER)) {{ st{sfx}_master({arg}, {vals}); }}")
        if low:
            bits = "elem_bits(r.rkey, e0)" + (", elem_bits(r.rkey, e0 + 4u)" if sfx else "")
            body.append(f"    if (has(r, SR)) {{ sts{sfx}_param({arg}, {vals}, {bits}); return; }}")
        out += body + [f"    st{sfx}_param({arg}, {vals});", "}"]
    return "\n".join(out)


def unit(p, reads, pad: str, *, H: int, elem: str, keep, sload, out, decl: str = "let ", zero: bool = False) -> list:
    """The lines of one unit: vec4 ``i`` (``H == 1``) or the pair of vec4s ``2j``, ``2j + 1`` (``H == 2``). Its
    tail masks (``keep(i)`` the expression for vec4 ``i``), element index (``elem``, of the unit's first vec4), the
    param and grad loads, the loads of the states ``reads`` (``sload(s)``: a vec4, or for a pair an array of two),
    and the update into ``out(h)`` (``decl`` "let " declares it; ``zero``: declare ``zero`` here). Names: ``keep``,
    ``e``, ``g``, ``s`` (H = 1), ``keep0``/``keep1``, ``e0``/``e1``, ... (H = 2). The caller stores the outputs
    (:func:`masked` gives them)."""
    hs = [""] if H == 1 else ["0", "1"]
    at = ["i"] if H == 1 else ["2u * j", "2u * j + 1u"]
    L = [f"let keep{h} = {keep(a)};" for h, a in zip(hs, at)] + (["let zero = vec4<f32>(0.0);"] if zero else [])
    L += [f"let e{hs[0]} = {elem};"] + (["let e1 = e0 + 4u;"] if H == 2 else [])
    pick = (lambda w, k: w) if H == 1 else (lambda w, k: f"{w}[{k}]")
    if p.param:
        L.append(f"let p0 = load_p{'' if H == 1 else '2'}({'i' if H == 1 else 'j'}, r);")
    if p.grad:
        ld = f"ld_{p.grad}(i)" if H == 1 else f"ld2_{p.grad}(j)"
        if H == 2:
            L.append(f"let gw = {ld};")
        for k, h in enumerate(hs):
            L += [f"var g{h} = select({pick('gw', k) if H == 2 else ld} * gm, zero, keep{h});",
                  f"if (neg) {{ g{h} = -g{h}; }}"]
    # the loads (zero where the tensor has no such state), then their padding lanes zeroed into s. (Every var is
    # given its zero value: naga and Tint declare a loop's `var x: T;` once, so it would keep the last iteration's
    # value, where WGSL says it starts at zero each time.)
    ld = ["s0"] if H == 1 else ["ls[0]", "ls[1]"]
    L += ["var s0 = State();" if H == 1 else "var ls = array<State, 2>();"]
    L += [f"if (has(r, HAS_{s.upper()})) {{ {_state_load(s, sload(s), ld)} }}" for s in reads]
    L += [f"var s{h} = {ld[k]};" for k, h in enumerate(hs)]
    L += [f"s{h}.{s} = select({ld[k]}.{s}, zero, keep{h});" for s in reads for k, h in enumerate(hs)]
    for k, h in enumerate(hs):
        pv = f"select({pick('p0', k)}, zero, keep{h})" if p.param else "zero"
        L.append(f"{decl}{out(k)} = {p.fn}(r, e{h}, {pv}, {'g' + h if p.grad else 'zero'}, s{h});")
    return [pad + ln for ln in L]


def _state_load(s: str, load: str, into: list) -> str:
    if len(into) == 1:
        return f"{into[0]}.{s} = {load};"
    return f"let w = {load}; {into[0]}.{s} = w[0]; {into[1]}.{s} = w[1];"


def masked(value: str, H: int, k: int) -> str:
    """An output of unit half ``k`` with its padding lanes zero."""
    return f"select({value}, zero, keep{'' if H == 1 else k})"


def _stores(p, writes, pad: str, H: int, out) -> list:
    """A plain unit's state and param stores."""
    ix = "i" if H == 1 else "j"
    sfx = "" if H == 1 else "2"
    L = []
    for s in writes:
        vals = ", ".join(masked(f"{out(k)}.s.{s}", H, k) for k in range(H))
        L.append(f"if (has(r, HAS_{s.upper()})) {{ st{sfx}_{s}({ix}, {vals}); }}")
    if p.param == "rw":
        vals = ", ".join(masked(f"{out(k)}.p", H, k) for k in range(H))
        L.append(f"store_p{sfx}({ix}, {vals}, r, e{'' if H == 1 else '0'});")
    return [pad + ln for ln in L]


def reduce_end(dest: str, cond: str, emit: Emit) -> list:
    """The end of a reducing entry point: the workgroup's ``acc`` (vec2) summed, then ``dest`` (a statement using
    ``total``) by thread 0 where ``cond``: a tree over workgroup memory, or subgroup sums and one barrier."""
    if not emit.subgroups:
        return ["    red2[lid] = acc;", "    reduce2(lid);", f"    if (lid == 0u && {cond}) {{ let total = red2[0]; {dest} }}"]
    return ["    let part = subgroupAdd(acc);", "    if (sgl == 0u) { red2[sgi] = part; }", "    workgroupBarrier();",
            f"    if (lid == 0u && {cond}) {{",
            "        var total = red2[0];", "        for (var q = 1u; q < nsg; q++) { total = total + red2[q]; }",
            f"        {dest}", "    }"]


def elementwise(p, present, emit: Emit = PLAIN, qat: dict | None = None) -> str:
    """The driver of one elementwise pass over the state buffers ``present`` in its bucket. ``qat``: the export's
    variant of the pass that writes the params (:func:`rlx_gpu.engine.qat.driver_lines`): it walks the chunk's
    ``qat_runs`` with a loop over the run, notes each stored weight in its channel's amax, and ends in the fused
    tensors' export (barriers, so uniform too; it does not reduce)."""
    reads = [s for s in p.reads if s in present]
    writes = [s for s in p.writes if s in present]
    red = bool(p.reduce)
    if red and qat:
        raise ValueError(f"pass {p.entry}: the qat= export's driver does not reduce")
    qd = qat or {}
    uniform = red or bool(qat)
    H = 2 if emit.wide and not qat else 1
    L = signature(p.kernel, emit.subgroups and red)
    L.append(f"    let blk = {qd.get('block', 'active_block(wid, nwg)')};")
    cond = "blk.tensor != NONE" + (f" && has(r, {p.only_if.upper()})" if p.only_if else "")
    if uniform:
        L += ["    let r = rec(select(0u, blk.tensor, blk.tensor != NONE));", f"    let live = {cond};",
              "    var acc = vec2<f32>(0.0);"] + qd.get("before", [])
    else:
        L += ["    if (blk.tensor == NONE) { return; }", "    let r = rec(blk.tensor);"]
        if p.only_if:
            L.append(f"    if (!has(r, {p.only_if.upper()})) {{ return; }}")
    if p.grad:
        L += ["    let gm = grad_mul();", f"    let neg = {'has(r, MAXIMIZE)' if p.signed else 'false'};"]
    loop = lambda full: _loop(p, reads, writes, H, uniform, full, qd)  # noqa: E731
    if emit.full and not qat:
        L += ["    if (4u * blk.first + WG * EPT * 4u <= blk.end) {  // a block wholly inside its tensor: no tail mask"]
        L += ["    " + ln for ln in loop(True)] + ["    } else {"] + ["    " + ln for ln in loop(False)] + ["    }"]
    else:
        L += loop(False)
    if "rest" in qd:  # (the export's loop over the rest of a long run)
        L += _loop(p, reads, writes, H, uniform, False, {**qd, **qd["rest"]})
    L += qd.get("after", [])
    if red:
        dest = {"x": "partials[blk.block].x = total.x;", "y": "partials[blk.block].y = total.y;",
                "xy": "partials[blk.block] = total;"}[p.reduce]
        L += reduce_end(dest, "live", emit)
    return "\n".join(L + ["}"])


def _loop(p, reads, writes, H: int, uniform: bool, full: bool, qd: dict) -> list:
    """The loop over a block's units (or, for the qat= export, over its run's vec4s)."""
    ix = "i" if H == 1 else "j"
    first = "blk.first" if H == 1 else "blk.first / 2u"
    span = "4u * i" if H == 1 else "8u * j"
    head = qd.get("loop")
    if head is None:
        head = [f"    for (var k = 0u; k < {'EPT' if H == 1 else 'EPT / 2u'}; k++) {{", f"        let {ix} = {first} + k * WG + lid;"]
        if uniform:
            head.append("        if (live) {" if full else f"        if (live && {span} < blk.end) {{")
        elif not full:
            head.append(f"        if ({span} >= blk.end) {{ break; }}")
    keep = (lambda a: "vec4<bool>(false)") if full else (lambda a: f"tail({a}, blk.end)")
    elem = qd.get("elem", f"elem0(blk, r, {'i' if H == 1 else '2u * j'})")
    out = (lambda k: "o") if H == 1 else (lambda k: f"o_{k}")
    L = head + unit(p, reads, "        ", H=H, elem=elem, keep=keep, zero=True,
                    sload=(lambda s: f"ld_{s}(i)") if H == 1 else (lambda s: f"ld2_{s}(j)"), out=out)
    L += _stores(p, writes, "        ", H, out) + qd.get("note", [])
    if p.reduce:
        terms = " + ".join(f"vec2<f32>(dot({masked(out(k) + '.sum_a', H, k)}, vec4<f32>(1.0)), "
                           f"dot({masked(out(k) + '.sum_b', H, k)}, vec4<f32>(1.0)))" for k in range(H))
        L.append(f"        acc = acc + {terms};")
    L += qd.get("close", ["        }"] if uniform else [])
    return L + ["    }"]


def per_tensor(p, emit: Emit = PLAIN) -> str:
    """The driver of one per-tensor pass: a workgroup per active tensor sums its blocks' ``partials`` and stores
    what the optimizer's function makes of them in the tensor's record (uniform control flow up to its barriers).
    With ``emit.ptloads`` a thread loads 8 of its partials before adding them, in the same order (the same bits),
    so that 8 loads are in flight at once, not a chain of num_blocks / WG dependent round trips (GPT-2's wte: 74)."""
    cond = "has(r, ACTIVE)" + (f" && has(r, {p.only_if.upper()})" if p.only_if else "")
    batch = [
        "        for (; j + 7u * WG < r.num_blocks; j = j + 8u * WG) {",
        "            let x = array<vec2<f32>, 8>(" + ", ".join(f"partials[r.first_block + j + {k}u * WG]"
                                                            for k in range(8)) + ");",
        "            for (var k = 0u; k < 8u; k++) { acc = acc + x[k]; }",
        "        }"] if emit.ptloads else []
    L = signature(p.kernel, emit.subgroups) + [
        "    let t = wid.x + wid.y * nwg.x;",
        "    if (t >= ntensors()) { return; }",
        "    let r = rec(t);",
        f"    let live = {cond};",
        "    var acc = vec2<f32>(0.0);",
        "    if (live) {",
        *(["        var j = lid;", *batch] if batch else []),
        f"        for ({'' if batch else 'var j = lid'}; j < r.num_blocks; j = j + WG) "
        "{ acc = acc + partials[r.first_block + j]; }",
        "    }"]
    return "\n".join(L + reduce_end(f"set_tensor_scalar(t, {p.fn}(r, total));", "live", emit) + ["}"])
