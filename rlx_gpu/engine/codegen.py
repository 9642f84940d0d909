"""The WGSL module of an optimizer for one bucket of tensors: its generated prelude, its own shader file, and one
generated driver per elementwise pass (the block loop lives here, once).

A module holds, in order: the ``hyper`` and ``blocks`` bindings; the record prelude (``struct Rec``, ``rec(t)``,
flags, offsets: :mod:`rlx_gpu.engine.records`); ``ieee.wgsl``, ``lowp.wgsl``, ``engine.wgsl``; the bucket's typed
arenas (``param``, ``grad``, ``master`` where there are float32 master weights, one per state buffer) with their
``ld_``/``st_`` accessors in float32; ``struct State`` (one vec4 per state), ``struct Out`` and the parameter
helpers; the optimizer's file (whose own bindings are written ``@group(0) @binding(N)``: the generator numbers
them after the others); then the elementwise entry points. An elementwise
pass calls the optimizer's function ``fn <name>(r: Rec, e: u32, p: vec4<f32>, g: vec4<f32>, s: State) -> Out`` on
each vec4 of every active tensor: loads (states only where the tensor has them), zeroes the padding lanes, stores
(rounding to 16 bits where a buffer is 16-bit, stochastically where asked), and for a reducing pass sums the
per-lane terms ``Out.sum_a``/``sum_b`` per block into ``partials``. A per-tensor pass's driver sums a tensor's
``partials`` and stores what the optimizer's function makes of them in the tensor's record (:class:`Pass`).
"""
from __future__ import annotations

import itertools
import re
from dataclasses import dataclass

from ..core.lowp import F32
from ..runtime.source import resolve, shader_dir, typed_array
from .qat import driver_lines, qat_load
from .qcodegen import param_grad_loads, q_bindings, q_elementwise, q_helpers

__all__ = ["Pass", "Signature", "Text", "optimizer_module", "engine_module", "optimizer_text", "engine_text"]


@dataclass(frozen=True)
class Pass:
    """One pass of a step.

    ``kind="elementwise"``: a generated driver calls the shader's ``fn <fn>(r: Rec, e: u32, p: vec4<f32>,
    g: vec4<f32>, s: State) -> Out`` on every vec4 of every active tensor (``e``: the element index in the tensor of
    lane 0). ``reads``/``writes`` name state buffers; ``param`` is "rw", "r" or "" (not loaded); ``grad`` the
    arena the grads come from ("grad", or e.g. Sophia-H's "estimate"; "" none), negated for maximize when
    ``signed``; ``reduce`` "x", "y" or "xy" sums the per-lane terms ``Out.sum_a`` (into ``partials[block].x``) and
    ``Out.sum_b`` (``.y``) per block; ``only_if`` a flag a tensor must have (others are skipped).

    ``kind="per_tensor"``: one workgroup per active tensor sums its blocks' ``partials`` and stores
    ``fn <fn>(r: Rec, sums: vec2<f32>) -> f32`` as the tensor's ``tensor_scalar`` (a record word the later passes
    read: a trust ratio, a norm).

    ``kind="custom"``: the shader's own entry point ``entry``, dispatched over every chunk of every bucket with
    the optimizer's ``_custom_groups`` workgroups."""
    entry: str
    kind: str = "elementwise"
    fn: str = ""
    reads: tuple = ()
    writes: tuple = ()
    param: str = "rw"
    grad: str = "grad"
    signed: bool = True
    reduce: str = ""
    only_if: str = ""

    @property
    def kernel(self) -> str:
        """The entry point of the pass in the module (the generated drivers' are ``pass_<entry>``)."""
        return self.entry if self.kind == "custom" else f"pass_{self.entry}"


@dataclass(frozen=True)
class Signature:
    """What a bucket's arenas hold: the dtypes of params, grads and states, and whether there are master copies."""
    param: object
    grad: object
    state: object
    master: bool
    native_f16: bool
    qbits: int = 0  # block-quantized states (8 or 4 bits per code; 0: none)
    qat: bool = False  # tensors with a quantized copy written in the step (engine/qat.py)

    @property
    def f16(self) -> bool:
        return self.native_f16 and "float16" in (self.param.name, self.grad.name, self.state.name)


