"""The GPU optimizer: the one public surface of the engine.

An optimizer is a declaration (``rlx_gpu/optim/<name>.py``): its NumPy twin as ``spec`` (defaults, validation,
state names, the update rule in NumPy), its ``record`` of named scalars and ``fill`` that computes them, its
``shader`` (the WGSL update function, or a few passes), and ``passes``. Everything else is here, once: parameter
groups and the options every optimizer shares (``rlx_gpu.core.options``), buckets of typed arenas, kernels,
the step (:mod:`.steps`), the gradient-norm reductions (:mod:`.reductions`) and state dicts (:mod:`.statedict`).
"""
from __future__ import annotations

import threading

import numpy as np

from ..core import options as shared
from ..core.construct import shared_options, unpack
from ..core.checkpoint import Checkpointable
from ..core.copying import Copyable
from ..core.torchcontract import TorchAware
from ..core.groups import checked_lr, resolve_lr_scale
from ..core.lowp import dtype_of, name_hash
from ..core.sync import locked
from ..core.torchparams import TorchParams
from ..runtime.arena import DeviceTensor
from ..runtime.device import get_device
from ..runtime.implementation import subgroup_directive
from ..runtime.kernels import get_kernel, grid
from .buckets import make_buckets
from .codegen import Emit, Pass, kernel_shape, optimizer_module
from .drivers import SWITCHES, switch
from .qat import QatMixin
from .qcodegen import QK
from .records import Record
from .reductions import ReduceMixin
from .statedict import StateMixin
from .hostio import HostIOMixin
from .sparse import SparseMixin
from .steps import StepMixin
from .watch import checked_by_caller, validate_groups

__all__ = ["Optimizer", "Pass"]


