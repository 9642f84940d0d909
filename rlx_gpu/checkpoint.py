"""Checkpoints: ``opt.save(path)``, ``<Optimizer>.load(path, device=None)`` and ``opt.restore(path)``.

Format (version 2): one ``.npz`` file, readable with NumPy alone (no rlx_gpu needed). Members are numbered, names
live only in the metadata, so every ``str`` a tensor may be named (``"a"`` and ``"a.npy"``, NUL, 70,000
characters) round-trips exactly:
    ``__meta__``           uint8 bytes of a JSON object (ASCII; any str escaped): format, version, class,
                           ``names`` (tensor i's name), ``shapes``, ``steps`` (per tensor; null = no state yet),
                           ``state`` (per tensor: its state buffers' names), ``lr_scale`` (per tensor),
                           ``param_groups`` (hyperparameters and tensor names)
    ``param/<i>``          float32 parameter i
    ``state/<i>/<state>``  float32 state buffer of tensor i (0-d for per-tensor scalars such as NAdam's mu_product)
Version 1 files (members named ``param/<name>``) still load. The file is written to a temporary name in the same
folder and renamed over ``path``, so a crash mid-save never leaves a half-written checkpoint in place. Reading
checks every size and type against the metadata before it allocates anything; any problem with the file is a
``ValueError`` naming it, and nothing is changed.
"""
from __future__ import annotations

import json
import os
import tempfile
import zipfile

import numpy as np

from ._groups import MAX_STEP, as_step, resolve_lr_scale

FORMAT, VERSION = "rlx_gpu-checkpoint", 2
READS = (1, 2)  # versions this module reads


def _jsonable(v):
    if isinstance(v, tuple):
        return [_jsonable(x) for x in v]
    if isinstance(v, (np.floating, np.integer, np.bool_)):
        return v.item()
    return v


def save(opt, path) -> None:
    """Write ``opt``'s params, state, steps and hyperparameters to ``path`` atomically."""
    with opt.lock:  # params and state of the same step
        sd = opt.state_dict()
        params = opt.read_params()
    names = list(params)
    index = {n: i for i, n in enumerate(names)}
    arrays = {f"param/{i}": np.ascontiguousarray(params[n], np.float32) for i, n in enumerate(names)}
    steps, state = [None] * len(names), [[] for _ in names]
    for n, st in sd["state"].items():
        i = index[n]
        steps[i] = int(st["step"])
        state[i] = [k for k in st if k != "step"]
        for k in state[i]:
            arrays[f"state/{i}/{k}"] = np.asarray(st[k], np.float32)
    meta = {"format": FORMAT, "version": VERSION, "class": type(opt).__name__, "names": names,
            "shapes": [list(params[n].shape) for n in names], "steps": steps, "state": state,
            "lr_scale": [float(opt.lr_scale[n]) for n in names],
            "param_groups": [{k: _jsonable(v) for k, v in g.items()} for g in sd["param_groups"]]}
    try:
        text = json.dumps(meta, ensure_ascii=True, allow_nan=False)
    except (TypeError, ValueError) as e:  # e.g. a scheduler's key holding an object JSON cannot hold
        raise ValueError(f"{os.fspath(path)}: cannot write this optimizer's hyperparameters as JSON ({e}); "
                         "nothing was written") from e
    arrays["__meta__"] = np.frombuffer(text.encode("ascii"), np.uint8)
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".rlx-gpu-ckpt-", suffix=".npz", dir=folder)
    try:
        with os.fdopen(fd, "wb") as f:
            np.savez(f, **arrays)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


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


def _normalise_v1(meta: dict) -> tuple[dict, callable, callable]:
    """Version 1 (members named by tensor name) in version 2's terms."""
    shapes, steps, state = meta.get("shapes"), meta.get("steps"), meta.get("state")
    if not isinstance(shapes, dict) or not isinstance(steps, dict) or not isinstance(state, dict):
        raise _Bad("version 1 metadata without its shapes, steps and state objects")
    names = list(shapes)
    scale = meta.get("lr_scale") or {}
    if not isinstance(scale, dict):
        raise _Bad("lr_scale in the metadata is not an object")
    out = dict(meta, names=names, shapes=[shapes[n] for n in names],
               steps=[steps.get(n) for n in names], state=[state.get(n, []) for n in names],
               lr_scale=[scale.get(n, 1.0) for n in names])
    return out, (lambda i: f"param/{names[i]}"), (lambda i, k: f"state/{names[i]}/{k}")


def _check_meta(meta: dict) -> None:
    names = meta.get("names")
    if not isinstance(names, list) or not names or not all(isinstance(n, str) for n in names):
        raise _Bad("the metadata has no list of tensor names")
    if len(set(names)) != len(names):
        raise _Bad("the metadata names a tensor twice")
    for key in ("shapes", "steps", "state", "lr_scale"):
        if not isinstance(meta.get(key), list) or len(meta[key]) != len(names):
            raise _Bad(f"{key!r} in the metadata is not a list of one entry per tensor")
    if not isinstance(meta.get("class"), str):
        raise _Bad("the metadata names no optimizer class")
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
        if not isinstance(ks, list) or not all(isinstance(k, str) for k in ks) or (ks and st is None):
            raise _Bad(f"the state names of {n!r} are not a list of strings")
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
            meta = _read_meta(z)
            if meta["version"] == 1:
                meta, pname, sname = _normalise_v1(meta)
            else:
                pname, sname = (lambda i: f"param/{i}"), (lambda i, k: f"state/{i}/{k}")
            _check_meta(meta)
            names, shapes = meta["names"], [tuple(s) for s in meta["shapes"]]
            if 4 * sum(int(np.prod(s, dtype=object)) for s in shapes) > size:
                raise _Bad("the metadata's shapes need more bytes than the file holds")
            params = {n: _member(z, pname(i), np.float32, shapes[i]) for i, n in enumerate(names)}
            state = {}
            for i, n in enumerate(names):
                if meta["steps"][i] is None:
                    continue
                st = {"step": as_step(meta["steps"][i])}
                for k in meta["state"][i]:
                    want = state_shape(k, shapes[i]) if state_shape is not None else None
                    st[k] = _member(z, sname(i, k), np.float32, want, max_bytes=size)
                state[n] = st
    except _Bad as e:
        raise ValueError(f"{path}: {e}") from None
    except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, EOFError, ValueError, KeyError, TypeError,
            OverflowError, RecursionError, NotImplementedError, RuntimeError, MemoryError) as e:
        raise ValueError(f"{path}: not a readable rlx_gpu checkpoint ({type(e).__name__}: {e})") from None
    groups = [dict(g) for g in meta["param_groups"]]
    return meta, params, {"state": state, "param_groups": groups}


