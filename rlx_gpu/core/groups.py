"""Parameter groups, hyperparameter validation, grad and state-dict checks.

Shared by the GPU optimizers and their NumPy twins, so both accept and reject exactly the same input
with the same words (torch.optim's, where torch has a message for it).
"""
from __future__ import annotations

import math
from numbers import Real

import numpy as np

from .lowp import dtype_of, round_rne
from .torchio import plain_hyper

#: The state name of a 16-bit parameter's float32 master copy (``master_weights=True``).
MASTER = "master_param"

# torch.optim's messages for the hyperparameters it checks; others read "Invalid <name> value: v".
_MESSAGES = {
    "lr": "Invalid learning rate",
    "eps": "Invalid epsilon value",
}
# Hyperparameters that may be negative (still finite); their optimizer checks the sign it needs.
_SIGNED = {"dampening", "beta2_decay"}
F32_MAX = float(np.finfo(np.float32).max)

#: The largest step count a tensor reaches: counters saturate there instead of wrapping, and a state dict or
#: checkpoint holding a larger one is refused. 2**53 is the last count float64 (the bias corrections' type)
#: represents exactly.
MAX_STEP = 2 ** 53


def as_step(value):
    """``value`` as a step count (int, NumPy integer, integral float, one-element array) or None if it is not one
    in [0, MAX_STEP]."""
    if isinstance(value, np.ndarray):
        if value.size != 1 or value.dtype.kind not in "iuf":
            return None
        value = value.reshape(-1)[0].item()
    if isinstance(value, (bool, np.bool_)):
        return None
    if isinstance(value, (float, np.floating)):
        if not math.isfinite(value) or not float(value).is_integer():
            return None
        value = int(value)
    if not isinstance(value, (int, np.integer)) or not 0 <= value <= MAX_STEP:
        return None
    return int(value)


def _finite(v) -> bool:
    try:
        return math.isfinite(v)
    except OverflowError:  # an int past float's range
        return False


def _bad(name: str, value) -> ValueError:
    return ValueError(f"{_MESSAGES.get(name, f'Invalid {name} value')}: {value}")


def validate_group(owner: str, group: dict, defaults: dict) -> None:
    """Check every hyperparameter of ``group`` against the type and range its default implies."""
    for name, default in defaults.items():
        v = group[name]
        if type(v) is float and type(default) is float and -F32_MAX <= v <= F32_MAX and (
                v >= 0.0 or name in _SIGNED):
            continue  # (a float in range, as the checks below find it: a scheduler's lr, without ABC checks)
        if isinstance(default, bool):
            if not isinstance(v, (bool, np.bool_)):
                raise TypeError(f"{owner}: {name} must be True or False, got {v!r}")
        elif isinstance(default, tuple):
            if not isinstance(v, (tuple, list)) or len(v) != len(default):
                raise ValueError(f"{owner}: {name} must be a pair of numbers, got {v!r}")
            for i, b in enumerate(v):
                ok = isinstance(b, Real) and not isinstance(b, bool)
                if name == "eps":  # Adafactor's (eps1, eps2); eps1 None means the dtype's machine epsilon
                    if not ((b is None and i == 0) or (ok and _finite(b) and b >= 0.0)):
                        raise ValueError(f"epsilon{i + 1} should be >= 0 but is: {b}")  # (torch's Adafactor)
                elif name == "nus":  # QHAdam's interpolation weights: [0, 1]
                    if not (ok and 0.0 <= b <= 1.0):
                        raise ValueError(f"Invalid nu parameter at index {i}: {b}")
                elif name == "ns_coefficients":  # Muon's Newton-Schulz polynomial: any finite numbers
                    if not (ok and _finite(b)):
                        raise ValueError(f"Invalid ns_coefficients value at index {i}: {b}")
                elif not (ok and 0.0 <= b < 1.0):
                    raise ValueError(f"Invalid beta parameter at index {i}: {b}")
        elif isinstance(default, Real):
            if not isinstance(v, Real) or isinstance(v, bool):
                raise TypeError(f"{owner}: {name} must be a number, got {v!r}")
            if not _finite(v) or (name not in _SIGNED and not v >= 0.0):
                raise _bad(name, v)
            if abs(v) > F32_MAX:  # (a step's records are float32: past its range the value would be inf there)
                raise ValueError(f"{owner}: {name} must be within float32's range (|x| <= {F32_MAX:.7g}), got {v!r}")


