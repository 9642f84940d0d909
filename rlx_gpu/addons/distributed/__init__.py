"""Data-parallel training with sharded optimizer state (ZeRO-1) over ``torch.distributed`` (gloo) or MPI
(mpi4py), with optional top-k gradient compression (:mod:`rlx_gpu.compression`).

    zero = rlx_gpu.distributed.ZeroRedundancyOptimizer(params, optimizer_class=rlx_gpu.AdamW, lr=1e-3)
    zero.step(local_grads)          # averaged across ranks, each rank steps its shard, params all-gathered
    zero.params["w"]                # every rank holds every parameter (NumPy, float32)

The parameters, flattened one after another, are cut into ``world_size`` contiguous ranges; each rank keeps the
optimizer state of its range only, as an optimizer of ``optimizer_class`` over the pieces of its range (so its
device memory for state is 1/N). For elementwise optimizers (Adam, AdamW, SGD, RMSprop, Adagrad, Lion, NAdamW,
RAdam, QHAdamW) the ranges are of (nearly) equal size and a tensor is split where a boundary falls; for the others
(LAMB, Adafactor, Mars, Muon, SophiaH: a trust ratio, a norm, factored moments or a matrix function of the whole
tensor) ranges end at tensor boundaries (the one nearest an equal split), so every tensor is stepped whole by one
rank and its per-tensor reductions are exact. A step averages the grads (through the host: gloo or MPI), clips
with the global norm, skips a step whose averaged grads hold inf/NaN on every rank alike, steps the shard and
all-gathers the updated ranges.

``grad_compression=TopK(ratio, error_feedback)``: the grads live on the device (``zero.grads``, or uploaded from
the dict given to ``step``); each rank sends its top-k entries per tensor (selected on the GPU, the residual kept
there), the lists are all-gathered and the mean rebuilt on the device straight into the shard's grad slots.

Checkpoints: ``save(path)`` writes a file per rank; ``restore(path)`` reads the files of a save by any number of
ranks into this one's range (resharding); :func:`single_process_state` gives them to the single-process optimizer.
A failed collective (a rank died or timed out) raises a RuntimeError saying so.
"""
from __future__ import annotations

import numpy as np

from ...core.numerics import clip_coef

from .files import read_shards, restore_shard, single_process_state, write_shard
from .net import transport
from .shards import segments, shard_ranges, sumsq, tensor_ranges

__all__ = ["ZeroRedundancyOptimizer", "shard_ranges", "tensor_ranges", "read_shards", "single_process_state"]


ELEMENTWISE = {"Adam", "AdamW", "SGD", "RMSprop", "Adagrad", "Lion", "NAdamW", "RAdam", "QHAdamW"}
WHOLE = {"LAMB", "Adafactor", "Mars", "Muon", "SophiaH"}


