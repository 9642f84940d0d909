"""The step: records, grads, dispatches, and the checked step's gate with no host round trip.

A checked step (``skip_nonfinite``, a loss scale) is skipped whole on the device when any grad is inf or NaN: the
check (clip.wgsl with CHECK, in the same read of the grads as the clip's norm) and a one-workgroup gate pass
(gate.wgsl) zero the grids of every later dispatch of the step (they are indirect). The host does not wait for the
outcomes: the records of the next steps come from a table with a row per count of applied steps, and the device
picks the row (:mod:`.tables`, :mod:`.gating`); outcomes are read back every few steps or when asked.

A device loss scale (``step(loss_scale=...)``, what GradScaler passes) is any object with ``buffer`` (a wgpu
buffer that begins with :data:`rlx_gpu.engine.gating.LOSS_SCALE_HEAD`'s fields: the scale as float32, a word the
step leaves alone, and a found-inf flag the gate sets on a skip),
``encode_pending(pass)`` (records an update still pending at the start of the step's pass) and ``committed()``
(called once the step was submitted, so a failed step leaves the update pending).

A step in two halves (:meth:`StepMixin._step_begin`, :meth:`StepMixin._step_end`, with a :class:`StepState`
between them) lets several optimizers share one submission: :class:`rlx_gpu.engine.StepGroup`.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..core.groups import check_grads
from ..core.numerics import check_device_loss_scale
from ..core.sparse import split_sparse
from ..core.sync import locked
from ..runtime.arena import DeviceTensor
from ..runtime.kernels import ComputePass
from .gating import ARGS_BYTE, GateMixin, Outcome
from .quick import QuickMixin
from .tables import TableMixin


@dataclass
class StepState:
    """A step between its halves: the pass left open (or ended, to be resumed), and what the second half needs."""
    check: bool
    row: int                        # an unchecked step's row of the record table
    cp: ComputePass | None
    ended: ComputePass | None = None
    binds: dict | None = None       # the gate passes' bind groups (a checked step)
    slot: object = None             # where this step copied its outcomes (mapped once submitted)
    outcome: Outcome | None = None


class StepMixin(QuickMixin, TableMixin, GateMixin):
    """``step``, ``last_step_skipped`` and the host bookkeeping of the GPU optimizers."""

    def _init_host_state(self):
        spec, n = self.spec, len(self._names)
        self._steps = np.zeros(n, np.int64)
        # scalar states (one float32 per tensor, e.g. NAdam's mu_product) live on the host; fill() advances them
        self._scalars = {s: np.array([spec.init_value(s, self.param_groups[g]) for g in self._group_of], np.float32)
                         for s in spec.scalar_states}
        self._materialized = [frozenset() for _ in range(n)]  # the state buffers each tensor has
        self._last_skipped = False
        self._init_tables()
        self._init_gate()
        if spec.eager_state:
            self._reset_state(range(n))

    def _ensure(self, s: str) -> None:
        """Make state arena ``s`` in every bucket (its bind groups are rebuilt): a state buffer in the state dtype,
        or a grad-like arena (``grad_like``: Sophia-H's estimates) in the grads' dtype."""
        if s in self.arena_states + self.grad_like and any(s not in b.states for b in self.buckets):
            for b in self.buckets:
                b.state(s, b.sig.grad if s in self.grad_like else None)
            self._binds.clear()

    def _reset_state(self, tensors):
        """Tensors back to step 0 with only their eager state, at its initial value."""
        for s in self.spec.eager_state:
            self._ensure(s)
        for t in tensors:
            self._steps[t] = 0
            g = self.param_groups[self._group_of[t]]
            self._materialized[t] = frozenset(self.spec.eager_state)
            for s, v in self._scalars.items():
                v[t] = self.spec.init_value(s, g)
            b, i = self._where[t]
            for s, arena in b.states.items():
                arena.fill(i, self.spec.init_value(s, g) if s in self.spec.eager_state else 0.0)

    @locked
    def step(self, grads=None, *, loss_scale=None, closure=None, grad_mul=None):
        """One optimizer step; returns ``closure``'s loss (None without one).

        ``grads``: dict name -> NumPy array (the param's dtype or float32) or DeviceTensor; a missing name means
        "no gradient" (that tensor, its state and its step count stay as they are). ``None`` steps every tensor
        using the device gradient slots ``self.grads``. Everything is checked before any GPU work. With
        ``skip_nonfinite`` (or a ``loss_scale``) a step whose grads hold inf or NaN changes nothing
        (``last_step_skipped``). ``loss_scale``: a device loss scale (see :mod:`rlx_gpu.engine.steps`); the
        kernels multiply the grads by 1/scale read on the device. ``grad_mul``: a factor the kernels multiply
        every grad by in this step (a clip factor computed elsewhere, as rlx_gpu.distributed does; rounded to
        float32; not with ``clip_grad_norm`` or a ``loss_scale``, which set it themselves). Built from torch
        tensors (``model.parameters()``): ``None`` takes each tensor's ``.grad`` and the tensors hold the new
        values afterwards (:mod:`rlx_gpu.core.torchio`; a sparse ``.grad`` is taken as a RowSparse). ``closure``
        (or a callable as ``grads``): called first, as torch's. A grad may be a :class:`rlx_gpu.RowSparse` (some
        rows of the tensor) on the optimizers that take them (:mod:`rlx_gpu.engine.sparse`)."""
        if (grads is None and closure is None and loss_scale is None and grad_mul is None and self._quick_ok
                and self._quick_step(self.skip_nonfinite)):
            return None  # (the steady state: .quick)
        check_device_loss_scale(type(self).__name__, loss_scale)
        mul = 1.0 if grad_mul is None else self._grad_mul_of(grad_mul, loss_scale)
        loss, grads = self._torch_prologue(grads, closure)
        check = self.skip_nonfinite or loss_scale is not None
        grads, sparse = split_sparse(grads, type(self).__name__)  # RowSparse grads: rlx_gpu.engine.sparse
        self._refuse_dense(grads)
        if sparse:
            if mul != 1.0:
                raise ValueError(f"{type(self).__name__}.step: grad_mul does not apply to RowSparse grads")
            more, sparse = self._split_sparse_grads(sparse, check)
            grads = {**grads, **more}
        if grads or not (sparse or (grads == {} and self.spec.dense_refusal)):  # (SparseAdam, no grads: nothing)
            self._step(grads, check=check, loss_scale=loss_scale, grad_mul=mul)
        if sparse:
            self._settle()
            self._sparse_step(sparse)
        self._torch_epilogue()
        return loss

    def _grad_mul_of(self, grad_mul, loss_scale) -> float:
        name = type(self).__name__
        if isinstance(grad_mul, bool) or not isinstance(grad_mul, (int, float, np.floating, np.integer)):
            raise TypeError(f"{name}.step: grad_mul must be a number, got {type(grad_mul).__name__}")
        if self.clip_grad_norm is not None or loss_scale is not None:
            raise ValueError(f"{name}.step: grad_mul does not combine with clip_grad_norm or a loss_scale (they set "
                             "the grads' multiplier themselves)")
        return float(np.float32(grad_mul))

    @property
    @locked
    def last_step_skipped(self) -> bool:
        """Whether the last step was skipped on its inf/NaN check (reads the outcomes back if still unknown)."""
        self._settle()
        return self._last_skipped

    def _step(self, grads, check: bool, loss_scale=None, grad_mul: float = 1.0) -> Outcome:
        """(The caller holds the lock, as for every private step method.)"""
        active = self._begin_checks(grads, check)
        enc = self.device.device.create_command_encoder()
        st = self._step_begin(enc, grads, active, check, loss_scale, grad_mul=grad_mul)
        out = self._step_end(enc, st)
        if loss_scale is not None:
            loss_scale.committed()  # (before the host work below: the step is submitted whatever it does)
        self._after_submit()
        return out

    def _begin_checks(self, grads, check: bool) -> np.ndarray:
        """The groups and ``grads`` checked (nothing changes if they are wrong), the tensors with a grad, and the
        outcomes of earlier checked steps settled as far as needed (all of them before an unchecked step)."""
        self._validate_groups()
        if grads is None:
            active = self._all_active
        else:
            check_grads(type(self).__name__, grads, self._shapes, DeviceTensor, self.device,
                        dtypes=self._grad_dtypes())
            active = np.zeros(len(self._names), bool)
            active[[self._index[k] for k in grads]] = True
        if check:
            self._settle_old()
        else:
            self._settle()
        return active

    # A step in two halves, so that several optimizers can share one submission (StepGroup): the first records
    # the uploads and the pass that reads the grads (clip norm, inf/NaN check) and leaves it open in ``st.cp``; the
    # second records the work (gated on the check) and submits (unless ``submit=False``).
    def _step_begin(self, enc, grads, active, check, loss_scale, pending: bool = True,
                    grad_mul: float = 1.0) -> StepState:
        self._grad_mul = grad_mul
        key = self._table_key(active, loss_scale is not None)
        if check:
            self._gate_buffers()
            self._checked_row(key, active)  # (may settle the outcomes first)
            row = -1
        else:
            tb, row = self._plain_row(key, active)
        if grads is not None:
            self._upload_grads(enc, grads)
        self._active = active  # (which tensors have a grad this step: for optimizers that record their own work)
        all_active = active is self._all_active or bool(active.all())
        if not check:
            self.device.queue.write_buffer(self._hyper, 0, tb.words[row])
            cp = ComputePass(enc)
            if self.clip_grad_norm is not None:
                self._encode_clip(cp, scale_grads=False, flat=all_active)  # the kernels multiply by the factor
            return StepState(False, row, cp)
        # choose the records on the device, check, gate every later dispatch on the check
        k, binds = self._gate_kernels(), self._gate_binds(loss_scale)
        cp = ComputePass(enc, self._gate, ARGS_BYTE, self._gate_cap)
        if loss_scale is not None and pending:  # (a shared submission records the scaler's update once)
            loss_scale.encode_pending(cp)
        k["choose"].dispatch(cp, binds["choose"], -(-self._hyper.size // 1024))
        # the check and (clipping on) the norm in one read of the grads, before the gate
        self._encode_clip(cp, scale_grads=False, flat=all_active, check=True, norm=self.clip_grad_norm is not None)
        return StepState(True, row, cp, binds=binds)

    def _step_suspend(self, st: StepState) -> None:
        """End the pass ``_step_begin`` left open (another optimizer's work follows in the encoder); ``_step_end``
        continues it in a new pass."""
        st.ended, st.cp = st.cp, None
        st.ended.end()

    def _step_end(self, enc, st: StepState, submit: bool = True) -> Outcome:
        """``st.cp``: the pass ``_step_begin`` left open, or None (suspended: a new one continues it). The host
        bookkeeping waits for the submission (``_step_submitted``): a step that fails to submit changes nothing."""
        cp = st.cp or st.ended.resume(enc)
        if not st.check:
            self._encode(cp)
            cp.end()
            st.outcome = Outcome(self, False)
        else:
            self._gate_kernels()["gate_step"].dispatch(cp, st.binds["gate_step"], 1)
            cp.gated = True
            self._encode(cp)
            cp.end()
            st.outcome, st.slot = self._record_outcome(enc, cp.args)
        if submit:
            self._submit(enc)
            self._step_submitted(st)
        return st.outcome

    def _step_submitted(self, st: StepState) -> None:
        """After the step's submission: the host state advanced (an unchecked step), or the outcome registered and
        the mapping of its copy requested (a checked one)."""
        self._norm_taken = self.clip_grad_norm is not None
        tb = self._rtable
        tb.served += 1
        if not st.check:
            self._set_live(tb.state(st.row + 1, False))
            self._rrow = st.row + 1
            return
        self._run.outcomes.append(st.outcome)
        self._mapped(st.slot)

    def _after_submit(self) -> None:
        """Host work once a step is submitted and a loss scale's update committed (SOAP's decompositions); a shared
        submission (StepGroup) calls it for each part after its own commit."""

    def _submit(self, enc):
        try:
            self.device.submit(enc)
        except Exception as e:
            raise RuntimeError(f"rlx_gpu: {type(self).__name__} step ({self.shader}) failed on "
                               f"{self.device.name}: {e}") from e

    def _upload_grads(self, enc, grads):
        """Host grads in one batched upload per bucket now; DeviceTensor grads as copies recorded into ``enc``. A
        grad that is another slot of this optimizer's grads is read as it was before this call (into a staging
        buffer first: a buffer cannot be copied onto itself, and the uploads below may overwrite that slot)."""
        host, copies, staged = {}, [], []  # host: name -> array
        own = {id(b.grad) for b in self.buckets}
        for k, g in grads.items():
            t = self._index[k]
            b, i = self._where[t]
            if isinstance(g, DeviceTensor):
                if g._arena is b.grad and g._index == i:
                    continue
                src, dst = g.bindings(), self.grads[k].bindings()
                if [x["size"] for x in src] != [x["size"] for x in dst]:  # chunked differently
                    host[k] = g.numpy()
                elif id(g._arena) in own:
                    staged += zip(src, dst)
                else:
                    copies += zip(src, dst)
        for k, g in grads.items():
            if not isinstance(g, DeviceTensor):
                host[k] = g
        if staged:
            tmp = self.device.buffer(sum(s["size"] for s, _ in staged), f"{type(self).__name__}.grad staging")
            pre, off = self.device.device.create_command_encoder(), 0
            for s, d in staged:
                pre.copy_buffer_to_buffer(s["buffer"], s["offset"], tmp, off, s["size"])
                copies.append(({"buffer": tmp, "offset": off, "size": s["size"]}, d))
                off += s["size"]
            self.device.submit(pre)
        self._write_host_grads(host)
        for s, d in copies:
            enc.copy_buffer_to_buffer(s["buffer"], s["offset"], d["buffer"], d["offset"], s["size"])
