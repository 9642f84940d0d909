"""Reading checkpoints (the format: :mod:`rlx_gpu.core.checkpoint`): every size, dtype and shape checked against the
metadata before anything is allocated; any problem with the file is a ``ValueError`` naming it."""
from __future__ import annotations

import json
import os
import zipfile

import numpy as np

from .groups import MAX_STEP, as_step
from .lowp import DTYPES, from_bits

FORMAT, VERSION = "rlx_gpu-checkpoint", 4
READS = (1, 2, 3, 4)  # versions this module reads (3: 4-bit codes one per byte, which load_state_dict still takes)


# -- reading: every check before any allocation ---------------------------------------------------------------
class _Bad(Exception):
    """A problem with the file; read() turns it into ValueError naming the file."""


def _member(z: zipfile.ZipFile, name: str, dtype, shape=None, max_bytes=None) -> np.ndarray:
    """One ``.npy`` member, its header checked (dtype, shape or size) before its data is read."""
    try:
        info = z.getinfo(name + ".npy")
    except KeyError:
        raise _Bad(f"member {name!r} is missing") from None
    if info.compress_type != zipfile.ZIP_STORED or info.file_size != info.compress_size:
        raise _Bad(f"member {name!r} is compressed (np.savez writes stored members)")
    with z.open(info) as f:
        try:
            version = np.lib.format.read_magic(f)
            read_header = {(1, 0): np.lib.format.read_array_header_1_0,
                           (2, 0): np.lib.format.read_array_header_2_0}.get(version)
            if read_header is None:
                raise _Bad(f"member {name!r} has .npy format version {version}")
            got_shape, fortran, got_dtype = read_header(f)
        except _Bad:
            raise
        except Exception as e:  # a garbled header
            raise _Bad(f"member {name!r} has a bad .npy header ({e})") from None
        if got_dtype != np.dtype(dtype) or fortran:
            raise _Bad(f"member {name!r} holds {got_dtype}{' (Fortran order)' if fortran else ''}, expected {dtype}")
        if shape is not None and tuple(got_shape) != tuple(shape):
            raise _Bad(f"member {name!r} has shape {tuple(got_shape)}, the metadata says {tuple(shape)}")
        nbytes = int(np.prod(got_shape, dtype=object)) * np.dtype(dtype).itemsize
        if nbytes > info.file_size - f.tell() or (max_bytes is not None and nbytes > max_bytes):
            raise _Bad(f"member {name!r} claims {nbytes} bytes, more than the file holds")
        data = f.read(nbytes)  # (zipfile checks the CRC once the member is read to its end)
        f.read()
    if len(data) != nbytes:
        raise _Bad(f"member {name!r} is cut short")
    return np.frombuffer(data, dtype).reshape(got_shape).copy()


def _typed(z, name: str, dtype_name, shape=None, max_bytes=None) -> np.ndarray:
    """A member stored as its dtype's bits (uint16 for the 16-bit dtypes), viewed as that dtype; "uint8" members
    are quantized states' codes (:mod:`rlx_gpu.core.quant`)."""
    if dtype_name == "uint8":
        return _member(z, name, np.uint8, shape, max_bytes)
    d = DTYPES.get(dtype_name) if isinstance(dtype_name, str) else None
    if d is None:
        raise _Bad(f"member {name!r}: unknown dtype {dtype_name!r} in the metadata")
    raw = _member(z, name, np.uint16 if d.low else np.float32, shape, max_bytes)
    return from_bits(raw, d)


def _shape(v) -> tuple:
    if not isinstance(v, list) or not all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in v):
        raise _Bad(f"a shape in the metadata is not a list of ints >= 0: {v!r}")
    return tuple(v)