class ZeroRedundancyOptimizer:
    """ZeRO-1 over ``torch.distributed`` (see the module docstring). ``params``: dict name -> float32 array, the
    same on every rank; ``process_group``: torch's (None: the default group, initialised by the caller) or an mpi4py
    communicator (``MPI.COMM_WORLD``: the collectives go through MPI); ``grad_compression``: None or
    :class:`rlx_gpu.compression.TopK`; ``defaults``: the inner optimizer's hyperparameters and options
    (``clip_grad_norm`` and ``skip_nonfinite`` are applied globally here)."""

    def __init__(self, params: dict, optimizer_class=None, process_group=None, grad_compression=None, **defaults):
        from .compression import TopK
        from ...optim import AdamW
        cls = optimizer_class or AdamW
        if cls.__name__ not in ELEMENTWISE | WHOLE:
            raise ValueError(f"ZeroRedundancyOptimizer: {cls.__name__} is not supported (supported: "
                             f"{', '.join(sorted(ELEMENTWISE | WHOLE))})")
        if grad_compression is not None and not isinstance(grad_compression, TopK):
            raise TypeError(f"ZeroRedundancyOptimizer: grad_compression must be None or rlx_gpu.compression.TopK, "
                            f"got {type(grad_compression).__name__}")
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
        self.whole = cls.__name__ in WHOLE
        self.ranges = (tensor_ranges([a.size for a in self.params.values()], self.world_size) if self.whole
                       else shard_ranges(off, self.world_size))
        lo, hi = self.ranges[self.rank]
        self._width = max(e - s for s, e in self.ranges)
        # (host exchange buffers, made once: (world, width) float32 for grads and params; top-k's lists)
        self._rows, self._lists = None, None
        self._segs = segments({n: a.size for n, a in self.params.items()}, self.ranges)
        self._pieces = {}  # piece name -> (tensor, start, stop) in the tensor's flat elements
        for n, a in self.params.items():
            s, e = max(lo, self._offsets[n]), min(hi, self._offsets[n] + a.size)
            if s < e:
                key = n if self.whole else f"{n}[{s - self._offsets[n]}:{e - self._offsets[n]}]"
                self._pieces[key] = (n, s - self._offsets[n], e - self._offsets[n])
        self.clip_grad_norm = defaults.pop("clip_grad_norm", None)
        self.skip_nonfinite = defaults.pop("skip_nonfinite", False)
        self.last_step_skipped = False
        self._last_norm = None
        self._broken = None  # (a collective that failed after this rank's shard had stepped)
        pieces = {k: self._piece(k, self.params[n].reshape(-1), self._offsets[n]) for k, (n, s, e) in
                  self._pieces.items()}
        self._check_same_params()
        self.inner = cls(pieces, **defaults) if pieces else None  # (a rank may own nothing when N > numel)
        self._class = cls.__name__
        self._comp = None
        #: With ``profile = True`` each step syncs the device between its parts and records their wall times (ms) in
        #: ``timings`` (benchmarks/zero_bench.py); off, nothing waits that would not wait anyway.
        self.profile, self.timings, self._t0 = False, {}, 0.0
        if grad_compression is not None:
            self._compression(grad_compression)

    def _piece(self, k: str, flat: np.ndarray, base: int = 0) -> np.ndarray:
        """Piece ``k``'s elements out of ``flat`` (the model's flat order from ``base``), shaped as the inner
        optimizer holds it (whole tensors keep their shape; pieces of split ones are flat)."""
        n, s, e = self._pieces[k]
        a = flat[self._offsets[n] - base + s:self._offsets[n] - base + e].copy()
        return a.reshape(self.params[n].shape) if self.whole else a

    def _compression(self, topk) -> None:
        from .compression import Rebuild, TopKCompressor
        if self.inner is None:
            raise ValueError(f"ZeroRedundancyOptimizer (rank {self.rank}): grad_compression needs every rank to own "
                             "a part of the params (fewer ranks, or whole tensors enough for each)")
        dev = self.inner.device
        self._comp = TopKCompressor(dev, {n: a.shape for n, a in self.params.items()}, topk)
        self._rebuild = Rebuild(dev, [(self.inner.grads[k], self._offsets[n] + s)
                                      for k, (n, s, e) in self._pieces.items()], self._comp.K, self.world_size)

    @property
    def grads(self) -> dict:
        """With ``grad_compression``: this rank's grads on its device (name -> DeviceTensor), which ``step(None)``
        compresses (a WGSL backward pass can write them in place)."""
        if self._comp is None:
            raise AttributeError("ZeroRedundancyOptimizer.grads: only with grad_compression (else step takes grads)")
        return self._comp.grads

    def _check_same_params(self) -> None:
        """Every rank was given the same tensor names and shapes (a fingerprint all-gathered), else ValueError."""
        import hashlib
        text = repr([(n, a.shape) for n, a in self.params.items()]).encode()
        mine = np.frombuffer(hashlib.sha1(text).digest()[:8], np.uint16).astype(np.float32)
        every = self._collective("the params' fingerprint", lambda: self._net.all_gather(mine))
        if any(not np.array_equal(o, mine) for o in every):
            raise ValueError(f"ZeroRedundancyOptimizer (rank {self.rank}): the ranks were given different tensors "
                             "(names or shapes differ); every rank must pass the same params")

    def _check_grads(self, arrays: dict) -> None:
        """Every tensor's grad, float32 of its shape, and no other (KeyError/ValueError naming it)."""
        missing = [n for n in self.params if n not in arrays]
        if missing:
            raise KeyError(f"ZeroRedundancyOptimizer.step: no grad for {missing} (every tensor needs one: a zero "
                           "grad would still decay its state)")
        for n, a in arrays.items():
            if n not in self._offsets:
                raise KeyError(f"ZeroRedundancyOptimizer.step: grad for unknown tensor {n!r}")
            a = np.asarray(a)
            if a.shape != self.params[n].shape or a.dtype != np.float32:
                raise ValueError(f"ZeroRedundancyOptimizer.step: grad for {n!r} must be float32 of shape "
                                 f"{self.params[n].shape}, got {a.dtype} {a.shape}")

    def _rows_buf(self) -> np.ndarray:
        """The host exchange buffer, (world, width) float32, rank r's range in row r (made once)."""
        if self._rows is None:
            self._rows = np.zeros((self.world_size, self._width), np.float32)
        return self._rows

    def _flat(self, arrays: dict) -> np.ndarray:
        """The grads checked and laid out in the exchange buffer."""
        self._check_grads(arrays)
        rows = self._rows_buf()
        for n, t0, t1, r, off in self._segs:
            rows[r, off:off + t1 - t0] = np.asarray(arrays[n]).reshape(-1)[t0:t1]
        return rows

    def step(self, grads: dict | None = None, grads_averaged: bool = False, *, loss_scale=None) -> None:
        """One step with this rank's ``grads`` (dict name -> float32 array; every tensor): the mean over ranks
        (unless ``grads_averaged``), the global clip and inf/NaN skip, this rank's shard stepped, params
        all-gathered. With ``grad_compression``, ``grads=None`` compresses ``zero.grads`` as they are on the
        device. ``loss_scale`` (a float; ``rlx_gpu.GradScaler().step(zero, grads)`` passes it): the grads carry
        that factor; they are multiplied by float32(1/scale) and a step with inf/NaN on any rank is skipped."""
        if self._broken:
            raise RuntimeError(f"ZeroRedundancyOptimizer (rank {self.rank}): a collective failed in an earlier step "
                               f"({self._broken}); this rank's state is ahead of the params: restore a checkpoint")
        self._mark(None)
        check = self.skip_nonfinite or loss_scale is not None
        inv = np.float32(1.0 if loss_scale is None else 1.0 / np.float64(loss_scale))
        if self._comp is not None:
            return self._step_compressed(grads, grads_averaged, check, inv)
        if grads is None:
            raise TypeError("ZeroRedundancyOptimizer.step: grads are required (a dict name -> float32 array)")
        rows = self._flat(grads)
        self._mark("flatten")
        lo, hi = self.ranges[self.rank]
        if not grads_averaged:  # (this rank's range summed over ranks: MPI's reduce-scatter; over gloo all-reduce)
            g = self._collective("the grads' reduce-scatter", lambda: self._net.reduce_scatter(rows))[:hi - lo]
            self._mark("reduce_scatter")
            g /= np.float32(self.world_size)
        else:
            g = rows[self.rank, :hi - lo].copy()
        if inv != 1.0:
            g = g * inv
        if self.clip_grad_norm is not None or check:  # (partial sums and flags, all-reduced)
            part = np.array([sumsq(g), 0.0 if np.isfinite(g).all() else 1.0])
            self._collective("the grads' norm all-reduce", lambda: self._net.all_reduce(part))
            self.last_step_skipped = check and (part[1] > 0 or not np.isfinite(part[0]))
            if self.last_step_skipped:
                return
            if self.clip_grad_norm is not None:
                self._last_norm = float(np.sqrt(part[0]))
                g = g * clip_coef(np.float32(self._last_norm), self.clip_grad_norm)
        self.last_step_skipped = False
        if self.inner is not None:
            self.inner.step({k: self._piece(k, g, lo) for k in self._pieces})
        self._mark("upload_and_step")
        self._finish_step()

    def _agree(self, bad: bool) -> bool:
        """Whether any rank saw inf/NaN (a one-element all-reduce)."""
        flag = np.array([1.0 if bad else 0.0], np.float32)
        self._collective("the inf/NaN flag's all-reduce", lambda: self._net.all_reduce(flag))
        return bool(flag[0])

    def _step_compressed(self, grads, grads_averaged: bool, check: bool, inv) -> None:
        """Top-k: this rank's entries selected on its device, every rank's lists all-gathered, the mean rebuilt in
        the shard's grad slots on the device, clipped by the global norm (partial sums all-reduced)."""
        if grads_averaged:
            raise ValueError("ZeroRedundancyOptimizer.step: grads_averaged=True means nothing to exchange; it does "
                             "not combine with grad_compression")
        if grads is not None:
            self._check_grads(grads)
            self._comp.write(grads)
            self._mark("upload_grads")
        if self._lists is None:  # (one row of K indices and K value bits per rank, made once)
            self._lists = np.zeros((self.world_size, 2 * self._comp.K), np.uint32)
        rows = self._lists
        sent = self._comp.compress(self._agree if check else None, out=rows[self.rank],
                                   mark=self._mark if self.profile else None, inv_scale=float(inv))
        self._mark("download_lists")
        if sent is None:  # (a rank saw inf/NaN: skipped everywhere, residuals unchanged)
            self.last_step_skipped = True
            return
        self._collective("the top-k lists' all-gather", lambda: self._net.all_gather_rows(rows))
        self._mark("all_gather_lists")
        partial = self._rebuild.run(rows)
        self._mark("upload_and_rebuild")
        coef = 1.0
        if self.clip_grad_norm is not None or check:
            tot = np.array([np.sum(partial, dtype=np.float64)], np.float64)
            self._collective("the grads' norm all-reduce", lambda: self._net.all_reduce(tot))
            self.last_step_skipped = check and not np.isfinite(tot[0])
            if self.last_step_skipped:
                return
            if self.clip_grad_norm is not None:
                self._last_norm = float(np.sqrt(tot[0]))
                coef = clip_coef(np.float32(self._last_norm), self.clip_grad_norm)
            self._mark("norm_all_reduce")
        self.last_step_skipped = False
        self.inner.step(None, grad_mul=float(coef))  # (the kernels read grads times grad_mul)
        self._mark("step")
        self._finish_step()

    def _finish_step(self) -> None:
        mine = (np.concatenate([v.reshape(-1) for v in self.inner.read_params().values()]) if self.inner is not None
                else np.zeros(0, np.float32))
        self._mark("download_params")
        self._all_gather(mine)
        self._mark("all_gather_params")

    def _mark(self, part) -> None:
        """With ``profile``: the wall time since the last mark, after the device's queued work, as ``part``."""
        if not self.profile:
            return
        import time
        if part is None:
            self.timings = {}
        elif self.inner is not None:
            self.inner.device.sync()
        now = time.perf_counter()
        if part is not None:
            self.timings[part] = self.timings.get(part, 0.0) + 1e3 * (now - self._t0)
        self._t0 = now

    def _all_gather(self, mine: np.ndarray) -> None:
        rows = self._rows_buf()
        rows[self.rank, :mine.size] = mine
        try:
            self._collective("the params' all-gather", lambda: self._net.all_gather_rows(rows))
        except RuntimeError:
            self._broken = "the params' all-gather"
            raise
        for n, t0, t1, r, off in self._segs:
            self.params[n].reshape(-1)[t0:t1] = rows[r, off:off + t1 - t0]

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
        """This rank's device bytes: its inner optimizer's (its state is its shard's) and top-k's grads and
        residual (``compression``)."""
        out = self.inner.memory() if self.inner is not None else {"params": 0, "grads": 0, "state": 0}
        c = self._comp
        return {**out, "compression": 0 if c is None else c.grads_arena.nbytes + (c.residual.nbytes if c.residual
                                                                                   else 0)}

    # -- checkpoints: a file per rank, read back by any number of ranks (or one process) ----------------------------
    def save(self, path) -> None:
        """Each rank writes ``<path>.rank<r>-of-<N>.npz`` (atomically: a temporary file renamed): its range of every
        state buffer (whole tensors' state as it is shaped), its step counts, its top-k residual, and (rank 0) the
        params; then waits for every rank (:func:`rlx_gpu.addons.distributed.files.write_shard`)."""
        write_shard(self, path)

    def restore(self, path) -> None:
        """Load a checkpoint saved by any number of ranks into this one's range (resharding as needed): params,
        step counts and state (and the top-k residual when saved by as many ranks); the hyperparameters stay as this
        optimizer was made (the files record them)."""
        restore_shard(self, path)
