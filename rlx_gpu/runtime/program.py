"""Your own WGSL compute shaders on an optimizer's device, with buffers bound by name.

    fwd = rlx_gpu.Program(opt.device, WGSL, "forward", WG=64)     # entry point, override constants
    fwd(groups, x=batch, w=opt.params["w"], out=hidden)           # one dispatch, submitted now
    enc = opt.device.encoder()                                    # or several in one submission:
    fwd.record(enc, groups, x=batch, w=opt.params["w"], out=hidden)
    bwd.record(enc, groups, ..., grad_w=opt.grads["w"])           # straight into the optimizer's grad slot
    opt.device.submit(enc); opt.step()                            # the step reads those grads, no copy

A binding is named by its declaration, ``@group(0) @binding(N) var<storage, read|read_write> NAME: ...``
(storage buffers in group 0; only those the entry point uses need a buffer). A value may be a
:class:`~rlx_gpu.DeviceTensor` (its range of its arena: ``binding()``), a wgpu buffer (whole), a dict
``{"buffer", "offset", "size"}`` or a tuple ``(buffer, offset, size)``. ``groups``: an int (a row of workgroups) or
an (x, y, z) tuple. Buffers of your own: ``device.buffer(nbytes, label, data=array)``, read back with
``device.read(buffer, out=array)``. Compiler errors are a RuntimeError naming the entry point and the line; a
source that is not a str, an entry point that uses a resource other than a group-0 storage buffer (``var<uniform>``,
a texture) and groups that are not 1 to 3 integers in range are refused before anything is compiled or recorded.
"""
from __future__ import annotations

import operator
import warnings

from . import source as src
from .arena import DeviceTensor
from .kernels import get_kernel

__all__ = ["Program"]

SKIP_WARNING = ("rlx_gpu.Program: this device runs with Dawn's skip_validation (RLX_GPU_DAWN_SKIP_VALIDATION=1): "
                "Dawn does not validate your kernel's bindings and dispatches, so a binding past its buffer is "
                "undefined behaviour instead of an error. Unset RLX_GPU_DAWN_SKIP_VALIDATION while you develop it")


ROBUST_WARNING = ("rlx_gpu.Program: this device runs without Dawn's robustness (RLX_GPU_DAWN_DISABLE_ROBUSTNESS=1): an "
                  "index past an array in your kernel reads or writes whatever memory is there, instead of being "
                  "clamped. Unset RLX_GPU_DAWN_DISABLE_ROBUSTNESS while you develop it")


def _resource(name: str, v):
    if isinstance(v, DeviceTensor):
        b = v.binding()
        return b["buffer"], b["offset"], b["size"]
    if isinstance(v, dict):
        return v["buffer"], v["offset"], v["size"]
    if isinstance(v, tuple) and len(v) == 3:
        return v
    if hasattr(v, "size") and hasattr(v, "usage"):  # a wgpu buffer
        return v, 0, v.size
    raise TypeError(f"rlx_gpu.Program: binding {name!r} must be a DeviceTensor, a wgpu buffer, a dict "
                    f"{{'buffer', 'offset', 'size'}} or a (buffer, offset, size) tuple, got {type(v).__name__}")


def _check_source(code, entry, label) -> None:
    """str arguments, and an entry point that uses storage buffers of group 0 only (what Program binds)."""
    for what, v in (("code", code), ("entry", entry), ("label", label)):
        if not isinstance(v, str):
            raise TypeError(f"rlx_gpu.Program: {what} must be a str (WGSL source text, an entry point's name, a "
                            f"label), got {type(v).__name__}")
    other = {n: r for n, r in src.resources(code).items() if (r[0], r[2]) != (0, "storage")}
    used = sorted(n for n in other if n in src.used_names(code, entry))
    if used:
        g, b, kind = other[used[0]]
        what = f"var<{kind}>" if kind != "handle" else "a texture or sampler"
        raise ValueError(f"rlx_gpu.Program {entry!r}: binding {used[0]!r} (@group({g}) @binding({b})) is {what}; a "
                         "Program binds storage buffers of group 0 only (declare it var<storage, read>)")


class Program:
    """One entry point of a WGSL source on ``device``, compiled once (cached by source text and constants)."""

    def __init__(self, device, code: str, entry: str, *, label: str = "user", **constants):
        _check_source(code, entry, label)
        self.device = device
        if getattr(device, "skip_validation", False):  # (never silently: docs/guides/webgpu-implementation.md)
            warnings.warn(SKIP_WARNING, RuntimeWarning, stacklevel=2)
        if not getattr(device, "robustness", True):
            warnings.warn(ROBUST_WARNING, RuntimeWarning, stacklevel=2)
        self.kernel = get_kernel(device, label, code, entry, **constants)
        #: The storage bindings the entry point uses: {name: (binding index, read-only)}.
        self.bindings = dict(self.kernel.bindings)

    def bind(self, **buffers):
        """The bind group for these buffers (cached: the same buffers give the same group)."""
        unknown = set(buffers) - set(self.bindings)
        if unknown:
            raise KeyError(f"rlx_gpu.Program {self.kernel.entry!r}: no binding named {sorted(unknown)}; it uses "
                           f"{sorted(self.bindings)}")
        return self.kernel.cached_bind({n: _resource(n, v) for n, v in buffers.items()})

    def record(self, encoder, groups, **buffers) -> None:
        """Record one dispatch into a command encoder (``device.encoder()``)."""
        x, y, z = self._grid(groups)
        lim = self.device.max_workgroups
        if not (0 < x <= lim and 0 < y <= lim and 0 < z <= lim):
            raise ValueError(f"rlx_gpu.Program {self.kernel.entry!r}: groups {groups} must be 1..{lim} per "
                             "dimension (pass an (x, y, z) tuple past one row)")
        bind = self.bind(**buffers)  # (before the pass: a bad buffer leaves the encoder usable)
        p = encoder.begin_compute_pass()
        p.set_pipeline(self.kernel.pipeline)
        p.set_bind_group(0, bind)
        p.dispatch_workgroups(x, y, z)
        p.end()

    def _grid(self, groups) -> tuple[int, int, int]:
        """(x, y, z) of an int or a tuple of 1 to 3 ints; TypeError/ValueError naming ``groups`` otherwise."""
        dims = groups if isinstance(groups, tuple) else (groups,)
        if not 1 <= len(dims) <= 3:
            raise ValueError(f"rlx_gpu.Program {self.kernel.entry!r}: groups must be an int or a tuple of 1 to 3 "
                             f"ints, got {groups!r}")
        try:
            if any(isinstance(d, bool) for d in dims):
                raise TypeError
            out = [operator.index(d) for d in dims]
        except TypeError:
            raise TypeError(f"rlx_gpu.Program {self.kernel.entry!r}: groups must be integers (workgroup counts), got "
                            f"{groups!r}") from None
        return tuple(out + [1] * (3 - len(out)))

    def __call__(self, groups, **buffers) -> None:
        """Record one dispatch and submit it."""
        enc = self.device.encoder()
        self.record(enc, groups, **buffers)
        self.device.submit(enc)
