"""The files of a ZeRO checkpoint (:mod:`rlx_gpu.distributed`): one ``<path>.rank<r>-of-<N>.npz`` per rank, each
with a JSON ``__meta__`` (format, the save's id, N, the rank's range, names, shapes, optimizer class, step counts,
per-tensor scalars, groups), its range of every state buffer (``state/<name>``) and, in rank 0's, the params."""
from __future__ import annotations

import numpy as np

__all__ = ["read_shards", "single_process_state"]


def read_shards(path, names=None, shapes=None, cls_name=None):
    """(params, {state: flat float32 over every element}, steps per tensor, per-tensor scalars) from the files a
    ZeRO checkpoint wrote (``<path>.rank<r>-of-<N>.npz``, all N of them); ValueError naming what is missing."""
    import glob
    import json
    import os
    files = sorted(glob.glob(f"{glob.escape(os.fspath(path))}.rank*-of-*.npz"))
    if not files:
        raise ValueError(f"{os.fspath(path)}: no ZeRO checkpoint files (<path>.rank<r>-of-<N>.npz)")
    metas = []
    for f in files:
        with np.load(f) as z:
            metas.append((json.loads(bytes(z["__meta__"]).decode()), {k: z[k] for k in z.files}))
    world = metas[0][0]["world"]
    if sorted(m["rank"] for m, _ in metas) != list(range(world)) or any(m["world"] != world for m, _ in metas):
        raise ValueError(f"{os.fspath(path)}: expected the {world} files of one save, found {len(files)}")
    m0 = metas[0][0]
    if len({m.get("save") for m, _ in metas}) != 1:
        raise ValueError(f"{os.fspath(path)}: the files come from different saves (a save was interrupted?)")
    if cls_name is not None and m0.get("class") != cls_name:
        raise ValueError(f"{os.fspath(path)}: a checkpoint of {m0.get('class')}, this optimizer is {cls_name}")
    if names is not None and (m0["names"] != names or [tuple(s) for s in m0["shapes"]] != [tuple(s) for s in shapes]):
        raise ValueError(f"{os.fspath(path)}: the checkpoint holds {m0['names']}, this optimizer {names}")
    total = sum(int(np.prod(s)) for s in m0["shapes"])
    full, steps, scalars = {}, {}, {}
    for m, z in metas:
        lo, hi = m["range"]
        for k, v in z.items():
            if k.startswith("state/"):
                full.setdefault(k[6:], np.zeros(total, np.float32))[lo:hi] = v
        steps.update({n: s for n, s in m["steps"].items() if s})
        for name, v in m["scalars"].items():
            scalars.setdefault(name, {}).update(v)
    z0 = next(z for m, z in metas if m["rank"] == 0)
    params = {n: z0[f"param/{i}"] for i, n in enumerate(m0["names"])}
    return params, full, steps, scalars


def single_process_state(path) -> tuple[dict, dict]:
    """(params, state dict) of a ZeRO checkpoint for the single-process optimizer of the same class:
    ``opt.load_state_dict(sd, params=params)``."""
    params, full, steps, scalars = read_shards(path)
    state, off = {}, 0
    for n, a in params.items():
        if steps.get(n):
            state[n] = {"step": steps[n], **{k: v[off:off + a.size].reshape(a.shape).copy() for k, v in full.items()},
                        **{k: np.array(v[n], np.float32) for k, v in scalars.items() if n in v}}
        off += a.size
    return params, state
