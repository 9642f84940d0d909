"""The WGSL module of an optimizer for one bucket of tensors: its generated prelude, its own shader file, and one
generated driver per elementwise pass (the block loop lives here, once).

A module holds, in order: the ``hyper`` and ``blocks`` bindings (``blocks``: the chunk's ``array<Block>``,
:data:`rlx_gpu.runtime.layout.BLOCK_ROW`); the record prelude (``struct Rec``, ``rec(t)``,
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
from ..runtime.layout import BLOCK_ROW
from ..runtime.params import structs
from ..runtime.source import resolve, shader_dir
from ..runtime.typed import typed_array
from .drivers import PLAIN, Emit, elementwise, param_helpers, per_tensor
from .qat import driver_lines, qat_load
from .qcodegen import q_bindings, q_helpers
from .qdrivers import q_elementwise

__all__ = ["Pass", "Signature", "Text", "Emit", "optimizer_module", "engine_module", "optimizer_text", "engine_text"]


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

    @property
    def precision(self) -> str:
        """The bucket's key in a per-precision class switch (:func:`rlx_gpu.engine.drivers.switch`): its 16-bit
        dtype's name (the params', else the states', else the grads'), with ``+master`` where 16-bit params keep
        float32 master copies; ``float32`` where no arena is 16-bit."""
        for dt in (self.param, self.state, self.grad):
            if dt.itemsize == 2:
                return dt.name + ("+master" if self.master and dt is self.param else "")
        return "float32"


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


def _head(record, sig, emit: Emit = PLAIN) -> tuple[Text, itertools.count]:
    idx = itertools.count()
    t = Text()
    if sig is not None and sig.f16:
        t.gen("enable f16;")
    if emit.subgroups and emit.directive:
        t.gen("enable subgroups;")
    t.gen(f"@group(0) @binding({next(idx)}) var<storage, read_write> hyper: array<u32>;\n"
          f"@group(0) @binding({next(idx)}) var<storage, read> blocks: array<Block>;")
    t.gen(BLOCK_ROW.wgsl())  # (a block table's row, read by name: runtime/layout.py)
    t.gen(record.wgsl())
    for f in ("ieee.wgsl", "lowp.wgsl", "engine.wgsl"):
        t.file(f)
    return t, idx


def _round_state(sig: Signature, hround: bool = False) -> str:
    """``round_state(v)``: ``v`` as it reads back once stored in the state dtype (for a pass that re-reads stored
    state, so the one before it can use the same values: LAMB); ``hround`` (``Emit.hround``): float16 rounded by
    the hardware's conversion (pack2x16float) and read back by integer operations, |v| >= 65520 (past the largest
    float16, rounded) to inf as the integer rounding does (WGSL leaves pack2x16float's out-of-range results
    undefined)."""
    d = sig.state.name
    if d == "float32":
        body = "v"
    elif d == "float16" and hround:  # (not unpack2x16float: llvmpipe folds the round trip away in some lanes)
        hw = "unpack4_f16(vec2<u32>(pack2x16float(v.xy), pack2x16float(v.zw)))"
        inf = "bitcast<vec4<f32>>((bitcast<vec4<u32>>(v) & vec4<u32>(0x80000000u)) | vec4<u32>(0x7f800000u))"
        body = f"select({hw}, {inf}, abs(v) >= vec4<f32>(65520.0))"
    else:  # (integer rounding even with shader-f16: NVIDIA's compiler does not keep a vec4<f16> round trip exact)
        tag = "f16" if d == "float16" else "bf16"
        body = f"unpack4_{tag}(pack4_{tag}(v))"
    return f"fn round_state(v: vec4<f32>) -> vec4<f32> {{ return {body}; }}"


def kernel_shape(opt, qbits: int) -> tuple[int, int]:
    """(WG, EPT) of a bucket's kernels: the class's; for a quantized bucket with ``QEPT`` set, QEPT vec4s a thread
    and the engine block (WG * EPT * 4 elements: the block tables, clip and reductions) kept: WG * EPT / QEPT
    threads a workgroup."""
    q = getattr(opt, "QEPT", None)
    if not qbits or not q or q == opt.EPT:
        return opt.WG, opt.EPT
    wg, rem = divmod(opt.WG * opt.EPT, q)
    if isinstance(q, bool) or not isinstance(q, int) or q <= 0 or rem or q % 2 or wg % 64:
        raise ValueError(f"{opt.__name__}.QEPT must be None or an even int dividing WG * EPT = {opt.WG * opt.EPT} "
                         f"into workgroups of a multiple of 64 threads, got {q!r}")
    return wg, q


def optimizer_text(opt, sig: Signature, present=None, emit: Emit = PLAIN) -> Text:
    """The full module of optimizer class ``opt`` for a bucket of signature ``sig`` holding the state buffers
    ``present`` (None: all; an optimizer with custom passes, which may name any, always gets all), its drivers
    walking as ``emit`` says (the quantized drivers use the pair accessors where ``emit.subgroups``)."""
    states = opt.arena_states
    passes = opt.passes + opt.other_passes
    if present is None or any(p.kind == "custom" for p in passes):
        present = states
    quantized = opt.spec.quantizable if sig.qbits else {}
    wide = emit.wide or bool(quantized and emit.subgroups)
    t, idx = _head(opt.record, sig, emit)
    typed = lambda name, dt, ro: t.gen(typed_array(name, next(idx), dt, ro, sig.native_f16, wide,  # noqa: E731
                                                   emit.vpack))
    typed("param", sig.param, False)
    typed("grad", sig.grad, True)
    if sig.master:
        typed("master", F32, False)
    for s in states:
        if s in present and s not in quantized:
            typed(s, sig.state, False)
    if quantized:
        t.gen(q_bindings([s for s in states if s in quantized], present, idx, sig.qbits))
    for name in opt.grad_like:  # further arenas laid out as the grads (Sophia-H's Hessian estimates)
        typed(name, sig.grad, True)
    if any(p.reduce or p.kind == "per_tensor" for p in passes):
        t.gen(f"@group(0) @binding({next(idx)}) var<storage, read_write> partials: array<vec2<f32>>;")
    members = ", ".join(f"{s}: vec4<f32>" for s in states) or "unused: vec4<f32>"
    t.gen(f"struct State {{ {members} }}\n"
          "struct Out { p: vec4<f32>, s: State, sum_a: vec4<f32>, sum_b: vec4<f32> }\n"
          "fn out(p: vec4<f32>, s: State) -> Out { return Out(p, s, vec4<f32>(0.0), vec4<f32>(0.0)); }")
    t.gen(param_helpers(sig.master, sig.param.low, wide))
    t.gen(_round_state(sig, emit.hround))
    t.file(opt.shader, idx)
    t.gen(structs(opt.shader))  # (the tables' structs the optimizer declared for it: runtime/params.py)
    if sig.qat:
        t.gen(qat_load(sig, getattr(opt, "QAT_KEEP", 0), opt.WG))
        t.file("qat_export.wgsl", idx)
        t.gen(structs("qat_export.wgsl"))  # (its words' constants: engine/qat.py)
    if quantized:
        nw = max(len([s for s in p.writes if s in present]) for p in passes if p.kind == "elementwise")
        ept = kernel_shape(opt, sig.qbits)[1]
        t.gen(q_helpers(states, present, quantized, sig.qbits, nw, ept, emit.subgroups, emit.qdirect, emit.qclosed,
                        emit.qform, emit.qredux))
    for p in passes:
        if p.kind == "elementwise" and quantized:
            t.gen(q_elementwise(p, present, quantized, sig.qbits, ept, emit))
        elif p.kind == "elementwise":
            qat = driver_lines(getattr(opt, "QAT_KEEP", 0)) if sig.qat and p.param == "rw" else None
            t.gen(elementwise(p, present, PLAIN if qat else emit, qat))
        elif p.kind == "per_tensor":
            t.gen(per_tensor(p, emit))
    return t


def optimizer_module(opt, sig: Signature, present=None, emit: Emit = PLAIN) -> str:
    return optimizer_text(opt, sig, present, emit).text()


def engine_text(shader: str, record, grad=None, native_f16: bool = False) -> Text:
    """An engine shader (the gradient-norm reduction, the checked-step gate) over an optimizer's record layout,
    with a typed read-write ``grad`` arena when ``grad`` (a dtype) is given."""
    sig = Signature(grad, grad, grad, False, native_f16) if grad is not None else None
    t, idx = _head(record, sig)
    if grad is not None:
        t.gen(typed_array("grad", next(idx), grad, False, native_f16))
    t.file(shader, idx)
    t.gen(structs(shader))  # (the structs and constants the host declared for it: runtime/params.py)
    return t


def engine_module(shader: str, record, grad=None, native_f16: bool = False) -> str:
    return engine_text(shader, record, grad, native_f16).text()


def _numbered(text: str, idx) -> str:
    """A shader file's own ``@binding(N)`` declarations numbered after the generated ones."""
    return re.sub(r"@binding\(N\)", lambda m: f"@binding({next(idx)})", text)
