"""WGSL loading and the per-device pipeline cache.

Shaders live in ``shaders/*.wgsl`` (shipped in the wheel as ``rlx_gpu/shaders``). The only templating
is a line ``// #include "name.wgsl"``, replaced by that file's text; a missing file fails loudly.
Everything tunable is a WGSL ``override`` constant set at pipeline creation. The binding layout of a
shader is read from its ``@group(0) @binding(N) var<storage, MODE> NAME`` declarations, so buffers are
bound by name and Python never repeats the layout.
"""
from __future__ import annotations

import functools
import re
from pathlib import Path

__all__ = ["shader_dir", "shader_files", "resolve", "load_source", "bindings", "entry_points", "Kernel",
           "get_kernel", "grid"]

_INCLUDE = re.compile(r'^[ \t]*//[ \t]*#include[ \t]+"([\w.\-]+)"[ \t]*$', re.M)
_BINDING = re.compile(
    r"@group\(0\)\s*@binding\((\d+)\)\s*var<storage\s*,\s*(read|read_write)\s*>\s*(\w+)\s*:")
_ENTRY = re.compile(r"@compute\s+@workgroup_size\([^)]*\)\s*fn\s+(\w+)")


def shader_dir() -> Path:
    """The folder holding the shipped ``.wgsl`` files (inside the installed package, else the checkout)."""
    here = Path(__file__).resolve().parent
    for cand in (here / "shaders", here.parent / "shaders"):
        if cand.is_dir() and any(cand.glob("*.wgsl")):
            return cand
    raise FileNotFoundError(f"rlx_gpu: no shaders folder next to {here} (looked in rlx_gpu/shaders and shaders/)")


def shader_files() -> list[Path]:
    """Every optimizer shader the package ships (include-only files such as common.wgsl excluded)."""
    return sorted(p for p in shader_dir().glob("*.wgsl") if _ENTRY.search(p.read_text()))


def resolve(path: Path, search: tuple = (), _stack: tuple = ()) -> tuple[str, list]:
    """``path``'s text with includes resolved, and for each output line its (file, line) of origin.

    An include is looked up next to the including file, then in ``search`` folders; a missing one fails loudly,
    and so does an include loop (ValueError naming the chain).
    """
    path = Path(path)
    key = path.resolve()
    if key in _stack:
        chain = " -> ".join(p.name for p in (*_stack[_stack.index(key):], key))
        raise ValueError(f"rlx_gpu: include loop: {chain}")
    if not path.is_file():
        raise FileNotFoundError(f"rlx_gpu: shader {path.name!r} not found in {path.parent}")
    out, origin = [], []
    for i, line in enumerate(path.read_text().splitlines(), 1):
        m = _INCLUDE.match(line)
        if not m:
            out.append(line)
            origin.append((str(path), i))
            continue
        name = m.group(1)
        cand = [d / name for d in (path.parent, *search) if (d / name).is_file()]
        if not cand:
            raise FileNotFoundError(f"rlx_gpu: shader {name!r} not found (included from {path.name}:{i})")
        text, orig = resolve(cand[0], search, (*_stack, key))
        out += [f"// ---- begin {name} ----", *text.splitlines(), f"// ---- end {name} ----"]
        origin += [(str(path), i), *orig, (str(path), i)]
    return "\n".join(out) + "\n", origin


@functools.lru_cache(maxsize=None)
def load_source(name: str) -> str:
    """The WGSL source of shipped shader ``name`` with its includes resolved, exactly as the runtime compiles it."""
    return resolve(shader_dir() / name)[0]


def bindings(source: str) -> dict[str, tuple[int, bool]]:
    """``name -> (binding index, read_only)`` for every group-0 storage binding in ``source``."""
    out = {}
    for idx, mode, name in _BINDING.findall(source):
        out[name] = (int(idx), mode == "read")
    return out


def entry_points(source: str) -> list[str]:
    return _ENTRY.findall(source)


