"""The files of a ZeRO checkpoint (:mod:`rlx_gpu.distributed`): one ``<path>.rank<r>-of-<N>.npz`` per rank, each
with a JSON ``__meta__`` (format, the save's id, N, the rank's range, names, shapes, optimizer class, step counts,
per-tensor scalars, groups), its range of every state buffer (``state/<name>``, flat: optimizers whose tensors are
split across ranks), the state of its whole tensors as shaped (``tstate/<tensor>/<name>``: optimizers that keep
tensors whole), its top-k residual (``residual/<i>``) and, in rank 0's, the params."""
from __future__ import annotations

import os

import numpy as np

from ...core.atomic import write_atomic
from .reading import read_shards

__all__ = ["read_shards", "single_process_state", "write_shard", "restore_shard"]


def write_shard(zero, path) -> None:
    """``zero.save(path)``: this rank's file, written atomically, then a barrier; rank 0 removes the files of a save
    by another number of ranks to the same path."""
    import glob
    import json
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
    write_atomic(f"{os.fspath(path)}.rank{zero.rank}-of-{zero.world_size}.npz", lambda f: np.savez(f, **out))
    zero._collective("the save's barrier", zero._net.barrier)
    if zero.rank == 0:  # (the files of a save by another number of ranks to the same path would be read too)
        for f in glob.glob(f"{glob.escape(os.fspath(path))}.rank*-of-*.npz"):
            if not f.endswith(f"-of-{zero.world_size}.npz"):
                os.unlink(f)


def restore_shard(zero, path) -> None:
    """``zero.restore(path)``: every rank reads and checks every file, and the ranks agree that all of them could,
    before any changes; then each loads its shard, and if any rank's optimizer refused its part (after the files
    passed), the ranks that had loaded theirs put back what they held, so that every rank raises with nothing
    changed."""
    err, state, flat, data = None, None, None, None
    try:
        data = read_shards(path, list(zero.params), [a.shape for a in zero.params.values()], zero._class,
                           rank=zero.rank, world=zero.world_size)
        state, flat = _shard_state(zero, *data[:5])
    except ValueError as e:
        err = e
    _agree(zero, err, "could not read the checkpoint")
    params, residual = data[0], data[5]
    if zero.inner is not None:
        keep = (zero.inner.state_dict(), zero.inner.read_params())
        try:
            zero.inner.load_state_dict({"state": state, "param_groups": keep[0]["param_groups"]}, cast=True,
                                       params={k: zero._piece(k, flat) for k in zero._pieces})
        except (ValueError, TypeError, KeyError) as e:
            err = ValueError(f"{os.fspath(path)}: {e}")
        try:
            _agree(zero, err, "refused its part of the checkpoint")
        except ValueError:
            if err is None:  # (this rank had loaded its part: back to what it held)
                zero.inner.load_state_dict(keep[0], params=keep[1])
            raise
    if zero._comp is not None and zero._comp.residual is not None:  # (another rank count: a fresh residual)
        zero._comp.residual.write_many([(i, residual[i].reshape(-1) if residual else
                                         np.zeros(a.size, np.float32)) for i, a in enumerate(zero.params.values())])
    for n, a in params.items():
        zero.params[n][...] = a
    zero._broken = None


def _shard_state(zero, params, full, steps, scalars, tensors) -> tuple[dict, np.ndarray]:
    """The inner optimizer's state dict entries for this rank's pieces, and the params flat."""
    state = {}
    for k, (n, s, e) in zero._pieces.items():
        if steps.get(n):
            own = tensors.get(n, {}) if zero.whole else {name: full[name][zero._offsets[n] + s:
                                                                           zero._offsets[n] + e].copy()
                                                         for name in full}
            state[k] = {"step": steps[n], **own,
                        **{name: np.array(v[n], np.float32) for name, v in scalars.items() if n in v}}
    return state, np.concatenate([params[n].reshape(-1) for n in zero.params])


def _agree(zero, err, what: str) -> None:
    """Raise on every rank if ``err`` happened on any (a one-element all-reduce): this rank's error, or a ValueError
    saying that another rank ``what``."""
    flag = np.array([0.0 if err is None else 1.0], np.float32)
    zero._collective("the restore's agreement", lambda: zero._net.all_reduce(flag))
    if err is not None:
        raise err
    if flag[0]:
        raise ValueError(f"ZeroRedundancyOptimizer.restore (rank {zero.rank}): another rank {what}; nothing changed")


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
