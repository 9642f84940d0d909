"""The step: records, grads, dispatches, and the checked step's gate with no host round trip.

A checked step (``skip_nonfinite``, a loss scale) is skipped whole on the device when any grad is inf or NaN: the
check (clip.wgsl with CHECK, in the same read of the grads as the clip's norm) and a one-workgroup gate pass
(gate.wgsl) zero the grids of every later dispatch of the step (they are indirect). The host cannot know whether
the previous checked step was applied (it reads each outcome back one step later), so it writes the records for
both outcomes and a ``choose`` pass picks one on the device; at most two steps are unsettled at a time, and the host state is a tree keyed by their outcomes.

A device loss scale (``step(loss_scale=...)``, what GradScaler passes) is any object with ``buffer`` (a wgpu
buffer whose word 0 is the scale as float32 and word 2 a found-inf flag the gate sets on a skip),
``encode_pending(pass)`` (records an update still pending at the start of the step's pass) and ``committed()``
(called once the step was submitted, so a failed step leaves the update pending).
"""
from __future__ import annotations

import numpy as np

from ..core.groups import MAX_STEP, check_grads, scaled
from ..core.sparse import split_sparse
from ..core.lowp import step_keys
from ..core.sync import locked
from ..runtime.arena import DeviceTensor
from ..runtime.kernels import ComputePass
from .gating import GateMixin, Outcome


