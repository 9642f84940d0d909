"""The host side of checked steps: outcomes settled when asked or every few steps, never per step.

A checked step is skipped whole on the device when a grad is inf or NaN (``shaders/gate.wgsl``). The device keeps
two counters in the gate buffer, the steps it ran and how many of them were applied, and logs each step's outcome.
The host records a run of checked steps without knowing their outcomes: the record table of the run
(:mod:`rlx_gpu.engine.tables`) is on the device and the ``choose`` pass copies the row of the applied count into the
hyper buffer. Every ``outcome_every`` steps a step's encoder copies the counters and the log into a small mappable
buffer; the host reads it some steps later (by then the step is long done) and moves the run's base forward. A read
when asked (``last_step_skipped``, state dicts, ``Outcome.skipped``) or when the run cannot continue (another set
of tensors active, another state needed, an unchecked step) settles everything.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..runtime.kernels import get_kernel
from ..runtime.params import Params, declare
from .codegen import engine_module

LOG = 128  # the outcome log's entries (a ring, indexed by the step counter; more than 3 x outcome_every)
#: The gate buffer (shaders/gate.wgsl ``gate``), by name: the last step's skip flag, the steps applied, the steps
#: run (both counters wrap at 2^32), set when a step found no row for its applied count, the skip flag of step j at
#: ``log[j % LOG]``; then ``args``: the later dispatches' arguments (3 words each), then their pristine copy.
GATE = Params("Gate", "last_skip", "applied", "steps", "overrun", f"log:u32[{LOG}]", tail="args")
#: The candidate buffer (gate.wgsl ``cand``): the applied count that selects row 0, the rows, then the rows' words.
TABLE = Params("Table", "applied0", "rows", tail="words")
#: The device loss-scale protocol's first words, which gate.wgsl reads (rlx_gpu/engine/steps.py; GradScaler's
#: LossScale, rlx_gpu/addons/amp.py, begins with them).
LOSS_SCALE_HEAD = ("scale:f32", "tracker", "found")
declare("gate.wgsl", GATE, TABLE, Params("LossScaleHead", *LOSS_SCALE_HEAD), LOG=LOG)
READ_BYTES = GATE.nbytes  # (what the host copies back: the counters and the log)
ARGS_BYTE = GATE.offset("args")
MASK = 0xFFFFFFFF
ROWS_AHEAD = 32            # rows a checked run's table holds beyond its unsettled steps


class Outcome:
    """Whether a step was skipped on its inf/NaN check, read back from the device only when asked."""

    __slots__ = ("_opt", "_skipped", "index")

    def __init__(self, opt, skipped, index: int = -1):
        self._opt, self._skipped, self.index = opt, skipped, index

    @property
    def skipped(self) -> bool:
        if self._skipped is None:
            self._opt._settle()
        return self._skipped

    @property
    def settled(self) -> bool:
        """Whether the outcome is known on the host without reading the device."""
        return self._skipped is not None


@dataclass
class Read:
    """A copy of the gate buffer's counters and log after step ``j`` (the device's step counter), being mapped."""
    slot: object
    promise: object
    j: int


@dataclass
class Run:
    """Checked steps recorded since the live host state (the run's base, row ``row`` of the record table)."""
    key: tuple
    row: int
    outcomes: list = field(default_factory=list)  # one per step not settled yet, in order
    reads: list = field(default_factory=list)

    @property
    def u(self) -> int:
        return len(self.outcomes)


class GateMixin:
    """Checked runs, settling their outcomes, and the gate passes of the GPU optimizers."""

    outcome_every = 32  # a checked step's outcomes are copied back every this many steps (1: every step)

    def _init_gate(self) -> None:
        self._run: Run | None = None
        self._c = self._j = 0  # the device's counters (applied steps, steps) at the live host state
        self._gate_k = None
        self._gate_args = None
        self._cand = self._on_device = None  # the candidate records' buffer, and the table in it

    def _max_dispatches(self) -> int:
        """The most dispatches a step records: every pass over every chunk of every bucket, plus the clip passes
        (an optimizer that records its own, Muon, says how many)."""
        chunks = sum(b.layout.num_chunks for b in self.buckets)
        return (len(self.passes) + 3) * chunks + 8

    def _run_key(self, key: tuple, active) -> tuple:
        """What must stay the same for the host state after a run to depend on its applied count alone."""
        return key[-1], self._need(key, active), key[0] if self._scalars else None

    def _checked_row(self, key: tuple, active) -> None:
        """Make the record table on the device hold the next checked step's row for every applied count."""
        run, rk = self._run, self._run_key(key, active)
        if run is not None and (run.key != rk or run.u >= LOG - self.outcome_every):
            self._settle()
            run = None
        if run is None:
            tb, row = self._plain_row(key, active)
            run = self._run = Run(rk, row)
            self._upload_table(tb, row, header_only=self._on_device is tb)
            return
        run.key = rk  # (equal; the quick path compares by identity)
        tb = self._rtable
        if tb.key != key or run.row + run.u >= tb.rows:  # a new table from the run's base (the live state)
            rows = run.u + 1 + (self._rows_after(tb, key, ROWS_AHEAD) if tb.key == key or tb.served > 1 else 0)
            self._rtable, self._rrow, run.row = self._new_table(key, active, rows), 0, 0
            self._upload_table(self._rtable, 0)

    def _upload_table(self, tb, row: int, header_only: bool = False) -> None:
        """``tb`` into the candidate buffer, with the counter offset that maps the applied count at the live
        state to ``row``."""
        wdev = self._hyper.size // 4  # (the choose pass reads rows at the hyper buffer's own, padded, length)
        need = TABLE.nbytes + 4 * tb.rows * wdev
        if self._cand is None or self._cand.size < need:
            self._cand = self.device.buffer(max(need, 2 * self._hyper.size), f"{type(self).__name__}.records")
            self._binds.clear()  # (the gate passes' bind groups and the quick programs bind it)
            header_only = False
        head = TABLE.pack(applied0=(self._c - row) & MASK, rows=tb.rows, words=())
        self.device.queue.write_buffer(self._cand, 0, head)
        if not header_only:
            words = tb.words if tb.words.shape[1] == wdev else np.pad(tb.words, ((0, 0), (0, wdev - tb.words.shape[1])))
            self.device.queue.write_buffer(self._cand, TABLE.offset("words"), words)
            self._on_device = tb

    def _record_outcome(self, enc, args: list):
        """After a checked step's dispatches: its Outcome (registered once submitted), and (every ``outcome_every``
        steps) the copy of the counters and log into a mappable slot (returned; mapped once submitted)."""
        if args != self._gate_args:  # (the dispatches' arguments, which gate_step restores or zeroes each step)
            cap = self._gate_cap
            self.device.queue.write_buffer(self._gate, ARGS_BYTE + 12 * cap, np.array(args, np.uint32))
            self._gate_args = list(args)
        out = Outcome(self, None, self._j + self._run.u)
        return out, self._outcome_copy(enc, out.index)

    def _outcome_copy(self, enc, j: int):
        """Step ``j``'s copy of the counters and log into a mappable slot, every ``outcome_every`` steps (the slot,
        mapped once submitted; None for the other steps)."""
        if (j + 1) % self.outcome_every:
            return None
        slot = self._outcome_slot()
        enc.copy_buffer_to_buffer(self._gate, 0, slot, 0, READ_BYTES)
        return slot

    def _mapped(self, slot) -> None:
        """The step that copied into ``slot`` was submitted: request its mapping."""
        if slot is not None:
            # (NOSYNC: wgpu-py would submit an empty command buffer first, which only matters for a buffer never written)
            self._run.reads.append(Read(slot, slot.map_async("READ_NOSYNC", 0, READ_BYTES), self._j + self._run.u))

    def _outcome_slot(self):
        if self._slots:
            return self._slots.pop()
        u = self.device.wgpu.BufferUsage
        return self.device.device.create_buffer(size=READ_BYTES, usage=u.MAP_READ | u.COPY_DST,
                                                label=f"{type(self).__name__}.outcomes")

    def _settle_old(self) -> None:
        """Read the copies that are ``outcome_every`` steps old (their steps are done by now)."""
        run = self._run
        while run is not None and run.reads and self._j + run.u - run.reads[0].j >= self.outcome_every:
            self._process(run.reads.pop(0))
            run = self._run

    def _settle(self) -> None:
        """Read back the outcomes of every step not settled yet and fix the host state."""
        run = self._run
        if run is None:
            return
        if not run.reads or run.reads[-1].j != self._j + run.u:  # (a copy after the last step, submitted now)
            slot = self._outcome_slot()
            enc = self.device.device.create_command_encoder()
            enc.copy_buffer_to_buffer(self._gate, 0, slot, 0, READ_BYTES)
            self.device.submit(enc)
            self._mapped(slot)
        while self._run is not None:
            if not self._run.reads:  # (a step that never ran: its submission failed)
                raise RuntimeError(f"rlx_gpu: {type(self).__name__}: a checked step's outcome never came back")
            self._process(self._run.reads.pop(0))

    def _process(self, read: Read) -> None:
        """One copy of the counters and log: the outcomes of the steps up to it, and the run's base moved there."""
        read.promise.sync_wait()
        w = GATE.unpack(read.slot.read_mapped(0, READ_BYTES))
        read.slot.unmap()
        self._slots.append(read.slot)
        run, c, j, log = self._run, w["applied"], w["steps"], w["log"]
        if w["overrun"] or (j - read.j) & MASK:
            raise RuntimeError(f"rlx_gpu: {type(self).__name__}: a checked step read past its record table or "
                               "its outcome copy is not where it was recorded (an engine bug; the optimizer's state "
                               "is no longer known)")
        done, applied = (j - self._j) & MASK, (c - self._c) & MASK
        for o in run.outcomes[:done]:
            o._skipped = bool(log[o.index % LOG])
        del run.outcomes[:done]
        run.row += applied
        last = bool(log[(j - 1) % LOG]) if done else self._last_skipped
        self._set_live(self._rtable.state(run.row, last))
        self._c, self._j, self._rrow = c, j, run.row
        if not run.outcomes:
            self._run = None

    def _gate_kernels(self) -> dict:
        if self._gate_k is None:
            code = engine_module("gate.wgsl", self.record)
            self._gate_k = {e: get_kernel(self.device, "gate.wgsl", code, e) for e in ("choose", "gate_step")}
        return self._gate_k

    def _gate_buffers(self):
        if not hasattr(self, "_gate"):
            u = self.device.wgpu.BufferUsage
            self._gate_cap = self._max_dispatches()
            self._gate = self.device.buffer(READ_BYTES + 24 * self._gate_cap, f"{type(self).__name__}.gate",
                                            usage=u.STORAGE | u.INDIRECT | u.COPY_DST | u.COPY_SRC)
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

