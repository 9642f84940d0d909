"""Row-sparse steps on the GPU (:class:`rlx_gpu.RowSparse` grads): one dispatch per tensor piece over the touched
(row, column) pairs, ``shaders/sparse.wgsl``, with torch's semantics for SparseAdam, Adagrad and SGD without
momentum; untouched rows cost nothing. SGD with momentum decays its whole buffer in torch, so a sparse grad goes
through the dense step there (densified on the host). What the twin does is :mod:`rlx_gpu.reference.sparse`."""
from __future__ import annotations

import numpy as np

from ..core.sparse import (RowSparse, check_sparse, check_use, coalesce, densify, grouped, refuse_dense,
                           storage_error)
from ..runtime.kernels import shipped_kernel

H = 16  # header words of the meta buffer


class SparseMixin:
    """``step`` with :class:`RowSparse` grads on the GPU classes whose twin has a ``sparse_kind``."""

    def _refuse_dense(self, grads) -> None:
        refuse_dense(type(self).__name__, self.spec.dense_refusal, grads)

    def _split_sparse_grads(self, sparse: dict, check: bool) -> tuple[dict, dict]:
        """(grads for the dense step, {name: (rows, values)} for the sparse one): every sparse grad checked
        (shapes, rows, what the optimizer accepts) before anything changes."""
        name = type(self).__name__
        check_use(name, self.spec, sparse, self.param_groups, check, self.clip_grad_norm)
        dense, out = {}, {}
        for n, g in sparse.items():
            if n not in self._index:
                raise KeyError(f"{name}.step: grad for unknown tensor {n!r}")
            t = self._index[n]
            b, _ = self._where[t]
            if b.sig.param.name != "float32" or b.sig.state.name != "float32" or b.sig.qbits:
                raise storage_error(name, n)
            group = self.param_groups[self._group_of[t]]
            self.spec.check_sparse(n, group)
            if isinstance(g, DeviceRowSparse):
                if g.opt is not self or g.name != n:
                    raise ValueError(f"{name}.step: the DeviceRowSparse given for {n!r} was uploaded for "
                                     f"{g.name!r} of another optimizer" if g.opt is not self else
                                     f"{name}.step: the DeviceRowSparse given for {n!r} was uploaded for {g.name!r}")
                out[n] = g
                continue
            idx, vals = check_sparse(name, n, g, self._shapes[n])
            if self.spec.sparse_dense(group):  # (SGD with momentum: torch decays every row of the buffer)
                dense[n] = densify(idx, vals, self._shapes[n])
            else:
                out[n] = (idx, vals)
        return dense, out

    def upload_sparse(self, grads: dict) -> dict:
        """``{name: RowSparse}`` checked, coalesced (or grouped, for SGD) and uploaded now: ``{name:
        DeviceRowSparse}`` that ``step`` takes with no host work or transfer (one dispatch per tensor), as many
        times as wanted. What a training loop whose sparse grads are made on the device looks like."""
        dense, checked = self._split_sparse_grads(grads, False)
        if dense:
            raise ValueError(f"{type(self).__name__}.upload_sparse: {next(iter(dense))!r}: this group's sparse "
                             "grads go through the dense step (SGD with momentum); pass the RowSparse to step")
        return {n: self._prepare(n, idx, vals) for n, (idx, vals) in checked.items()}

    def _prepare(self, n: str, idx, vals) -> "DeviceRowSparse":
        t = self._index[n]
        b, i = self._where[t]
        kind = self.spec.sparse_kind
        if kind == "sgd":
            rows, starts, counts, vals = grouped(idx, vals)
            extra = [starts, counts]
        else:
            rows, vals = coalesce(idx, vals)
            extra = []
        L = vals.shape[1]
        vbuf = self.device.buffer(4 * max(1, vals.size), f"{n}.sparse values", data=np.ascontiguousarray(vals))
        pieces = []
        for (c, off, ln, toff) in b.layout.pieces[i]:
            head = np.zeros(H, np.uint32)
            head[:5] = [L, rows.size, off, toff, ln]
            meta = np.concatenate([head, rows.astype(np.uint32)] + [e.astype(np.uint32) for e in extra])
            pieces.append((c, self.device.buffer(4 * meta.size, f"{n}.sparse meta", data=meta)))
        return DeviceRowSparse(self, n, rows.size, L, vbuf, pieces)

    def _sparse_step(self, sparse: dict) -> None:
        """Apply checked sparse grads (``{name: (rows, values)}`` or DeviceRowSparse): one command buffer, one
        dispatch per tensor piece. The scalars (lr, step, maximize) go in the first words of each meta buffer."""
        kind = self.spec.sparse_kind
        states = self.spec.sparse_states
        for s in states:
            self._ensure(s)
        k = shipped_kernel(self.device, "sparse.wgsl", f"sparse_{kind}")
        enc = self.device.device.create_command_encoder()
        for n, g in sparse.items():
            t = self._index[n]
            group = self.param_groups[self._group_of[t]]
            step = min(int(self._steps[t]) + 1, 2 ** 53)
            self._steps[t] = step
            self._materialized[t] = self._materialized[t] | frozenset(states)
            prep = g if isinstance(g, DeviceRowSparse) else self._prepare(n, *g)
            if not prep.rows:
                continue
            f = self.spec.sparse_scalars(group, step, self._scale[t])
            words = np.concatenate([[int(bool(group.get("maximize", False)))], np.zeros(2, np.uint32),
                                    np.array(f + [0.0] * (4 - len(f)), np.float32).view(np.uint32)]).astype(np.uint32)
            b, _ = self._where[t]
            for c, mbuf in prep.pieces:
                self.device.queue.write_buffer(mbuf, 4 * 5, words)  # (header words 5..11)
                bufs = {"param": b.param.buffers[c], "sp_meta": mbuf, "vals": prep.values}
                for s, name in zip(states, ("st_a", "st_b")):
                    bufs[name] = b.states[s].buffers[c]
                k.dispatch(enc, k.bind(bufs), -(-prep.rows * prep.L // 256))
        self._submit(enc)


class DeviceRowSparse(RowSparse):
    """A sparse grad already on the device (:meth:`upload_sparse`): its rows, row length and buffers."""

    __slots__ = ("opt", "name", "rows", "L", "pieces")

    def __init__(self, opt, name, rows, L, values, pieces):
        super().__init__(None, values)
        self.opt, self.name, self.rows, self.L, self.pieces = opt, name, rows, L, pieces

    def __repr__(self):
        return f"DeviceRowSparse({self.name!r}, {self.rows} rows of {self.L})"
