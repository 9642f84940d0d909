"""The one GPU optimizer base: param groups, arenas, the scalar buffer, dispatch, state dicts.

A family module subclasses :class:`Optimizer` with ``spec`` (its NumPy twin class, which holds the
defaults, state names and validation), ``shader`` and ``_fill``: the per-tensor scalars of the record
its kernel reads from the ``hyper`` buffer (layout in ``shaders/common.wgsl``).
"""
from __future__ import annotations

import math
import threading

import numpy as np

from ._groups import MAX_STEP, check_grads, check_state_dict, parse_params, resolve_lr_scale, scaled
from ._sync import locked
from .arena import Arena, DeviceTensor, Layout
from .checkpoint import Checkpointable
from .device import get_device
from .kernels import ComputePass, get_kernel

__all__ = ["Optimizer"]

REC = 16  # words per tensor record in the hyper buffer (see shaders/common.wgsl)
ACTIVE, MAXIMIZE = 1, 2


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


class Optimizer(Checkpointable):
    """Base class of the GPU optimizers. Not used directly. (save, load, restore: :class:`Checkpointable`.)"""

    spec = None         # the NumPy twin class: defaults, state names, validation
    shader: str = ""    # shaders/<family>.wgsl
    entries = ("step",)  # the shader's entry points this class compiles
    passes = None        # those a step runs, in order (default: all entries)
    per_tensor = ()      # passes dispatched once with a workgroup per tensor (not over every chunk's blocks)
    WG, EPT = 256, 2     # workgroup size, vec4s per thread; a block is WG*EPT*4 elements
    aux_states = ()      # states the family keeps outside the arenas (Adafactor's factored moments)
    constants: dict = {}  # further WGSL override constants of the family's shader
    CLIP_SHAPE = (256, 2)  # workgroup size, vec4s per thread of the gradient-norm reduction (same block size)
    CLIP_BPW = 4           # blocks per workgroup in the reduction over the block table
    CLIP_FLAT_WGS = 1024   # workgroups per chunk of the flat reduction (every tensor counted); PERF_NOTES.md 19
    CLIP_FLAT_U = 8        # vec4 loads per thread per round of the flat reduction

    def __init__(self, params, *, device=None, lr_scale=None, clip_grad_norm=None, skip_nonfinite=False, **hyper):
        name = type(self).__name__
        spec = self.spec
        #: Serialises this optimizer's calls (re-entrant); hold it to make several calls atomic.
        self.lock = threading.RLock()
        self.defaults = {**spec.defaults, **hyper}
        self.param_groups, arrays = parse_params(name, params, self.defaults)
        for g in self.param_groups:
            spec.validate(g)
        self.device = dev = get_device(device)
        self._names = list(arrays)
        #: Per-tensor multiplier of the group lr (``lr_scale=``), applied in the kernel's scalars.
        self.lr_scale = resolve_lr_scale(name, lr_scale, self._names)
        self._scale = np.array([self.lr_scale[n] for n in self._names], np.float64)
        if clip_grad_norm is not None:
            from .clip import _check_max_norm
            _check_max_norm(clip_grad_norm)
        #: Global L2-norm clip folded into every step (None: off); may be changed between steps.
        self.clip_grad_norm = clip_grad_norm
        #: Skip a step whose grads hold inf or NaN: params, state and step counts stay bit-identical.
        self.skip_nonfinite = bool(skip_nonfinite)
        self._last_skipped = False
        self._norm_taken = False  # whether the last step (or stand-alone clip) computed a gradient norm
        # Checked steps whose outcome the host has not read yet (oldest first), and the host state as a tree
        # keyed by those outcomes (see _step); None when everything is settled.
        self._unsettled: list = []
        self._tree = None
        self._clipk: dict = {}
        self._index = {n: i for i, n in enumerate(self._names)}
        self._shapes = {n: a.shape for n, a in arrays.items()}
        self._group_of = np.array([gi for gi, g in enumerate(self.param_groups) for _ in g["params"]])
        order = [n for g in self.param_groups for n in g["params"]]
        assert order == self._names
        align = dev.alignment // 4
        block = self.WG * self.EPT * 4
        unit = math.lcm(align, block)  # chunks hold whole blocks: block j of any tensor starts at element j*block
        chunk = (dev.max_storage_binding // 4) // unit * unit
        self.layout = Layout([a.size for a in arrays.values()], align_elems=align, chunk_elems=chunk,
                             block=block)
        self._param = Arena(dev, self.layout, f"{name}.params")
        self._grad = Arena(dev, self.layout, f"{name}.grads")
        self._param.write_many(enumerate(arrays.values()))
        self.params = {n: DeviceTensor(self._param, i, n, self._shapes[n]) for i, n in enumerate(self._names)}
        self.grads = {n: DeviceTensor(self._grad, i, n, self._shapes[n]) for i, n in enumerate(self._names)}
        self._state: dict[str, Arena] = {}
        self._dummies: dict[str, object] = {}
        self._steps = np.zeros(len(self._names), np.int64)
        # Scalar states (one float32 per tensor) live on the host; _fill reads and advances them.
        self._scalars = {s: np.array([spec.init_value(s, self.param_groups[g]) for g in self._group_of], np.float32)
                         for s in spec.scalar_states}
        self._materialized = [frozenset() for _ in self._names]  # state names each tensor has (immutable)
        # n tensor records, then one global record (grad multiplier and clipping; shaders/common.wgsl)
        self._hyper = dev.buffer(4 * REC * (len(self._names) + 1), f"{name}.hyper")
        self._blocks = [dev.buffer(b.nbytes, f"{name}.blocks[{c}]", data=b) for c, b in enumerate(self.layout.blocks)]
        self._binds: dict = {}
        if spec.eager_state:
            for s in spec.eager_state:
                self._ensure(s)
            self._reset_state(range(len(self._names)))
        self._kernels = {e: get_kernel(dev, self.shader, e, WG=self.WG, EPT=self.EPT, **self.constants)
                         for e in self.entries}

    # -- state arenas ----------------------------------------------------------------------------
    def _ensure(self, s: str):
        if s in self.spec.scalar_states or s in self.aux_states:
            return None
        if s not in self._state:
            self._state[s] = Arena(self.device, self.layout, f"{type(self).__name__}.{s}")
            self._binds.clear()
        return self._state[s]

    def _reset_state(self, tensors):
        """Tensors back to step 0 with only their eager state, at its initial value."""
        self._settle()
        for t in tensors:
            self._steps[t] = 0
            g = self.param_groups[self._group_of[t]]
            self._materialized[t] = frozenset(self.spec.eager_state)
            for s, v in self._scalars.items():
                v[t] = self.spec.init_value(s, g)
            for s, arena in self._state.items():
                v = self.spec.init_value(s, g) if s in self.spec.eager_state else 0.0
                arena.fill(t, v)

    def _buffers(self, chunk: int) -> dict:
        """Buffers by binding name for one chunk (missing state arenas bound to a tiny dummy)."""
        out = {"hyper": self._hyper, "blocks": self._blocks[chunk], "param": self._param.buffers[chunk],
               "grad": self._grad.buffers[chunk]}
        for s in self.spec.all_state_names:
            if s in self._state:
                out[s] = self._state[s].buffers[chunk]
            else:
                if s not in self._dummies:
                    self._dummies[s] = self.device.buffer(16, f"unused {s}")
                out[s] = self._dummies[s]
        return out

    def _bind(self, entry: str, chunk: int):
        key = (entry, chunk)
        if key not in self._binds:
            k = self._kernels[entry]
            bufs = self._buffers(chunk)
            self._binds[key] = k.bind({n: bufs[n] for n in k.bindings})
        return self._binds[key]

    # -- the step --------------------------------------------------------------------------------
    @locked
    def read_params(self, names=None, out: dict | None = None) -> dict:
        """Host copies of the parameters (all, or ``names``), read back in one batched transfer.

        ``out``: a dict of float32 arrays (e.g. the previous result) to fill instead of new ones; in a training
        loop this saves the page faults of fresh memory (on the H200: 16 GB/s into new arrays, 24 into reused)."""
        from .arena import _check_out
        if out is not None and names is None:
            names = list(out)
        names = list(self._names if names is None else names)
        for n in names:
            if n not in self._index:
                raise KeyError(f"{type(self).__name__}.read_params: unknown tensor {n!r}")
        outs = None
        if out is not None:
            for n in names:
                _check_out(n, out[n], self._shapes[n])
            outs = [out[n].reshape(-1) for n in names]
        flat = self._param.read_many([self._index[n] for n in names], outs)
        if out is not None:
            return {n: out[n] for n in names}
        return {n: f.reshape(self._shapes[n]) for n, f in zip(names, flat)}

    def set_lr(self, lr: float) -> None:
        """Set the learning rate of every param group (takes effect at the next step)."""
        for g in self.param_groups:
            g["lr"] = lr

    @locked
    def set_lr_scale(self, lr_scale) -> None:
        """Replace the per-tensor lr factors (``lr_scale=``: dict name -> factor, missing names 1, or a callable
        name -> factor); checked before anything changes, effective at the next step."""
        scale = resolve_lr_scale(type(self).__name__, lr_scale, self._names)
        self.lr_scale, self._scale = scale, np.array([scale[n] for n in self._names], np.float64)

    @locked
    def write_params(self, params: dict) -> None:
        """Upload several parameters (dict name -> float32 array of the tensor's shape) in one transfer; checked
        before anything changes (``opt.params[name].write(array)`` writes one)."""
        check_grads(type(self).__name__, params, self._shapes, call="write_params", noun="param")
        self._param.write_many([(self._index[n], a) for n, a in params.items()])

    @locked
    def zero_grad(self) -> None:
        """Zero the device gradient slots."""
        enc = self.device.device.create_command_encoder()
        self._grad.clear(enc)
        self.device.submit(enc)

    @locked
    def step(self, grads=None) -> None:
        """One optimizer step.

        ``grads``: dict name -> float32 ndarray or DeviceTensor; a missing name means "no gradient" (that
        tensor, its state and its step count stay as they are). ``None`` steps every tensor using the
        device gradient slots ``self.grads``. Everything is checked before any GPU work. With
        ``skip_nonfinite`` a step whose grads hold inf or NaN changes nothing (``last_step_skipped``).
        """
        self._step(grads, inv_scale=1.0, check=self.skip_nonfinite)

    @property
    @locked
    def last_step_skipped(self) -> bool:
        """Whether the last step was skipped on its inf/NaN check (reads the outcome back if still unknown)."""
        self._settle()
        return self._last_skipped

    @locked
    def _step(self, grads, inv_scale: float, check: bool, scaler=None) -> "Outcome":
        """The step, with the grads multiplied by ``inv_scale`` in the kernels and, when ``check``, skipped
        whole on the device if any grad is inf or NaN, with no host round trip. Returns the step's :class:`Outcome`.

        ``scaler``: a GradScaler whose state is on this device (``shaders/amp.wgsl``): its pending update() runs
        first, the grads are multiplied by 1/scale read on the device, and a skip is recorded there.

        A checked step cannot know whether the one before it was applied (the host has not read that back), so
        its records (step counts, bias corrections, fresh state, loss scale) are written for both cases and a
        pass on the device picks one (``shaders/gate.wgsl``). The host reads each outcome one step later, when it
        is long done; at most two steps are unsettled at a time."""
        name = type(self).__name__
        for g in self.param_groups:
            self.spec.validate(g)
        n = len(self._names)
        if grads is None:
            active = np.ones(n, bool)
        else:
            check_grads(name, grads, self._shapes, DeviceTensor, self.device)
            active = np.zeros(n, bool)
            active[[self._index[k] for k in grads]] = True
        if scaler is not None and not check:
            raise ValueError("a step with a GradScaler is always checked")
        self._settle(keep=1 if check else 0)
        # an update() the scaler has pending is recorded into this step: if the step fails, it stays pending
        pending = scaler is not None and scaler._pending_update
        try:
            return self._encode_step(grads, active, inv_scale, check, scaler)
        except BaseException:
            if pending:
                scaler._pending_update = True
            raise

    def _encode_step(self, grads, active, inv_scale, check, scaler) -> "Outcome":
        name, n = type(self).__name__, len(self._names)
        enc = self.device.device.create_command_encoder()
        if grads is not None:
            self._upload_grads(enc, grads)
        # the host state for each outcome of the unsettled step (one branch when everything is settled)
        branches = [(False, self._tree[False]), (True, self._tree[True])] if self._unsettled \
            else [(False, self._snapshot())]
        recs, nexts = [], []
        need = {}  # state names per group this step
        for gi in set(self._group_of[active].tolist()):
            need[gi] = frozenset(self.spec.state_names(self.param_groups[gi]))
            for st in need[gi]:
                self._ensure(st)
        for key, snap in branches:
            self._restore_snapshot(snap)
            fresh = [frozenset()] * n
            mat = list(self._materialized)
            for t in np.flatnonzero(active):
                f = need[self._group_of[t]] - mat[t]
                if f:
                    fresh[t], mat[t] = f, mat[t] | f
            steps = np.minimum(self._steps + active, MAX_STEP)  # counters saturate, never wrap
            self._pending = {k: v.copy() for k, v in self._scalars.items()}
            recs.append(self._records(active, steps, fresh, inv_scale, device_scale=scaler is not None))
            scalars = {k: np.where(active, self._pending[k], v) for k, v in self._scalars.items()}
            nexts.append((steps, scalars, mat, False))
        all_active = bool(active.all())
        if not check:
            self.device.queue.write_buffer(self._hyper, 0, recs[0])
            cp = ComputePass(enc)
            if self.clip_grad_norm is not None:
                self._encode_clip(cp, scale_grads=False, flat=all_active)  # the kernels multiply by the factor
            self._encode(cp)
            cp.end()
            self._submit(enc)
            self._tree = None
            self._restore_snapshot(nexts[0])
            self._norm_taken = self.clip_grad_norm is not None
            return Outcome(self, False)
        # choose the records on the device, check, gate every later dispatch on the check
        gate = self._gate_buffers()
        self.device.queue.write_buffer(self._cand, 0, np.concatenate([recs[0], recs[-1]]))
        k, binds = self._gate_kernels, self._gate_binds(scaler)
        cp = ComputePass(enc, gate, 16, self._gate_cap)
        if scaler is not None:
            scaler._encode_update(cp)
        k["choose"].dispatch(cp, binds["choose"], -(-recs[0].size // 256))
        self._encode_clip(cp, scale_grads=False, flat=all_active, check=True)
        k["gate_step"].dispatch(cp, binds["gate_step"], 1)
        cp.gated = True
        if self.clip_grad_norm is not None:
            self._encode_clip(cp, scale_grads=False, flat=all_active)
        self._encode(cp)
        cp.end()
        self.device.queue.write_buffer(gate, 16, np.array(cp.args, np.uint32))
        slot = self._slots.pop() if self._slots else self.device.device.create_buffer(
            size=16, usage=self.device.wgpu.BufferUsage.MAP_READ | self.device.wgpu.BufferUsage.COPY_DST,
            label=f"{name}.outcome")
        enc.copy_buffer_to_buffer(gate, 0, slot, 0, 4)
        self._submit(enc)
        self._norm_taken = self.clip_grad_norm is not None
        outcome = Outcome(self, None)
        # (NOSYNC: wgpu-py would submit an empty command buffer first, which only matters for a buffer never written)
        self._unsettled.append((slot, slot.map_async("READ_NOSYNC", 0, 4), outcome))
        # the new tree: keyed by the older unsettled outcome (if any), then by this step's
        leaf = [{False: nx, True: (sn[0], sn[1], sn[2], True)} for nx, (_, sn) in zip(nexts, branches)]
        self._tree = {False: leaf[0], True: leaf[1]} if len(branches) == 2 else leaf[0]
        return outcome

    def _submit(self, enc):
        try:
            self.device.submit(enc)
        except Exception as e:
            raise RuntimeError(f"rlx_gpu: {type(self).__name__} step ({self.shader}) failed on "
                               f"{self.device.name}: {e}") from e

    def _upload_grads(self, enc, grads):
        """Host grads in one batched upload now; DeviceTensor grads as copies recorded into ``enc``. A grad that
        is another slot of this optimizer's grads is read as it was before this call (into a staging buffer
        first: a buffer cannot be copied onto itself, and the uploads below may overwrite that slot)."""
        host, copies, staged = [], [], []
        for k, g in grads.items():
            i = self._index[k]
            if isinstance(g, DeviceTensor):
                if g._arena is self._grad and g._index == i:
                    continue
                src, dst = g.bindings(), self.grads[k].bindings()
                if [b["size"] for b in src] != [b["size"] for b in dst]:  # chunked differently
                    host.append((i, g.numpy()))
                elif g._arena is self._grad:
                    staged += zip(src, dst)
                else:
                    copies += zip(src, dst)
        for k, g in grads.items():
            if not isinstance(g, DeviceTensor):
                host.append((self._index[k], g))
        if staged:
            tmp = self.device.buffer(sum(s["size"] for s, _ in staged), f"{type(self).__name__}.grad staging")
            pre, off = self.device.device.create_command_encoder(), 0
            for s, d in staged:
                pre.copy_buffer_to_buffer(s["buffer"], s["offset"], tmp, off, s["size"])
                copies.append(({"buffer": tmp, "offset": off, "size": s["size"]}, d))
                off += s["size"]
            self.device.submit(pre)
        self._grad.write_many(host)  # all host grads in one batched upload
        for s, d in copies:
            enc.copy_buffer_to_buffer(s["buffer"], s["offset"], d["buffer"], d["offset"], s["size"])

    # -- host bookkeeping of checked steps -------------------------------------------------------------
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

    def _settle(self, keep: int = 0, through: "Outcome | None" = None) -> None:
        """Read back the outcomes of all but the newest ``keep`` unsettled steps (or of those up to
        ``through``) and fix the host state."""
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

    def _gate_buffers(self):
        if not hasattr(self, "_gate"):
            u = self.device.wgpu.BufferUsage
            # the most dispatches a step records: every pass over every chunk, plus the clip passes
            self._gate_cap = (len(self.entries) + 2) * self.layout.num_chunks + 8
            self._gate = self.device.buffer(16 + 12 * self._gate_cap, f"{type(self).__name__}.gate",
                                            usage=u.STORAGE | u.INDIRECT | u.COPY_DST | u.COPY_SRC)
            self._cand = self.device.buffer(2 * self._hyper.size, f"{type(self).__name__}.records")
            self._gate_kernels = {e: get_kernel(self.device, "gate.wgsl", e) for e in ("choose", "gate_step")}
            self._slots = []
        return self._gate

    def _gate_binds(self, scaler) -> dict:
        """The gate passes' bind groups for this scaler buffer (a dummy without a scaler)."""
        scaler = scaler._buf if scaler is not None else None
        key = ("gate", scaler)  # the buffer itself (kept alive by the key, so no other buffer takes its id)
        if key not in self._binds:
            if scaler is None:
                if "scaler" not in self._dummies:
                    self._dummies["scaler"] = self.device.buffer(32, "no GradScaler")
                scaler = self._dummies["scaler"]
            self._binds[key] = {e: k.bind({"hyper": self._hyper, "cand": self._cand, "gate": self._gate,
                                           "scaler": scaler}) for e, k in self._gate_kernels.items()}
        return self._binds[key]

    def _records(self, active, steps, fresh, inv_scale: float = 1.0, device_scale: bool = False) -> np.ndarray:
        """The hyper buffer's words for this step: n tensor records, then the global record."""
        n = len(self._names)
        vals = np.zeros((n, REC), np.float64)
        flags = np.zeros(n, np.uint32)
        for gi, g in enumerate(self.param_groups):
            sel = np.flatnonzero(self._group_of == gi)
            if not len(sel):
                continue
            sub = np.zeros((len(sel), REC), np.float64)
            f = self._fill(scaled(g, self._scale[sel]), np.maximum(steps[sel], 1).astype(np.float64),
                           [fresh[t] for t in sel], sub, sel)
            flags[sel] = np.asarray(f, np.uint32) | (MAXIMIZE if g.get("maximize") else 0)
            vals[sel] = sub
        words = vals.astype(np.float32).view(np.uint32)
        words[:, 0] = flags | np.where(active, ACTIVE, 0).astype(np.uint32)
        words[:, 14] = self.layout.first_block
        words[:, 15] = self.layout.num_blocks
        self._pack(words)
        glob = self._global_record(self.clip_grad_norm, 0, 2.0, count_all=False, inv_scale=inv_scale)
        glob[8] = 1 if device_scale else 0  # the gate's choose pass takes 1/scale from the GradScaler's buffer
        return np.ascontiguousarray(np.concatenate([words, glob[None]]))

    def _write_records(self, active, steps, fresh, inv_scale: float = 1.0):
        self.device.queue.write_buffer(self._hyper, 0, self._records(active, steps, fresh, inv_scale))

    @staticmethod
    def _global_record(max_norm, kind, p, count_all, inv_scale=1.0) -> np.ndarray:
        g = np.zeros(REC, np.uint32)
        g[0] = np.float32(inv_scale).view(np.uint32)  # the grad multiplier (a clip pass may overwrite it)
        g[7] = np.float32(inv_scale).view(np.uint32)
        g[1] = np.float32(max_norm if max_norm is not None else 0.0).view(np.uint32)
        g[2] = kind
        g[3] = np.float32(p).view(np.uint32)
        g[4] = 1 if count_all else 0
        return g

    def _clip_kernels(self, check: bool = False):
        """The reduction kernels (``check``: the inf/NaN check's variants); makes the scratch buffers once."""
        wg, ept = self.CLIP_SHAPE if self.CLIP_SHAPE[0] * self.CLIP_SHAPE[1] == self.WG * self.EPT \
            else (self.WG, self.EPT)  # the same block size as the optimizer's block table
        if check not in self._clipk:
            self._clipk[check] = {e: get_kernel(self.device, "clip.wgsl", e, WG=wg, EPT=ept, BPW=self.CLIP_BPW,
                                                U=self.CLIP_FLAT_U, CHECK=check)
                                  for e in ("partial", "flat", "total", "scale")}
        if not hasattr(self, "_clip_scratch"):
            self._clip_scratch = self.device.buffer(4 * max(1, self.layout.total_blocks), f"{type(self).__name__}.clip")
            # the flat pass writes one slot per workgroup into its chunk's region (aligned for the binding), in a
            # buffer of its own: the total sums every slot, so neither pass may see the other's old values
            al = self.device.alignment // 4
            self._flat_wgs = [min(self.CLIP_FLAT_WGS, -(-c // (4 * wg * self.CLIP_FLAT_U)))
                              for c in self.layout.chunk_elems]
            self._flat_off = np.concatenate([[0], np.cumsum([-(-w // al) * al for w in self._flat_wgs])])
            self._flat_scratch = self.device.buffer(4 * int(self._flat_off[-1]), f"{type(self).__name__}.clip_flat")
        return self._clipk[check]

    def _clip_binds(self, check: bool, flat: bool) -> tuple[list, object]:
        """Bind groups of the partial (or flat) pass per chunk, and of the total pass."""
        key = ("clip", check, flat)
        if key not in self._binds:
            k = self._clip_kernels(check)

            def bind(entry, c, scratch):
                return k[entry].bind({"hyper": self._hyper, "blocks": self._blocks[c], "grad": self._grad.buffers[c],
                                      "scratch": scratch})
            if flat:
                fs = self._flat_scratch
                per = [bind("flat", c, (fs, 4 * int(self._flat_off[c]), 4 * self._flat_wgs[c]))
                       for c in range(self.layout.num_chunks)]
                self._binds[key] = per, bind("total", 0, fs)
            else:
                per = [bind("partial", c, self._clip_scratch) for c in range(self.layout.num_chunks)]
                self._binds[key] = per, per[0]
        return self._binds[key]

    def _encode_clip(self, enc, scale_grads: bool, flat: bool = False, check: bool = False):
        """The norm (or, with ``check``, the inf/NaN flag) into the global record. ``flat`` when every tensor
        counts: whole chunks are reduced without the block table (padding is zero)."""
        k = self._clip_kernels(check)
        per, tot = self._clip_binds(check, flat)
        for c, b in enumerate(self.layout.blocks):
            if flat:
                k["flat"].dispatch(enc, per[c], self._flat_wgs[c])
            else:
                k["partial"].dispatch(enc, per[c], -(-len(b) // self.CLIP_BPW))
        k["total"].dispatch(enc, tot, 1)
        if scale_grads:
            per, _ = self._clip_binds(check, False)
            for c, b in enumerate(self.layout.blocks):
                k["scale"].dispatch(enc, per[c], len(b))

    def _set_global_word(self, k: int, value: np.ndarray) -> None:
        self.device.queue.write_buffer(self._hyper, 4 * (REC * len(self._names) + k), value)

    def _global_word(self, k: int, dtype) -> float:
        out = np.empty(1, dtype)
        self.device.read(self._hyper, 4 * (REC * len(self._names) + k), 4, out=out)
        return out[0]

    @locked
    def _clip_on_device(self, max_norm, kind, p, scale_grads) -> float:
        """The stand-alone rlx_gpu.clip_grad_norm on the device grad slots; returns the total norm."""
        self._set_global_word(0, self._global_record(max_norm, kind, p, count_all=True))
        enc = self.device.device.create_command_encoder()
        self._encode_clip(enc, scale_grads, flat=True)
        self.device.submit(enc)
        self._norm_taken = True
        return self.last_grad_norm()

    @locked
    def last_grad_norm(self) -> float | None:
        """The total gradient norm the last step's clip (``clip_grad_norm=``) or the last stand-alone
        :func:`rlx_gpu.clip_grad_norm` computed on the device (reads 4 bytes back); NaN after a step skipped on
        its inf/NaN check; None when the last step clipped nothing (clipping off, a fresh or loaded optimizer)."""
        if not self._norm_taken:
            return None
        return float(self._global_word(5, np.float32))

    def _fill(self, group: dict, t: np.ndarray, fresh: list, rec: np.ndarray, sel: np.ndarray):
        """Fill ``rec[:, 1:14]`` (float64, one row per tensor of ``group`` at steps ``t``); return flags.

        ``sel`` holds the tensors' indices; scalar states are advanced in ``self._pending[name][sel]`` (kept
        only for tensors that step).

        ``t`` is the step each tensor reaches this step (at least 1; inactive tensors' rows are ignored).
        ``fresh[i]`` names the state buffers tensor i gets this step (SGD seeds its momentum from it)."""
        raise NotImplementedError

    def _pack(self, words: np.ndarray) -> None:
        """Write integer words of the records (sizes, offsets) into ``words`` (n x REC uint32); default none."""

    def _encode(self, enc) -> None:
        """Record this step's dispatches: each pass over every chunk's blocks, or once per tensor."""
        for e in (self.passes or self.entries):
            self._dispatch(enc, e)

    def _dispatch(self, enc, e: str) -> None:
        k = self._kernels[e]
        if e in self.per_tensor:
            k.dispatch(enc, self._bind(e, 0), len(self._names))
        else:
            for c, b in enumerate(self.layout.blocks):
                k.dispatch(enc, self._bind(e, c), len(b))

    # -- state dicts -----------------------------------------------------------------------------
    @locked
    def state_dict(self) -> dict:
        """``{"state": {name: {"step", <state buffers>}}, "param_groups": [...]}`` with NumPy arrays."""
        self._settle()
        host = {s: a.read_all() for s, a in self._state.items()}
        state = {}
        for t, n in enumerate(self._names):
            if self._steps[t] == 0 and not self._materialized[t]:
                continue
            st = {"step": int(self._steps[t])}
            for s in self.spec.all_state_names:
                if s in self._materialized[t] and s not in self.aux_states:  # the family adds aux states
                    st[s] = (np.array(self._scalars[s][t], np.float32) if s in self._scalars
                             else self.layout.gather(host[s], t, self._shapes[n]))
            state[n] = st
        groups = [dict({k: v for k, v in g.items() if k != "params"}, params=list(g["params"]))
                  for g in self.param_groups]
        return {"state": state, "param_groups": groups}

    @locked
    def load_state_dict(self, sd: dict) -> None:
        """Restore a state dict (from this class or its NumPy twin); checked fully before anything changes."""
        name = type(self).__name__
        self._settle()
        state, hypers = check_state_dict(name, sd, self.param_groups, self._shapes, self.spec.all_state_names,
                                         self.defaults, self.spec.state_shape)
        for h in hypers:
            self.spec.check(h)
        for st in state.values():
            for s in st:
                if s != "step":
                    self._ensure(s)
        groups = [dict(g, **h) for g, h in zip(self.param_groups, hypers)]
        # Whole chunks are assembled on the host and uploaded once per state buffer.
        for s, arena in self._state.items():
            chunks = [np.zeros(c, np.float32) for c in self.layout.chunk_elems]
            for t, n in enumerate(self._names):
                st = state.get(n)
                if st is not None and s in st:
                    v = st[s]
                elif s in self.spec.eager_state and st is None:
                    v = np.full(self._shapes[n], self.spec.init_value(s, groups[self._group_of[t]]), np.float32)
                else:
                    continue
                self.layout.scatter(chunks, t, v)
            self.device.transfer.upload([(b, 0, h.view(np.uint8)) for b, h in zip(arena.buffers, chunks)])
        for g, h in zip(self.param_groups, hypers):
            g.update(h)
        self._norm_taken = False
        for t, n in enumerate(self._names):
            st = state.get(n)
            g = self.param_groups[self._group_of[t]]
            for s, v in self._scalars.items():
                v[t] = st[s] if st is not None and s in st else self.spec.init_value(s, g)
            if st is None:
                self._steps[t] = 0
                self._materialized[t] = frozenset(self.spec.eager_state)
            else:
                self._steps[t] = st["step"]
                self._materialized[t] = frozenset(k for k in st if k != "step")