class Text:
    """A generated module: its lines, and for each the (file, line) it came from ("<generated>" for the
    generator's own), so that a compiler's message points into the shipped file (``rlx-gpu check-shaders``)."""

    def __init__(self):
        self.lines, self.origin = [], []

    def gen(self, text: str) -> None:
        for ln in text.splitlines():
            self.lines.append(ln)
            self.origin.append(("<generated>", len(self.lines)))

    def file(self, name: str, idx=None) -> None:
        """A shipped file, includes resolved; its ``@binding(N)`` declarations numbered from ``idx``."""
        code, orig = resolve(shader_dir() / name, (shader_dir(),))
        if idx is not None:
            code = _numbered(code, idx)
        self.gen(f"// ---- begin {name} ----")
        self.lines += code.splitlines()
        self.origin += orig
        self.gen(f"// ---- end {name} ----")

    def text(self) -> str:
        return "\n".join(self.lines) + "\n"


def _head(record, sig) -> tuple[Text, itertools.count]:
    idx = itertools.count()
    t = Text()
    if sig is not None and sig.f16:
        t.gen("enable f16;")
    t.gen(f"@group(0) @binding({next(idx)}) var<storage, read_write> hyper: array<u32>;\n"
          f"@group(0) @binding({next(idx)}) var<storage, read> blocks: array<vec4<u32>>;")
    t.gen(record.wgsl())
    for f in ("ieee.wgsl", "lowp.wgsl", "engine.wgsl"):
        t.file(f)
    return t, idx


def _elementwise(p: Pass, present, qat: bool = False) -> str:
    """The generated driver of one elementwise pass over the state buffers ``present`` in its bucket (an absent
    one is a zero the compiler can see, with no binding, load or store). Padding lanes past a tensor's end are
    stored as zero (they are zero: arenas are zero-filled and only tensor ranges are written), so no old value
    stays live in a register across the update: the kernels are bound by memory, and registers are occupancy
    (PERF_NOTES 31). A reducing pass ends in workgroup barriers, so everything before them stays in uniform
    control flow (no early return or break on values read from read-write storage: Tint checks this, and it is
    what WGSL requires); the others return early. ``qat``: the export's variant of the pass that writes the
    params (engine/qat.py): it walks the chunk's ``qat_runs`` (whole rows of the fused tensors, the engine's
    blocks of the others) with a loop over the run, notes each stored weight in its channel's amax, and ends in
    the fused tensors' export (barriers, so uniform too; it does not reduce)."""
    reads = [s for s in p.reads if s in present]
    writes = [s for s in p.writes if s in present]
    red = bool(p.reduce)
    if red and qat:
        raise ValueError(f"pass {p.entry}: the qat= export's driver does not reduce")
    uniform = red or qat
    qd = driver_lines() if qat else {}
    L = ["@compute @workgroup_size(WG)",
         f"fn {p.kernel}(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,",
         "        @builtin(local_invocation_index) lid: u32) {",
         f"    let blk = {qd.get('block', 'active_block(wid, nwg)')};"]
    cond = "blk.x != NONE"
    if uniform:
        L += ["    let r = rec(select(0u, blk.x, blk.x != NONE));"]
        if p.only_if:
            cond += f" && has(r, {p.only_if.upper()})"
        L += [f"    let live = {cond};", "    var acc = vec2<f32>(0.0);"] + qd.get("before", [])
    else:
        L += ["    if (blk.x == NONE) { return; }", "    let r = rec(blk.x);"]
        if p.only_if:
            L.append(f"    if (!has(r, {p.only_if.upper()})) {{ return; }}")
    if p.grad:
        L += ["    let gm = grad_mul();", f"    let neg = {'has(r, MAXIMIZE)' if p.signed else 'false'};"]
    L += qd.get("loop", ["    for (var k = 0u; k < EPT; k++) {",
                         "        let i = blk.y + k * WG + lid;",
                         "        if (live && 4u * i < blk.z) {" if uniform else "        if (4u * i >= blk.z) { break; }"])
    L += ["        let keep = tail(i, blk.z);",
          "        let zero = vec4<f32>(0.0);",
          f"        let e = {qd.get('elem', 'elem0(blk, r, i)')};"]
    lines, gv = param_grad_loads(p, "        ")
    L += lines
    L.append("        var s0: State;")
    for s in reads:
        L.append(f"        if (has(r, HAS_{s.upper()})) {{ s0.{s} = ld_{s}(i); }}")
    L.append("        var s = s0;")
    for s in reads:
        L.append(f"        s.{s} = select(s0.{s}, zero, keep);")
    L.append(f"        let o = {p.fn}(r, e, {'select(p0, zero, keep)' if p.param else 'zero'}, {gv}, s);")
    for s in writes:
        L.append(f"        if (has(r, HAS_{s.upper()})) {{ st_{s}(i, select(o.s.{s}, zero, keep)); }}")
    if p.param == "rw":
        L.append("        store_p(i, select(o.p, zero, keep), r, e);")
    L += qd.get("note", [])
    if red:
        L += ["        acc = acc + vec2<f32>(dot(select(o.sum_a, zero, keep), vec4<f32>(1.0)), "
              "dot(select(o.sum_b, zero, keep), vec4<f32>(1.0)));"]
    if uniform and not qat:
        L.append("        }")
    L.append("    }")
    L += qd.get("after", [])
    if red:
        dest = {"x": "partials[blk.w].x = red2[0].x;", "y": "partials[blk.w].y = red2[0].y;",
                "xy": "partials[blk.w] = red2[0];"}[p.reduce]
        L += ["    red2[lid] = acc;", "    reduce2(lid);", f"    if (lid == 0u && live) {{ {dest} }}"]
    L.append("}")
    return "\n".join(L)