def _registry(twin: bool) -> dict:
    """Concrete optimizer classes by name (the GPU classes, or the twins)."""
    import rlx_gpu
    from rlx_gpu import reference
    from .optimizer import Optimizer
    from .reference.base import ReferenceOptimizer
    mod, base = (reference, ReferenceOptimizer) if twin else (rlx_gpu, Optimizer)
    return {n: c for n, c in vars(mod).items() if isinstance(c, type) and issubclass(c, base) and c is not base}


def _kwargs(target, meta, params, device) -> tuple[list, dict]:
    spec = target.spec if getattr(target, "spec", None) is not None else target
    known = set(spec.defaults)
    groups = [{"params": {n: params[n] for n in g["params"]},
               **{k: (tuple(v) if isinstance(v, list) else v) for k, v in g.items() if k in known}}
              for g in meta["param_groups"]]
    kw = {"lr_scale": dict(zip(meta["names"], meta["lr_scale"]))}
    if not _is_twin(target):
        kw["device"] = device
    return groups, kw


def load(cls, path, device=None):
    """A ready optimizer of class ``cls`` (or the class the file names, when ``cls`` is a base class)."""
    twin = _is_twin(cls)
    name = _peek(os.fspath(path)).get("class")
    target = _registry(twin).get(name) if isinstance(name, str) else None
    if target is None or not issubclass(target, cls):
        raise ValueError(f"{os.fspath(path)}: checkpoint of {_word(name)}, cannot load it as {cls.__name__}")
    meta, params, sd = read(path, target.state_shape if twin else target.spec.state_shape)
    groups, kw = _kwargs(target, meta, params, device)
    try:
        opt = target(groups, **kw)
        opt.load_state_dict(sd)
    except (ValueError, TypeError, KeyError) as e:  # hyperparameters or state the file holds are invalid
        raise ValueError(f"{os.fspath(path)}: {e}") from e
    return opt


def restore(opt, path) -> None:
    """Load a checkpoint into an existing optimizer (params, state, steps, hyperparameters, lr_scale); everything
    is checked before anything changes."""
    path = os.fspath(path)
    cls = _peek(path).get("class")
    if cls != type(opt).__name__:
        raise ValueError(f"{path}: checkpoint of {_word(cls)}, this optimizer is {type(opt).__name__}")
    spec = opt.spec if getattr(opt, "spec", None) is not None else opt
    meta, params, sd = read(path, spec.state_shape)
    with opt.lock:
        mine = {n: tuple(np.shape(p)) for n, p in opt.read_params().items()}
        if list(mine) != meta["names"] or list(mine.values()) != [tuple(s) for s in meta["shapes"]]:
            raise ValueError(f"{path}: checkpoint tensors {meta['names']} do not match this optimizer's "
                             f"{list(mine)} (or their shapes differ)")
        scale = dict(zip(meta["names"], meta["lr_scale"]))
        try:
            resolve_lr_scale(type(opt).__name__, scale, meta["names"])
            opt.load_state_dict(sd)  # validates fully before changing anything
        except (ValueError, TypeError, KeyError) as e:
            raise ValueError(f"{path}: {e}") from e
        opt.set_lr_scale(scale)
        opt.write_params(params)


def _word(name) -> str:
    return name if isinstance(name, str) and name.isidentifier() else repr(name)


def _peek(path) -> dict:
    """The metadata of a checkpoint (checked only for its format and version)."""
    os.path.getsize(path)  # FileNotFoundError for a missing file
    try:
        with zipfile.ZipFile(path) as z:
            return _read_meta(z)
    except _Bad as e:
        raise ValueError(f"{path}: {e}") from None
    except (zipfile.BadZipFile, OSError, EOFError, ValueError, KeyError, TypeError, RecursionError) as e:
        raise ValueError(f"{path}: not a readable rlx_gpu checkpoint ({type(e).__name__}: {e})") from None


def _is_twin(cls) -> bool:
    from .reference.base import ReferenceOptimizer
    return issubclass(cls, ReferenceOptimizer)


class Checkpointable:
    """``save``, ``load`` and ``restore`` for both optimizer bases (the GPU classes and the NumPy twins)."""

    def save(self, path) -> None:
        """Write params, state, steps and hyperparameters to one ``.npz`` file, atomically."""
        save(self, path)

    @classmethod
    def load(cls, path, device=None):
        """A ready optimizer from a checkpoint written by :meth:`save`."""
        return load(cls, path, device)

    def restore(self, path) -> None:
        """Load a checkpoint into this optimizer (same class and tensors); nothing changes if it fails."""
        restore(self, path)
