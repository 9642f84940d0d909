"""The NumPy twin's base class: the readable specification every GPU optimizer is tested against.

A twin subclass gives ``defaults``, the names of its state buffers, and ``_update``: the update rule for one
tensor, in float32 NumPy, in the reference implementation's order of operations. Everything else lives here and
in :mod:`rlx_gpu.core`, shared with the GPU classes: parameter groups, the shared options, validation, missing
grads, clipping, the inf/NaN skip, state dicts, checkpoints, and precision. Parameters may be float16 or bfloat16:
``_update`` always sees float32 working copies (the float32 master copy with ``master_weights``), states kept in
``state_dtype`` are widened before and rounded to nearest even after, and the parameter is stored rounded to
nearest even or stochastically, exactly as the kernels do (:mod:`rlx_gpu.core.lowp`).
"""
from __future__ import annotations

import copy
import threading

import numpy as np

from ..core.checkpoint import Checkpointable
from ..core.construct import shared_options, unpack
from ..core.copying import Copyable
from ..core.groups import (MAX_STEP, check_grads, check_load_params, check_state_dict, checked_lr, reconcile_master,
                           resolve_lr_scale, scaled)
from ..core.lowp import DTYPES, dtype_of, element_bits, name_hash, round_rne, round_stochastic, step_key
from ..core.numerics import check_max_norm, clip_coef, host_clip_, host_loss_scale, host_total_norm, norm_kind
from ..core.quant import join_state, split_state
from ..core.quant import entries as quant_entries
from ..core.sync import locked
from ..core.torchio import plain_hyper
from ..core.torchparams import TorchParams
from ..core.sparse import split_sparse
from .quantized import QuantizedTwin
from .sparse import SparseTwin
from .spec import MASTER, Spec

F32 = np.float32


