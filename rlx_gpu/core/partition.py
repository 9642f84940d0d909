"""What every Partition shares (``rlx_gpu.Partition`` on the GPU, ``rlx_gpu.reference.Partition`` its twin): params
as every optimizer takes them (a dict of arrays, torch's ``model.parameters()``/``named_parameters()``, groups),
routing by label, the parts' groups, and state dicts and checkpoints that load into every part or into none.

A param group's keys go to each part its tensors are routed to (they must be that part's hyperparameters); a
part's own keyword arguments are its defaults. ``state_dict()`` is ``{"parts": {label: that part's state dict}}``;
``load_state_dict`` and ``restore`` check every part (every file) before they change any.
"""
from __future__ import annotations

import os
import threading

import numpy as np

from .checkpoint import restore_plan
from .copying import Copyable, named_group
from .groups import checked_lr, resolve_lr_scale
from .numerics import check_max_norm
from .torchio import _torch
from .torchparams import from_torch

MAX_PARTS = 4
OWN = ("clip_grad_norm", "skip_nonfinite", "device")


def _as_groups(params) -> list:
    if isinstance(params, dict):
        return [{"params": params}]
    if isinstance(params, (list, tuple)) and params and all(isinstance(g, dict) and "params" in g for g in params):
        return [dict(g) for g in params]
    raise TypeError("Partition: params must be a dict name -> array, torch tensors (model.parameters(), "
                    f"model.named_parameters()) or a list of param groups, got {type(params).__name__}")



def _check_labels(optimizers: dict) -> None:
    """Every label names a checkpoint file of its own (``<path>.<label>.npz``): no path separator or NUL, and no
    two labels with the same text; ValueError naming the label otherwise (before anything is made or written)."""
    import os
    seps = {"/", "\\", "\0", os.sep, os.altsep} - {None}
    seen = {}
    for k in optimizers:
        text = str(k)
        if any(c in text for c in seps) or not text:
            raise ValueError(f"Partition: part name {k!r} cannot name its checkpoint file <path>.{text}.npz (it is "
                             "empty or holds '/', '\\' or NUL)")
        if text in seen:
            raise ValueError(f"Partition: part names {seen[text]!r} and {k!r} would share <path>.{text}.npz")
        seen[text] = k

