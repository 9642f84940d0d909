"""The files of a ZeRO checkpoint (:mod:`rlx_gpu.distributed`): one ``<path>.rank<r>-of-<N>.npz`` per rank, each
with a JSON ``__meta__`` (format, the save's id, N, the rank's range, names, shapes, optimizer class, step counts,
per-tensor scalars, groups), its range of every state buffer (``state/<name>``, flat: optimizers whose tensors are
split across ranks), the state of its whole tensors as shaped (``tstate/<tensor>/<name>``: optimizers that keep
tensors whole), its top-k residual (``residual/<i>``) and, in rank 0's, the params."""
from __future__ import annotations

import numpy as np

__all__ = ["read_shards", "single_process_state", "write_shard", "restore_shard"]


def write_shard(zero, path) -> None:
    """``zero.save(path)``: this rank's file, written atomically, then a barrier; rank 0 removes the files of a save
    by another number of ranks to the same path."""
    import glob
    import json
    import os
    import tempfile
    if zero._broken:
        raise RuntimeError(f"ZeroRedundancyOptimizer.save (rank {zero.rank}): a collective failed earlier "
                           f"({zero._broken}); this rank's state is ahead of its params: not saved")
    token = np.array([float(int.from_bytes(os.urandom(2), "little")) if zero.rank == 0 else 0.0], np.float32)
    zero._collective("the save's id", lambda: zero._net.all_reduce(token))  # (rank 0's, on every rank)
    sd = zero.inner.state_dict(dequantize=True) if zero.inner is not None else {"state": {}, "param_groups": []}
    lo, hi = zero.ranges[zero.rank]
    out, steps, scalars = {}, {}, {}
    for k, (n, s, e) in zero._pieces.items():
        st = sd["state"].get(k, {})
        steps[n] = int(st.get("step", 0))
        for name, v in st.items():
            v = np.asarray(v, np.float32)
            if name == "step":
                continue
            if v.ndim == 0:
                scalars.setdefault(name, {})[n] = float(v)
            elif zero.whole:
                out[f"tstate/{n}/{name}"] = v
            else:
                out.setdefault(f"state/{name}", np.zeros(hi - lo, np.float32))[zero._offsets[n] + s - lo:
                                                                              zero._offsets[n] + e - lo] = v
    if zero._comp is not None:
        out.update({f"residual/{i}": v for i, v in enumerate(zero._comp.read_residual().values())})
    groups = [{k: v for k, v in g.items() if k != "params"} for g in sd["param_groups"]]
    meta = {"format": "rlx_gpu.zero", "version": 2, "save": int(token[0]), "class": zero._class,
            "world": zero.world_size, "rank": zero.rank, "range": [lo, hi], "whole": zero.whole,
            "names": list(zero.params), "shapes": [list(a.shape) for a in zero.params.values()], "steps": steps,
            "scalars": scalars, "groups": groups}
    out["__meta__"] = np.frombuffer(json.dumps(meta, default=lambda o: list(o) if isinstance(o, tuple) else
                                               str(o)).encode(), np.uint8)
    if zero.rank == 0:
        out.update({f"param/{i}": a for i, a in enumerate(zero.params.values())})
    final = f"{os.fspath(path)}.rank{zero.rank}-of-{zero.world_size}.npz"
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(os.path.abspath(final)), suffix=".npz")
    with os.fdopen(fd, "wb") as f:
        np.savez(f, **out)
    os.replace(tmp, final)
    zero._collective("the save's barrier", zero._net.barrier)
    if zero.rank == 0:  # (the files of a save by another number of ranks to the same path would be read too)
        for f in glob.glob(f"{glob.escape(os.fspath(path))}.rank*-of-*.npz"):
            if not f.endswith(f"-of-{zero.world_size}.npz"):
                os.unlink(f)


