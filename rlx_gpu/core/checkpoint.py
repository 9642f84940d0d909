"""Checkpoints: ``opt.save(path)``, ``<Optimizer>.load(path, device=None)`` and ``opt.restore(path)``, for the GPU
classes and the NumPy twins alike (both inherit :class:`Checkpointable`; it uses only their public methods).

Format (version 4): one ``.npz`` file, readable with NumPy alone. Members are numbered and names live only in the
metadata, so every ``str`` a tensor may be named (``"a"`` and ``"a.npy"``, NUL, 70,000 characters) round-trips:
    ``__meta__``           uint8 bytes of a JSON object (ASCII; any str escaped): format, version, class, ``names``,
                           ``shapes``, ``dtypes`` (per tensor), ``steps`` (per tensor; null = no state yet),
                           ``state`` (per tensor: {state name: dtype}), ``lr_scale`` (per tensor), ``options``
                           (the precision options: master_weights, stochastic_rounding, rounding_seed, state_dtype,
                           grad_dtype, and clip_grad_norm, skip_nonfinite), ``param_groups``
    ``param/<i>``          parameter i: float32, or the uint16 bit patterns of a float16/bfloat16 one
    ``state/<i>/<state>``  a state buffer of tensor i, stored the same way (0-d for per-tensor scalars); quantized
                           states (``state_bits``) as the state dict holds them (:func:`rlx_gpu.core.quant.entries`):
                           ``<state>_codes`` (uint8; 4-bit codes two per byte: version 3 held one per byte, and
                           its files still load), ``_absmax`` and ``_qmap``
Versions 1 and 2 (float32 only; version 1 named members by tensor) still load. Written to a temporary file and
renamed, so a crash mid-save leaves the old file (:mod:`rlx_gpu.core.atomic`: the temporaries a killed save left
are removed by the next). Reading checks every size, dtype and shape against the metadata
before it allocates anything; any problem with the file is a ``ValueError`` naming it, and nothing changes.
"""
from __future__ import annotations

import json
import os

import numpy as np

from .atomic import write_atomic
from .checkpoint_file import FORMAT, VERSION, peek, read, word
from .groups import resolve_lr_scale
from .torchio import plain_hyper
from .lowp import as_bits, dtype_of

SAVED_OPTIONS = ("clip_grad_norm", "skip_nonfinite", "master_weights", "stochastic_rounding", "rounding_seed",
                 "state_dtype", "state_bits", "min_quantized_size", "grad_dtype", "qat")
GPU_ONLY = ("qat",)  # (the quantized copies of the qat= export: a twin loads the checkpoint without them)


def _jsonable(v):
    if isinstance(v, tuple):
        return [_jsonable(x) for x in v]
    if isinstance(v, (np.floating, np.integer, np.bool_)):
        return v.item()
    return v


def save(opt, path) -> None:
    """Write ``opt``'s params, state, steps, hyperparameters and options to ``path`` atomically."""
    with opt.lock:  # params and state of the same step
        sd = opt.numpy_state_dict()  # (rlx_gpu's format, also for a torch-built optimizer)
        params = opt.read_params()
    spec = getattr(opt, "spec", type(opt))  # (a GPU class's twin, or the twin itself)
    for g in sd["param_groups"]:  # (what load() would refuse is refused before the old file is touched)
        try:
            spec.validate(plain_hyper(spec.__name__, g))  # (a 1-element tensor lr as its float, as a step takes it)
        except (TypeError, ValueError) as e:
            raise type(e)(f"{os.fspath(path)}: not saved ({e}); nothing was written") from e
    names = list(params)
    index = {n: i for i, n in enumerate(names)}
    arrays = {f"param/{i}": np.array(as_bits(params[n]), order="C") for i, n in enumerate(names)}  # (0-d kept)
    steps, state = [None] * len(names), [{} for _ in names]
    for n, st in sd["state"].items():
        i = index[n]
        steps[i] = int(st["step"])
        for k, v in st.items():
            if k != "step":
                v = np.asarray(v)
                state[i][k] = "uint8" if v.dtype == np.uint8 else dtype_of(v.dtype).name  # (quantized codes)
                arrays[f"state/{i}/{k}"] = np.array(as_bits(v), order="C")
    meta = {"format": FORMAT, "version": VERSION, "class": type(opt).__name__, "names": names,
            "shapes": [list(params[n].shape) for n in names], "dtypes": [dtype_of(params[n].dtype).name for n in names],
            "steps": steps, "state": state, "lr_scale": [float(opt.lr_scale[n]) for n in names],
            "options": {k: _jsonable(opt.options[k]) for k in SAVED_OPTIONS if k in opt.options},
            "param_groups": [{k: _jsonable(v) for k, v in g.items()} for g in sd["param_groups"]]}
    try:
        text = json.dumps(meta, ensure_ascii=True, allow_nan=False)
    except (TypeError, ValueError) as e:  # e.g. a scheduler's key holding an object JSON cannot hold
        raise ValueError(f"{os.fspath(path)}: cannot write this optimizer's hyperparameters as JSON ({e}); "
                         "nothing was written") from e
    arrays["__meta__"] = np.frombuffer(text.encode("ascii"), np.uint8)
    write_atomic(path, lambda f: np.savez(f, **arrays))


