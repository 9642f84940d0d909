"""Data-parallel training with sharded optimizer state (ZeRO-1) over ``torch.distributed`` (gloo) or MPI
(mpi4py), first version.

    zero = rlx_gpu.distributed.ZeroRedundancyOptimizer(params, optimizer_class=rlx_gpu.AdamW, lr=1e-3)
    zero.step(local_grads)          # averaged across ranks, each rank steps its shard, params all-gathered
    zero.params["w"]                # every rank holds every parameter (NumPy, float32)

The parameters, flattened one after another, are cut into ``world_size`` contiguous ranges of (nearly) equal
size, tensors split where a boundary falls; each rank keeps the optimizer state of its range only, as an
optimizer of ``optimizer_class`` over the pieces of its range (so its device memory for state is 1/N). A step
all-reduces the grads (the mean over ranks, through the host: gloo or MPI), clips with the global norm and skips a step
whose averaged grads hold inf/NaN on every rank alike (every rank sees the same averaged grads), steps the shard,
and all-gathers the updated ranges. Optimizers whose update is elementwise only (a per-tensor reduction would see
only its piece of a split tensor): Adam, AdamW, SGD, RMSprop, Adagrad, Lion, NAdamW, RAdam, QHAdamW.

Checkpoints: ``save(path)`` writes a file per rank; ``restore(path)`` reads the files of a save by any number of
ranks into this one's range (resharding); :func:`single_process_state` gives them to the single-process optimizer.
Not built yet (the rest of the multi-GPU issue): top-k compression, reduce-scatter, overlap of transfers and
collectives, per-tensor reductions across ranks (LAMB, MARS, Adafactor). A failed collective (a rank died or
timed out) raises a RuntimeError saying so.
"""
from __future__ import annotations

import numpy as np

from .core.numerics import clip_coef

from .distributed_files import read_shards, single_process_state

__all__ = ["ZeroRedundancyOptimizer", "shard_ranges", "read_shards", "single_process_state"]


class TorchTransport:
    """Sum-all-reduce, all-gather and barrier over ``torch.distributed`` (gloo), on NumPy float32 arrays."""

    def __init__(self, group):
        import torch.distributed as dist
        if not dist.is_initialized():
            raise RuntimeError("ZeroRedundancyOptimizer: call torch.distributed.init_process_group first (or pass an "
                               "mpi4py communicator as process_group)")
        self.dist, self.group = dist, group
        self.rank, self.world_size = dist.get_rank(group), dist.get_world_size(group)

    def all_reduce(self, a: np.ndarray) -> None:
        import torch
        self.dist.all_reduce(torch.from_numpy(a), group=self.group)  # (in place: the tensor shares a's memory)

    def all_gather(self, a: np.ndarray) -> list:
        import torch
        outs = [torch.zeros(a.size, dtype=torch.float32) for _ in range(self.world_size)]
        self.dist.all_gather(outs, torch.from_numpy(a), group=self.group)
        return [o.numpy() for o in outs]

    def barrier(self) -> None:
        self.dist.barrier(group=self.group)


class MPITransport:
    """The same over an mpi4py communicator (``mpirun -n N python train.py``)."""

    def __init__(self, comm):
        from mpi4py import MPI
        self.MPI, self.comm = MPI, comm
        self.rank, self.world_size = comm.Get_rank(), comm.Get_size()

    def all_reduce(self, a: np.ndarray) -> None:
        self.comm.Allreduce(self.MPI.IN_PLACE, a, op=self.MPI.SUM)

    def all_gather(self, a: np.ndarray) -> list:
        out = np.empty((self.world_size, a.size), np.float32)
        self.comm.Allgather(a, out)
        return list(out)

    def barrier(self) -> None:
        self.comm.Barrier()


def transport(process_group):
    """``process_group``: None (torch.distributed's default group), a torch ProcessGroup, or an mpi4py
    communicator (``MPI.COMM_WORLD``)."""
    if process_group is not None and hasattr(process_group, "Allreduce"):
        return MPITransport(process_group)
    return TorchTransport(process_group)