def checked_lr(spec, groups: list, lr):
    """``lr`` as every group will hold it (a 1-element tensor as a float), checked as a step would check it (its
    type and range, then the spec's checks across each group) before any group changes: ``set_lr``'s check."""
    lr = plain_hyper(spec.__name__, {"lr": lr})["lr"]
    for g in groups:
        spec.validate({**g, "lr": lr}, ["lr"])
    return lr


def parse_params(owner: str, params, defaults: dict):
    """``params`` (dict of arrays, or list of group dicts) -> (groups, {name: float32 array copy}).

    Each group is a dict of hyperparameters plus ``"params"``: the list of its tensor names.
    """
    if isinstance(params, dict):
        raw = [{"params": params}]
    elif isinstance(params, (list, tuple)):
        raw = list(params)
    else:
        raise TypeError(f"{owner}: params must be a dict name -> array or a list of param-group dicts, "
                        f"got {type(params).__name__}")
    groups, arrays = [], {}
    for gi, g in enumerate(raw):
        if not isinstance(g, dict) or "params" not in g or not isinstance(g["params"], dict):
            raise TypeError(f"{owner}: param group {gi} must be a dict with a 'params' dict name -> array")
        unknown = set(g) - set(defaults) - {"params"}
        if unknown:
            raise ValueError(f"{owner}: param group {gi} has unknown option(s) {sorted(unknown)}; "
                             f"known: {sorted(defaults)}")
        names = []
        for name, a in g["params"].items():
            if not isinstance(name, str):
                raise TypeError(f"{owner}: tensor names must be strings, got {name!r}")
            if name in arrays:
                raise ValueError(f"{owner}: tensor {name!r} appears more than once in the params")
            if not isinstance(a, np.ndarray):
                raise TypeError(f"{owner}: tensor {name!r} must be a numpy float32 array (float16 and bfloat16 too), "
                                f"got {type(a).__name__}")
            if dtype_of(a.dtype) is None:
                raise TypeError(f"{owner}: tensor {name!r} has dtype {a.dtype}, expected float32, float16 or "
                                "bfloat16 (ml_dtypes.bfloat16)")
            arrays[name] = np.array(a, copy=True, order="C")
            names.append(name)
        group = {k: (tuple(v) if isinstance(v, list) else v) for k, v in defaults.items()}
        group.update({k: (tuple(v) if isinstance(v, list) else v) for k, v in g.items() if k != "params"})
        validate_group(owner, group, defaults)
        group["params"] = names
        groups.append(group)
    if not arrays:
        raise ValueError(f"{owner} got an empty parameter list")
    return groups, arrays


def _dtypes_word(dts) -> str:
    return " or ".join(dict.fromkeys(str(np.dtype(d)) for d in dts))


def check_grads(owner: str, grads, shapes: dict, device_tensor_type=None, device=None, call: str = "step",
                noun: str = "grad", dtypes=None) -> dict:
    """Validate a ``step(grads)`` dict (or another per-tensor dict) before anything changes; returns it.

    ``dtypes``: name -> the NumPy dtypes accepted for that tensor (a dict, or a function of the name, called only for
    names in ``shapes``; default float32 only); a DeviceTensor must hold
    the first of them (the slot's own dtype)."""
    owner = f"{owner}.{call}"
    if not isinstance(grads, dict):
        raise TypeError(f"{owner}: {noun}s must be a dict name -> array, got {type(grads).__name__}")
    for name, g in grads.items():
        if name not in shapes:
            raise KeyError(f"{owner}: {noun} for unknown tensor {name!r}")
        want = shapes[name]
        ok = (np.dtype(np.float32),) if dtypes is None else tuple(np.dtype(d) for d in (
            dtypes(name) if callable(dtypes) else dtypes[name]))
        if device_tensor_type is not None and isinstance(g, device_tensor_type):
            if g.device.device is not device.device:
                raise ValueError(f"{owner}: {noun} for {name!r} lives on another device ({g.device.name})")
            if g.dtype != ok[0]:
                raise TypeError(f"{owner}: {noun} for {name!r} is a DeviceTensor of {g.dtype}, expected {ok[0]}")
            shape = g.shape
        elif isinstance(g, np.ndarray):
            if g.dtype not in ok:
                raise TypeError(f"{owner}: {noun} for {name!r} has dtype {g.dtype}, expected {_dtypes_word(ok)}")
            shape = g.shape
        else:
            raise TypeError(f"{owner}: {noun} for {name!r} must be a {_dtypes_word(ok)} numpy array"
                            f"{' or DeviceTensor' if device_tensor_type else ''}, got {type(g).__name__}")
        if tuple(shape) != tuple(want):
            raise ValueError(f"{owner}: {noun} for {name!r} has shape {tuple(shape)}, expected {tuple(want)}")
    return grads


