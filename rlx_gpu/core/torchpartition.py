"""``rlx_gpu.torch.Partition``: a Partition built from torch tensors as a ``torch.optim.Optimizer``.

Its torch groups are its parts' groups in order (each part's hyperparameters, the tensors routed there): what torch's
schedulers and GradScaler walk. ``state_dict()`` is torch's format over every part (indices across the parts'
groups); rlx_gpu's ``{"parts": ...}`` format loads too. ``add_param_group`` routes the new group's tensors to the
parts (the Partition is rebuilt with every group; states carry over).
"""
from __future__ import annotations

import threading

from .partition import PartitionBase
from .torchcontract import SWITCH_DEFAULTS, TorchContract
from .torchio import _torch
from .torchstate import TorchState


class PartitionContract(TorchContract):
    """torch.optim.Optimizer's contract over :class:`rlx_gpu.Partition` (see the module docstring)."""

    def __init__(self, params, *args, **kwargs):
        self.__dict__.update(_view=threading.local(), _torch_groups=[], _torch_defaults={})
        with self._engine_view():
            self._rlx_base.__init__(self, params, *args, **kwargs)
        self._torch_side()

    def _torch_side(self) -> None:
        """torch's groups over the parts' groups (torch's constructor checks them)."""
        groups = [dict({k: v for k, v in g.items() if k != "params"}, **SWITCH_DEFAULTS,
                       params=[self._torch[n] for n in g["params"]]) for g in self.__dict__["_engine_groups"]]
        self.__dict__.update(_torch_groups=[], _building=True)
        _torch().optim.Optimizer.__init__(self, groups, {})
        self.__dict__["_building"] = False
        self.__dict__["_name_of"] = {id(t): n for n, t in self._torch.items()}
        self.__dict__.setdefault("_state_map", TorchState(self))

    def numpy_state_dict(self, **kw) -> dict:
        with self._engine_view():
            return self._flat_state_dict(**kw)

    def load_numpy_state_dict(self, sd, cast: bool = False, **kw) -> None:
        try:
            with self._engine_view(load=True):
                if isinstance(sd, dict) and "parts" in sd:
                    self._rlx_base.load_state_dict(self, sd, cast)
                else:
                    self._load_flat(sd, cast)
        finally:
            self._touch()

    def load_state_dict(self, state_dict: dict, cast: bool = False) -> None:
        """torch's format over every part, or rlx_gpu's (``{"parts": ...}`` or by tensor name)."""
        if isinstance(state_dict, dict) and "parts" in state_dict:
            return self.load_numpy_state_dict(state_dict, cast)
        return super().load_state_dict(state_dict, cast)

    def step(self, closure=None, *, loss_scale=None):
        """One step of every part from the tensors' ``.grad`` (``closure``: called first, its loss returned)."""
        return super().step(closure, loss_scale=loss_scale)

    def restore(self, path, cast: bool = False) -> None:
        """Every part from its checkpoint (all checked first)."""
        try:
            with self._engine_view(load=True):
                self._rlx_base.restore(self, path, cast)
        finally:
            self._touch()

    def _copy_payload(self, memo):
        return PartitionBase._copy_payload(self, memo)

    def add_param_group(self, param_group: dict) -> None:
        """The group's tensors routed by label (torch's checks first); the Partition is rebuilt with every group on
        the same device, the other tensors' params and states carried over."""
        if self.__dict__.get("_building"):
            return _torch().optim.Optimizer.add_param_group(self, param_group)
        keep = {k: v for k, v in self.__dict__.items() if k.startswith("_optimizer_") or k == "_state_map"}
        with self._engine_view():
            self._rlx_base.add_param_group(self, param_group)
        self.__dict__.update(keep)
        self._touch()
