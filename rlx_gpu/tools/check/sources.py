"""What ``rlx-gpu check-shaders`` checks: WGSL sources with their origin maps, entry points and override constants.

With no paths given, the package's shaders are checked exactly as the runtime compiles them: every optimizer's
generated module for float32, bfloat16 with float32 master weights (16-bit values packed in u32 words) and float16
(``shader-f16`` storage); the engine's gradient-norm reduction for each grad dtype and its checked-step gate; and
the stand-alone shaders (the loss-scale update, the bench's copy). Each entry point is checked with the pipeline
layout the runtime gives it: only the bindings it uses. Given paths, each ``.wgsl`` file is checked on its own
(``// #include`` resolved next to it, then in the shipped folder).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ...core.lowp import BF16, F16, F32
from ...runtime import params
from ...runtime import source as src


@dataclass
class Diagnostic:
    file: str
    line: int | None
    column: int | None
    message: str
    target: str | None = None  # naga-cli: the translation that failed (SPIR-V, MSL, HLSL, GLSL)

    def where(self) -> str:
        return self.file + (f":{self.line}:{self.column}" if self.line else "")


@dataclass
class Source:
    path: Path     # the file the module is named after (its shader, or the user's file)
    code: str
    origin: list   # output line -> (file, line)
    entries: list
    constants: dict
    label: str = ""  # e.g. "AdamW (bfloat16 + float32 master)"; the file name for a user's file
    layouts: dict = field(default_factory=dict)  # entry point -> [(binding, read_only)] it uses

    def __post_init__(self):
        self.label = self.label or self.path.name
        binds = src.bindings(self.code)
        for e in self.entries:
            self.layouts.setdefault(e, sorted(binds[n] for n in src.used_bindings(self.code, e)))

    @property
    def name(self) -> str:
        """How results name this module: its file, and the variant for a generated one."""
        return str(self.path) if self.label == self.path.name else f"{self.path} [{self.label}]"

    def locate(self, line, col, message, target=None) -> Diagnostic:
        if line is not None and 1 <= line <= len(self.origin):
            f, ln = self.origin[line - 1]
            if f == "<generated>":
                f = f"{self.path} [{self.label}, generated line {ln}]"
                ln = None
            return Diagnostic(f, ln, col if ln else None, message.strip(), target)
        return Diagnostic(str(self.path), None, None, message.strip(), target)


def load(path: Path, constants: dict) -> Source:
    """A user's file, includes resolved next to it and then in the shipped folder."""
    code, origin = src.resolve(path, (src.shader_dir(),))
    return Source(path, code, origin, src.entry_points(code), constants)


SIGNATURES = (("float32", F32, F32, F32, False, False), ("bfloat16 + float32 master", BF16, BF16, F32, True, False),
              ("float16", F16, F16, F16, False, True))


def shipped() -> list:
    """Every module the runtime compiles, generated as it generates them."""
    from ...engine import Optimizer
    from ...optim import AdamW  # noqa: F401 (registers every optimizer class)
    from ...addons.distributed import compression  # noqa: F401 (declares the top-k kernels' parameters)
    from ...addons.qat import kernels  # noqa: F401 (declares the QAT kernels' arguments)

    d = src.shader_dir()
    out = []
    for name, cls in sorted(Optimizer.optimizer_classes().items()):
        if cls.shader:  # (SparseAdam: only the sparse kernels, checked below)
            out += _optimizer_modules(d, name, cls)
    return out + _engine_modules(d, Optimizer.optimizer_classes()["AdamW"].record) + _plain_files(d)


def _optimizer_modules(d, name: str, cls) -> list:
    """One optimizer's generated modules: every signature, quantized states, the qat= export, a default bucket."""
    from ...engine.codegen import Emit, Signature, optimizer_text
    from ...engine.qsearch import FORMS
    entries = [p.kernel for p in cls.passes + cls.other_passes]
    consts = {"WG": cls.WG, "EPT": cls.EPT, **cls.constants}
    out = []
    for label, pd, gd, sd, master, native in SIGNATURES:
        t = optimizer_text(cls, Signature(pd, gd, sd, master, native))
        out.append(Source(d / cls.shader, t.text(), t.origin, entries, consts, f"{name} ({label})"))
        if sd is F16 and "round_state(" in (d / cls.shader).read_text():  # (F16ROUND: by the hardware's conversion)
            t = optimizer_text(cls, Signature(pd, gd, sd, master, native), emit=Emit(hround=True))
            out.append(Source(d / cls.shader, t.text(), t.origin, entries, consts, f"{name} ({label}, F16ROUND)"))
    for bits in (8, 4) if cls.spec.quantizable else ():  # block-quantized states (state_bits)
        for label, pd, gd, sd, master, native in SIGNATURES[:2]:
            t = optimizer_text(cls, Signature(pd, gd, sd, master, native, bits))
            out.append(Source(d / cls.shader, t.text(), t.origin, entries, consts, f"{name} ({label}, {bits}-bit)"))
        for form in FORMS[bits]:  # (QCLOSED: each form of the width, QFORM8 / QFORM4)
            t = optimizer_text(cls, Signature(*SIGNATURES[0][1:], bits), emit=Emit(qclosed=True, qform=form))
            out.append(Source(d / cls.shader, t.text(), t.origin, entries, consts,
                              f"{name} ({bits}-bit, closed search{'' if form == FORMS[bits][0] else ', ' + form})"))
    if cls.__name__ == "AdamW":  # the qat= export's variant (engine/qat.py), with its own entry points
        for label, pd in (("float32", F32), ("bfloat16", BF16)):
            t = optimizer_text(cls, Signature(pd, pd, F32, False, False, qat=True))
            out.append(Source(d / cls.shader, t.text(), t.origin, entries + ["qat_amax", "qat_rescale", "qat_encode"],
                              consts, f"{name} ({label}, qat export)"))
    # and as a bucket usually is: only the state buffers a default group makes (the others left out)
    present = tuple(s for s in cls.spec.state_names(dict(cls.spec.defaults)) if s in cls.arena_states)
    if present != tuple(cls.arena_states):
        t = optimizer_text(cls, Signature(*SIGNATURES[0][1:]), present)
        held = ", ".join(present) or "no state buffers"
        out.append(Source(d / cls.shader, t.text(), t.origin, entries, consts, f"{name} (float32, {held})"))
    return out


