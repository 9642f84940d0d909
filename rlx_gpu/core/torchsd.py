"""torch's state-dict format and ``add_param_group`` for torch-built optimizers (mixed into
:class:`rlx_gpu.core.torchcontract.TorchContract`).

``state_dict()`` is torch's: ``{"state": {index: {name: tensor}}, "param_groups": [{..., "params": [index]}]}``
with indices as torch assigns them, every state array a tensor of its own dtype and bits (quantized states as
their uint8 codes, float32 absmax and map: lossless; ``dequantize=True`` gives float32 moments, what torch.optim's
class takes), ``step`` a 0-d tensor; ``torch.save`` then ``torch.load(weights_only=True)`` reads it back. The
state-dict hooks run as torch runs them. ``load_state_dict`` takes torch's format (from this class or from
torch.optim's class of the same algorithm) or rlx_gpu's (names), checks everything before anything changes, and
keeps non-parameter keys of ``"state"`` as torch does.
"""
from __future__ import annotations

import copy
import threading

from .torchio import _torch, plain
from .torchstate import check_fixed_keys, real_shape_of, state_from_torch, state_to_torch


def _is_native(sd) -> bool:
    groups = sd.get("param_groups") if isinstance(sd, dict) else None
    return isinstance(groups, (list, tuple)) and any(
        isinstance(g, dict) and any(isinstance(n, str) for n in g.get("params", ())) for g in groups)


class TorchFormat:
    """``state_dict``, ``load_state_dict`` and ``add_param_group`` in torch's terms."""

    def _pack_groups(self):
        """torch's ``pack_group``: ({id(tensor): index}, the groups with indices), indices exactly as torch's."""
        mapping, start, groups = {}, 0, []
        for g in self.__dict__["_torch_groups"]:
            packed = {k: v for k, v in g.items() if k != "params"}
            mapping.update({id(p): i for i, p in enumerate(g["params"], start) if id(p) not in mapping})
            packed["params"] = [mapping[id(p)] for p in g["params"]]
            start += len(packed["params"])
            groups.append(packed)
        return mapping, groups

    def state_dict(self, dequantize: bool = False) -> dict:
        """torch's format (see :mod:`rlx_gpu.core.torchsd`); the state-dict hooks run as in torch."""
        for hook in self._optimizer_state_dict_pre_hooks.values():
            hook(self)
        native = self.numpy_state_dict(dequantize=dequantize)["state"]
        mapping, groups = self._pack_groups()
        state = {mapping[id(t)]: state_to_torch(native[n], real_shape_of(t)) for n, t in self._torch.items()
                 if n in native and id(t) in mapping}
        state.update(self.state.extra)
        sd = {"state": state, "param_groups": groups}
        for hook in self._optimizer_state_dict_post_hooks.values():
            got = hook(self, sd)
            if got is not None:
                sd = got
        return sd

    def load_state_dict(self, state_dict: dict, cast: bool = False) -> None:
        """Load torch's format (or rlx_gpu's); everything is checked before anything changes (``cast``: convert
        states of another float dtype). The load hooks run as in torch."""
        sd = dict(state_dict)
        for hook in self._optimizer_load_state_dict_pre_hooks.values():
            got = hook(self, sd)
            if got is not None:
                sd = got
        if _is_native(sd):
            self.load_numpy_state_dict(sd, cast=cast)
        else:
            self._load_torch_format(sd, cast)
        for hook in self._optimizer_load_state_dict_post_hooks.values():
            hook(self)

    def _load_torch_format(self, sd: dict, cast: bool) -> None:
        owner = type(self).__name__
        if not isinstance(sd, dict) or "state" not in sd or "param_groups" not in sd:
            raise ValueError(f"{owner}.load_state_dict: expected a dict with 'state' and 'param_groups'")
        groups, saved = self.__dict__["_torch_groups"], copy.deepcopy(sd["param_groups"])
        if len(groups) != len(saved):
            raise ValueError("loaded state dict has a different number of parameter groups")
        if any(len(g["params"]) != len(s["params"]) for g, s in zip(groups, saved)):
            raise ValueError("loaded state dict contains a parameter group that doesn't match the size of "
                             "optimizer's group")
        spec, fixed = getattr(self._rlx_base, "spec", None), self._fixed_keys()
        check_fixed_keys(f"{owner}.load_state_dict", saved, spec)
        for s in saved:  # (torch's AdamW sets decoupled_weight_decay whatever the state dict says)
            s.update({k: fixed[k] for k in getattr(spec, "torch_forced_keys", ())})
        id_map = {i: p for s, g in zip(saved, groups) for i, p in zip(s["params"], g["params"])}
        names, state, extra = self.__dict__["_name_of"], {}, {}
        for k, v in sd["state"].items():
            if k in id_map:
                st = state[names[id(id_map[k])]] = state_from_torch(owner, v)
                if isinstance(st, dict):
                    st.setdefault("step", 1 if st else 0)  # (torch's SGD counts no steps)
            else:
                extra[k] = v
        native = [dict({k: plain(v) for k, v in s.items() if not self._skip_key(k)}, params=list(eg["params"]))
                  for s, eg in zip(saved, self.__dict__["_engine_groups"])]
        self.load_numpy_state_dict({"state": state, "param_groups": native}, cast=cast)  # (checked first)
        for g, s in zip(groups, saved):  # torch's update_group; keys an older state dict lacks keep their values
            s["params"] = g["params"]
            for k, v in g.items():
                s.setdefault(k, v)
        groups[:] = saved
        self.state.extra = extra

    # -- groups ---------------------------------------------------------------------------------------------------
    def add_param_group(self, param_group: dict) -> None:
        """torch's ``add_param_group`` (its checks and messages); the engine is then rebuilt with every group on the
        same device, the other tensors' params and states carried over (a failure changes nothing)."""
        torch_add = _torch().optim.Optimizer.add_param_group
        if self.__dict__.get("_building"):  # (torch's constructor adding the first groups)
            return torch_add(self, param_group)
        with self.lock:
            mine = self.defaults
            self.defaults = self.__dict__["_torch_defaults"]
            try:
                torch_add(self, param_group)
            finally:
                self.defaults = mine
            try:
                self._rebuild_engine()
            except BaseException:
                self.__dict__["_torch_groups"].pop()
                raise
            finally:
                self._touch()

    def _rebuild_engine(self) -> None:
        """A new engine over torch's groups (a scratch object, moved in once it is complete)."""
        from .copying import ctor_options
        native = self.numpy_state_dict()
        kw = {k: v for k, v in ctor_options(self).items() if k not in self.defaults}
        scratch = object.__new__(type(self))
        scratch.__dict__.update(_view=threading.local(), _torch_groups=self.__dict__["_torch_groups"],
                                _torch_defaults=self.__dict__["_torch_defaults"])
        kw["device"] = self.device if self.on_device else None
        if not self.on_device:
            kw.pop("device")
        extra = {k: kw.pop(k) for k in type(self).extra_kwargs if k in kw}
        scratch._build_engine(kw, extra)
        new = scratch.__dict__["_engine_groups"][len(native["param_groups"]):]
        scratch.load_numpy_state_dict({"state": native["state"],
                                         "param_groups": native["param_groups"] + [dict(g) for g in new]})
        keep = ("_view", "_torch_groups", "_torch_defaults", "lock", "defaults", "_state_map", "_gen")
        self.__dict__.update({k: v for k, v in scratch.__dict__.items() if k not in keep})

