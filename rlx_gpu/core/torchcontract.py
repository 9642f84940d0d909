"""torch.optim.Optimizer's contract for rlx_gpu's optimizers built from torch tensors.

``rlx_gpu.AdamW(model.parameters())`` IS a ``torch.optim.Optimizer``: given torch tensors, an optimizer class
(through its metaclass, :class:`TorchAware`) makes an instance of its torch flavour, ``flavour(cls)`` (the class
``rlx_gpu.torch.AdamW``), a subclass of both ``rlx_gpu.AdamW`` and ``torch.optim.Optimizer``; built from NumPy
arrays nothing here runs and torch is never imported. The flavour keeps two views of the groups: torch's
(``param_groups``: tensors, hyperparameters as given, a tensor ``lr`` kept, torch's switches ``foreach``/``fused``/
``capturable``/``differentiable``; what schedulers and GradScaler read and write) and the engine's (names, plain
floats), synchronised each time the engine runs (a step, a state dict, a checkpoint). It has torch's step hooks
(torch's own wrapper), state-dict hooks, ``add_param_group`` (the engine is rebuilt with every group; states carry
over), ``state`` (:class:`rlx_gpu.core.torchstate.TorchState`), torch-format state dicts (tensors, integer keys,
lossless) and ``step(closure)``.
"""
from __future__ import annotations

import contextlib
import copy
import threading

from .copying import ctor_options
from .options import TORCH_SWITCHES, split as split_options
from .torchio import _torch, is_tensor, plain
from .torchparams import materialize
from .torchsd import TorchFormat
from .torchstate import TorchState, real_shape_of, state_from_torch, state_to_torch

_FLAVOURS: dict = {}
SWITCH_DEFAULTS = {"foreach": None, "fused": None, "capturable": False, "differentiable": False}


def flavour(cls):
    """The ``torch.optim.Optimizer`` subclass of rlx_gpu class ``cls`` (made once, ``rlx_gpu.torch.<Name>``)."""
    if getattr(cls, "_rlx_base", None) is not None:
        return cls
    if cls not in _FLAVOURS:
        torch = _torch()
        mixin = getattr(cls, "torch_contract", TorchContract)
        doc = (f"rlx_gpu.{cls.__name__} as a torch.optim.Optimizer: what rlx_gpu.{cls.__name__}(model.parameters()) "
               f"makes (see :mod:`rlx_gpu.torch`).\n\n{cls.__doc__ or ''}")
        _FLAVOURS[cls] = type(cls.__name__, (mixin, cls, torch.optim.Optimizer),
                              {"_rlx_base": cls, "__module__": "rlx_gpu.addons.torch", "__qualname__": cls.__name__,
                               "__doc__": doc})
    return _FLAVOURS[cls]


class TorchAware(type):
    """The metaclass of rlx_gpu's optimizers: given torch tensors, a class makes its torch flavour's instance
    (hyperparameters are checked first, as torch checks them before the params)."""

    def __call__(cls, *args, **kwargs):
        if getattr(cls, "_rlx_base", None) is None and (args or "params" in kwargs):
            params = args[0] if args else kwargs.pop("params")
            rest = args[1:]
            check = getattr(cls, "_check_arguments", None)
            if check is not None:
                check(rest, dict(kwargs))
            params, found = materialize(cls.__name__, params)
            if found and getattr(cls, "spec", cls) is not None:  # (not the base class: it says what to use)
                cls = flavour(cls)
            args = (params, *rest)
        return super().__call__(*args, **kwargs)


def native_groups(opt) -> list:
    """An optimizer's groups as its engine keeps them (tensor names in ``"params"``)."""
    return opt.__dict__.get("_engine_groups") or opt.param_groups