class StepMixin(GateMixin):
    """``step``, ``last_step_skipped`` and the host bookkeeping of the GPU optimizers."""

    _grad_mul = 1.0  # the grads' multiplier in the next steps' records (rlx_gpu.distributed sets a global clip's)

    def _init_host_state(self):
        spec, n = self.spec, len(self._names)
        self._steps = np.zeros(n, np.int64)
        # scalar states (one float32 per tensor, e.g. NAdam's mu_product) live on the host; fill() advances them
        self._scalars = {s: np.array([spec.init_value(s, self.param_groups[g]) for g in self._group_of], np.float32)
                         for s in spec.scalar_states}
        self._materialized = [frozenset() for _ in range(n)]  # the state buffers each tensor has
        self._last_skipped = False
        self._unsettled: list = []
        self._tree = None
        self._gate_k = None
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
    def step(self, grads=None, *, loss_scale=None, closure=None):
        """One optimizer step; returns ``closure``'s loss (None without one).

        ``grads``: dict name -> NumPy array (the param's dtype or float32) or DeviceTensor; a missing name means
        "no gradient" (that tensor, its state and its step count stay as they are). ``None`` steps every tensor
        using the device gradient slots ``self.grads``. Everything is checked before any GPU work. With
        ``skip_nonfinite`` (or a ``loss_scale``) a step whose grads hold inf or NaN changes nothing
        (``last_step_skipped``). ``loss_scale``: a device loss scale (see :mod:`rlx_gpu.engine.steps`); the
        kernels multiply the grads by 1/scale read on the device. Built from torch tensors (``model.parameters()``):
        ``None`` takes each tensor's ``.grad`` and the tensors hold the new values afterwards
        (:mod:`rlx_gpu.core.torchio`; a sparse ``.grad`` is taken as a RowSparse). ``closure`` (or a callable as
        ``grads``): called first, as torch's. A grad may be a :class:`rlx_gpu.RowSparse` (some rows of the
        tensor) on the optimizers that take them (:mod:`rlx_gpu.engine.sparse`)."""
        loss, grads = self._torch_prologue(grads, closure)
        check = self.skip_nonfinite or loss_scale is not None
        grads, sparse = split_sparse(grads)  # RowSparse grads: rlx_gpu.engine.sparse
        self._refuse_dense(grads)
        if sparse:
            more, sparse = self._split_sparse_grads(sparse, check)
            grads = {**grads, **more}
        if grads or not (sparse or (grads == {} and self.spec.dense_refusal)):  # (SparseAdam, no grads: nothing)
            self._step(grads, check=check, loss_scale=loss_scale)
        if sparse:
            self._settle()
            self._sparse_step(sparse)
        self._torch_epilogue()
        return loss

    @property
    @locked
    def last_step_skipped(self) -> bool:
        """Whether the last step was skipped on its inf/NaN check (reads the outcome back if still unknown)."""
        self._settle()
        return self._last_skipped

    @locked
    def _step(self, grads, check: bool, loss_scale=None) -> Outcome:
        active = self._begin_checks(grads, check)
        out = self._encode_step(grads, active, check, loss_scale)
        if loss_scale is not None:
            loss_scale.committed()  # (before the host work below: the step is submitted whatever it does)
        self._after_submit()
        return out

    @locked
    def _begin_checks(self, grads, check: bool) -> np.ndarray:
        """The groups and ``grads`` checked (nothing changes if they are wrong), the tensors with a grad, and the
        outcomes of earlier checked steps settled as far as needed."""
        self._validate_groups()
        n = len(self._names)
        if grads is None:
            active = np.ones(n, bool)
        else:
            check_grads(type(self).__name__, grads, self._shapes, DeviceTensor, self.device,
                        dtypes=self._grad_dtypes())
            active = np.zeros(n, bool)
            active[[self._index[k] for k in grads]] = True
        self._settle(keep=1 if check else 0)
        return active

    def _encode_step(self, grads, active, check, loss_scale) -> Outcome:
        enc = self.device.device.create_command_encoder()
        st = self._step_begin(enc, grads, active, check, loss_scale)
        return self._step_end(enc, st)

    # A step in two halves, so that several optimizers can share one submission (rlx_gpu.partition): the first
    # records the uploads, the records and the pass that reads the grads (clip norm, inf/NaN check) and leaves it
    # open in ``st["cp"]``; the second records the work (gated on the check) and submits (unless ``submit=False``).
    def _step_begin(self, enc, grads, active, check, loss_scale, pending: bool = True) -> dict:
        n = len(self._names)
        if grads is not None:
            self._upload_grads(enc, grads)
        # the host state for each outcome of the unsettled step (one branch when everything is settled: the live
        # state, which an unchecked step reads in place; a checked one keeps a snapshot for its skipped outcome)
        branches = [(False, self._tree[False]), (True, self._tree[True])] if self._unsettled \
            else [(False, self._snapshot() if check else None)]
        need = {}  # state names per group this step
        for gi in set(self._group_of[active].tolist()):
            need[gi] = frozenset(self.spec.state_names(self.param_groups[gi]))
            for s in need[gi]:
                self._ensure(s)
        recs, nexts = [], []
        for _, snap in branches:
            if snap is not None:
                self._restore_snapshot(snap)
            fresh, mat = [frozenset()] * n, list(self._materialized)
            for t in np.flatnonzero(active):
                f = need[self._group_of[t]] - mat[t]
                if f:
                    fresh[t], mat[t] = f, mat[t] | f
            steps = np.minimum(self._steps + active, MAX_STEP)  # counters saturate, never wrap
            self._pending = {k: v.copy() for k, v in self._scalars.items()}
            recs.append(self._records(active, steps, fresh, mat, device_scale=loss_scale is not None))
            scalars = {k: np.where(active, self._pending[k], v) for k, v in self._scalars.items()}
            nexts.append((steps, scalars, mat, False))
        all_active = bool(active.all())
        self._active = active  # (which tensors have a grad this step: for optimizers that record their own work)
        st = dict(check=check, branches=branches, nexts=nexts, recs=recs)
        if not check:
            self.device.queue.write_buffer(self._hyper, 0, recs[0])
            st["cp"] = ComputePass(enc)
            if self.clip_grad_norm is not None:
                self._encode_clip(st["cp"], scale_grads=False, flat=all_active)  # the kernels multiply by the factor
            return st
        # choose the records on the device, check, gate every later dispatch on the check
        gate = self._gate_buffers()
        # the second set at the hyper buffer's own (padded) length, where the choose pass looks for it
        self.device.queue.write_buffer(self._cand, 0, recs[0])
        self.device.queue.write_buffer(self._cand, self._hyper.size, recs[-1])
        k, binds = self._gate_kernels(), self._gate_binds(loss_scale)
        cp = st["cp"] = ComputePass(enc, gate, 16, self._gate_cap)
        if loss_scale is not None and pending:  # (a shared submission records the scaler's update once)
            loss_scale.encode_pending(cp)
        k["choose"].dispatch(cp, binds["choose"], -(-recs[0].size // 256))
        # the check and (clipping on) the norm in one read of the grads, before the gate
        self._encode_clip(cp, scale_grads=False, flat=all_active, check=True, norm=self.clip_grad_norm is not None)
        st["gate"], st["binds"] = gate, binds
        return st

    def _step_suspend(self, st) -> None:
        """End the pass ``_step_begin`` left open (another optimizer's work follows in the encoder); ``_step_end``
        continues it in a new pass."""
        st["ended"], st["cp"] = st["cp"], None
        st["ended"].end()

    def _step_end(self, enc, st, submit: bool = True) -> Outcome:
        """``st["cp"]``: the pass ``_step_begin`` left open, or None (suspended: a new one continues it)."""
        cp = st["cp"] or st["ended"].resume(enc)
        if not st["check"]:
            self._encode(cp)
            cp.end()
            if submit:
                self._submit(enc)
            self._tree = None
            self._steps, self._scalars, self._materialized, self._last_skipped = st["nexts"][0]  # (made fresh above)
            self._norm_taken = self.clip_grad_norm is not None
            return Outcome(self, False)
        gate = st["gate"]
        self._gate_kernels()["gate_step"].dispatch(cp, st["binds"]["gate_step"], 1)
        cp.gated = True
        self._encode(cp)
        cp.end()
        self.device.queue.write_buffer(gate, 16, np.array(cp.args, np.uint32))
        u = self.device.wgpu.BufferUsage
        slot = self._slots.pop() if self._slots else self.device.device.create_buffer(
            size=16, usage=u.MAP_READ | u.COPY_DST, label=f"{type(self).__name__}.outcome")
        enc.copy_buffer_to_buffer(gate, 0, slot, 0, 4)
        if submit:
            self._submit(enc)
        self._norm_taken = self.clip_grad_norm is not None
        outcome = Outcome(self, None)
        st["slot"] = slot  # (a shared submission maps it after submitting: _step_mapped)
        if submit:
            self._step_mapped(st, outcome)
        return outcome

    def _after_submit(self) -> None:
        """Host work once a step is submitted and a loss scale's update committed (SOAP's decompositions); a shared
        submission (Partition) calls it for each part after its own commit."""

    def _step_mapped(self, st, outcome) -> None:
        """After the submission: the outcome's read-back requested, and the host state's new tree."""
        slot, nexts, branches = st["slot"], st["nexts"], st["branches"]
        # (NOSYNC: wgpu-py would submit an empty command buffer first, which only matters for a buffer never written)
        self._unsettled.append((slot, slot.map_async("READ_NOSYNC", 0, 4), outcome))
        # the new tree: keyed by the older unsettled outcome (if any), then by this step's
        leaf = [{False: nx, True: (sn[0], sn[1], sn[2], True)} for nx, (_, sn) in zip(nexts, branches)]
        self._tree = {False: leaf[0], True: leaf[1]} if len(branches) == 2 else leaf[0]

    def _submit(self, enc):
        try:
            self.device.submit(enc)
        except Exception as e:
            raise RuntimeError(f"rlx_gpu: {type(self).__name__} step ({self.shader}) failed on "
                               f"{self.device.name}: {e}") from e

    def _records(self, active, steps, fresh, mat, device_scale=False) -> np.ndarray:
        """The hyper buffer's words for this step: n tensor records, then the global record."""
        n, rec = len(self._names), self.record
        cols, flags = {}, np.zeros(n, np.uint32)
        t_all = np.maximum(steps, 1).astype(np.float64)
        for g, sel in zip(self.param_groups, self._group_members):
            if not len(sel):
                continue
            c, f = self.fill(scaled(g, self._scale[sel], self.spec.lr_keys), t_all[sel], [fresh[t] for t in sel], sel)
            for k, v in c.items():
                cols.setdefault(k, np.zeros(n))[sel] = v
            flags[sel] = rec.flags(len(sel), dict(f, maximize=bool(g.get("maximize", False))))
        key = tuple(mat)
        if key not in self._has_bits:
            if len(self._has_bits) > 64:
                self._has_bits.clear()
            self._has_bits[key] = rec.flags(n, {f"has_{s}": [s in m for m in mat] for s in self.arena_states})
        flags |= self._static_bits | self._has_bits[key] | (active.astype(np.uint32) * np.uint32(rec.bit["active"]))
        words = {"first_block": self._first_block, "num_blocks": self._num_blocks}
        if self._sr.any():
            words["rkey"] = step_keys(self.precision["rounding_seed"], steps, self._name_hash)
        recs = rec.pack(n, cols, flags, words)
        glob = rec.pack_global(grad_mul=self._grad_mul, inv_scale=1.0, norm_p=2.0,  # (a device loss scale sets both on the device)
                               max_norm=self.clip_grad_norm if self.clip_grad_norm is not None else 0.0,
                               device_scale=1 if device_scale else 0)
        return np.ascontiguousarray(np.concatenate([recs, glob[None]]))

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