class Optimizer(QatMixin, StepMixin, SparseMixin, ReduceMixin, StateMixin, HostIOMixin, TorchParams, Copyable,
                Checkpointable, metaclass=TorchAware):
    """Base class of the GPU optimizers (use a subclass, e.g. :class:`rlx_gpu.AdamW`; ``Optimizer.load(path)``
    makes the class a checkpoint names). A subclass is a declaration: ``spec`` (its NumPy twin), ``shader`` (its
    WGSL update function), ``fields``/``flags`` (its record) and ``passes``; CONTRIBUTING.md shows one whole.
    Every subclass has the same surface: ``step``, ``params``/``grads`` (:class:`DeviceTensor`), ``param_groups``,
    ``read_params``/``write_params``/``write_grads``, ``zero_grad``, ``set_lr``/``set_lr_scale``, ``clip_grads``,
    ``last_grad_norm``, ``last_step_skipped``, ``state_dict``/``load_state_dict``, ``save``/``load``/``restore``,
    ``memory``, ``options``, ``device`` and ``lock``."""

    # -- the declaration a subclass gives --------------------------------------------------------------------
    spec = None            # the NumPy twin class: defaults, state names, validation, the update rule in NumPy
    shader: str = ""       # shaders/<file>.wgsl: the update function(s) and any further passes
    fields: tuple = ()     # the names of the per-tensor float32 scalars fill() computes (the record)
    flags: tuple = ()      # the names of fill()'s per-tensor flags
    passes: tuple = ()     # the Pass list of one step
    other_passes: tuple = ()  # passes compiled with the step's but run by other methods (Sophia-H's Hessian update)
    grad_like: tuple = ()  # further arenas laid out as the grads (Sophia-H's "estimate")
    record = None          # built from fields, flags and the twin's param-shaped states (arena_states)
    arena_states: tuple = ()
    WG, EPT = 256, 2       # workgroup size, vec4s per thread: a block is WG*EPT*4 elements
    # the drivers' variants (engine/drivers.py; none changes a result bit but a reduction's order): pairs of vec4s
    # per thread in buckets with 16-bit arenas, loops without tail masks in blocks wholly inside their tensor,
    # subgroup operations in reductions and quantized block maxima where the device has them; bfloat16 rounded
    # with vector operations. Each a bool or a dict by the bucket's precision (drivers.switch); the defaults are
    # the H200 run's choices (PERF_NOTES 54): pairs of vec4s lost in float16 buckets (bound as u32 words there)
    WIDE = {"bfloat16": True, "float16": False, "bfloat16+master": True}
    FULL, SUBGROUPS, VPACK = True, True, True
    QDIRECT = False  # quantized buckets: the maps read from the state buffers, not copied (to be measured: issue 25)
    PTLOADS = True  # per-tensor passes: 8 block partials loaded at once, the same adds (H200: 35 -> 11-18 us)
    QCLOSED = {4: True, 8: True}  # quantized buckets: the code search in closed form, the same codes (by width)
    # and the form a width takes (engine/qsearch.FORMS): 8-bit "vlog" (H100: +1% fp32 / +7% bf16 params over
    # "log", which was +14% / +3% over the guide search on the H200), 4-bit unsigned "linear" (+6% over the
    # bisection); PERF_NOTES 59, 64, 80
    QFORM8, QFORM4 = "vlog", "linear"
    F16ROUND = False  # float16 states: round_state by the hardware's conversion (drivers.Emit.hround; issue 25)
    QEPT = None  # quantized buckets: vec4s a thread, the block kept (codegen.kernel_shape; to be measured: issue 25)
    QFULL = True  # quantized buckets' subgroup driver: whole blocks without tail masks (H100: +4-5%, PERF_NOTES 78)
    QHOIST = True  # the same driver: the record read once per tensor, not per round (H100: -1 to -4%, PERF_NOTES 82)
    QREDUX = True  # the same driver: block maxima by subgroupMax in a block's subgroups (8-bit -4/-6%, PERF_NOTES 82)
    QBTAB = False  # the same driver: a workgroup's block rows read once into workgroup memory (PERF_NOTES 85)
    constants: dict = {}   # further WGSL override constants of the shader
    on_device = True
    extra_kwargs: tuple = ()  # constructor keywords beyond the hyperparameters and options (Kron's probe)
    _classes: dict = {}

    def __init_subclass__(cls, **kw):
        super().__init_subclass__(**kw)
        if cls.spec is not None:
            cls.arena_states = cls.spec.typed_states()
            cls.record = Record(*cls.fields, flags=cls.flags, states=cls.arena_states)
            Optimizer._classes.setdefault(cls.__name__, cls)  # (the first class of a name: a subclass for a
            #                                                     tuning run does not replace AdamW in checkpoints)
            cls.__signature__ = shared.signature(cls.spec.defaults, gpu=True, overrides=cls.spec.option_defaults)
            if cls.__doc__ and "Options (every optimizer)" not in cls.__doc__:
                cls.__doc__ = cls.__doc__.rstrip() + "\n" + shared.doc(gpu=True, overrides=cls.spec.option_defaults)

    @classmethod
    def optimizer_classes(cls) -> dict:
        return dict(Optimizer._classes)

    @classmethod
    def _check_arguments(cls, args: tuple, kwargs: dict) -> None:
        """The arguments after ``params`` checked as the constructor checks them (the metaclass asks first: bad
        hyperparameters are ValueErrors before params are looked at, as in torch)."""
        if cls.spec is not None:
            kwargs = {k: v for k, v in kwargs.items() if k not in cls.extra_kwargs}
            hyper, _ = shared.split(cls.__name__, cls.spec.defaults, args, kwargs, gpu=True,
                                    overrides=cls.spec.option_defaults, fixed=cls.spec.torch_group_keys)
            cls.spec.validate({**cls.spec.defaults, **hyper})

    @classmethod
    def hyperparameters(cls) -> dict:
        return dict(cls.spec.defaults)

    @classmethod
    def state_shape_of(cls, state: str, shape) -> tuple:
        return cls.spec.state_shape_of(state, shape)

    # -- construction --------------------------------------------------------------------------------------
    def __init__(self, params, *args, **kwargs):
        name = type(self).__name__
        if self.spec is None:
            raise TypeError("rlx_gpu.Optimizer is a base class; use an optimizer such as rlx_gpu.AdamW")
        #: Serialises this optimizer's calls (re-entrant); hold it to make several calls atomic.
        self.lock = threading.RLock()
        self.defaults, self.param_groups, arrays, opts = unpack(name, self.spec, params, self._bind_torch, args,
                                                                kwargs, gpu=True)
        self._validated = None
        self._validate_groups()  # (the optimizer's own checks beyond the defaults' types; cached for the steps)
        self.device = dev = get_device(opts.pop("device"))
        self._names = list(arrays)
        self._index = {n: i for i, n in enumerate(self._names)}
        self._shapes = {n: a.shape for n, a in arrays.items()}
        self._group_of = np.array([gi for gi, g in enumerate(self.param_groups) for _ in g["params"]])
        self._group_members = [np.flatnonzero(self._group_of == gi) for gi in range(len(self.param_groups))]
        # lr_scale: per-tensor multiplier of the group lr, applied in the kernel's scalars; clip_grad_norm: global
        # L2-norm clip folded into every step (None: off; may be changed between steps); skip_nonfinite: skip a
        # step whose grads hold inf or NaN (params, state and step counts stay bit-identical); precision:
        # master_weights, stochastic_rounding, rounding_seed, state_dtype, grad_dtype
        self.lr_scale, self.clip_grad_norm, self.skip_nonfinite, self.precision = shared_options(name, opts,
                                                                                                 self._names)
        self._scale = np.array([self.lr_scale[n] for n in self._names], np.float64)
        dts = [dtype_of(a.dtype) for a in arrays.values()]
        self._dtypes = dts
        self.buckets = make_buckets(dev, name, dts, [a.size for a in arrays.values()], self.precision,
                                    self.WG * self.EPT * 4, self.spec.quantizable, self._names)
        self._where = [None] * len(self._names)
        for b in self.buckets:
            for t in b.ids:
                self._where[t] = (b, b.local[t])
        self._write_params({t: a for t, a in enumerate(arrays.values())}, init_master=True)
        self.params = {n: DeviceTensor(b.param, i, n, self._shapes[n]) for n, (b, i) in zip(self._names, self._where)}
        self.grads = {n: DeviceTensor(b.grad, i, n, self._shapes[n]) for n, (b, i) in zip(self._names, self._where)}
        self._first_block = np.array([b.layout.first_block[i] for b, i in self._where], np.uint32)
        self._num_blocks = np.array([b.layout.num_blocks[i] for b, i in self._where], np.uint32)
        self._total_blocks = self.buckets[-1].layout.block_end
        self._name_hash = np.array([name_hash(n) for n in self._names], np.uint32)
        self._master = np.array([b.sig.master for b, _ in self._where])
        self._sr = np.array([bool(self.precision["stochastic_rounding"]) and d.low for d in dts])
        self._static_bits = self.record.flags(len(self._names), {"master": self._master, "sr": self._sr})
        self._has_bits: dict = {}
        self._hyper = dev.buffer(4 * self.record.size * (len(self._names) + 1), f"{name}.hyper")
        reducing = any(p.reduce or p.kind == "per_tensor" for p in self.passes + self.other_passes)
        # per-block sums of the reducing passes (two floats per block), read by the per-tensor passes
        self._partials = dev.buffer(8 * max(1, self._total_blocks), f"{name}.partials") if reducing else None
        self._dummies: dict = {}
        self._binds: dict = {}
        self._modules: dict = {}
        self._kernels: dict = {}
        self._init_host_state()
        self._init_reductions()
        self._init_qat()
        # the steady state of step() may take the quick path (.quick) when the step is the engine's own
        self._quick_ok = not self._torch and self.spec.dense_refusal is None and all(
            getattr(type(self), m) is getattr(Optimizer, m) for m in ("_encode", "_begin_checks", "_after_submit",
                                                                       "_step_begin", "_step_end", "_quick_step"))

    @property
    def options(self) -> dict:
        """Every shared option's current value (what a checkpoint saves)."""
        return {"clip_grad_norm": self.clip_grad_norm, "skip_nonfinite": self.skip_nonfinite, **self.precision}

    # -- kernels and bindings -------------------------------------------------------------------------------
    def _module(self, bucket) -> str:
        """The bucket's module, for its signature and the state buffers it has made so far."""
        key = (bucket.sig, tuple(bucket.states))
        if key not in self._modules:
            self._modules[key] = optimizer_module(type(self), bucket.sig, tuple(bucket.states), self._emit(bucket))
        return self._modules[key]

    def _emit(self, bucket) -> Emit:
        """How the bucket's drivers walk (the class's WIDE, FULL and SUBGROUPS where they apply)."""
        sig, even = bucket.sig, kernel_shape(type(self), bucket.sig.qbits)[1] % 2 == 0
        on = {k: switch(getattr(self, k), sig.precision, f"{type(self).__name__}.{k}", sig.qbits) for k in SWITCHES}
        sub = on["SUBGROUPS"] and "subgroups" in self.device.features and (even or not sig.qbits)
        low = sig.precision != "float32"
        return Emit(wide=on["WIDE"] and low and even and not (sig.qat or sig.qbits), full=on["FULL"] and not sig.qat,
                    subgroups=sub, directive=sub and subgroup_directive(), vpack=on["VPACK"],
                    qdirect=on["QDIRECT"] and bool(sig.qbits), qclosed=on["QCLOSED"] and bool(sig.qbits),
                    qform=self.QFORM8 if sig.qbits == 8 else self.QFORM4, hround=on["F16ROUND"],
                    ptloads=on["PTLOADS"], qfull=on["QFULL"] and bool(sig.qbits),
                    qhoist=on["QHOIST"] and bool(sig.qbits), qredux=on["QREDUX"] and bool(sig.qbits),
                    qbtab=on["QBTAB"] and bool(sig.qbits))

    def _kernel(self, bucket, entry: str):
        key = (bucket.sig, tuple(bucket.states), entry)
        if key not in self._kernels:
            wg, ept = kernel_shape(type(self), bucket.sig.qbits)
            self._kernels[key] = get_kernel(self.device, f"{type(self).__name__}:{bucket.sig.param.name}",
                                            self._module(bucket), entry, WG=wg, EPT=ept, **self.constants)
        return self._kernels[key]

    def _dummy(self, key: str):
        if key not in self._dummies:
            self._dummies[key] = self.device.buffer(16, f"unused {key}")
        return self._dummies[key]

    def _buffers(self, bucket, chunk: int) -> dict:
        """Buffers by binding name for one chunk of one bucket (state buffers not made yet bound to a dummy)."""
        out = {"hyper": self._hyper, "blocks": bucket.blocks[chunk], "param": bucket.param.buffers[chunk],
               "grad": bucket.grad.buffers[chunk]}
        if bucket.master is not None:
            out["master"] = bucket.master.buffers[chunk]
        for s in self.arena_states + self.grad_like:
            a = bucket.states.get(s)
            key = s + "_q" if s in bucket.quantizable else s  # (a quantized state: codes and absmax)
            out[key] = a.buffers[chunk] if a is not None else self._dummy(s)
        if self._partials is not None:
            out["partials"] = self._partials
        out.update(self._extra_buffers(bucket, chunk))
        out.update(self._qat_buffers(bucket, chunk))
        return out

    def _extra_buffers(self, bucket, chunk: int) -> dict:
        """The optimizer's own buffers (partials, factored moments, ...) by binding name; default none."""
        return {}

    def _bind(self, entry: str, bucket, chunk: int):
        key = (entry, id(bucket), chunk)
        if key not in self._binds:
            self._binds[key] = self._kernel(bucket, entry).bind(self._buffers(bucket, chunk))
        return self._binds[key]

    def _custom_groups(self, p: Pass, bucket, chunk: int) -> int:
        """Workgroups of a custom pass over one chunk of one bucket (the optimizer's own passes)."""
        raise NotImplementedError(f"{type(self).__name__}: custom pass {p.entry!r} needs _custom_groups")

    def _encode(self, enc) -> None:
        """Record the step's passes into ``enc`` (a :class:`ComputePass`): elementwise and custom ones over every
        chunk of every bucket, per-tensor ones once with a workgroup per tensor. The plan (pipeline, bind group,
        grid) is made once (and again when a state arena is made)."""
        plan = self._binds.get("plan")
        if plan is None:
            plan = self._binds["plan"] = self._plan()
        p = enc.compute
        for pipe, bind, x, y in plan:
            p.set_pipeline(pipe)
            p.set_bind_group(0, bind)
            if enc.gated:
                p.dispatch_workgroups_indirect(enc.args_buffer, enc.add(x, y))
            else:
                p.dispatch_workgroups(x, y, 1)

    def _plan(self) -> list:
        plan = []
        for p in self.passes:
            if p.kind == "per_tensor":
                b = self.buckets[0]
                plan.append((self._kernel(b, p.kernel), self._bind(p.kernel, b, 0), len(self._names)))
                continue
            for b in self.buckets:
                for c, blk in enumerate(b.layout.blocks):
                    n = len(blk) if p.kind == "elementwise" else self._custom_groups(p, b, c)
                    if p.kind == "elementwise" and b.sig.qbits:
                        n = -(-len(blk) // QK)  # (a quantized pass steps QK blocks per workgroup)
                    plan.append((self._kernel(b, p.kernel), self._bind(p.kernel, b, c), n))
        plan += self._qat_plan()  # (the qat= export's passes: gated with the step)
        return [(k.pipeline, bind, *grid(n, self.device.max_workgroups)) for k, bind, n in plan if n > 0]

    def _validate_groups(self) -> None:
        """Every group's hyperparameters checked (:func:`rlx_gpu.engine.watch.validate_groups`)."""
        validate_groups(self)

    @locked
    def set_lr(self, lr: float) -> None:
        """Set the learning rate of every param group (takes effect at the next step); a bad value raises before
        any group changes."""
        lr = checked_lr(self.spec, self.param_groups, lr)
        for g in self.param_groups:
            g["lr"] = lr
        checked_by_caller(self, "lr")  # (checked as the step would: it does not check it again)

    @locked
    def set_lr_scale(self, lr_scale) -> None:
        """Replace the per-tensor lr factors (``lr_scale=``: dict name -> factor, missing names 1, or a callable
        name -> factor); checked before anything changes, effective at the next step."""
        scale = resolve_lr_scale(type(self).__name__, lr_scale, self._names)
        self.lr_scale, self._scale = scale, np.array([scale[n] for n in self._names], np.float64)
        self._scale_version += 1

    @locked
    def zero_grad(self, set_to_none: bool = True) -> None:
        """Zero the device gradient slots (built from torch tensors: their ``.grad``, as torch.optim's zero_grad:
        set to None, or zeroed with ``set_to_none=False``)."""
        if self._torch_zero_grad(set_to_none):
            return
        enc = self.device.device.create_command_encoder()
        for b in self.buckets:
            b.grad.clear(enc)
        self.device.submit(enc)

    def memory(self) -> dict:
        """Bytes on the device by kind (params, grads, state incl. master copies, scratch) and state bytes per
        parameter."""
        out = {"params": 0, "grads": 0, "state": 0}
        for b in self.buckets:
            for k, v in b.nbytes.items():
                out[k] += v
        out["scratch"] = (self._hyper.size + sum(x.size for b in self.buckets for x in b.blocks) + self._scratch_bytes()
                          + sum(b.size for b in (self._cand, getattr(self, "_gate", None)) if b is not None))
        n = sum(int(np.prod(s)) for s in self._shapes.values())
        out["state_per_param"] = out["state"] / max(1, n)
        return out