def _read_meta(z) -> dict:
    if "__meta__.npy" not in z.namelist():
        raise _Bad("not a readable rlx_gpu checkpoint (it has no __meta__ member)")
    raw = _member(z, "__meta__", np.uint8)
    try:
        meta = json.loads(raw.tobytes().decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as e:
        raise _Bad(f"the metadata is not JSON ({type(e).__name__})") from None
    if not isinstance(meta, dict):
        raise _Bad(f"the metadata is a JSON {type(meta).__name__}, expected an object")
    if meta.get("format") != FORMAT or meta.get("version") not in READS:
        raise _Bad(f"not an rlx_gpu checkpoint of version {' or '.join(map(str, READS))} (format "
                   f"{meta.get('format')!r}, version {meta.get('version')!r})")
    return meta


def _normalise(meta: dict) -> tuple[dict, callable, callable]:
    """Versions 1 and 2 (float32 only; version 1 names members by tensor) in version 4's terms."""
    v = meta["version"]
    if v == 1:
        shapes, steps, state = meta.get("shapes"), meta.get("steps"), meta.get("state")
        if not isinstance(shapes, dict) or not isinstance(steps, dict) or not isinstance(state, dict):
            raise _Bad("version 1 metadata without its shapes, steps and state objects")
        names = list(shapes)
        scale = meta.get("lr_scale") or {}
        if not isinstance(scale, dict):
            raise _Bad("lr_scale in the metadata is not an object")
        meta = dict(meta, names=names, shapes=[shapes[n] for n in names], steps=[steps.get(n) for n in names],
                    state=[state.get(n, []) for n in names], lr_scale=[scale.get(n, 1.0) for n in names])
        pname, sname = (lambda i: f"param/{names[i]}"), (lambda i, k: f"state/{names[i]}/{k}")
    else:
        pname, sname = (lambda i: f"param/{i}"), (lambda i, k: f"state/{i}/{k}")
    if v < 3:
        n = len(meta["names"]) if isinstance(meta.get("names"), list) else 0
        state = meta.get("state")
        if isinstance(state, list):
            state = [{k: "float32" for k in ks} if isinstance(ks, list) and all(isinstance(k, str) for k in ks)
                     else ks for ks in state]
        meta = dict(meta, dtypes=["float32"] * n, state=state, options={})
    return meta, pname, sname


def _check_meta(meta: dict) -> None:
    names = meta.get("names")
    if not isinstance(names, list) or not names or not all(isinstance(n, str) for n in names):
        raise _Bad("the metadata has no list of tensor names")
    if len(set(names)) != len(names):
        raise _Bad("the metadata names a tensor twice")
    for key in ("shapes", "dtypes", "steps", "state", "lr_scale"):
        if not isinstance(meta.get(key), list) or len(meta[key]) != len(names):
            raise _Bad(f"{key!r} in the metadata is not a list of one entry per tensor")
    if not isinstance(meta.get("class"), str):
        raise _Bad("the metadata names no optimizer class")
    if not isinstance(meta.get("options"), dict):
        raise _Bad("options in the metadata is not an object")
    groups = meta.get("param_groups")
    if not isinstance(groups, list) or not all(isinstance(g, dict) for g in groups):
        raise _Bad("param_groups in the metadata is not a list of objects")
    listed = []
    for g in groups:
        if not isinstance(g.get("params"), list):
            raise _Bad("a param group in the metadata has no list of tensor names")
        listed += g["params"]
    if listed != names:
        raise _Bad("the param groups do not list the checkpoint's tensors in order")
    for i, n in enumerate(names):
        _shape(meta["shapes"][i])
        st, ks = meta["steps"][i], meta["state"][i]
        if st is not None and as_step(st) is None:
            raise _Bad(f"the step of {n!r} is {st!r}, expected an int in [0, {MAX_STEP}]")
        if not isinstance(ks, dict) or not all(isinstance(k, str) and (v in DTYPES or v == "uint8")
                                               for k, v in ks.items()) \
                or (ks and st is None):
            raise _Bad(f"the state of {n!r} is not an object of state names and dtypes")
        if meta["dtypes"][i] not in DTYPES:
            raise _Bad(f"the dtype of {n!r} is {meta['dtypes'][i]!r}, expected one of {sorted(DTYPES)}")
        v = meta["lr_scale"][i]
        if not isinstance(v, (int, float)) or isinstance(v, bool):
            raise _Bad(f"the lr_scale of {n!r} is {v!r}, expected a number")


def read(path, state_shape=None) -> tuple[dict, dict, dict]:
    """(meta, params, state dict) from a checkpoint; ValueError naming the file if it is not a valid one.

    ``state_shape(state, tensor shape)``: the expected shape of each state buffer (checked before reading it)."""
    path = os.fspath(path)
    size = os.path.getsize(path)  # FileNotFoundError for a missing file, as open() would
    try:
        with zipfile.ZipFile(path) as z:
            meta, pname, sname = _normalise(_read_meta(z))
            _check_meta(meta)
            names, shapes = meta["names"], [tuple(s) for s in meta["shapes"]]
            if sum(int(np.prod(s, dtype=object)) * DTYPES[d].itemsize for s, d in zip(shapes, meta["dtypes"])) > size:
                raise _Bad("the metadata's shapes need more bytes than the file holds")
            params = {n: _typed(z, pname(i), meta["dtypes"][i], shapes[i]) for i, n in enumerate(names)}
            state = {}
            for i, n in enumerate(names):
                if meta["steps"][i] is None:
                    continue
                st = {"step": as_step(meta["steps"][i])}
                for k, d in meta["state"][i].items():
                    want = state_shape(k, shapes[i]) if state_shape is not None else None
                    st[k] = _typed(z, sname(i, k), d, want, max_bytes=size)
                state[n] = st
    except _Bad as e:
        raise ValueError(f"{path}: {e}") from None
    except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, EOFError, ValueError, KeyError, TypeError,
            OverflowError, RecursionError, NotImplementedError, RuntimeError, MemoryError) as e:
        raise ValueError(f"{path}: not a readable rlx_gpu checkpoint ({type(e).__name__}: {e})") from None
    groups = [dict(g) for g in meta["param_groups"]]
    return meta, params, {"state": state, "param_groups": groups}


def word(name) -> str:
    return name if isinstance(name, str) and name.isidentifier() else repr(name)


def peek(path) -> dict:
    """The metadata of a checkpoint (checked only for its format and version)."""
    os.path.getsize(path)  # FileNotFoundError for a missing file
    try:
        with zipfile.ZipFile(path) as z:
            return _read_meta(z)
    except _Bad as e:
        raise ValueError(f"{path}: {e}") from None
    except (zipfile.BadZipFile, OSError, EOFError, ValueError, KeyError, TypeError, RecursionError) as e:
        raise ValueError(f"{path}: not a readable rlx_gpu checkpoint ({type(e).__name__}: {e})") from None