class TorchContract(TorchFormat):
    """torch.optim.Optimizer's contract over an rlx_gpu optimizer class (the next base); see the module doc."""

    _rlx_base = None
    extra_kwargs: tuple = ()

    # -- the two views of the groups ----------------------------------------------------------------------------
    def _viewing(self) -> bool:
        return getattr(self.__dict__["_view"], "depth", 0) > 0

    @property
    def param_groups(self):
        return self.__dict__["_engine_groups" if self._viewing() else "_torch_groups"]

    @param_groups.setter
    def param_groups(self, value):
        self.__dict__["_engine_groups" if self._viewing() else "_torch_groups"] = value

    @property
    def state(self):
        return self.__dict__["_state_map"]

    @state.setter
    def state(self, value):
        if value is not self.__dict__.get("_state_map"):
            self.__dict__["_state_map"] = TorchState(self, {k: v for k, v in dict(value).items() if not is_tensor(k)})

    @contextlib.contextmanager
    def _engine_view(self, load: bool = False):
        """The engine's groups for the engine's code (this thread), synchronised from torch's first; with
        ``load``, hyperparameters the engine changed go back into torch's groups."""
        tls = self.__dict__["_view"]
        outer = getattr(tls, "depth", 0) == 0
        before = self._sync_to_engine() if outer else None
        tls.depth = getattr(tls, "depth", 0) + 1
        try:
            yield
        finally:
            tls.depth -= 1
        if outer and load:
            self._sync_from_engine(before)

    def _skip_key(self, k) -> bool:
        return k in ("params", "param_names") or k in TORCH_SWITCHES or k in self._fixed_keys()

    def _fixed_keys(self) -> dict:
        spec = getattr(self._rlx_base, "spec", None)
        return dict(getattr(spec, "torch_group_keys", {}))

    def _sync_to_engine(self):
        out = []
        for tg, eg in zip(self.__dict__["_torch_groups"], self.__dict__.get("_engine_groups", ())):
            for k, v in tg.items():
                if not self._skip_key(k):
                    eg[k] = plain(v)
            out.append({k: repr(v) for k, v in eg.items() if k != "params"})
        return out

    def _sync_from_engine(self, before) -> None:
        for tg, eg, was in zip(self.__dict__["_torch_groups"], self.__dict__["_engine_groups"], before):
            for k, v in eg.items():
                if k != "params" and repr(v) != was.get(k):
                    if is_tensor(tg.get(k)):
                        tg[k].fill_(v)
                    else:
                        tg[k] = v

    def _touch(self) -> None:
        """The device state may have changed: ``state`` reads it again."""
        self.__dict__["_gen"] = self.__dict__.get("_gen", 0) + 1

    @property
    def _state_generation(self):
        return self.__dict__.get("_gen", 0)

    # -- construction -------------------------------------------------------------------------------------------
    @classmethod
    def _split(cls, args, kwargs) -> tuple:
        """(hyperparameters as given (tensors kept), plain ones, the options given, torch's switches, the class's
        extra keyword arguments (Kron's ``probe``)); everything checked, the hyperparameters first."""
        base = cls._rlx_base
        spec = base.spec
        extra = {k: kwargs.pop(k) for k in base.extra_kwargs if k in kwargs}
        raw = dict(zip(spec.defaults, args))
        raw.update({k: kwargs[k] for k in spec.defaults if k in kwargs})
        switches = {**SWITCH_DEFAULTS, **{k: kwargs[k] for k in TORCH_SWITCHES if k in kwargs}}
        hyper, _ = split_options(base.__name__, spec.defaults, args, dict(kwargs), gpu=True,
                                 overrides=spec.option_defaults, fixed=spec.torch_group_keys)
        spec.validate({**spec.defaults, **hyper})
        opts = {k: v for k, v in kwargs.items() if k not in spec.defaults and k not in TORCH_SWITCHES
                and k not in spec.torch_group_keys}
        return raw, hyper, opts, switches, extra

    def __init__(self, params, *args, **kwargs):
        self.__dict__.update(_view=threading.local(), _torch_groups=[])
        raw, hyper, opts, switches, extra = self._split(args, dict(kwargs))
        defaults = {**self._rlx_base.spec.defaults, **raw, **switches, **self._fixed_keys()}
        self.__dict__.update(_torch_defaults=defaults, _building=True)
        _torch().optim.Optimizer.__init__(self, _rlx_named(params), defaults)
        self.__dict__["_building"] = False
        self._build_engine(opts, extra)
        self.defaults = {**self._rlx_base.spec.defaults, **hyper}

    def _engine_groups_from(self, torch_groups) -> list:
        """torch's groups as the engine's constructor takes them: {name: tensor} (named as torch numbers them, or
        by ``param_names``), each tensor once, the hyperparameters plain."""
        keys, out, counter = self._rlx_base.spec.defaults, [], 0
        for tg in torch_groups:
            names = tg.get("param_names") or [str(counter + i) for i in range(len(tg["params"]))]
            counter += len(tg["params"])
            named, seen = {}, set()
            for n, t in zip(names, tg["params"]):
                if id(t) not in seen:
                    seen.add(id(t))
                    named[n] = t
            out.append({"params": named, **{k: plain(tg[k]) for k in keys if k in tg}})
        return out

    def _build_engine(self, opts: dict, extra: dict) -> None:
        with self._engine_view():
            self._rlx_base.__init__(self, self._engine_groups_from(self.__dict__["_torch_groups"]), **opts, **extra)
        self.__dict__["_name_of"] = {id(t): n for n, t in self._torch.items()}
        if "_state_map" not in self.__dict__:
            self.__dict__["_state_map"] = TorchState(self)

    @classmethod
    def load(cls, path, device=None):
        """Refused: a torch optimizer is made from its model's tensors (build it, then ``opt.restore(path)``)."""
        raise TypeError(f"rlx_gpu.torch.{cls.__name__}.load: build the optimizer from the model's tensors, then "
                        f"opt.restore(path) (or rlx_gpu.{cls.__name__}.load(path) for a NumPy-built one)")

    # -- the engine's entry points ------------------------------------------------------------------------------
    def step(self, closure=None, *, loss_scale=None):
        """One step from the tensors' ``.grad`` (``closure``: called first with grad enabled, its loss returned;
        a dict of grads instead works as ``rlx_gpu``'s ``step(grads)``)."""
        grads = None
        if closure is not None and not callable(closure):
            grads, closure = closure, None
        loss = None
        if closure is not None:
            with _torch().enable_grad():
                loss = closure()
        try:
            with self._engine_view():
                self._rlx_base.step(self, grads, loss_scale=loss_scale)
        finally:
            self._touch()
        return loss

    def numpy_state_dict(self, **kw) -> dict:
        with self._engine_view():
            return self._rlx_base.state_dict(self, **kw)

    def load_numpy_state_dict(self, sd, **kw) -> None:
        try:
            with self._engine_view(load=True):
                self._rlx_base.load_state_dict(self, sd, **kw)
        finally:
            self._touch()

    def write_params(self, params: dict) -> None:
        """As ``rlx_gpu``'s ``write_params`` (the tensors get the values too)."""
        try:
            self._rlx_base.write_params(self, params)
        finally:
            self._touch()

    def restore(self, path, cast: bool = False) -> None:
        """As ``rlx_gpu``'s ``restore`` (params, state, hyperparameters; the tensors get the values)."""
        self._rlx_base.restore(self, path, cast)

    def _torch_param_state(self) -> dict:
        sd = self.numpy_state_dict()["state"]
        return {id(t): (t, state_to_torch(sd[n], real_shape_of(t))) for n, t in self._torch.items() if n in sd}

    def _load_param_state(self, tensor, st) -> None:
        name = self.__dict__["_name_of"].get(id(tensor))
        if name is None:
            raise KeyError(f"{type(self).__name__}.state: the tensor is not one of this optimizer's parameters")
        if st is not None and not isinstance(st, dict):
            raise TypeError(f"{type(self).__name__}.state[{name!r}]: expected a dict of state, got {type(st).__name__}")
        sd = self.numpy_state_dict()
        sd["state"].pop(name, None)
        if st is not None:
            sd["state"][name] = state_from_torch(type(self).__name__, st)
        self.load_numpy_state_dict(sd)

    # -- copies -------------------------------------------------------------------------------------------------
    def _copy_payload(self, memo):
        """(torch's groups (``memo``: a deepcopy's, the tensors copied through it; None: pickle's, the tensors
        themselves), constructor keyword arguments, native state dict) that rebuild this optimizer."""
        with self.lock:
            sd = self.numpy_state_dict()
            groups = self.__dict__["_torch_groups"]
            groups = copy.deepcopy(groups, memo) if memo is not None else [dict(g) for g in groups]
        return groups, ctor_options(self), sd


def _rlx_named(params):
    """rlx_gpu's dict name -> tensor (also as a group's "params") as torch's named pairs."""
    if isinstance(params, dict):
        return list(params.items())
    if isinstance(params, list):
        return [dict(g, params=list(g["params"].items())) if isinstance(g, dict) and isinstance(g.get("params"), dict)
                else g for g in params]
    return params
