"""The host side of checked steps: outcomes read back one step late, the host state as a tree keyed by them, and
the gate passes' kernels and buffers (shaders/gate.wgsl; the step itself: rlx_gpu/engine/steps.py)."""
from __future__ import annotations

import numpy as np

from ..runtime.kernels import get_kernel
from .codegen import engine_module


class Outcome:
    """Whether a step was skipped on its inf/NaN check, read back from the device only when asked."""

    __slots__ = ("_opt", "_skipped")

    def __init__(self, opt, skipped):
        self._opt, self._skipped = opt, skipped

    @property
    def skipped(self) -> bool:
        if self._skipped is None:
            self._opt._settle(through=self)
        return self._skipped

    @property
    def settled(self) -> bool:
        """Whether the outcome is known on the host without reading the device."""
        return self._skipped is not None


class GateMixin:
    """Snapshots of the host state, settling outcomes, and the gate passes of the GPU optimizers."""

    def _max_dispatches(self) -> int:
        """The most dispatches a step records: every pass over every chunk of every bucket, plus the clip passes
        (an optimizer that records its own, Muon, says how many)."""
        chunks = sum(b.layout.num_chunks for b in self.buckets)
        return (len(self.passes) + 3) * chunks + 8

    def _snapshot(self):
        """(step counts, scalar states, materialized state names, last step skipped): the host state."""
        return (self._steps.copy(), {k: v.copy() for k, v in self._scalars.items()},
                list(self._materialized), self._last_skipped)

    def _restore_snapshot(self, snap):
        steps, scalars, mat, skipped = snap
        self._steps = steps.copy()
        self._scalars = {k: v.copy() for k, v in scalars.items()}
        self._materialized = list(mat)
        self._last_skipped = skipped

    def _settle(self, keep: int = 0, through: Outcome | None = None) -> None:
        """Read back the outcomes of all but the newest ``keep`` unsettled steps (or of those up to ``through``)
        and fix the host state."""
        while len(self._unsettled) > keep and not (through is not None and through.settled):
            slot, promise, outcome = self._unsettled.pop(0)
            promise.sync_wait()
            skipped = bool(np.frombuffer(slot.read_mapped(0, 4), np.uint32)[0])
            slot.unmap()
            self._slots.append(slot)
            outcome._skipped = skipped
            self._tree = self._tree[skipped]
        if not self._unsettled and self._tree is not None:
            self._restore_snapshot(self._tree)
            self._tree = None

    def _gate_kernels(self) -> dict:
        if self._gate_k is None:
            code = engine_module("gate.wgsl", self.record)
            self._gate_k = {e: get_kernel(self.device, "gate.wgsl", code, e) for e in ("choose", "gate_step")}
        return self._gate_k

    def _gate_buffers(self):
        if not hasattr(self, "_gate"):
            u = self.device.wgpu.BufferUsage
            self._gate_cap = self._max_dispatches()
            self._gate = self.device.buffer(16 + 12 * self._gate_cap, f"{type(self).__name__}.gate",
                                            usage=u.STORAGE | u.INDIRECT | u.COPY_DST | u.COPY_SRC)
            self._cand = self.device.buffer(2 * self._hyper.size, f"{type(self).__name__}.records")
            self._slots = []
        return self._gate

    def _gate_binds(self, loss_scale) -> dict:
        """The gate passes' bind groups for this loss-scale buffer (a dummy without one)."""
        buf = loss_scale.buffer if loss_scale is not None else self._dummy("loss scale")
        key = ("gate", buf)  # the buffer itself (kept alive by the key, so no other buffer takes its id)
        if key not in self._binds:
            self._binds[key] = {e: k.bind({"hyper": self._hyper, "cand": self._cand, "gate": self._gate,
                                           "loss_scale": buf}) for e, k in self._gate_kernels().items()}
        return self._binds[key]

