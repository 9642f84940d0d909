"""Checkpoints: ``opt.save(path)``, ``<Optimizer>.load(path, device=None)`` and ``opt.restore(path)``.

Format: one ``.npz`` file (readable with NumPy alone, no rlx_gpu needed):
    ``__meta__``             uint8 bytes of a JSON object: format, version, class, param_groups (hyperparameters
                             and tensor names), steps, and for each tensor the names of its state buffers
    ``param/<name>``         float32 parameter
    ``state/<name>/<state>`` float32 state buffer (0-d for per-tensor scalars such as NAdam's mu_product)
The file is written to a temporary name in the same folder and renamed over ``path``, so a crash mid-save
never leaves a half-written checkpoint in place. Params, state and step counts round-trip bit for bit.
"""
from __future__ import annotations

import io
import json
import os
import tempfile
import zipfile

import numpy as np

FORMAT, VERSION = "rlx_gpu-checkpoint", 1


def _jsonable(v):
    if isinstance(v, tuple):
        return [_jsonable(x) for x in v]
    if isinstance(v, (np.floating, np.integer, np.bool_)):
        return v.item()
    return v


def save(opt, path) -> None:
    """Write ``opt``'s params, state, steps and hyperparameters to ``path`` atomically."""
    sd = opt.state_dict()
    params = opt.read_params()
    arrays = {f"param/{n}": np.ascontiguousarray(a, np.float32) for n, a in params.items()}
    steps, names = {}, {}
    for n, st in sd["state"].items():
        steps[n] = int(st["step"])
        names[n] = [k for k in st if k != "step"]
        for k in names[n]:
            arrays[f"state/{n}/{k}"] = np.asarray(st[k], np.float32)
    meta = {"format": FORMAT, "version": VERSION, "class": type(opt).__name__,
            "param_groups": [{k: _jsonable(v) for k, v in g.items()} for g in sd["param_groups"]],
            "shapes": {n: list(a.shape) for n, a in params.items()}, "steps": steps, "state": names,
            "lr_scale": dict(opt.lr_scale)}
    arrays["__meta__"] = np.frombuffer(json.dumps(meta).encode(), np.uint8)
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


def read(path) -> tuple[dict, dict, dict]:
    """(meta, params, state dict) from a checkpoint; ValueError naming the file if it is not a valid one."""
    path = os.fspath(path)
    try:
        with open(path, "rb") as f:
            data = f.read()
        z = np.load(io.BytesIO(data), allow_pickle=False)
        files = set(z.files)
        meta = json.loads(bytes(z["__meta__"]).decode())
    except FileNotFoundError:
        raise
    except (OSError, ValueError, KeyError, zipfile.BadZipFile, UnicodeDecodeError, json.JSONDecodeError,
            EOFError) as e:
        raise ValueError(f"{path}: not a readable rlx_gpu checkpoint ({type(e).__name__}: {e})") from e
    if meta.get("format") != FORMAT or meta.get("version") != VERSION:
        raise ValueError(f"{path}: not an rlx_gpu checkpoint of version {VERSION} (format {meta.get('format')!r}, "
                         f"version {meta.get('version')!r})")
    try:
        params = {n: z[f"param/{n}"] for n in meta["shapes"]}
        state = {}
        for n, ks in meta["state"].items():
            st = {"step": int(meta["steps"][n])}
            for k in ks:
                st[k] = z[f"state/{n}/{k}"]
            state[n] = st
    except (KeyError, ValueError, zipfile.BadZipFile, OSError) as e:
        raise ValueError(f"{path}: checkpoint is incomplete or corrupted ({type(e).__name__}: {e})") from e
    for n, shape in meta["shapes"].items():
        if params[n].shape != tuple(shape) or params[n].dtype != np.float32:
            raise ValueError(f"{path}: param {n!r} is {params[n].dtype}{params[n].shape}, expected float32{tuple(shape)}")
    groups = [dict(g) for g in meta["param_groups"]]
    return meta, params, {"state": state, "param_groups": groups}


def load(cls, path, device=None):
    """A ready optimizer of class ``cls`` (or the class the file names, when ``cls`` is a base class)."""
    meta, params, sd = read(path)
    target = cls
    if meta["class"] != cls.__name__:
        import rlx_gpu
        from rlx_gpu import reference
        base = getattr(reference, meta["class"], None) if _is_twin(cls) else getattr(rlx_gpu, meta["class"], None)
        if base is None or not issubclass(base, cls):
            raise ValueError(f"{os.fspath(path)}: checkpoint of {meta['class']}, cannot load it as {cls.__name__}")
        target = base
    spec = target.spec if hasattr(target, "spec") and target.spec is not None else target
    known = set(spec.defaults)
    groups = []
    for g in sd["param_groups"]:
        groups.append({"params": {n: params[n] for n in g["params"]},
                       **{k: (tuple(v) if isinstance(v, list) else v) for k, v in g.items() if k in known}})
    kw = {} if _is_twin(target) else {"device": device}
    opt = target(groups, lr_scale=meta.get("lr_scale"), **kw)
    opt.load_state_dict(sd)
    return opt


def restore(opt, path) -> None:
    """Load a checkpoint into an existing optimizer; everything is checked before anything changes."""
    meta, params, sd = read(path)
    if meta["class"] != type(opt).__name__:
        raise ValueError(f"{os.fspath(path)}: checkpoint of {meta['class']}, this optimizer is {type(opt).__name__}")
    mine = {n: tuple(np.shape(p)) for n, p in opt.read_params().items()}
    if mine != {n: tuple(s) for n, s in meta["shapes"].items()}:
        raise ValueError(f"{os.fspath(path)}: checkpoint tensors {sorted(meta['shapes'])} do not match this "
                         f"optimizer's {sorted(mine)} (or their shapes differ)")
    opt.load_state_dict(sd)  # validates fully before changing anything
    if hasattr(opt, "_param"):
        opt._param.write_many([(opt._index[n], a) for n, a in params.items()])
    else:
        for n, a in params.items():
            opt.params[n][...] = a


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
