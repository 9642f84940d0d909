"""The NumPy twin's base class: the readable specification every GPU optimizer is tested against.

A twin subclass gives ``defaults``, the names of its state buffers, and ``_update``: the update rule for
one tensor, in float32 NumPy, in torch.optim's order of operations. Everything else (param groups,
validation, missing grads, state dicts) lives here and in :mod:`rlx_gpu._groups`, shared with the GPU side.
"""
from __future__ import annotations

import copy
import threading

import numpy as np

from .._groups import MAX_STEP, check_grads, check_state_dict, parse_params, resolve_lr_scale, scaled, validate_group
from .._sync import locked
from ..checkpoint import Checkpointable

F32 = np.float32


class ReferenceOptimizer(Checkpointable):
    #: Hyperparameter names and defaults (a bool default makes a flag, a tuple a pair of betas).
    defaults: dict = {}
    #: Every state buffer name this optimizer can have (torch's names).
    all_state_names: tuple = ()
    #: State buffers created for every tensor at construction (Adagrad's ``sum``).
    eager_state: tuple = ()
    #: States that are one number per tensor (0-d float32 arrays), kept on the host by the GPU class.
    scalar_states: tuple = ()

    # -- the spec, shared with the GPU class ----------------------------------------------------
    @classmethod
    def state_names(cls, group: dict) -> tuple:
        """The state buffers a tensor in ``group`` gets at its first step."""
        return cls.all_state_names

    @classmethod
    def state_shape(cls, state: str, shape: tuple) -> tuple:
        """The shape of state buffer ``state`` for a tensor of ``shape``."""
        return () if state in cls.scalar_states else tuple(shape)

    @classmethod
    def init_value(cls, state: str, group: dict) -> float:
        """The value a state buffer starts at."""
        return 0.0

    @classmethod
    def check(cls, group: dict) -> None:
        """Validation beyond what the defaults' types imply; raise ValueError."""

    @classmethod
    def validate(cls, group: dict) -> None:
        validate_group(cls.__name__, group, cls.defaults)
        cls.check(group)

    # -- the twin ----------------------------------------------------------------------------
    def __init__(self, params, lr_scale=None, clip_grad_norm=None, skip_nonfinite=False, **hyper):
        name = type(self).__name__
        #: Serialises this optimizer's calls (re-entrant), as the GPU classes' lock.
        self.lock = threading.RLock()
        self._last_norm = None
        self.defaults = {**type(self).defaults, **hyper}
        self.param_groups, self.params = parse_params(name, params, self.defaults)
        #: Per-tensor multiplier of the group lr (``lr_scale=``).
        self.lr_scale = resolve_lr_scale(name, lr_scale, list(self.params))
        if clip_grad_norm is not None:
            from ..clip import _check_max_norm
            _check_max_norm(clip_grad_norm)
        #: Global L2-norm clip applied to each step's grads (None: off).
        self.clip_grad_norm = clip_grad_norm
        #: Skip a step whose grads hold inf or NaN (nothing changes; see ``last_step_skipped``).
        self.skip_nonfinite = bool(skip_nonfinite)
        self.last_step_skipped = False
        for g in self.param_groups:
            self.validate(g)
        self._group_of = {n: i for i, g in enumerate(self.param_groups) for n in g["params"]}
        self.grads = {n: np.zeros_like(a) for n, a in self.params.items()}
        self.state: dict = {}
        for n, p in self.params.items():
            g = self.param_groups[self._group_of[n]]
            for s in self.eager_state:
                self.state.setdefault(n, {"step": 0})[s] = np.full(p.shape, self.init_value(s, g), F32)

    def set_lr(self, lr: float) -> None:
        """Set the learning rate of every param group."""
        for g in self.param_groups:
            g["lr"] = lr

    @locked
    def set_lr_scale(self, lr_scale) -> None:
        """Replace the per-tensor lr factors (as the GPU classes)."""
        self.lr_scale = resolve_lr_scale(type(self).__name__, lr_scale, list(self.params))

    @locked
    def write_params(self, params: dict) -> None:
        """Overwrite several parameters (dict name -> float32 array), checked first (as the GPU classes)."""
        check_grads(type(self).__name__, params, {n: p.shape for n, p in self.params.items()}, call="write_params",
                    noun="param")
        for n, a in params.items():
            self.params[n][...] = a

    def last_grad_norm(self) -> float | None:
        """The total gradient norm the last step computed (NaN after a step skipped on inf/NaN); None when it
        clipped nothing (clipping off, a fresh or loaded optimizer)."""
        return None if self._last_norm is None else float(self._last_norm)

    @locked
    def read_params(self, names=None, out: dict | None = None) -> dict:
        """Copies of the parameters (all, or ``names``; into ``out``'s arrays when given), as the GPU class."""
        names = list(out) if out is not None and names is None else (self.params if names is None else names)
        if out is None:
            return {n: self.params[n].copy() for n in names}
        for n in names:
            np.copyto(out[n], self.params[n])
        return {n: out[n] for n in names}

    def zero_grad(self) -> None:
        for g in self.grads.values():
            g.fill(0)

    @locked
    def step(self, grads=None) -> None:
        """One step for every tensor in ``grads`` (default: every tensor, with ``self.grads``)."""
        self._step(grads, 1.0, self.skip_nonfinite)

    @locked
    def _step(self, grads, inv_scale: float, check: bool) -> bool:
        # Extreme values overflow and produce NaN as they do in float32 on the GPU and in torch: no warnings.
        with np.errstate(over="ignore", under="ignore", invalid="ignore", divide="ignore"):
            return self._step_checked(grads, inv_scale, check)

    def _step_checked(self, grads, inv_scale: float, check: bool) -> bool:
        name = type(self).__name__
        self.last_step_skipped = False
        for g in self.param_groups:
            self.validate(g)
        grads = self.grads if grads is None else check_grads(name, grads, {n: p.shape for n, p in self.params.items()})
        if check:
            self.last_step_skipped = not all(np.isfinite(np.asarray(g)).all() for g in grads.values())
            if self.last_step_skipped:  # no norm taken: NaN if this step clips (as the GPU classes report)
                self._last_norm = F32(np.nan) if self.clip_grad_norm is not None else None
                return False
        if inv_scale != 1.0:
            grads = {n: np.asarray(g, F32) * F32(inv_scale) for n, g in grads.items()}
        self._last_norm = None
        if self.clip_grad_norm is not None:  # torch's clip_grad_norm_ over this step's grads, not in place
            from ..clip import clip_coef, host_total_norm
            self._last_norm = host_total_norm(list(grads.values()))
            c = clip_coef(self._last_norm, self.clip_grad_norm)
            grads = {n: np.asarray(g, F32) * c for n, g in grads.items()}
        self._before_update(grads)
        for n, g in grads.items():
            group = self.param_groups[self._group_of[n]]
            st = self.state.setdefault(n, {"step": 0})
            fresh = set()
            for s in self.state_names(group):
                if s not in st:
                    st[s] = np.full(self.state_shape(s, self.params[n].shape), self.init_value(s, group), F32)
                    fresh.add(s)
            st["step"] = min(st["step"] + 1, MAX_STEP)  # saturates, never wraps
            self._update(self.params[n], np.asarray(g, F32).copy(), st, scaled(group, self.lr_scale[n]), fresh)
        return True

    def _before_update(self, grads: dict) -> None:
        """Hook run once per step after every check passed, before the per-tensor updates."""

    def _update(self, p: np.ndarray, g: np.ndarray, st: dict, group: dict, fresh: set) -> None:
        raise NotImplementedError

    @locked
    def state_dict(self) -> dict:
        return {"state": copy.deepcopy(self.state),
                "param_groups": [dict(copy.deepcopy(g), params=list(g["params"])) for g in self.param_groups]}

    @locked
    def load_state_dict(self, sd: dict) -> None:
        name = type(self).__name__
        state, hypers = check_state_dict(name, sd, self.param_groups, {n: p.shape for n, p in self.params.items()},
                                         self.all_state_names, self.defaults, self.state_shape)
        for h in hypers:
            self.check(h)
        for g, h in zip(self.param_groups, hypers):
            g.update(h)
        self._last_norm = None
        self.state = {n: {k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in st.items()}
                      for n, st in state.items()}