class PartitionBase(Copyable):
    """Routing, groups and state of a Partition; the step is the subclass's (device or host)."""

    on_device = True

    def _part_class(self, key, cls):
        """The optimizer class a part is made of (the GPU Partition: a GPU class; the twin: its twin)."""
        raise NotImplementedError

    def _make_part(self, cls, groups: list, kw: dict):
        raise NotImplementedError

    def __init__(self, params, label, optimizers: dict, *, device=None, clip_grad_norm=None,
                 skip_nonfinite=False):
        if not callable(label):
            raise TypeError("Partition: label must be a callable (name, shape) -> a key of optimizers")
        if not isinstance(optimizers, dict) or not optimizers or len(optimizers) > MAX_PARTS:
            raise ValueError(f"Partition: 1 to {MAX_PARTS} sub-optimizers, got {len(optimizers or ())}")
        _check_labels(optimizers)
        if clip_grad_norm is not None:
            check_max_norm(clip_grad_norm)
        if not isinstance(skip_nonfinite, bool):
            raise TypeError(f"Partition: skip_nonfinite must be True or False, got {skip_nonfinite!r}")
        self.lock = threading.RLock()
        self.label, self.optimizers = label, dict(optimizers)
        self.clip_grad_norm, self.skip_nonfinite = clip_grad_norm, skip_nonfinite
        params, tensors = from_torch("Partition", params)
        groups = _as_groups(params)
        self._source_groups = [dict(g, params=list(g["params"])) for g in groups]
        routed = self._route_groups(groups, tensors)
        self.parts: dict = {}
        dev = device
        for k, spec in optimizers.items():
            cls, kw = spec if isinstance(spec, tuple) else (spec, {})
            cls = self._part_class(k, cls)
            clash = set(OWN) & set(kw)
            if clash:
                raise ValueError(f"Partition: optimizers[{k!r}] sets {sorted(clash)}; give them to Partition")
            if routed[k]:  # (a label nothing was routed to has no part)
                self.parts[k] = self._make_part(cls, routed[k], dict(kw, device=dev))
                dev = getattr(self.parts[k], "device", None)
        if not self.parts:
            raise ValueError("Partition: no params")
        self.device = dev
        self._part_of = {n: k for k, p in self.parts.items() for n in p.params}
        self._torch = {n: t for p in self.parts.values() for n, t in getattr(p, "_torch", {}).items()}
        #: Every part's groups (the same dicts: a schedule or a write changes that part's group).
        self.param_groups = [g for p in self.parts.values() for g in p.param_groups]

    def _route_groups(self, groups: list, tensors: dict) -> dict:
        """label -> that part's groups ({**group keys, "params": {name: tensor or array}})."""
        routed: dict = {k: [] for k in self.optimizers}
        for g in groups:
            mine: dict = {k: {} for k in self.optimizers}
            for n, a in g["params"].items():
                if not isinstance(a, np.ndarray):
                    raise TypeError(f"Partition: {n!r} must be a NumPy array or a torch tensor, got {type(a).__name__}")
                shape = tuple(tensors[n].shape) if n in tensors else tuple(np.shape(a))
                k = self.label(n, shape)
                if k not in self.optimizers:
                    raise ValueError(f"Partition: label gave {k!r} for {n!r}; expected one of {sorted(self.optimizers)}")
                mine[k][n] = tensors.get(n, a)
            for k, members in mine.items():
                if members:
                    routed[k].append({**{h: v for h, v in g.items() if h != "params"}, "params": members})
        return routed

    # -- what a user reads --------------------------------------------------------------------------------------
    @property
    def params(self) -> dict:
        """Every part's params by name."""
        return {n: t for p in self.parts.values() for n, t in p.params.items()}

    @property
    def grads(self) -> dict:
        """Every part's grads by name."""
        return {n: t for p in self.parts.values() for n, t in p.grads.items()}

    @property
    def lr_scale(self) -> dict:
        return {n: s for p in self.parts.values() for n, s in p.lr_scale.items()}

    def read_params(self, names=None) -> dict:
        """Host copies of every part's params (all, or ``names``)."""
        got = {n: a for p in self.parts.values() for n, a in p.read_params().items()}
        return got if names is None else {n: got[n] for n in ([names] if isinstance(names, str) else names)}

    def set_lr(self, lr: float) -> None:
        """Every part's lr (checked in every part before any changes)."""
        for p in self.parts.values():
            checked_lr(getattr(p, "spec", type(p)), p.param_groups, lr)  # (a GPU part's spec, or the twin itself)
        for p in self.parts.values():
            p.set_lr(lr)

    def set_lr_scale(self, lr_scale) -> None:
        """Replace the per-tensor lr factors (dict name -> factor, missing names 1, routed to the parts; a callable
        name -> factor, given to every part; or None: every factor 1), checked in every part before any changes."""
        if lr_scale is None or callable(lr_scale):
            routed = dict.fromkeys(self.parts, lr_scale)
        elif isinstance(lr_scale, dict):
            routed = self._route(lr_scale, "lr_scale")
        else:
            raise TypeError("Partition: lr_scale must be a dict name -> factor or a callable name -> factor, got "
                            f"{type(lr_scale).__name__}")
        # every part's factors resolved once (a callable is called once per tensor, as the single optimizers call
        # it), then given to the parts as plain dicts: nothing left to fail after the first part changes
        resolved = {k: resolve_lr_scale(type(p).__name__, routed.get(k, {}), list(p.lr_scale))
                    for k, p in self.parts.items()}
        for k, p in self.parts.items():
            p.set_lr_scale(resolved[k])

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Every part's zero_grad (built from torch tensors: their ``.grad``)."""
        for p in self.parts.values():
            p.zero_grad(set_to_none)

    def _call_closure(self, closure):
        """A step's closure, with grad enabled where the params are torch tensors (as torch's optimizers)."""
        if self._torch:
            with _torch().enable_grad():
                return closure()
        return closure()

    def _route(self, grads: dict, what: str = "grads") -> dict:
        unknown = [n for n in grads if n not in self._part_of]
        if unknown:
            raise KeyError(f"Partition: {what} for unknown tensor(s) {unknown}")
        out: dict = {}
        for n, g in grads.items():
            out.setdefault(self._part_of[n], {})[n] = g
        return out

    # -- state ----------------------------------------------------------------------------------------------------
    def state_dict(self, dequantize: bool = False) -> dict:
        """``{"parts": {label: that part's state_dict()}}``."""
        return {"parts": {k: p.state_dict(dequantize=dequantize) for k, p in self.parts.items()}}

    def load_state_dict(self, sd: dict, cast: bool = False) -> None:
        """Load every part's state dict; every part is checked before any changes."""
        parts = sd.get("parts") if isinstance(sd, dict) else None
        if not isinstance(parts, dict) or set(parts) != set(self.parts):
            raise ValueError(f"Partition.load_state_dict: expected {{'parts': {{...}}}} with {sorted(self.parts)}")
        with self.lock:
            for k, p in self.parts.items():
                p._check_load(parts[k], cast)
            for k, p in self.parts.items():
                p.load_state_dict(parts[k], cast=cast)

    def _flat_state_dict(self, dequantize: bool = False) -> dict:
        """Every part's state and groups in one state dict keyed by tensor name (what torch's format is made of)."""
        state, groups = {}, []
        for p in self.parts.values():
            sd = p.state_dict(dequantize=dequantize)
            state.update(sd["state"])
            groups += sd["param_groups"]
        return {"state": state, "param_groups": groups}

    def _load_flat(self, sd: dict, cast: bool = False) -> None:
        """A flat state dict (:meth:`_flat_state_dict`'s) split into the parts and loaded (all or nothing)."""
        groups, at, parts = list(sd["param_groups"]), 0, {}
        for k, p in self.parts.items():
            mine = groups[at:at + len(p.param_groups)]
            at += len(p.param_groups)
            parts[k] = {"state": {n: st for n, st in sd["state"].items() if self._part_of.get(n) == k},
                        "param_groups": mine}
        unknown = [n for n in sd["state"] if n not in self._part_of]
        if unknown or at != len(groups):
            raise ValueError(f"Partition.load_state_dict: {len(groups)} groups and tensors {unknown or '...'} do not "
                             f"match this Partition's {at} groups")
        self.load_state_dict({"parts": parts}, cast)

    def save(self, path) -> None:
        """One checkpoint per part: ``<path>.<label>.npz``."""
        for k, p in self.parts.items():
            p.save(f"{os.fspath(path)}.{k}.npz")

    def restore(self, path, cast: bool = False) -> None:
        """Restore every part from its checkpoint (:meth:`save`'s files); every file is read and checked before any
        part changes."""
        with self.lock:
            plans = {}
            for k, p in self.parts.items():
                file = f"{os.fspath(path)}.{k}.npz"
                sd, params, scale = restore_plan(p, file)
                try:
                    p._check_load(sd, cast, params)
                except (ValueError, TypeError, KeyError) as e:
                    raise ValueError(f"{file}: {e}") from e
                plans[k] = (sd, params, scale)
            for k, p in self.parts.items():
                sd, params, scale = plans[k]
                p.load_state_dict(sd, cast=cast, params=params)
                p.set_lr_scale(scale)
                p._torch_epilogue()

    # -- groups and copies -----------------------------------------------------------------------------------------
    def add_param_group(self, param_group: dict) -> None:
        """A group routed to the parts by label (its keys go to each part its tensors reach): the Partition is
        rebuilt with every group on the same device, params and states carried over (a refused group changes
        nothing)."""
        with self.lock:
            groups, kw, _ = self._copy_payload(None)
            param_group = named_group(param_group, sum(len(g["params"]) for g in groups))
            flat = self._flat_state_dict()
            fresh = type.__call__(type(self), groups + [param_group], device=self.device, **kw)
            old = {g["params"][0]: g for g in flat["param_groups"] if g["params"]}
            mine = [dict(old.get(g["params"][0], g), params=list(g["params"]))
                    for g in fresh.__dict__.get("_engine_groups") or fresh.param_groups]  # (a torch one's: by name)
            fresh._load_flat({"state": flat["state"], "param_groups": mine})
            self._adopt(fresh)

    def _adopt(self, fresh) -> None:
        lock = self.lock
        self.__dict__.clear()
        self.__dict__.update(fresh.__dict__, lock=lock)

    def _copy_payload(self, memo):
        import copy
        with self.lock:
            sd = self.numpy_state_dict()
            values = dict(self._torch) if self._torch else self.read_params()
        if self._torch and memo is not None:
            values = {n: copy.deepcopy(t, memo) for n, t in values.items()}
        groups = [dict(g, params={n: values[n] for n in g["params"]}) for g in self._source_groups]
        kw = {"label": self.label, "optimizers": self.optimizers, "clip_grad_norm": self.clip_grad_norm,
              "skip_nonfinite": self.skip_nonfinite}
        return groups, kw, sd