def load(cls, path, device=None):
    """A ready optimizer of class ``cls`` (or the class the file names, when ``cls`` is a base class), with the
    file's precision options."""
    path = os.fspath(path)
    name = peek(path).get("class")
    target = cls.optimizer_classes().get(name) if isinstance(name, str) else None
    if target is None or not issubclass(target, cls):
        raise ValueError(f"{path}: checkpoint of {word(name)}, cannot load it as {cls.__name__}")
    meta, params, sd = read(path, target.state_shape_of)
    known = set(target.hyperparameters())
    groups = [{"params": {n: params[n] for n in g["params"]},
               **{k: (tuple(v) if isinstance(v, list) else v) for k, v in g.items() if k in known}}
              for g in meta["param_groups"]]
    kw = {k: v for k, v in meta["options"].items() if k in SAVED_OPTIONS and (target.on_device or k not in GPU_ONLY)}
    kw["lr_scale"] = dict(zip(meta["names"], meta["lr_scale"]))
    if target.on_device:
        kw["device"] = device
    try:
        opt = target(groups, **kw)
        opt.load_state_dict(sd)
    except (ValueError, TypeError, KeyError) as e:  # hyperparameters, options or state the file holds are invalid
        raise ValueError(f"{path}: {e}") from e
    return opt


def restore_plan(opt, path) -> tuple:
    """(state dict, params, lr_scale) of checkpoint ``path`` for ``opt``: the file read and checked against the
    optimizer's class, tensors and shapes; nothing changed (``restore`` loads them; ``Partition`` plans every part
    before it loads any)."""
    path = os.fspath(path)
    cls = peek(path).get("class")
    if cls != type(opt).__name__:
        raise ValueError(f"{path}: checkpoint of {word(cls)}, this optimizer is {type(opt).__name__}")
    meta, params, sd = read(path, opt.state_shape_of)
    mine = {n: tuple(np.shape(p)) for n, p in opt.read_params().items()}
    if list(mine) != meta["names"] or list(mine.values()) != [tuple(s) for s in meta["shapes"]]:
        raise ValueError(f"{path}: checkpoint tensors {meta['names']} do not match this optimizer's "
                         f"{list(mine)} (or their shapes differ)")
    scale = dict(zip(meta["names"], meta["lr_scale"]))
    try:
        resolve_lr_scale(type(opt).__name__, scale, meta["names"])
    except (ValueError, TypeError, KeyError) as e:
        raise ValueError(f"{path}: {e}") from e
    return sd, params, scale


def restore(opt, path, cast: bool = False) -> None:
    """Load a checkpoint into an existing optimizer (params, state, steps, hyperparameters, lr_scale); everything
    is checked before anything changes. A checkpoint of other dtypes is refused unless ``cast``."""
    with opt.lock:
        sd, params, scale = restore_plan(opt, path)
        try:
            opt.load_numpy_state_dict(sd, cast=cast, params=params)  # validates everything before changing anything
        except (ValueError, TypeError, KeyError) as e:
            raise ValueError(f"{os.fspath(path)}: {e}") from e
        opt.set_lr_scale(scale)
        opt._torch_epilogue()  # (built from torch tensors: they hold the restored values; else nothing)


class Checkpointable:
    """``save``, ``load`` and ``restore`` for both optimizer bases (the GPU classes and the NumPy twins). A base
    provides ``optimizer_classes()`` (name -> class), ``hyperparameters()``, ``state_shape_of``, ``on_device``."""

    def save(self, path) -> None:
        """Write params, state, steps, hyperparameters and options to one ``.npz`` file, atomically."""
        save(self, path)

    @classmethod
    def load(cls, path, device=None):
        """A ready optimizer from a checkpoint written by :meth:`save` (the file's class and precision)."""
        return load(cls, path, device)

    def restore(self, path, cast: bool = False) -> None:
        """Load a checkpoint into this optimizer (same class and tensors); nothing changes if it fails. A
        checkpoint of other dtypes is a ValueError, or with ``cast=True`` converted (rounding to nearest even)."""
        restore(self, path, cast)
