"""torch's view of an optimizer's state: per-tensor state dicts as torch keeps them, and ``opt.state``.

A tensor's state moves between rlx_gpu's format (NumPy arrays by state name, ``step`` an int) and torch's
(tensors) losslessly and generically: every array becomes a tensor of the same dtype and bits (uint8 codes stay
uint8, float32 absmax float32, bfloat16 through its int16 bits), whatever the state holds; ``step`` is a 0-d
float32 tensor as torch's (float64 past 2**24, where float32 stops counting exactly). For a complex parameter
(kept as its ``view_as_real``), float32 states of that shape are complex64 again, as torch keeps them.

``opt.state`` (:class:`TorchState`) is keyed by the parameter tensors, as torch's: reading ``opt.state[p]`` gives
copies of the device state of ``p`` (``{}`` for a tensor without state, as torch's defaultdict), read once per
change of the state; assigning ``opt.state[p] = {...}`` loads that state for ``p`` (checked as
``load_state_dict`` checks, nothing changed if it fails) and ``del opt.state[p]`` resets ``p`` to no state; changing
a tensor read from it in place changes nothing on the device, but changing the dict read (``opt.state[p][k] = v``,
``del``, ``update``, ``setdefault``, ``pop``, ``clear``: :class:`ParamState`) stores the whole dict back as that
assignment does, a key that is not one of the optimizer's states refused with nothing changed. Other keys of
``opt.state`` itself (what hooks keep there) are stored as given and appear in ``state_dict()["state"]``, as in
torch.
"""
from __future__ import annotations

from collections.abc import MutableMapping

from .torchio import _torch, is_tensor, to_array, to_tensor

EXACT_F32_STEPS = 2 ** 24


def step_tensor(step):
    torch = _torch()
    return torch.tensor(float(step), dtype=torch.float32 if step <= EXACT_F32_STEPS else torch.float64)


def state_to_torch(st: dict, real_shape=None) -> dict:
    """One tensor's state (rlx_gpu's format) as torch's; ``real_shape``: the float32-pairs shape of a complex
    parameter."""
    torch, out = _torch(), {}
    for k, v in st.items():
        if k == "step":
            out[k] = step_tensor(v)
            continue
        t = to_tensor(v)
        if real_shape is not None and t.dtype == torch.float32 and tuple(t.shape) == tuple(real_shape):
            t = torch.view_as_complex(t)
        out[k] = t
    return out


def state_from_torch(owner: str, st) -> dict:
    """One tensor's state in torch's format as rlx_gpu's (tensors as arrays of their dtype and bits, complex as
    float32 pairs, ``step`` a number); what is not a dict comes back as it is (the load says what is wrong)."""
    if not isinstance(st, dict):
        return st
    out = {}
    for k, v in st.items():
        if v is None:
            continue  # (torch's SGD without momentum may keep momentum_buffer: None)
        if k == "step":
            out[k] = v.item() if is_tensor(v) and v.numel() == 1 else v
        else:
            out[k] = to_array(owner, k, v) if is_tensor(v) else v
    return out


class TorchState(MutableMapping):
    """``opt.state`` of a torch-built optimizer (see the module docstring). ``opt`` provides
    ``_torch_param_state()`` ({id(tensor): (tensor, torch-format state)}, read from the device),
    ``_state_generation`` (changes whenever the device state may have), ``_load_param_state(tensor, state or None)``."""

    def __init__(self, opt, extra=None):
        self._opt, self.extra, self._cache, self._gen = opt, dict(extra or {}), None, None

    def _entries(self) -> dict:
        if self._cache is None or self._gen != self._opt._state_generation:
            self._cache, self._gen = self._opt._torch_param_state(), self._opt._state_generation
        return self._cache

    def __getitem__(self, key):
        if is_tensor(key):
            got = self._entries().get(id(key))
            return ParamState(self, key, {k: (v.clone() if is_tensor(v) else v) for k, v in got[1].items()} if got
                              else {})
        return self.extra[key]

    def __setitem__(self, key, value) -> None:
        if is_tensor(key):
            self._opt._load_param_state(key, value)
        else:
            self.extra[key] = value

    def __delitem__(self, key) -> None:
        if is_tensor(key):
            if id(key) not in self._entries():
                raise KeyError(key)
            self._opt._load_param_state(key, None)
        else:
            del self.extra[key]

    def __contains__(self, key) -> bool:
        return id(key) in self._entries() if is_tensor(key) else key in self.extra

    def __iter__(self):
        yield from (t for t, _ in self._entries().values())
        yield from self.extra

    def __len__(self) -> int:
        return len(self._entries()) + len(self.extra)

    def __repr__(self) -> str:
        return f"TorchState({len(self._entries())} tensors with state, extra keys {list(self.extra)})"


class ParamState(dict):
    """``opt.state[p]`` as read: a copy of ``p``'s state whose changes are stored back whole (``opt.state[p] =``
    the changed dict); if that load refuses it (a key that is not one of the optimizer's states, a wrong shape),
    the error is raised and both the dict and the device state stay as they were."""

    def __init__(self, owner: TorchState, key, data: dict):
        super().__init__(data)
        self._owner, self._key = owner, key

    def _change(self, fn, *args):
        before = dict(self)
        out = fn(self, *args)
        try:
            self._owner[self._key] = dict(self)
        except BaseException:
            dict.clear(self)
            dict.update(self, before)
            raise
        return out

    def __setitem__(self, k, v):
        self._change(dict.__setitem__, k, v)

    def __delitem__(self, k):
        self._change(dict.__delitem__, k)

    def update(self, *args, **kwargs):
        self._change(lambda d: dict.update(d, *args, **kwargs))

    def setdefault(self, k, default=None):
        return dict.__getitem__(self, k) if k in self else self._change(dict.setdefault, k, default)

    def pop(self, k, *default):
        return self._change(dict.pop, k, *default) if k in self else dict.pop(self, k, *default)

    def popitem(self):
        return self._change(dict.popitem)

    def clear(self):
        self._change(dict.clear)

    def __ior__(self, other):
        self.update(other)
        return self

    def __reduce__(self):  # (a copy or pickle of it is a plain dict)
        return dict, (dict(self),)


def check_fixed_keys(where: str, groups, spec, who: str = "this") -> None:
    """State-dict ``groups`` against the torch keys ``spec`` holds one value of (``torch_group_keys``): another
    value is refused, but for the keys torch's class sets whatever it loads (``torch_forced_keys``)."""
    forced = getattr(spec, "torch_forced_keys", ())
    for g in groups:
        for k, want in getattr(spec, "torch_group_keys", {}).items():
            if k not in forced and k in g and g[k] != want:
                raise ValueError(f"{where}: the state has {k}={g[k]!r}, but {who} is torch's optimizer with "
                                 f"{k}={want!r}")


def real_shape_of(t):
    """The float32-pairs shape of a complex tensor, None for a real one."""
    return tuple(t.shape) + (2,) if t.is_complex() else None
