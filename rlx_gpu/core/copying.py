"""``copy.deepcopy`` and ``pickle`` of every optimizer (GPU classes, twins, Partition), rebuilt from what their
public methods give: the constructor's groups and options, then the state dict loaded.

- ``copy.deepcopy(opt)``: a new optimizer with copies of the params and every state buffer, on the same device
  (through the host); built from torch tensors, the tensors are deep-copied too (through the copy's memo, so a
  model and its optimizer copied together share the copied tensors).
- ``pickle.dumps(opt)``: host copies (NumPy arrays, or the torch tensors); ``pickle.loads`` builds it again on the
  default device (``RLX_GPU_ADAPTER`` or the best adapter). Hooks are not kept (as torch's deepcopy and pickle do
  not keep them), nor a Kron ``probe`` that cannot be pickled.
"""
from __future__ import annotations

import copy

from .checkpoint import SAVED_OPTIONS


def ctor_options(opt) -> dict:
    """The keyword arguments that make an optimizer like ``opt`` (its options, lr_scale, defaults and the class's
    extra keywords such as Kron's ``probe``), without ``device``."""
    kw = {k: opt.options[k] for k in SAVED_OPTIONS if k in opt.options}
    kw["lr_scale"] = dict(opt.lr_scale)
    for k in getattr(type(opt), "extra_kwargs", ()):
        kw[k] = getattr(opt, k)
    kw.update({k: v for k, v in getattr(opt, "defaults", {}).items()})
    return kw


def named_group(group: dict, count: int) -> dict:
    """A new group's tensors or arrays by name: given as a list (torch's way), numbered after the ``count`` there
    are (as torch numbers them)."""
    if not isinstance(group, dict):
        raise TypeError(f"add_param_group: param_group must be a dict with 'params', got {type(group).__name__}")
    group = dict(group)
    items = group.get("params")
    if items is not None and not isinstance(items, dict):
        items = [items] if hasattr(items, "shape") else list(items)
        group["params"] = dict(x if isinstance(x, tuple) else (str(count + i), x) for i, x in enumerate(items))
    return group


def rebuilt(cls, groups, kw: dict, sd: dict):
    """An optimizer of ``cls`` made from ``groups`` and ``kw``, with state dict ``sd`` loaded (what pickle calls)."""
    opt = cls(groups, **kw)
    opt.load_numpy_state_dict(sd)
    return opt


class Copyable:
    """``__deepcopy__``, ``__reduce__`` and the state-dict entry points checkpoints and copies use (a torch-built
    optimizer's ``state_dict()`` is torch's format; these are rlx_gpu's)."""

    def numpy_state_dict(self, **kw) -> dict:
        """rlx_gpu's own state dict (name-keyed NumPy arrays, quantized states as codes and absmax words; what
        checkpoints hold), also for an optimizer built from torch tensors, whose ``state_dict()`` is torch's format.
        Keyword arguments as ``state_dict``'s (``dequantize=True``)."""
        return self.state_dict(**kw)

    def load_numpy_state_dict(self, sd, **kw) -> None:
        """Load what :meth:`numpy_state_dict` gave (checked fully before anything changes)."""
        self.load_state_dict(sd, **kw)

    def _copy_payload(self, memo):
        """(groups, constructor keyword arguments, state dict); ``memo``: a deepcopy's (torch tensors are copied
        through it), None for pickle."""
        with self.lock:
            sd = self.numpy_state_dict()
            params = self.read_params()
        tensors = getattr(self, "_torch", {})
        if tensors:
            params = {n: (copy.deepcopy(t, memo) if memo is not None else t) for n, t in tensors.items()}
        keys = set(self.hyperparameters())
        groups = [{"params": {n: params[n] for n in g["params"]}, **{k: v for k, v in g.items() if k in keys}}
                  for g in sd["param_groups"]]
        return groups, ctor_options(self), sd

    def add_param_group(self, param_group: dict) -> None:
        """Add a group (``{"params": {name: array}, <hyperparameters>}``, as the constructor's groups): the optimizer
        is rebuilt with every group (on the same device), the other tensors' params and states carried over; a
        group that is refused changes nothing. ``params``/``grads`` hold new DeviceTensors afterwards."""
        with self.lock:
            groups, kw, sd = self._copy_payload(None)
            if self.on_device:
                kw["device"] = self.device
            fresh = type(self)(groups + [named_group(param_group, sum(len(g["params"]) for g in groups))], **kw)
            new = fresh.param_groups[len(sd["param_groups"]):]
            fresh.load_numpy_state_dict({"state": sd["state"],
                                           "param_groups": sd["param_groups"] + [dict(g, params=list(g["params"]))
                                                                                 for g in new]})
            lock = self.lock
            self.__dict__.clear()
            self.__dict__.update(fresh.__dict__, lock=lock)

    def __deepcopy__(self, memo):
        groups, kw, sd = self._copy_payload(memo)
        if self.on_device:
            kw["device"] = self.device
        return rebuilt(type(self), groups, kw, sd)

    def __reduce__(self):
        return rebuilt, (type(self), *self._copy_payload(None))