ELEMENTWISE = {"Adam", "AdamW", "SGD", "RMSprop", "Adagrad", "Lion", "NAdamW", "RAdam", "QHAdamW"}


def shard_ranges(total: int, world: int) -> list[tuple[int, int]]:
    """``world`` contiguous ranges covering ``[0, total)``, sizes differing by at most one element."""
    cuts = [total * r // world for r in range(world + 1)]
    return list(zip(cuts[:-1], cuts[1:]))


class ZeroRedundancyOptimizer:
    """ZeRO-1 over ``torch.distributed`` (see the module docstring). ``params``: dict name -> float32 array, the
    same on every rank; ``process_group``: torch's (None: the default group, initialised by the caller) or an mpi4py
    communicator (``MPI.COMM_WORLD``: the collectives go through MPI);
    ``defaults``: the inner optimizer's hyperparameters and options (``clip_grad_norm`` and ``skip_nonfinite``
    are applied globally here)."""

    def __init__(self, params: dict, optimizer_class=None, process_group=None, grad_compression=None, **defaults):
        from .optim import AdamW
        cls = optimizer_class or AdamW
        if cls.__name__ not in ELEMENTWISE:
            raise ValueError(f"ZeroRedundancyOptimizer: {cls.__name__} is not supported yet (elementwise updates "
                             f"only: {', '.join(sorted(ELEMENTWISE))})")
        if grad_compression is not None:
            raise ValueError("ZeroRedundancyOptimizer: grad_compression is not built yet")
        self._net = transport(process_group)
        self.rank, self.world_size = self._net.rank, self._net.world_size
        for n, a in params.items():
            if not isinstance(a, np.ndarray) or a.dtype != np.float32:
                raise TypeError(f"ZeroRedundancyOptimizer: {n!r} must be a float32 NumPy array")
        self.params = {n: np.array(a) for n, a in params.items()}
        self._offsets, off = {}, 0
        for n, a in self.params.items():
            self._offsets[n] = off
            off += a.size
        self.numel = off
        self.ranges = shard_ranges(off, self.world_size)
        lo, hi = self.ranges[self.rank]
        self._pieces = {}  # piece name -> (tensor, start, stop) in the tensor's flat elements
        for n, a in self.params.items():
            s, e = max(lo, self._offsets[n]), min(hi, self._offsets[n] + a.size)
            if s < e:
                self._pieces[f"{n}[{s - self._offsets[n]}:{e - self._offsets[n]}]"] = \
                    (n, s - self._offsets[n], e - self._offsets[n])
        self.clip_grad_norm = defaults.pop("clip_grad_norm", None)
        self.skip_nonfinite = defaults.pop("skip_nonfinite", False)
        self.last_step_skipped = False
        self._last_norm = None
        self._broken = None  # (a collective that failed after this rank's shard had stepped)
        pieces = {k: self.params[n].reshape(-1)[s:e].copy() for k, (n, s, e) in self._pieces.items()}
        self._check_same_params()
        self.inner = cls(pieces, **defaults) if pieces else None  # (a rank may own nothing when N > numel)
        self._class = cls.__name__

    def _check_same_params(self) -> None:
        """Every rank was given the same tensor names and shapes (a fingerprint all-gathered), else ValueError."""
        import hashlib
        text = repr([(n, a.shape) for n, a in self.params.items()]).encode()
        mine = np.frombuffer(hashlib.sha1(text).digest()[:8], np.uint16).astype(np.float32)
        every = self._collective("the params' fingerprint", lambda: self._net.all_gather(mine))
        if any(not np.array_equal(o, mine) for o in every):
            raise ValueError(f"ZeroRedundancyOptimizer (rank {self.rank}): the ranks were given different tensors "
                             "(names or shapes differ); every rank must pass the same params")

    def _flat(self, arrays: dict) -> np.ndarray:
        missing = [n for n in self.params if n not in arrays]
        if missing:
            raise KeyError(f"ZeroRedundancyOptimizer.step: no grad for {missing} (every tensor needs one: a zero "
                           "grad would still decay its state)")
        out = np.zeros(self.numel, np.float32)
        for n, a in arrays.items():
            if n not in self._offsets:
                raise KeyError(f"ZeroRedundancyOptimizer.step: grad for unknown tensor {n!r}")
            a = np.asarray(a)
            if a.shape != self.params[n].shape or a.dtype != np.float32:
                raise ValueError(f"ZeroRedundancyOptimizer.step: grad for {n!r} must be float32 of shape "
                                 f"{self.params[n].shape}, got {a.dtype} {a.shape}")
            out[self._offsets[n]:self._offsets[n] + a.size] = a.reshape(-1)
        return out

    def step(self, grads: dict, grads_averaged: bool = False) -> None:
        """One step with this rank's ``grads`` (dict name -> float32 array; every tensor): the mean over ranks
        (unless ``grads_averaged``), the global clip and inf/NaN skip, this rank's shard stepped, params
        all-gathered."""
        if self._broken:
            raise RuntimeError(f"ZeroRedundancyOptimizer (rank {self.rank}): a collective failed in an earlier step "
                               f"({self._broken}); this rank's state is ahead of the params: restore a checkpoint")
        g = self._flat(grads)
        if not grads_averaged:
            self._collective("the grads' all-reduce", lambda: self._net.all_reduce(g))
            g /= np.float32(self.world_size)
            bad = not np.isfinite(g).all()
        else:  # (each rank's own grads: the skip is agreed on)
            flag = np.array([0.0 if np.isfinite(g).all() else 1.0], np.float32)
            self._collective("the inf/NaN flag's all-reduce", lambda: self._net.all_reduce(flag))
            bad = bool(flag[0])
        self.last_step_skipped = self.skip_nonfinite and bad
        if self.last_step_skipped:
            return
        if self.clip_grad_norm is not None:  # (the global norm: every rank holds the whole averaged grad)
            self._last_norm = float(np.sqrt(np.sum(g.astype(np.float64) ** 2)))
            g = g * clip_coef(np.float32(self._last_norm), self.clip_grad_norm)
        if self.inner is not None:
            self.inner.step({k: g[self._offsets[n] + s:self._offsets[n] + e].copy()
                             for k, (n, s, e) in self._pieces.items()})
            mine = np.concatenate([v.reshape(-1) for v in self.inner.read_params().values()])
        else:
            mine = np.zeros(0, np.float32)
        self._all_gather(mine)

    def _all_gather(self, mine: np.ndarray) -> None:
        width = max(e - s for s, e in self.ranges)
        buf = np.zeros(width, np.float32)
        buf[:mine.size] = mine
        try:
            outs = self._collective("the params' all-gather", lambda: self._net.all_gather(buf))
        except RuntimeError:
            self._broken = "the params' all-gather"
            raise
        full = np.concatenate([o[:e - s] for o, (s, e) in zip(outs, self.ranges)])
        for n, a in self.params.items():
            a.reshape(-1)[...] = full[self._offsets[n]:self._offsets[n] + a.size]

    def _collective(self, what: str, fn):
        """``fn()`` (a collective); a failure (a rank that died, or one that did not answer within the process
        group's timeout) as a RuntimeError that says so."""
        try:
            return fn()
        except Exception as e:
            raise RuntimeError(f"ZeroRedundancyOptimizer (rank {self.rank} of {self.world_size}): {what} failed: "
                               "another rank died or did not answer within the process group's timeout, or gave a "
                               f"collective of another size ({type(e).__name__}: "
                               f"{str(e).splitlines()[0] if str(e) else ''})") from e

    def last_grad_norm(self):
        return self._last_norm

    def memory(self) -> dict:
        """This rank's inner optimizer's device bytes (its state is its shard's)."""
        return self.inner.memory() if self.inner is not None else {"params": 0, "grads": 0, "state": 0}

    # -- checkpoints: a file per rank, read back by any number of ranks (or one process) ----------------------------
    def save(self, path) -> None:
        """Each rank writes ``<path>.rank<r>-of-<N>.npz`` (atomically: a temporary file renamed): its range of every
        state buffer, flattened, its step counts, and (rank 0) the params; then waits for every rank."""
        import glob
        import json
        import os
        import tempfile
        if self._broken:
            raise RuntimeError(f"ZeroRedundancyOptimizer.save (rank {self.rank}): a collective failed earlier "
                               f"({self._broken}); this rank's state is ahead of its params: not saved")
        token = np.array([float(int.from_bytes(os.urandom(2), "little")) if self.rank == 0 else 0.0], np.float32)
        self._collective("the save's id", lambda: self._net.all_reduce(token))  # (rank 0's, on every rank)
        sd = self.inner.state_dict(dequantize=True) if self.inner is not None else {"state": {}, "param_groups": []}
        lo, hi = self.ranges[self.rank]
        arrays, steps, scalars = {}, {}, {}
        for k, (n, s, e) in self._pieces.items():
            st = sd["state"].get(k, {})
            steps[n] = int(st.get("step", 0))
            for name, v in st.items():
                v = np.asarray(v, np.float32)
                if name == "step":
                    continue
                if v.ndim == 0:
                    scalars.setdefault(name, {})[n] = float(v)
                else:
                    arrays.setdefault(name, np.zeros(hi - lo, np.float32))[self._offsets[n] + s - lo:
                                                                           self._offsets[n] + e - lo] = v
        groups = [{k: v for k, v in g.items() if k != "params"} for g in sd["param_groups"]]
        meta = {"format": "rlx_gpu.zero", "version": 1, "save": int(token[0]), "class": self._class,
                "world": self.world_size, "rank": self.rank, "range": [lo, hi],
                "names": list(self.params), "shapes": [list(a.shape) for a in self.params.values()], "steps": steps,
                "scalars": scalars, "groups": groups}
        out = {f"state/{k}": v for k, v in arrays.items()}
        out["__meta__"] = np.frombuffer(json.dumps(meta, default=lambda o: list(o) if isinstance(o, tuple) else
                                                   str(o)).encode(), np.uint8)
        if self.rank == 0:
            out.update({f"param/{i}": a for i, a in enumerate(self.params.values())})
        final = f"{os.fspath(path)}.rank{self.rank}-of-{self.world_size}.npz"
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(os.path.abspath(final)), suffix=".npz")
        with os.fdopen(fd, "wb") as f:
            np.savez(f, **out)
        os.replace(tmp, final)
        self._collective("the save's barrier", self._net.barrier)
        if self.rank == 0:  # (the files of a save by another number of ranks to the same path would be read too)
            for f in glob.glob(f"{glob.escape(os.fspath(path))}.rank*-of-*.npz"):
                if not f.endswith(f"-of-{self.world_size}.npz"):
                    os.unlink(f)

    def restore(self, path) -> None:
        """Load a checkpoint saved by any number of ranks into this one's range (resharding as needed): params,
        step counts and state; the hyperparameters stay as this optimizer was made (the files record them)."""
        params, full, steps, scalars = read_shards(path, list(self.params), [a.shape for a in self.params.values()],
                                                   self._class)
        if self.inner is None:
            for n, a in params.items():
                self.params[n][...] = a
            self._broken = None
            return
        state = {}
        for k, (n, s, e) in self._pieces.items():
            if steps.get(n):
                state[k] = {"step": steps[n], **{name: full[name][self._offsets[n] + s:self._offsets[n] + e].copy()
                                                 for name in full},
                            **{name: np.array(v[n], np.float32) for name, v in scalars.items() if n in v}}
        sd = self.inner.state_dict()
        self.inner.load_state_dict({"state": state, "param_groups": sd["param_groups"]}, cast=True,
                                   params={k: params[n].reshape(-1)[s:e].copy()
                                           for k, (n, s, e) in self._pieces.items()})  # (checked before any change)
        for n, a in params.items():
            self.params[n][...] = a
        self._broken = None