def _engine_modules(d, record) -> list:
    """The engine's own generated modules: the clip passes per grad dtype and the checked step's gate."""
    from ...engine.codegen import engine_text
    from ...engine.reductions import ReduceMixin
    clip = {"WG": ReduceMixin.CLIP_SHAPE[0], "EPT": ReduceMixin.CLIP_SHAPE[1], "BPW": ReduceMixin.CLIP_BPW,
            "U": ReduceMixin.CLIP_FLAT_U, "CHECK": True, "NORM": True}
    out = []
    for grad, native in ((F32, False), (BF16, False), (F16, True)):
        t = engine_text("clip.wgsl", record, grad, native)
        out.append(Source(d / "clip.wgsl", t.text(), t.origin, ["partial", "flat", "total", "scale"], clip,
                          f"{grad.name} grads"))
    t = engine_text("gate.wgsl", record)
    return out + [Source(d / "gate.wgsl", t.text(), t.origin, ["choose", "gate_step"], {}, "AdamW's records")]


def _plain_files(d) -> list:
    """The shaders compiled as shipped (with the parameter structs the runtime appends to them)."""
    from ..bench.timing import COPY_VARIANTS
    from ...linalg.tcns import NS_IO  # (tcns.wgsl is compiled with its parameter struct after it)
    wg, ept = COPY_VARIANTS[0]
    out = []
    for f, consts in (("amp.wgsl", {}), ("copy.wgsl", {"WG": wg, "EPT": ept}), ("sparse.wgsl", {}), ("gemm.wgsl", {}),
                      ("muon.wgsl", {}), ("muon16.wgsl", {}), ("topk.wgsl", {"EF": True}), ("topk.wgsl", {"EF": False}),
                      ("topk_rebuild.wgsl", {}), ("stiefel.wgsl", {}), ("partition.wgsl", {}),
                      ("soap.wgsl", {}), ("kron.wgsl", {}), ("gemm16.wgsl", {}),
                      ("factor.wgsl", {}), ("householder.wgsl", {}), ("basis.wgsl", {}), ("half.wgsl", {}),
                      ("qat_kernels.wgsl", {"WG": 256, "EPT": 4})):
        code, origin = src.resolve(d / f)
        tail = params.structs(f)  # (the parameter structs the runtime puts after the text: runtime/params.py)
        if tail:
            code = f"{code}{tail}\n"
            origin = origin + [("<generated>", i + 1) for i in range(tail.count("\n") + 1)]
        out.append(Source(d / f, code, origin, src.entry_points(code), consts))
    code, origin = src.resolve(d / "tcns.wgsl")
    code, origin = code + "\n" + NS_IO.wgsl() + "\n", origin + [("<generated>", 0)] * 2
    return out + [Source(d / "tcns.wgsl", code, origin, src.entry_points(code), {}, "NsIo declared after it")]


def collect(paths: list) -> tuple[list, list]:
    """(sources, load failures as (path, message)): the given files and the .wgsl files in given folders, or, with
    none given, the shipped modules."""
    if not paths:
        return shipped(), []
    files = []
    for raw in paths:
        p = Path(raw)
        if p.is_dir():
            files += sorted(p.glob("*.wgsl"))
        elif p.is_file():
            files.append(p)
        else:
            raise FileNotFoundError(raw)
    sources, failed = [], []
    for f in files:
        try:
            sources.append(load(f, {}))
        except (OSError, UnicodeDecodeError, ValueError) as e:  # ValueError: an include loop, depth or size
            failed.append((f, str(e)))
    return sources, failed
