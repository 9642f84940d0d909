"""Compute pipelines, cached per device, and the recording of dispatches.

A :class:`Kernel` is one entry point of a WGSL source text with its override constants, compiled once per device
(:func:`get_kernel`, keyed by the source text itself, so generated sources are cached like shipped ones). Its
pipeline layout holds only the storage bindings the entry point uses (:func:`rlx_gpu.runtime.source.used_bindings`),
and buffers are bound by name. :class:`ComputePass` records a run of dispatches into one compute pass, optionally
as indirect dispatches whose grids a shader may zero (a skipped step).
"""
from __future__ import annotations

import hashlib

from . import params as prm_decl
from . import source as src

__all__ = ["Kernel", "ComputePass", "get_kernel", "shipped_kernel", "grid"]


class Kernel:
    """One compute pipeline (source text + entry point + override constants) on one device."""

    def __init__(self, device, label: str, code: str, entry: str, constants: dict):
        wgpu = device.wgpu
        self.device, self.label, self.entry = device, label, entry
        self.constants = dict(constants)
        self._groups: dict = {}  # cached_bind's
        declared = src.bindings(code)
        used = src.used_bindings(code, entry)
        self.bindings = {n: declared[n] for n in sorted(used, key=lambda n: declared[n][0])}
        d = device.device
        try:
            module = device.shader_module(code, label)
            entries = [{"binding": i, "visibility": wgpu.ShaderStage.COMPUTE,
                        "buffer": {"type": wgpu.BufferBindingType.read_only_storage if ro
                                   else wgpu.BufferBindingType.storage}}
                       for i, ro in self.bindings.values()]
            self.layout = d.create_bind_group_layout(entries=entries, label=label)
            playout = d.create_pipeline_layout(bind_group_layouts=[self.layout], label=label)
            self.pipeline = d.create_compute_pipeline(
                layout=playout, label=f"{label}:{entry}",
                compute={"module": module, "entry_point": entry, "constants": self.constants})
        except Exception as e:
            device._failed(e)
            raise RuntimeError(f"rlx_gpu: shader {label!r} entry {entry!r} failed to compile: {e}") from e

    def cached_bind(self, buffers: dict):
        """:meth:`bind`, kept: the same buffers (and ranges) for this entry point's bindings give the same group, so
        work recorded every step makes its bind groups once (the entry holds the buffers: their ids stay theirs;
        at most 4096 groups are kept per kernel: blocked factorisations bind a block's parameters per dispatch)."""
        norm = {n: buffers[n] if isinstance(buffers.get(n), tuple) else (buffers[n], 0, None)
                for n in self.bindings if n in buffers}
        key = tuple((n, id(b), o, s) for n, (b, o, s) in norm.items())
        hit = self._groups.get(key)
        if hit is None:
            if len(self._groups) >= 4096:
                self._groups.clear()
            hit = self._groups[key] = (self.bind(buffers), [b for b, _, _ in norm.values()])
        return hit[0]

    def bind(self, buffers: dict):
        """A bind group from ``{binding name: buffer or (buffer, offset, size)}`` for every binding this entry point
        uses (others in ``buffers`` are ignored)."""
        missing = set(self.bindings) - set(buffers)
        if missing:
            raise KeyError(f"rlx_gpu: {self.label}:{self.entry}: no buffer for binding(s) {sorted(missing)}")
        ranges = {}
        for name in self.bindings:
            buf, off, size = buffers[name] if isinstance(buffers[name], tuple) else (buffers[name], 0, None)
            ranges[name] = (buf, off, buf.size - off if size is None else size)
        self._check_aliasing(ranges)
        entries = [{"binding": idx, "resource": dict(zip(("buffer", "offset", "size"), ranges[name]))}
                   for name, (idx, _) in self.bindings.items()]
        try:
            return self.device.device.create_bind_group(layout=self.layout, entries=entries,
                                                        label=f"{self.label}:{self.entry}")
        except Exception as e:
            self.device._failed(e)
            raise RuntimeError(f"rlx_gpu: {self.label}: binding buffers failed: {e}") from e

    def _check_aliasing(self, ranges: dict) -> None:
        """WebGPU's rules for one dispatch: a buffer bound writable is bound nowhere else read-only, and two
        writable bindings of one buffer do not overlap. (wgpu-native enforces the first with a bare "Validation
        Error", Dawn both; checked here, so both give this error, naming the bindings.)"""
        items = list(ranges.items())
        for i, (a, (buf, off, size)) in enumerate(items):
            for b, (buf2, off2, size2) in items[i + 1:]:
                ro_a, ro_b = self.bindings[a][1], self.bindings[b][1]
                if buf2 is not buf or (ro_a and ro_b):
                    continue
                if ro_a != ro_b or (off < off2 + size2 and off2 < off + size):
                    how = "read-only and writable" if ro_a != ro_b else "writable with overlapping ranges"
                    raise ValueError(f"rlx_gpu: {self.label}:{self.entry}: bindings {a!r} and {b!r} are one buffer "
                                     f"bound {how} (bytes {off}..{off + size} and {off2}..{off2 + size2}); WebGPU "
                                     "forbids it in one dispatch: bind separate buffers")

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
        self.encoder = encoder
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

    def split(self, **pass_args) -> None:
        """End the current pass and continue in a new one on the same encoder, begun with ``pass_args`` (e.g.
        ``timestamp_writes``: a profiler timing the phases of a step, ``benchmarks/muon_phases.py``)."""
        self.compute.end()
        self.compute = self.encoder.begin_compute_pass(**pass_args)

    def resume(self, encoder) -> "ComputePass":
        """A new pass on ``encoder`` that continues this ended one (its indirect arguments and their buffer)."""
        cp = ComputePass(encoder, self.args_buffer, self._base, self._cap)
        cp.args, cp.gated = self.args, self.gated
        return cp


def grid(groups: int, limit: int) -> tuple[int, int]:
    """Split ``groups`` workgroups into an (x, y) grid with x, y <= limit; kernels skip ids >= groups."""
    x = min(groups, limit)
    y = -(-groups // x)
    if y > limit:
        raise ValueError(f"rlx_gpu: {groups} workgroups exceed the adapter's {limit}x{limit} grid")
    return x, y


def get_kernel(device, label: str, code: str, entry: str, **constants) -> Kernel:
    """The cached :class:`Kernel` for this source text; compiled once per (device, source, entry, constants) while
    it is among the device's most recently used (``runtime.device.PIPELINES_KEPT``)."""
    key = (hashlib.sha1(code.encode()).hexdigest(), entry, tuple(sorted(constants.items())))
    cache = device._shared["pipelines"]
    with device._shared["lock"]:
        k = cache.get(key)
        if k is None:
            k = cache[key] = Kernel(device, label, code, entry, constants)
    return k


def shipped_kernel(device, shader: str, entry: str, **constants) -> Kernel:
    """A kernel of a shipped shader file (``shaders/<shader>``, includes resolved, then the parameter structs
    declared for it: :func:`rlx_gpu.runtime.params.declare`; after the text, as directives come first)."""
    tail = prm_decl.structs(shader)
    code = src.load_source(shader)
    return get_kernel(device, shader, f"{code}{tail}\n" if tail else code, entry, **constants)
