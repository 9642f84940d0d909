"""Row-sparse steps on the GPU (:class:`rlx_gpu.RowSparse` grads): one dispatch per tensor piece over the touched
(row, column) pairs, ``shaders/sparse.wgsl``, with torch's semantics for SparseAdam, Adagrad and SGD without
momentum; untouched rows cost nothing. SGD with momentum decays its whole buffer in torch, so a sparse grad goes
through the dense step there (densified on the host). What the twin does is :mod:`rlx_gpu.reference.sparse`."""
from __future__ import annotations

import numpy as np

from ..core.sparse import RowSparse, check_use, parts, refuse_dense, route, storage_error
from ..core.sync import locked
from ..runtime.kernels import shipped_kernel
from ..runtime.params import Params, declare

# A meta buffer per tensor piece, read by name in shaders/sparse.wgsl: the piece (written with the grad's upload:
# row length, rows, the piece's offset in its chunk, its first element in the tensor, its length), the step's
# scalars (written each step: the twin's sparse_scalars by name, and negate for maximize), then the touched rows
# and (SGD) each row's first entry and entry count.
PIECE = ("L", "rows", "off", "toff", "ln")
STEP = ("negate", "rate", "eps", "omb1", "omb2")
SPARSE_META = Params("SparseMeta", *PIECE, "negate", "rate:f32", "eps:f32", "omb1:f32", "omb2:f32", tail="idx")
declare("sparse.wgsl", SPARSE_META)
H = SPARSE_META.words  # the words before the rows
_SCALARS = dict.fromkeys(STEP[1:])  # (the f32 fields after negate, in order)
assert SPARSE_META.fields[len(PIECE):] == (("negate", "u32"),) + tuple((n, "f32") for n in _SCALARS)


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
            if isinstance(g, DeviceRowSparse):
                self.spec.check_sparse(n, group)
                if g.opt is not self or g.name != n:
                    raise ValueError(f"{name}.step: the DeviceRowSparse given for {n!r} was uploaded for "
                                     f"{g.name!r} of another optimizer" if g.opt is not self else
                                     f"{name}.step: the DeviceRowSparse given for {n!r} was uploaded for {g.name!r}")
                if self.spec.sparse_dense(group):
                    raise ValueError(f"{name}.step: {n!r}: this group's sparse grads go through the dense step (SGD "
                                     "with momentum); an uploaded grad cannot: pass the RowSparse to step")
                out[n] = g
                continue
            route(name, self.spec, n, g, group, self._shapes[n], dense, out)
        return dense, out

    @locked
    def upload_sparse(self, grads: dict) -> dict:
        """``{name: RowSparse}`` checked, coalesced (or grouped, for SGD) and uploaded now: ``{name:
        DeviceRowSparse}`` that ``step`` takes with no host work or transfer (one dispatch per tensor), as many
        times as wanted. What a training loop whose sparse grads are made on the device looks like."""
        dense, checked = self._split_sparse_grads(grads, False)
        if dense:
            raise ValueError(f"{type(self).__name__}.upload_sparse: {next(iter(dense))!r}: this group's sparse "
                             "grads go through the dense step (SGD with momentum); pass the RowSparse to step")
        return {n: self._prepare(n, idx, vals) for n, (idx, vals) in checked.items()}

    def _prepare(self, n: str, idx, vals, reuse=None) -> "DeviceRowSparse":
        """Rows, values and per-piece meta on the device, as parts that each fit a storage binding and keep every
        thread's loop short (:func:`rlx_gpu.core.sparse.parts`: usually one part), each with a meta buffer for
        every piece of the tensor its rows touch; into ``reuse``'s buffers when they are large enough (a host
        RowSparse each step reuses its tensor's). Their transfers go through the batched upload path."""
        L = vals.shape[1]
        host = self._host_parts(n, idx, vals)
        if reuse is None or not reuse.fits(host):
            dev = self.device
            made = [(k, dev.buffer(4 * max(1, v.size), f"{n}.sparse values"),
                     [(c, dev.buffer(4 * m.size, f"{n}.sparse meta")) for c, m in metas]) for k, v, metas in host]
        else:
            made = [(k, vb, mb) for (k, _, _), (_, vb, mb) in zip(host, reuse.parts)]
        items = []
        for (_, v, metas), (_, vbuf, mbufs) in zip(host, made):
            items += [(vbuf, 0, v.view(np.uint8))] if v.size else []
            items += [(mb, 0, m.view(np.uint8)) for (_, m), (_, mb) in zip(metas, mbufs)]
        self.device.transfer.upload(items)
        return DeviceRowSparse(self, n, L, made)

    def _host_parts(self, n: str, idx, vals) -> list:
        """[(rows, values flat, [(chunk, meta words)])]: the parts of :func:`rlx_gpu.core.sparse.parts` for a
        storage binding of values (and of meta), each with the meta of every piece of the tensor its rows touch."""
        b, i = self._where[self._index[n]]
        L, sgd, mb = vals.shape[1], self.spec.sparse_kind == "sgd", self.device.max_storage_binding
        out = []
        for rows, starts, counts, v in parts(idx, vals, sgd, max(1, min(mb // (4 * max(L, 1)), (mb // 4 - H) // 3))):
            extra = [starts.astype(np.uint32), counts.astype(np.uint32)] if sgd else []
            lo, hi = int(rows[0]) * L, (int(rows[-1]) + 1) * L
            metas = []
            for (c, off, ln, toff) in b.layout.pieces[i]:
                if toff < hi and lo < toff + ln:  # (a piece these rows touch)
                    idx_words = np.concatenate([rows.astype(np.uint32)] + extra)
                    metas.append((c, SPARSE_META.pack(L=L, rows=rows.size, off=off, toff=toff, ln=ln,
                                                      **dict.fromkeys(STEP, 0), idx=idx_words)))
            out.append((rows.size, np.ascontiguousarray(v).reshape(-1), metas))
        return out

    def _sparse_step(self, sparse: dict) -> None:
        """Apply checked sparse grads (``{name: (rows, values)}`` or DeviceRowSparse): one command buffer, one
        dispatch per part and tensor piece. The step's scalars (lr, step, maximize) go in each meta buffer's STEP fields."""
        for s in self.spec.sparse_states:  # (made even when no tensor has rows this step: the state exists)
            self._ensure(s)
        enc = self.device.device.create_command_encoder()
        reuse = self.__dict__.setdefault("_sparse_reuse", {})  # a host RowSparse's buffers, per tensor
        steps = {}
        for n, g in sparse.items():
            t = self._index[n]
            steps[t] = min(int(self._steps[t]) + 1, 2 ** 53)
            try:
                if not isinstance(g, DeviceRowSparse):
                    g = reuse[n] = self._prepare(n, *g, reuse=reuse.get(n))
                self._encode_sparse(enc, g, step=steps[t])
            except Exception:
                reuse.pop(n, None)  # (nothing of this tensor is kept from a step that failed)
                raise
        for t, step in steps.items():  # (the host's count once everything is recorded)
            self._steps[t] = step
            self._materialized[t] = self._materialized[t] | frozenset(self.spec.sparse_states)
        self._submit(enc)

    def _encode_sparse(self, enc, g: "DeviceRowSparse", step=None) -> None:
        """Record one tensor's sparse dispatches (with ``step``: its scalars for that step count first)."""
        if not g.rows:
            return
        kind, states = self.spec.sparse_kind, self.spec.sparse_states
        for s in states:
            self._ensure(s)
        t = self._index[g.name]
        if step is not None:
            group = self.param_groups[self._group_of[t]]
            words = step_words(group, self.spec.sparse_scalars(group, step, self._scale[t]))
            for _, _, mbufs in g.parts:
                for _, mbuf in mbufs:
                    self.device.queue.write_buffer(mbuf, 4 * len(PIECE), words)
        v4 = "4" if kind == "adam" and g.L % 4 == 0 else ""  # (four columns a thread where rows allow it)
        k = shipped_kernel(self.device, "sparse.wgsl", f"sparse_{kind}{v4}")
        b, _ = self._where[t]
        key = tuple(id(b.states[s]) for s in states)
        if g.binds is None or g.binds[0] != key:  # (made once; again only if a state arena was remade)
            binds = []
            for rows, vbuf, mbufs in g.parts:
                for c, mbuf in mbufs:
                    bufs = {"param" + v4: b.param.buffers[c], "sp_meta": mbuf, "vals" + v4: vbuf}
                    for s, name in zip(states, ("st_a", "st_b")):
                        bufs[name + v4] = b.states[s].buffers[c]
                    binds.append((rows, k.bind(bufs)))
            g.binds = (key, binds)
        for rows, bind in g.binds[1]:
            k.dispatch(enc, bind, -(-rows * (g.L // 4 if v4 else g.L) // 256))


def step_words(group: dict, scalars: dict) -> np.ndarray:
    """The STEP fields' words of SPARSE_META (those after PIECE): negate (maximize) and the twin's scalars by name
    (a name the optimizer's kind does not use is 0). Written for every sparse step, so packed directly in the
    declaration's order rather than through ``Params.pack`` (tests/test_sparse.py checks that both agree)."""
    if not scalars.keys() <= _SCALARS.keys():
        raise KeyError(f"SparseMeta: unknown scalars {sorted(scalars.keys() - _SCALARS.keys())}")
    out = np.empty(len(STEP), np.uint32)
    out[0] = bool(group.get("maximize", False))
    out[1:] = np.array([scalars.get(n, 0.0) for n in _SCALARS], np.float32).view(np.uint32)
    return out


class DeviceRowSparse(RowSparse):
    """A sparse grad already on the device (:meth:`upload_sparse`): its row length and its parts, each (rows, values
    buffer, [(chunk, meta buffer)]) (usually one)."""

    __slots__ = ("opt", "name", "L", "parts", "binds")

    def __init__(self, opt, name, L, parts):
        super().__init__(None, [vb for _, vb, _ in parts])
        self.opt, self.name, self.L, self.parts, self.binds = opt, name, L, parts, None

    @property
    def rows(self) -> int:
        """Rows over all parts (a row repeated past one part's run counts once per part)."""
        return sum(k for k, _, _ in self.parts)

    def fits(self, host: list) -> bool:
        """Whether these buffers can take ``host``'s parts ([(rows, values, [(chunk, meta)])]) as they are."""
        return len(host) == len(self.parts) and all(
            vb.size >= 4 * v.size and [c for c, _ in metas] == [c for c, _ in mbufs] and
            all(m.size * 4 <= mb.size for (_, m), (_, mb) in zip(metas, mbufs))
            for (_, v, metas), (_, vb, mbufs) in zip(host, self.parts))

    def __repr__(self):
        return f"DeviceRowSparse({self.name!r}, {self.rows} rows of {self.L} in {len(self.parts)} part(s))"