class Kernel:
    """One compute pipeline (shader file + entry point + override constants) on one device."""

    def __init__(self, device, shader: str, entry: str, constants: dict):
        wgpu = device.wgpu
        self.device, self.shader, self.entry = device, shader, entry
        self.constants = dict(constants)
        src = load_source(shader)
        self.bindings = bindings(src)
        d = device.device
        try:
            module = d.create_shader_module(code=src, label=shader)
            entries = [
                {"binding": i, "visibility": wgpu.ShaderStage.COMPUTE,
                 "buffer": {"type": wgpu.BufferBindingType.read_only_storage if ro
                            else wgpu.BufferBindingType.storage}}
                for i, ro in sorted(self.bindings.values())
            ]
            self.layout = d.create_bind_group_layout(entries=entries, label=shader)
            playout = d.create_pipeline_layout(bind_group_layouts=[self.layout], label=shader)
            self.pipeline = d.create_compute_pipeline(
                layout=playout, label=f"{shader}:{entry}",
                compute={"module": module, "entry_point": entry, "constants": self.constants})
        except Exception as e:
            raise RuntimeError(f"rlx_gpu: shader {shader!r} entry {entry!r} failed to compile: {e}") from e

    def bind(self, buffers: dict):
        """A bind group from ``{binding name: buffer or (buffer, offset, size)}``; every binding must be given."""
        missing = set(self.bindings) - set(buffers)
        if missing:
            raise KeyError(f"rlx_gpu: {self.shader}: no buffer for binding(s) {sorted(missing)}")
        entries = []
        for name, (idx, _) in self.bindings.items():
            b = buffers[name]
            if isinstance(b, tuple):
                buf, off, size = b
                entries.append({"binding": idx, "resource": {"buffer": buf, "offset": off, "size": size}})
            else:
                entries.append({"binding": idx, "resource": {"buffer": b, "offset": 0, "size": b.size}})
        try:
            return self.device.device.create_bind_group(layout=self.layout, entries=entries,
                                                        label=f"{self.shader}:{self.entry}")
        except Exception as e:
            raise RuntimeError(f"rlx_gpu: {self.shader}: binding buffers failed: {e}") from e

    def dispatch(self, encoder, bind_group, groups: int):
        """Record ``groups`` workgroups (a 2-D grid past the per-dimension limit; kernels flatten it)."""
        if groups <= 0:
            return
        x, y = grid(groups, self.device.max_workgroups)
        own = not isinstance(encoder, ComputePass)
        p = encoder.begin_compute_pass() if own else encoder.compute
        p.set_pipeline(self.pipeline)
        p.set_bind_group(0, bind_group)
        if not own and encoder.gated:
            p.dispatch_workgroups_indirect(encoder.args_buffer, encoder.add(x, y))
        else:
            p.dispatch_workgroups(x, y, 1)
        if own:
            p.end()


class ComputePass:
    """One compute pass for a run of :meth:`Kernel.dispatch` calls (a pass per dispatch costs two more API calls
    each; WebGPU orders the dispatches of a pass and makes each one's storage writes visible to the next).

    While :attr:`gated` is true, dispatches are indirect: their grids go to :attr:`args` (three u32 words each,
    from byte ``base`` of ``args_buffer``), which the caller writes into the buffer before submitting, and a shader
    may zero them on the device to cancel the dispatches (``shaders/gate.wgsl``: a step skipped on its inf/NaN
    check, with no host round trip). Call :meth:`end` before using the encoder for anything else."""

    def __init__(self, encoder, args_buffer=None, base: int = 0, capacity: int = 0):
        self.compute = encoder.begin_compute_pass()
        self.args_buffer, self._base, self._cap = args_buffer, base, capacity
        self.gated = False
        self.args: list[int] = []

    def add(self, x: int, y: int) -> int:
        i = len(self.args) // 3
        if i >= self._cap:
            raise RuntimeError(f"rlx_gpu: more than {self._cap} gated dispatches in one step")
        self.args += [x, y, 1]
        return self._base + 12 * i

    def end(self) -> None:
        self.compute.end()


def grid(groups: int, limit: int) -> tuple[int, int]:
    """Split ``groups`` workgroups into an (x, y) grid with x, y <= limit; kernels skip ids >= groups."""
    x = min(groups, limit)
    y = -(-groups // x)
    if y > limit:
        raise ValueError(f"rlx_gpu: {groups} workgroups exceed the adapter's {limit}x{limit} grid")
    return x, y


def get_kernel(device, shader: str, entry: str, **constants) -> Kernel:
    """The cached :class:`Kernel`; compiled once per (device, shader, entry, constants)."""
    key = (shader, entry, tuple(sorted(constants.items())))
    cache = device._shared["pipelines"]
    k = cache.get(key)
    if k is None:
        with device._shared["lock"]:
            k = cache.get(key)
            if k is None:
                k = cache[key] = Kernel(device, shader, entry, constants)
    return k