def _per_tensor(p: Pass) -> str:
    """The generated driver of one per-tensor pass (uniform control flow up to its barriers, as above)."""
    cond = "has(r, ACTIVE)" + (f" && has(r, {p.only_if.upper()})" if p.only_if else "")
    L = ["@compute @workgroup_size(WG)",
         f"fn {p.kernel}(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,",
         "        @builtin(local_invocation_index) lid: u32) {",
         "    let t = wid.x + wid.y * nwg.x;",
         "    if (t >= ntensors()) { return; }",
         "    let r = rec(t);",
         f"    let live = {cond};",
         "    var acc = vec2<f32>(0.0);",
         "    if (live) {",
         "        for (var j = lid; j < r.num_blocks; j = j + WG) { acc = acc + partials[r.first_block + j]; }",
         "    }",
         "    red2[lid] = acc;", "    reduce2(lid);",
         f"    if (lid == 0u && live) {{ set_tensor_scalar(t, {p.fn}(r, red2[0])); }}", "}"]
    return "\n".join(L)


def _param_helpers(master: bool, low: bool) -> str:
    """``load_p``: the value updates start from (the float32 master copy where the tensor has one); ``store_p``:
    the new value into the master copy and the parameter (rounded), or stochastically rounded."""
    load = "return ld_param(i);" if not master else "if (has(r, MASTER)) { return ld_master(i); } return ld_param(i);"
    body = ["fn store_p(i: u32, v: vec4<f32>, r: Rec, e0: u32) {"]
    if master:
        body.append("    if (has(r, MASTER)) { st_master(i, v); }")
    if low:
        body.append("    if (has(r, SR)) { sts_param(i, v, elem_bits(r.rkey, e0)); return; }")
    body += ["    st_param(i, v);", "}"]
    return "\n".join([f"fn load_p(i: u32, r: Rec) -> vec4<f32> {{ {load} }}"] + body)