def reconcile_master(owner: str, sd, has_master, cast: bool):
    """``sd`` without the float32 master copies (``master_param``) of tensors this optimizer keeps none for: dropped
    with ``cast``, else a ValueError naming the tensor. (Missing master copies are made from the parameters.)"""
    if not isinstance(sd, dict) or not isinstance(sd.get("state"), dict):
        return sd  # check_state_dict says what is wrong
    state = {}
    for n, st in sd["state"].items():
        if isinstance(st, dict) and MASTER in st and not has_master(n):
            if not cast:
                raise ValueError(f"{owner}.load_state_dict: the state of {n!r} holds master_param, but this optimizer "
                                 f"keeps no float32 master copy of it; pass cast=True to drop it")
            st = {k: v for k, v in st.items() if k != MASTER}
        state[n] = st
    return dict(sd, state=state)


def check_load_params(owner: str, params: dict, shapes: dict, dtypes: dict, cast: bool) -> dict:
    """Params loaded with a state dict (``restore``): every tensor named, of its shape and dtype (``dtypes``: name
    -> DType), or converted (round to nearest even) with ``cast``; else a ValueError that says so."""
    if set(params) != set(shapes):
        raise ValueError(f"{owner}: params hold {sorted(params)}, expected {sorted(shapes)}")
    if cast:
        params = {n: (round_rne(a, dtypes[n]) if np.asarray(a).dtype != dtypes[n].np else a) for n, a in params.items()}
    try:
        check_grads(owner, params, shapes, call="load", noun="param", dtypes={n: (d.np,) for n, d in dtypes.items()})
    except TypeError as e:
        raise ValueError(f"{e}; pass cast=True to convert") from None
    return params


def check_state_dict(owner: str, sd, groups: list, shapes: dict, state_names: tuple, defaults: dict,
                     state_shape=lambda state, shape: tuple(shape), state_dtype=None, cast: bool = False):
    """Validate a state dict fully before anything is loaded; returns (state, new hyperparameters).

    Every problem is a ``ValueError`` (a wrong value) or ``TypeError`` (a wrong Python type) naming the place;
    nothing is changed by a call that raises. ``state_shape(state, tensor shape)`` gives each state's shape
    (NAdam's ``mu_product`` is 0-d, Adafactor's ``row_var`` is [..., m, 1]); ``state_dtype(state, tensor name)``
    its NumPy dtype (default float32). A state of another float dtype is a ``ValueError`` unless ``cast``
    (then it is converted: widened exactly, or rounded to nearest even)."""
    where = f"{owner}.load_state_dict"
    if not isinstance(sd, dict):
        raise TypeError(f"{where}: expected a dict with 'state' and 'param_groups', got {type(sd).__name__}")
    if "state" not in sd or "param_groups" not in sd:
        raise ValueError(f"{where}: expected a dict with 'state' and 'param_groups'")
    pgs, raw_state = sd["param_groups"], sd["state"]
    if not isinstance(pgs, (list, tuple)):
        raise TypeError(f"{where}: 'param_groups' must be a list of dicts, got {type(pgs).__name__}")
    if not isinstance(raw_state, dict):
        raise TypeError(f"{where}: 'state' must be a dict name -> dict, got {type(raw_state).__name__}")
    if any(isinstance(k, int) for k in raw_state) or any(
            isinstance(g, dict) and isinstance(g.get("params"), (list, tuple)) and
            any(isinstance(i, int) and not isinstance(i, bool) for i in g["params"]) for g in pgs):
        raise ValueError(f"{where}: this is torch.optim's format (state and params keyed by index); convert it "
                         "with rlx_gpu.from_torch_state_dict(sd, opt), or build the optimizer from torch tensors "
                         "(it then takes torch's format)")
    if len(pgs) != len(groups):
        raise ValueError(f"{where}: state dict has {len(pgs)} param groups, optimizer has {len(groups)}")
    hypers = _check_groups(where, pgs, groups, defaults)
    state = {name: _check_state(where, name, st, shapes, state_names, state_shape, state_dtype, cast)
             for name, st in raw_state.items()}
    return state, hypers