def restore_shard(zero, path) -> None:
    """``zero.restore(path)``: everything checked (by the inner optimizer's ``load_state_dict``) before any change."""
    params, full, steps, scalars, tensors, residual = read_shards(
        path, list(zero.params), [a.shape for a in zero.params.values()], zero._class, rank=zero.rank,
        world=zero.world_size)
    if zero.inner is not None:
        state = {}
        for k, (n, s, e) in zero._pieces.items():
            if steps.get(n):
                own = tensors.get(n, {}) if zero.whole else {name: full[name][zero._offsets[n] + s:
                                                                               zero._offsets[n] + e].copy()
                                                             for name in full}
                state[k] = {"step": steps[n], **own,
                            **{name: np.array(v[n], np.float32) for name, v in scalars.items() if n in v}}
        sd = zero.inner.state_dict()
        flat = np.concatenate([params[n].reshape(-1) for n in zero.params])
        zero.inner.load_state_dict({"state": state, "param_groups": sd["param_groups"]}, cast=True,
                                   params={k: zero._piece(k, flat) for k in zero._pieces})
    if zero._comp is not None and zero._comp.residual is not None:  # (another rank count: a fresh residual)
        zero._comp.residual.write_many([(i, residual[i].reshape(-1) if residual else
                                         np.zeros(a.size, np.float32)) for i, a in enumerate(zero.params.values())])
    for n, a in params.items():
        zero.params[n][...] = a
    zero._broken = None


def read_shards(path, names=None, shapes=None, cls_name=None, rank=None, world=None):
    """(params, {state: flat float32 over every element}, steps per tensor, per-tensor scalars, {tensor: {state:
    array}} of whole tensors, rank ``rank``'s residual list when saved by ``world`` ranks (else [])) from the files a
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
    saved = metas[0][0]["world"]
    if sorted(m["rank"] for m, _ in metas) != list(range(saved)) or any(m["world"] != saved for m, _ in metas):
        raise ValueError(f"{os.fspath(path)}: expected the {saved} files of one save, found {len(files)}")
    m0 = metas[0][0]
    if len({m.get("save") for m, _ in metas}) != 1:
        raise ValueError(f"{os.fspath(path)}: the files come from different saves (a save was interrupted?)")
    if cls_name is not None and m0.get("class") != cls_name:
        raise ValueError(f"{os.fspath(path)}: a checkpoint of {m0.get('class')}, this optimizer is {cls_name}")
    if names is not None and (m0["names"] != names or [tuple(s) for s in m0["shapes"]] != [tuple(s) for s in shapes]):
        raise ValueError(f"{os.fspath(path)}: the checkpoint holds {m0['names']}, this optimizer {names}")
    total = sum(int(np.prod(s)) for s in m0["shapes"])
    full, steps, scalars, tensors, residual = {}, {}, {}, {}, []
    for m, z in metas:
        lo, hi = m["range"]
        for k, v in z.items():
            if k.startswith("state/"):
                full.setdefault(k[6:], np.zeros(total, np.float32))[lo:hi] = v
            elif k.startswith("tstate/"):
                n, name = k[7:].rsplit("/", 1)
                tensors.setdefault(n, {})[name] = v
        if m["rank"] == rank and saved == world:
            residual = [z[f"residual/{i}"] for i in range(len(m0["names"])) if f"residual/{i}" in z]
        steps.update({n: s for n, s in m["steps"].items() if s})
        for name, v in m["scalars"].items():
            scalars.setdefault(name, {}).update(v)
    z0 = next(z for m, z in metas if m["rank"] == 0)
    params = {n: z0[f"param/{i}"] for i, n in enumerate(m0["names"])}
    return params, full, steps, scalars, tensors, residual


def single_process_state(path) -> tuple[dict, dict]:
    """(params, state dict) of a ZeRO checkpoint for the single-process optimizer of the same class:
    ``opt.load_state_dict(sd, params=params)``."""
    params, full, steps, scalars, tensors, _ = read_shards(path)
    state, off = {}, 0
    for n, a in params.items():
        if steps.get(n):
            own = tensors.get(n) or {k: v[off:off + a.size].reshape(a.shape).copy() for k, v in full.items()}
            state[n] = {"step": steps[n], **own, **{k: np.array(v[n], np.float32) for k, v in scalars.items()
                                                     if n in v}}
        off += a.size
    return params, state
