"""Data-parallel training with sharded optimizer state (ZeRO-1) over ``torch.distributed`` (first version).

    zero = rlx_gpu.distributed.ZeroRedundancyOptimizer(params, optimizer_class=rlx_gpu.AdamW, lr=1e-3)
    zero.step(local_grads)          # averaged across ranks, each rank steps its shard, params all-gathered
    zero.params["w"]                # every rank holds every parameter (NumPy, float32)

The parameters, flattened one after another, are cut into ``world_size`` contiguous ranges of (nearly) equal
size, tensors split where a boundary falls; each rank keeps the optimizer state of its range only, as an
optimizer of ``optimizer_class`` over the pieces of its range (so its device memory for state is 1/N). A step
all-reduces the grads (the mean over ranks, through the host: gloo), clips with the global norm and skips a step
whose averaged grads hold inf/NaN on every rank alike (every rank sees the same averaged grads), steps the shard,
and all-gathers the updated ranges. Optimizers whose update is elementwise only (a per-tensor reduction would see
only its piece of a split tensor): Adam, AdamW, SGD, RMSprop, Adagrad, Lion, NAdamW, RAdam, QHAdamW.

Not built yet (the rest of the multi-GPU issue): MPI, top-k compression, reduce-scatter, per-tensor reductions
across ranks (LAMB, MARS, Adafactor), sharded checkpoints and resharding, and the timings on two GPUs.
"""
from __future__ import annotations

import numpy as np

from .core.numerics import clip_coef

__all__ = ["ZeroRedundancyOptimizer", "shard_ranges"]

ELEMENTWISE = {"Adam", "AdamW", "SGD", "RMSprop", "Adagrad", "Lion", "NAdamW", "RAdam", "QHAdamW"}


def shard_ranges(total: int, world: int) -> list[tuple[int, int]]:
    """``world`` contiguous ranges covering ``[0, total)``, sizes differing by at most one element."""
    cuts = [total * r // world for r in range(world + 1)]
    return list(zip(cuts[:-1], cuts[1:]))


class ZeroRedundancyOptimizer:
    """ZeRO-1 over ``torch.distributed`` (see the module docstring). ``params``: dict name -> float32 array, the
    same on every rank; ``process_group``: torch's (None: the default group, initialised by the caller);
    ``defaults``: the inner optimizer's hyperparameters and options (``clip_grad_norm`` and ``skip_nonfinite``
    are applied globally here)."""

    def __init__(self, params: dict, optimizer_class=None, process_group=None, grad_compression=None, **defaults):
        import torch.distributed as dist
        from .optim import AdamW
        cls = optimizer_class or AdamW
        if cls.__name__ not in ELEMENTWISE:
            raise ValueError(f"ZeroRedundancyOptimizer: {cls.__name__} is not supported yet (elementwise updates "
                             f"only: {', '.join(sorted(ELEMENTWISE))})")
        if grad_compression is not None:
            raise ValueError("ZeroRedundancyOptimizer: grad_compression is not built yet")
        if not dist.is_initialized():
            raise RuntimeError("ZeroRedundancyOptimizer: call torch.distributed.init_process_group first")
        self._dist, self.group = dist, process_group
        self.rank, self.world_size = dist.get_rank(process_group), dist.get_world_size(process_group)
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
        pieces = {k: self.params[n].reshape(-1)[s:e].copy() for k, (n, s, e) in self._pieces.items()}
        self.inner = cls(pieces, **defaults) if pieces else None  # (a rank may own nothing when N > numel)

    def _flat(self, arrays: dict) -> np.ndarray:
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
        import torch
        flat = torch.from_numpy(self._flat(grads))
        if not grads_averaged:
            self._dist.all_reduce(flat, group=self.group)
            flat /= self.world_size
        g = flat.numpy()
        self.last_step_skipped = self.skip_nonfinite and not np.isfinite(g).all()
        if self.last_step_skipped:
            return
        if self.clip_grad_norm is not None:  # (the global norm: every rank holds the whole averaged grad)
            self._last_norm = float(np.sqrt(np.sum(g.astype(np.float64) ** 2)))
            g = g * clip_coef(np.float32(self._last_norm), self.clip_grad_norm)
        if self.inner is not None:
            lo = self.ranges[self.rank][0]
            self.inner.step({k: g[self._offsets[n] + s:self._offsets[n] + e].copy()
                             for k, (n, s, e) in self._pieces.items()})
            mine = np.concatenate([v.reshape(-1) for v in self.inner.read_params().values()])
        else:
            lo, mine = 0, np.zeros(0, np.float32)
        self._all_gather(mine)

    def _all_gather(self, mine: np.ndarray) -> None:
        import torch
        width = max(e - s for s, e in self.ranges)
        buf = torch.zeros(width)
        buf[:mine.size] = torch.from_numpy(mine)
        outs = [torch.zeros(width) for _ in range(self.world_size)]
        self._dist.all_gather(outs, buf, group=self.group)
        full = np.concatenate([o.numpy()[:e - s] for o, (s, e) in zip(outs, self.ranges)])
        for n, a in self.params.items():
            a.reshape(-1)[...] = full[self._offsets[n]:self._offsets[n] + a.size]

    def last_grad_norm(self):
        return self._last_norm

    def memory(self) -> dict:
        """This rank's inner optimizer's device bytes (its state is its shard's)."""
        return self.inner.memory() if self.inner is not None else {"params": 0, "grads": 0, "state": 0}