class ReferenceOptimizer(QuantizedTwin, SparseTwin, Spec, TorchParams, Copyable, Checkpointable):
    """The NumPy twin of a GPU optimizer (subclasses give ``defaults``, state names and ``_update``)."""

    # -- the twin ----------------------------------------------------------------------------
    def __init__(self, params, *args, **kwargs):
        name = type(self).__name__
        #: Serialises this optimizer's calls (re-entrant), as the GPU classes' lock.
        self.lock = threading.RLock()
        self._last_norm = None
        self.defaults, self.param_groups, self.params, opts = unpack(name, type(self), params, self._bind_torch,
                                                                     args, kwargs, gpu=False)
        self._shapes = {n: p.shape for n, p in self.params.items()}
        # as the GPU classes': lr_scale (per tensor), clip_grad_norm (applied to each step's grads; None: off),
        # skip_nonfinite (nothing changes on inf/NaN grads; see last_step_skipped), the precision options
        self.lr_scale, self.clip_grad_norm, self.skip_nonfinite, self.precision = shared_options(
            name, opts, list(self.params))
        self.last_step_skipped = False
        for g in self.param_groups:
            self.validate(g)
        self._group_of = {n: i for i, g in enumerate(self.param_groups) for n in g["params"]}
        gd = DTYPES[opts["grad_dtype"]] if opts["grad_dtype"] else None
        self._grad_dt = {n: (gd or dtype_of(p.dtype)) for n, p in self.params.items()}
        self.grads = {n: np.zeros(p.shape, self._grad_dt[n].np) for n, p in self.params.items()}
        self._state_dt = DTYPES[opts["state_dtype"]]
        self.state: dict = {}
        for n, p in self.params.items():
            g = self.param_groups[self._group_of[n]]
            for s in self.eager_state:
                self.state.setdefault(n, {"step": 0})[s] = self._new_state(s, p.shape, g)

    @property
    def options(self) -> dict:
        return {"clip_grad_norm": self.clip_grad_norm, "skip_nonfinite": self.skip_nonfinite, **self.precision}

    def _master(self, n) -> bool:
        return self.precision["master_weights"] and self.params[n].dtype.itemsize == 2

    def _round_state(self, x: np.ndarray) -> np.ndarray:
        """``x`` as it reads back once stored in ``state_dtype`` (for an update that re-reads its stored state:
        LAMB's second pass)."""
        return x if self._state_dt.name == "float32" else round_rne(x, self._state_dt).astype(F32)

    def _state_dtype(self, state: str, name: str) -> np.dtype:
        return self._state_dt.np if state in self.typed_states() else np.dtype(np.float32)

    def _new_state(self, s, shape, group):
        return np.full(self.state_shape(s, shape), self.init_value(s, group), F32).astype(self._state_dtype(s, ""))

    def set_lr(self, lr: float) -> None:
        """Set the learning rate of every param group (a bad value raises before any group changes)."""
        lr = checked_lr(type(self), self.param_groups, lr)
        for g in self.param_groups:
            g["lr"] = lr

    @locked
    def set_lr_scale(self, lr_scale) -> None:
        """Replace the per-tensor lr factors (as the GPU classes)."""
        self.lr_scale = resolve_lr_scale(type(self).__name__, lr_scale, list(self.params))

    @locked
    def write_params(self, params: dict) -> None:
        """Overwrite several parameters (dict name -> array of the param's dtype), checked first (as the GPU
        classes); master copies follow, and so do the torch tensors the twin was built from."""
        self._upload_params(params)
        self._torch_epilogue(params)

    def _upload_params(self, params: dict) -> None:
        check_grads(type(self).__name__, params, self._shapes, call="write_params",
                    noun="param", dtypes=lambda n: (self.params[n].dtype,))
        self.check_param_values(f"{type(self).__name__}.write_params", params)
        for n, a in params.items():
            self.params[n][...] = a
            if self._master(n) and n in self.state:
                self.state[n][MASTER] = a.astype(F32)

    @locked
    def clip_grads(self, max_norm, norm_type=2.0) -> float:
        """Clip ``self.grads`` (built from torch tensors: their ``.grad``) in place to a global norm of
        ``max_norm``, as torch's clip_grad_norm_; return the total norm (as the GPU classes)."""
        check_max_norm(max_norm)
        norm_kind(norm_type)
        if self._torch:
            return self._torch_clip(max_norm, norm_type)
        return host_clip_(list(self.grads.values()), max_norm, norm_type)

    def last_grad_norm(self) -> float | None:
        """The total gradient norm the last step computed (NaN after a step skipped on inf/NaN); None when it
        clipped nothing (clipping off, a fresh or loaded optimizer)."""
        return None if self._last_norm is None else float(self._last_norm)

    @locked
    def read_params(self, names=None, out: dict | None = None) -> dict:
        """Copies of the parameters (all, or ``names``; into ``out``'s arrays when given), as the GPU class."""
        names = list(out) if out is not None and names is None else (self.params if names is None else names)
        names = [names] if isinstance(names, str) else names
        if out is None:
            return {n: self.params[n].copy() for n in names}
        for n in names:
            np.copyto(out[n], self.params[n])
        return {n: out[n] for n in names}

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Zero ``self.grads`` (built from torch tensors: their ``.grad``, as torch.optim's zero_grad)."""
        if not self._torch_zero_grad(set_to_none):
            for g in self.grads.values():
                g.fill(0)

    @locked
    def step(self, grads=None, *, loss_scale: float | None = None, closure=None):
        """One step for every tensor in ``grads`` (default: every tensor, with ``self.grads``; built from torch
        tensors: their ``.grad``). ``loss_scale``: the grads carry this factor (a GradScaler's); the step is then
        checked for inf/NaN. ``closure`` (or a callable as ``grads``): called first, its loss returned."""
        loss, grads = self._torch_prologue(grads, closure)
        inv = host_loss_scale(type(self).__name__, loss_scale)
        check = self.skip_nonfinite or loss_scale is not None
        grads, sparse = split_sparse(grads, type(self).__name__)  # (RowSparse grads: rlx_gpu.reference.sparse)
        self._refuse_dense(grads)
        if sparse:
            more, sparse = self._split_sparse(sparse, check)
            grads = {**grads, **more}
        if grads or not (sparse or (grads == {} and self.dense_refusal)):  # (SparseAdam, no grads: nothing)
            self._step(grads, inv, check)
        if sparse:
            with np.errstate(over="ignore", under="ignore", invalid="ignore", divide="ignore"):
                self._sparse_step(sparse)
        self._torch_epilogue()
        return loss

    @locked
    def _step(self, grads, inv_scale: float, check: bool) -> bool:
        # Extreme values overflow and produce NaN as they do in float32 on the GPU and in torch: no warnings.
        with np.errstate(over="ignore", under="ignore", invalid="ignore", divide="ignore"):
            return self._step_checked(grads, inv_scale, check)

    def _step_checked(self, grads, inv_scale: float, check: bool) -> bool:
        name = type(self).__name__
        self.last_step_skipped = False
        for g in self.param_groups:
            g.update(plain_hyper(name, {k: g[k] for k in self.defaults if k in g}))  # (tensor lr: a float)
            self.validate(g)
        grads = self.grads if grads is None else self._slot_grads(grads)
        grads = {n: np.asarray(g).astype(F32) for n, g in grads.items()}
        if check:
            self.last_step_skipped = not (all(np.isfinite(g).all() for g in grads.values()) and
                                          self._inputs_finite(grads))
            if self.last_step_skipped:  # no norm taken: NaN if this step clips (as the GPU classes report)
                self._last_norm = F32(np.nan) if self.clip_grad_norm is not None else None
                return False
        if inv_scale != 1.0:
            grads = {n: g * F32(inv_scale) for n, g in grads.items()}
        self._last_norm = None
        if self.clip_grad_norm is not None:  # torch's clip_grad_norm_ over this step's grads, not in place
            self._last_norm = host_total_norm(list(grads.values()))
            c = clip_coef(self._last_norm, self.clip_grad_norm)
            grads = {n: g * c for n, g in grads.items()}
        self._before_update(grads)
        for n, g in grads.items():
            group = self.param_groups[self._group_of[n]]
            st = self.state.setdefault(n, {"step": 0})
            fresh = set()
            for s in self.state_names(group):
                if not self._holds(st, s):
                    if s in self.quantizable and self._qbits(n):
                        self._new_qstate(n, s, st)
                    else:
                        st[s] = self._new_state(s, self.params[n].shape, group)
                    fresh.add(s)
            if self._master(n) and MASTER not in st:
                st[MASTER] = self.params[n].astype(F32)
            st["step"] = min(st["step"] + 1, MAX_STEP)  # saturates, never wraps
            self._apply(n, g.copy(), st, scaled(group, self.lr_scale[n], self.lr_keys), fresh)
        return True

    def _slot_grads(self, grads: dict) -> dict:
        """``grads`` checked (as ``step`` checks them) and as their slots hold them (16-bit grads rounded)."""
        ok = {n: (self._grad_dt[n].np, (F32 if self._grad_dt[n].low else self.params[n].dtype)) for n in grads
              if n in self.params}
        check_grads(type(self).__name__, grads, self._shapes, dtypes=ok)
        return {n: np.asarray(g).astype(F32).astype(self._grad_dt[n].np) for n, g in grads.items()}

    def _apply(self, n, g, st, group, fresh) -> None:
        """``_update`` on float32 working copies of the param and states, then the stores in their dtypes."""
        p = self.params[n]
        bits = self._qbits(n)
        if p.dtype == F32 and self._state_dt.name == "float32" and not bits:
            self._update(p, g, st, group, fresh)  # all float32: in place
            return
        # float32 working copies: 16-bit states widened (rounded back after), quantized ones dequantized (quantized
        # back after); the param itself where it is float32, else its master copy or a widened copy
        work, store = self._quantized_work(st, bits, p.shape) if bits else self._widened_work(st)
        wp = st[MASTER] if MASTER in st else (p if p.dtype == F32 else p.astype(F32))
        self._update(wp, g, work, group, fresh)
        store(work)
        self._store_param(n, wp, st["step"])

    def _widened_work(self, st: dict):
        typed = [s for s in self.typed_states() if s in st and st[s].dtype != F32]

        def store(work):
            for k, v in work.items():
                st[k] = round_rne(v, self._state_dt) if k in typed else v
        return dict(st, **{s: st[s].astype(F32) for s in typed}), store

    def _store_param(self, n, wp, step) -> None:
        p = self.params[n]
        if p.dtype == F32:
            return
        d = dtype_of(p.dtype)
        if self.precision["stochastic_rounding"] and MASTER not in self.state.get(n, {}):
            bits = element_bits(step_key(self.precision["rounding_seed"], step, name_hash(n)), p.size)
            p[...] = round_stochastic(wp.reshape(-1), d, bits).reshape(p.shape)
        else:
            p[...] = round_rne(wp, d)

    def _inputs_finite(self, grads: dict) -> bool:
        """A checked step's inputs besides the grads (Kron's probes) hold no inf or NaN; else it is skipped."""
        return True

    def _before_update(self, grads: dict) -> None:
        """Hook run once per step after every check passed, before the per-tensor updates."""

    def _update(self, p: np.ndarray, g: np.ndarray, st: dict, group: dict, fresh: set) -> None:
        raise NotImplementedError

    @locked
    def state_dict(self, dequantize: bool = False) -> dict:
        """A deep copy of the state (``dequantize``: quantized states as float32 arrays of their names)."""
        state = self._dequantized(self.state) if dequantize else self.state
        return {"state": copy.deepcopy(state),
                "param_groups": [dict(copy.deepcopy(g), params=list(g["params"])) for g in self.param_groups]}

    @locked
    def _check_load(self, sd: dict, cast: bool = False, params: dict | None = None) -> tuple:
        """Everything ``load_state_dict`` checks, nothing changed: (state, hyperparameters, quantized state,
        params), as the GPU classes'."""
        name = type(self).__name__
        sd, qstate = split_state(name, sd, self.quantizable, self._qbits_of, self._shapes,
                                 lambda s, n: self._state_dtype(s, n))
        sd = reconcile_master(name, sd, lambda n: n in self.params and self._master(n), cast)
        names = self.all_state_names + ((MASTER,) if any(self._master(n) for n in self.params) else ())
        state, hypers = check_state_dict(name, sd, self.param_groups, self._shapes,
                                         names, self.defaults, self.state_shape_of, self._state_dtype, cast)
        for h in hypers:
            self.check(h)
        qstate = join_state(state, qstate, self.quantizable, self._qbits_of)
        if params is not None:
            params = check_load_params(name, params, self._shapes, {n: dtype_of(p.dtype) for n, p in self.params.items()},
                                       cast)
            self.check_param_values(name, params)
        return state, hypers, qstate, params

    @locked
    def load_state_dict(self, sd: dict, cast: bool = False, params: dict | None = None) -> None:
        """Restore a state dict (from this twin or its GPU class); checked fully before anything changes."""
        state, hypers, qstate, params = self._check_load(sd, cast, params)
        if params is not None:
            for n, a in params.items():
                self.params[n][...] = a
        for g, h in zip(self.param_groups, hypers):
            g.update(h)
        self._last_norm = None
        self.state = {n: {k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in st.items()}
                      for n, st in state.items()}
        for n, qs in qstate.items():
            for s, (codes, absmax) in qs.items():
                self.state[n].update(quant_entries(s, codes, absmax, self._qbits(n), self.quantizable[s]))
        for n, st in self.state.items():  # a master copy the state dict lacks: the parameter's value
            if self._master(n) and MASTER not in st:
                st[MASTER] = self.params[n].astype(F32)