def _check_groups(where: str, pgs, groups: list, defaults: dict) -> list:
    """A state dict's param groups checked against the optimizer's: their hyperparameters."""
    hypers = []
    for i, (pg, g) in enumerate(zip(pgs, groups)):
        if not isinstance(pg, dict):
            raise TypeError(f"{where}: param group {i} must be a dict, got {type(pg).__name__}")
        names = pg.get("params", [])
        if not isinstance(names, (list, tuple)) or not all(isinstance(n, str) for n in names) \
                or list(names) != list(g["params"]):
            raise ValueError(f"{where}: param group {i} holds {names!r}, optimizer's group {i} holds {g['params']}")
        h = {k: (tuple(pg[k]) if isinstance(pg.get(k), list) else pg.get(k, g[k])) for k in defaults}
        h.update({k: v for k, v in pg.items() if k not in defaults and k != "params"})  # e.g. schedulers' keys
        validate_group(where, h, defaults)
        hypers.append(h)
    return hypers


def _check_state(where: str, name, st, shapes: dict, state_names: tuple, state_shape, state_dtype, cast: bool):
    """One tensor's entry of a state dict checked (and cast where asked): its step and state arrays."""
    if name not in shapes:
        raise ValueError(f"{where}: state for unknown tensor {name!r}")
    if not isinstance(st, dict) or "step" not in st:
        raise ValueError(f"{where}: state for {name!r} must be a dict with 'step'")
    step = as_step(st["step"])
    if step is None:
        raise ValueError(f"{where}: 'step' of {name!r} must be an int in [0, 2**53], got {st['step']!r}")
    out = {"step": step}
    for k, v in st.items():
        if k == "step":
            continue
        if k not in state_names:
            raise ValueError(f"{where}: unknown state {k!r} for {name!r}; expected some of {list(state_names)}")
        if not isinstance(v, (np.ndarray, np.generic, float, int)) or isinstance(v, bool):
            raise TypeError(f"{where}: {k} of {name!r} must be a float32 array, got {type(v).__name__}")
        a = np.asarray(v)
        want_dt = np.dtype(np.float32) if state_dtype is None else np.dtype(state_dtype(k, name))
        if a.dtype != want_dt:
            if dtype_of(a.dtype) is None:
                raise TypeError(f"{where}: {k} of {name!r} has dtype {a.dtype}, expected {want_dt}")
            if not cast:
                raise ValueError(f"{where}: {k} of {name!r} is {a.dtype}, this optimizer keeps it in {want_dt}; "
                                 f"pass cast=True to convert it (rounding to nearest even where it narrows)")
            with np.errstate(over="ignore", invalid="ignore"):
                a = a.astype(np.float32).astype(want_dt)
        want = tuple(state_shape(k, shapes[name]))
        if a.shape != want:
            raise ValueError(f"{where}: {k} of {name!r} has shape {a.shape}, expected {want}")
        out[k] = a
    return out


def resolve_lr_scale(owner: str, lr_scale, names) -> dict:
    """``lr_scale`` (None, dict name -> factor, or callable name -> factor) as a factor for every tensor."""
    if lr_scale is None:
        return {n: 1.0 for n in names}
    if callable(lr_scale):
        raw = {n: lr_scale(n) for n in names}
    elif isinstance(lr_scale, dict):
        unknown = set(lr_scale) - set(names)
        if unknown:
            raise KeyError(f"{owner}: lr_scale names unknown tensor(s) {sorted(unknown)}")
        raw = {n: lr_scale.get(n, 1.0) for n in names}
    else:
        raise TypeError(f"{owner}: lr_scale must be a dict name -> factor or a callable name -> factor, "
                        f"got {type(lr_scale).__name__}")
    for n, v in raw.items():
        if not isinstance(v, Real) or isinstance(v, bool) or not _finite(v) or v < 0:
            raise ValueError(f"{owner}: lr_scale for {n!r} must be a finite number >= 0, got {v!r}")
    return {n: float(v) for n, v in raw.items()}


def scaled(group: dict, factor, lr_keys=("lr",)):
    """``group`` with its learning rates (the hyperparameters an optimizer names in ``lr_keys``) times ``factor``."""
    if isinstance(factor, float) and factor == 1.0:
        return group
    return dict(group, **{k: group[k] * factor for k in lr_keys})
