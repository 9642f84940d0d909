"""Reading the rank files of a ZeRO checkpoint (:mod:`rlx_gpu.addons.distributed.files`) for ``restore`` and
:func:`single_process_state`: every file is opened safely (each member's header checked before its data is read)
and checked against the others before anything is returned: the same save, class, tensors and rank count; ranks
0..N-1 once each; ranges that cover the params one after another (at tensor boundaries for whole-tensor
optimizers); every member of the right name, dtype and shape; step counts that agree where ranks share a tensor.
Since every rank reads every file, a corrupted or tampered file is the same ValueError, naming it, on every rank."""
from __future__ import annotations

import glob
import json
import os
import zipfile
from contextlib import ExitStack

import numpy as np

from ...core.checkpoint_file import _Bad, _member, _shape  # (the checkpoint reader's checked member reads)
from ...core.groups import MAX_STEP

__all__ = ["read_shards", "load_files"]


def _int(v, lo=0, hi=None) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= lo and (hi is None or v <= hi)


def _meta(z: zipfile.ZipFile) -> dict:
    """A rank file's metadata, its fields' types checked (version 1 files: no class, save or whole tensors)."""
    if "__meta__.npy" not in z.namelist():
        raise _Bad("not a ZeRO checkpoint file (it has no __meta__ member)")
    try:
        m = json.loads(_member(z, "__meta__", np.uint8).tobytes().decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as e:
        raise _Bad(f"the metadata is not JSON ({type(e).__name__})") from None
    if not isinstance(m, dict) or m.get("format") != "rlx_gpu.zero" or m.get("version") not in (1, 2):
        raise _Bad("not a ZeRO checkpoint file of version 1 or 2 (its metadata says otherwise)")
    m.setdefault("whole", False)
    m.setdefault("scalars", {})
    ok = (_int(m.get("world"), 1) and _int(m.get("rank"), 0, m["world"] - 1) and isinstance(m.get("names"), list)
          and all(isinstance(n, str) for n in m["names"]) and isinstance(m.get("shapes"), list)
          and len(m["shapes"]) == len(m["names"]) and isinstance(m["whole"], bool)
          and isinstance(m.get("range"), list) and len(m["range"]) == 2 and all(_int(x) for x in m["range"])
          and m["range"][0] <= m["range"][1] and isinstance(m.get("steps"), dict)
          and all(n in m["names"] and _int(s, 0, MAX_STEP) for n, s in m["steps"].items())
          and isinstance(m["scalars"], dict) and all(isinstance(v, dict) for v in m["scalars"].values()))
    if not ok:
        raise _Bad("its metadata is malformed (world, rank, names, shapes, range, steps or scalars)")
    m["shapes"] = [_shape(s) for s in m["shapes"]]
    for v in m["scalars"].values():
        if not all(k in m["names"] and isinstance(x, (int, float)) and not isinstance(x, bool) for k, x in v.items()):
            raise _Bad("its metadata's per-tensor scalars are malformed")
    return m


def _check_set(path: str, files: list, metas: list) -> None:
    """The files are the N of one save: ranks 0..N-1, the same save, class and tensors, ranges covering the params
    one after another (at tensor boundaries when tensors are whole), the same step count where ranks share one."""
    m0 = metas[0]
    world = m0["world"]
    by_rank = sorted(range(len(files)), key=lambda i: metas[i]["rank"])
    if [metas[i]["rank"] for i in by_rank] != list(range(world)) or any(m["world"] != world for m in metas):
        raise ValueError(f"{path}: expected the {world} files of one save, found {len(files)} "
                         f"({', '.join(os.path.basename(f) for f in files)})")
    for f, m in zip(files, metas):
        for key in ("save", "class", "names", "shapes", "whole"):
            if m.get(key) != m0.get(key):
                raise ValueError(f"{f}: its {key!r} differs from {files[0]}'s (files of different saves? a save was "
                                 "interrupted, or a file was replaced)")
    sizes = [int(np.prod(s, dtype=np.int64)) for s in m0["shapes"]]
    bounds = np.concatenate([[0], np.cumsum(sizes, dtype=np.int64)]).tolist()
    at = 0
    for i in by_rank:
        lo, hi = metas[i]["range"]
        if lo != at or (m0["whole"] and (lo not in bounds or hi not in bounds)):
            raise ValueError(f"{files[i]}: its range [{lo}, {hi}) does not continue the ranks before it (at {at}"
                             f"{', at a tensor boundary' if m0['whole'] else ''})")
        at = hi
    if at != bounds[-1]:
        raise ValueError(f"{files[by_rank[-1]]}: the ranges end at {at}, the params hold {bounds[-1]} elements")
    seen: dict = {}
    for f, m in zip(files, metas):
        for what, vals in [("step count", m["steps"])] + [(f"scalar {k!r}", v) for k, v in m["scalars"].items()]:
            for n, v in vals.items():
                if seen.setdefault((what, n), v) != v:
                    raise ValueError(f"{f}: the {what} of {n!r} differs from another rank's ({v} vs {seen[what, n]})")


def _expected(m: dict, spec) -> dict:
    """Member name -> (shape, required) that rank file ``m`` may hold (any ``state/<name>`` of its range's length,
    under the key "state/*", where the class is not known: version 1 files)."""
    lo, hi = m["range"]
    offs = np.concatenate([[0], np.cumsum([int(np.prod(s, dtype=np.int64)) for s in m["shapes"]])]).tolist()
    states = None if spec is None else [s for s in spec.all_state_names if s not in spec.scalar_states]
    out = {"state/*": ((hi - lo,), False)} if states is None else {f"state/{s}": ((hi - lo,), False) for s in states}
    for i, (n, shape) in enumerate(zip(m["names"], m["shapes"])):
        out[f"residual/{i}"] = ((offs[i + 1] - offs[i],), False)
        if m["rank"] == 0:
            out[f"param/{i}"] = (shape, True)
        if m["whole"] and states and lo <= offs[i] and offs[i + 1] <= hi:
            out.update({f"tstate/{n}/{s}": (tuple(spec.state_shape_of(s, shape)), False) for s in states})
    return out


def _members(f: str, z: zipfile.ZipFile, m: dict, spec) -> dict:
    """Every member of rank file ``f`` (float32, of its expected shape; a residual of its tensor's size)."""
    want, got = _expected(m, spec), {}
    for raw in z.namelist():
        name = raw[:-4] if raw.endswith(".npy") else raw
        if name == "__meta__":
            continue
        key = "state/*" if name.startswith("state/") and "state/*" in want else name
        if key not in want:
            raise ValueError(f"{f}: unexpected member {name!r} (not a state of {m.get('class')} or of a tensor "
                             "this rank holds)")
        shape = want[key][0]
        a = _member(z, name, np.float32)
        if (a.size, a.shape) != (int(np.prod(shape, dtype=np.int64)), a.shape if key.startswith("residual/") else shape):
            raise ValueError(f"{f}: member {name!r} has shape {a.shape}, expected {shape}")
        got[name] = a
    missing = [k for k, (_, required) in want.items() if required and k not in got]
    res = [k for k in got if k.startswith("residual/")]
    if missing or 0 < len(res) < len(m["names"]):
        raise ValueError(f"{f}: member {(missing or ['residual/*'])[0]!r} is missing")
    return got


def _spec(cls_name):
    from ...engine import Optimizer
    from ...optim import AdamW  # noqa: F401 (registers every optimizer class)
    cls = Optimizer.optimizer_classes().get(cls_name) if isinstance(cls_name, str) else None
    return cls.spec if cls is not None else None


def _unreadable(f: str, e: Exception) -> ValueError:
    if isinstance(e, _Bad):
        return ValueError(f"{f}: {e}")
    return ValueError(f"{f}: not a readable ZeRO checkpoint file ({type(e).__name__}: {e})")


def load_files(path) -> tuple[list, list, list]:
    """(files, metadata, members) of every rank file of the ZeRO checkpoint at ``path``, each checked and all checked
    against each other (ValueError naming the file)."""
    files = sorted(glob.glob(f"{glob.escape(os.fspath(path))}.rank*-of-*.npz"))
    if not files:
        raise ValueError(f"{os.fspath(path)}: no ZeRO checkpoint files (<path>.rank<r>-of-<N>.npz)")
    metas, members = [], []
    with ExitStack() as stack:
        zips = []
        for f in files:
            try:
                zips.append(stack.enter_context(zipfile.ZipFile(f)))
                metas.append(_meta(zips[-1]))
            except (_Bad, OSError, zipfile.BadZipFile, EOFError, ValueError) as e:
                raise _unreadable(f, e) from None
        _check_set(os.fspath(path), files, metas)
        spec = _spec(metas[0].get("class"))
        if metas[0].get("class") is not None and spec is None:
            raise ValueError(f"{files[0]}: a checkpoint of an unknown optimizer class {metas[0]['class']!r}")
        for f, z, m in zip(files, zips, metas):
            try:
                members.append(_members(f, z, m, spec))
            except (_Bad, OSError, zipfile.BadZipFile, EOFError) as e:
                raise _unreadable(f, e) from None
    held = [(f, sorted(k for k in z if k.startswith("state/"))) for f, m, z in zip(files, metas, members)
            if m["range"][1] > m["range"][0]]
    for f, names in held[1:]:
        if names != held[0][1]:
            raise ValueError(f"{f}: holds the states {names}, {held[0][0]} {held[0][1]}")
    return files, metas, members


def read_shards(path, names=None, shapes=None, cls_name=None, rank=None, world=None):
    """(params, {state: flat float32 over every element}, steps per tensor, per-tensor scalars, {tensor: {state:
    array}} of whole tensors, rank ``rank``'s residual list when saved by ``world`` ranks (else [])) from the files a
    ZeRO checkpoint wrote (``<path>.rank<r>-of-<N>.npz``, all N of them), every file checked first (ValueError
    naming the file, or what does not match ``names``/``shapes``/``cls_name``)."""
    files, metas, members = load_files(path)
    m0 = metas[0]
    if cls_name is not None and m0.get("class") != cls_name:
        raise ValueError(f"{os.fspath(path)}: a checkpoint of {m0.get('class')}, this optimizer is {cls_name}")
    if names is not None and (m0["names"] != list(names) or m0["shapes"] != [tuple(s) for s in shapes]):
        raise ValueError(f"{os.fspath(path)}: the checkpoint holds {m0['names']}, this optimizer {list(names)}")
    total = sum(int(np.prod(s, dtype=np.int64)) for s in m0["shapes"])
    full, steps, scalars, tensors, residual = {}, {}, {}, {}, []
    for m, z in zip(metas, members):
        lo, hi = m["range"]
        for k, v in z.items():
            if k.startswith("state/"):
                full.setdefault(k[6:], np.zeros(total, np.float32))[lo:hi] = v
            elif k.startswith("tstate/"):
                n, name = k[7:].rsplit("/", 1)
                tensors.setdefault(n, {})[name] = v
        if m["rank"] == rank and m["world"] == world:
            residual = [z[f"residual/{i}"] for i in range(len(m0["names"])) if f"residual/{i}" in z]
        steps.update({n: s for n, s in m["steps"].items() if s})
        for name, v in m["scalars"].items():
            scalars.setdefault(name, {}).update(v)
    z0 = members[[m["rank"] for m in metas].index(0)]
    params = {n: z0[f"param/{i}"] for i, n in enumerate(m0["names"])}
    return params, full, steps, scalars, tensors, residual