def _round_state(sig: Signature) -> str:
    """``round_state(v)``: ``v`` as it reads back once stored in the state dtype (for a pass that re-reads stored
    state, so the one before it can use the same values: LAMB)."""
    d = sig.state.name
    if d == "float32":
        body = "v"
    else:  # (integer rounding even with shader-f16: NVIDIA's compiler does not keep a vec4<f16> round trip exact)
        tag = "f16" if d == "float16" else "bf16"
        body = f"unpack4_{tag}(pack4_{tag}(v))"
    return f"fn round_state(v: vec4<f32>) -> vec4<f32> {{ return {body}; }}"


def optimizer_text(opt, sig: Signature, present=None) -> Text:
    """The full module of optimizer class ``opt`` for a bucket of signature ``sig`` holding the state buffers
    ``present`` (None: all; an optimizer with custom passes, which may name any, always gets all)."""
    states = opt.arena_states
    passes = opt.passes + opt.other_passes
    if present is None or any(p.kind == "custom" for p in passes):
        present = states
    t, idx = _head(opt.record, sig)
    t.gen(typed_array("param", next(idx), sig.param, False, sig.native_f16))
    t.gen(typed_array("grad", next(idx), sig.grad, True, sig.native_f16))
    if sig.master:
        t.gen(typed_array("master", next(idx), F32, False, sig.native_f16))
    quantized = opt.spec.quantizable if sig.qbits else {}
    for s in states:
        if s in present and s not in quantized:
            t.gen(typed_array(s, next(idx), sig.state, False, sig.native_f16))
    if quantized:
        t.gen(q_bindings([s for s in states if s in quantized], present, idx, sig.qbits))
    for name in opt.grad_like:  # further arenas laid out as the grads (Sophia-H's Hessian estimates)
        t.gen(typed_array(name, next(idx), sig.grad, True, sig.native_f16))
    if any(p.reduce or p.kind == "per_tensor" for p in passes):
        t.gen(f"@group(0) @binding({next(idx)}) var<storage, read_write> partials: array<vec2<f32>>;")
    members = ", ".join(f"{s}: vec4<f32>" for s in states) or "unused: vec4<f32>"
    t.gen(f"struct State {{ {members} }}\n"
          "struct Out { p: vec4<f32>, s: State, sum_a: vec4<f32>, sum_b: vec4<f32> }\n"
          "fn out(p: vec4<f32>, s: State) -> Out { return Out(p, s, vec4<f32>(0.0), vec4<f32>(0.0)); }")
    t.gen(_param_helpers(sig.master, sig.param.low))
    t.gen(_round_state(sig))
    t.file(opt.shader, idx)
    if sig.qat:
        t.gen(qat_load(sig))
        t.file("qat_export.wgsl", idx)
    if quantized:
        nw = max(len([s for s in p.writes if s in present]) for p in passes if p.kind == "elementwise")
        t.gen(q_helpers(states, present, quantized, sig.qbits, nw, opt.EPT))
    for p in passes:
        if p.kind == "elementwise":
            t.gen(q_elementwise(p, present, quantized, sig.qbits, opt.EPT) if quantized
                  else _elementwise(p, present, sig.qat and p.param == "rw"))
        elif p.kind == "per_tensor":
            t.gen(_per_tensor(p))
    return t


def optimizer_module(opt, sig: Signature, present=None) -> str:
    return optimizer_text(opt, sig, present).text()


def engine_text(shader: str, record, grad=None, native_f16: bool = False) -> Text:
    """An engine shader (the gradient-norm reduction, the checked-step gate) over an optimizer's record layout,
    with a typed read-write ``grad`` arena when ``grad`` (a dtype) is given."""
    sig = Signature(grad, grad, grad, False, native_f16) if grad is not None else None
    t, idx = _head(record, sig)
    if grad is not None:
        t.gen(typed_array("grad", next(idx), grad, False, native_f16))
    t.file(shader, idx)
    return t


def engine_module(shader: str, record, grad=None, native_f16: bool = False) -> str:
    return engine_text(shader, record, grad, native_f16).text()


def _numbered(text: str, idx) -> str:
    """A shader file's own ``@binding(N)`` declarations numbered after the generated ones."""
    return re.sub(r"@binding\(N\)", lambda m: f"@binding({next(idx)})", text)
