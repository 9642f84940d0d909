"""What the optimizers that record their own matrix work (Muon, StiefelSGD, SOAP, Kron) share: float32 params and
state, the tensors grouped by shape (each shape's matrices batched in work buffers of one binding), one small record
per tensor piece (``REC_BYTES`` apart) for their elementwise kernels, and square factors per tensor kept per shape
(SOAP's and Kron's), in their state dicts."""
from __future__ import annotations

import numpy as np

from .. import linalg
from ..engine import Optimizer
from ..linalg.half import Scales
from ..runtime.kernels import shipped_kernel

F32 = np.float32

REC_BYTES = 256  # one record per tensor piece, at a storage-offset-aligned stride


class MatrixOptimizer(Optimizer):
    """``_groups``: shape -> tensor indices; ``_rec[t]``: tensor t's first piece record; ``_mp``: the records'
    buffer (``REC_BYTES`` each)."""

    shader = ""  # (no generated module: the subclass records its kernels and rlx_gpu.linalg's in _encode)
    passes = ()

    def __init__(self, params, *args, **kwargs):
        super().__init__(params, *args, **kwargs)
        name = type(self).__name__
        self._check_matrices()
        for n, d in zip(self._names, self._dtypes):
            if d.name != "float32" or self.precision["state_dtype"] != "float32":
                raise ValueError(f"{name}: {n!r} is {d.name} (state {self.precision['state_dtype']}); {name} "
                                 "keeps float32 params and state")
        self._groups: dict = {}
        for t, n in enumerate(self._names):
            self._groups.setdefault(self._shapes[n], []).append(t)
        dev = self.device
        for (rows, cols), ts in self._groups.items():  # (a shape's matrices are worked on in one buffer, bound whole)
            size = 4 * len(ts) * rows * cols
            if size > dev.max_storage_binding:
                raise ValueError(f"{name}: the {len(ts)} tensors of shape {(rows, cols)} need {size} bytes of "
                                 f"scratch in one binding; the adapter binds at most {dev.max_storage_binding}")
        self._rec, r = [], 0  # each tensor's first record (one per piece), fixed: bind groups are kept
        for b, i in self._where:
            self._rec.append(r)
            r += len(b.layout.pieces[i])
        self._mp = dev.buffer(REC_BYTES * r, f"{name}.pieces")
        self._keep: list = []  # (this step's parameter buffers, until the next step)
        self._cache: dict = {}  # (rlx_gpu.linalg's work and parameter buffers, made once per setting)
        self._check_f16()

    #: The subclass's shader file (``_k`` compiles its entry points).
    wgsl = ""

    def fill(self, g, t, fresh, sel):
        """No per-tensor record fields: the kernels read the pieces' records (``_piece_records``) instead."""
        return {}, {}

    def _k(self, entry):
        return shipped_kernel(self.device, self.wgsl, entry, **self._kernel_constants())

    def _kernel_constants(self) -> dict:
        return {}

    def _grad_mul_word(self) -> int:
        """The word of the hyper buffer holding this step's grad factor (clip, loss scale)."""
        return len(self._names) * self.record.size + self.record.global_word("grad_mul")

    def _piece_records(self, words, t, params, at: int, **values) -> list:
        """Tensor ``t``'s piece records into ``words`` (REC_BYTES apart from its first), each ``rec`` (a
        :class:`~rlx_gpu.runtime.params.Params` whose first fields are ``count``, ``chunk_off`` and ``work_off``: the
        piece's length, its offset in its chunk, and ``at`` + its offset in the tensor) packed with ``values`` by
        name (a callable value is called with the piece's offset in the tensor); returns (record, bucket, chunk,
        count) per piece, for the dispatches."""
        b, i = self._where[t]
        rows = []
        for r, (c, off, ln, toff) in enumerate(b.layout.pieces[i], self._rec[t]):
            named = {k: (v(toff) if callable(v) else v) for k, v in values.items()}
            packed = params.pack(count=ln, chunk_off=off, work_off=at + toff, **named)
            w = r * REC_BYTES // 4
            words[w:w + len(packed)] = packed
            rows.append((r, b, c, ln))
        return rows

    def _record_range(self, r: int) -> tuple:
        """Piece record ``r`` as a binding range of the records' buffer."""
        return (self._mp, r * REC_BYTES, REC_BYTES)

    # -- matmul_dtype="float16" (SOAP, Kron, StiefelSGD): the products' inputs in float16 -------------------------
    #: The float16 GEMM that runs (:func:`rlx_gpu.linalg.gemm_path`: "subgroup-matrix" or "tiled"; "emulated" where
    #: set by hand), resolved when a group first asks for float16.
    _mm_path: str | None = None

    @property
    def matmul_path(self) -> str:
        """The GEMM this optimizer's products run on: "tiled" (float32's ``gemm.wgsl``, or float16's ``gemm16.wgsl``),
        "subgroup-matrix" (float16 on the tensor cores) or "emulated" (that kernel written out, where set by hand).
        SOAP's, Kron's and StiefelSGD's ``matmul_dtype`` products; Muon's ``ns_dtype`` GEMMs are not reported here."""
        return self._mm_path or "tiled"

    def _begin_checks(self, grads, check: bool):
        self._check_f16()  # (a group may have switched to float16 since: refused before anything is recorded)
        return super()._begin_checks(grads, check)

    def _check_f16(self) -> None:
        if any(g.get("matmul_dtype") == "float16" for g in self.param_groups):
            linalg.f16_device(self.device, f"{type(self).__name__}(matmul_dtype='float16')")
            self._mm_path = self._mm_path or linalg.gemm_path(np.float16, self.device)

    def _halves(self, shape, sizes: dict, scale_slots: int) -> dict:
        """Shape ``shape``'s float16 buffers (name -> elements a matrix; made on first use, kept) and its
        :class:`~rlx_gpu.linalg.half.Scales` (``w16["scales"]``)."""
        w = self._work[shape]
        if "h16" not in w:
            B, name = len(self._groups[shape]), type(self).__name__
            w["h16"] = {k: self.device.buffer(2 * B * v + 4, f"{name}.{k}{shape}") for k, v in sizes.items()}
            w["h16"]["scales"] = Scales.make(self.device, B, scale_slots, f"{name}.scales{shape}")
        return w["h16"]

    def _check_matrices(self) -> None:
        """The subclass's shape checks (2-D tensors at least), before anything is grouped by shape."""
        self.spec.check_shapes(type(self).__name__, self._shapes, self.param_groups)

    def _pieces_count(self) -> int:
        return sum(len(b.layout.pieces[i]) for b, i in self._where)

    # -- for the optimizers with square factors per tensor (SOAP, Kron): kept per shape, in ``_work[shape][name]``
    #: Factor states (name -> 0: rows x rows, 1: columns x columns), matrix after matrix in their shape's buffer.
    factor_states: dict = {}

    def _factor_buffers(self, extra_mn: tuple, extra_big: tuple = ()) -> None:
        """``_work[shape]``: the factor buffers, work buffers of B m n floats (``extra_mn``) and of B max(m, n)^2
        (``extra_big``), each checked against the binding limit; ``_slot[t]``: t's place in its shape's buffers."""
        name, dev = type(self).__name__, self.device
        self._work, self._slot = {}, {}
        for (m, n), ts in self._groups.items():
            B, big = len(ts), max(m, n) ** 2
            if 4 * B * big > dev.max_storage_binding:
                raise ValueError(f"{name}: the {B} tensors of shape {(m, n)} need {4 * B * big} bytes of factors "
                                 f"in one binding; the adapter binds at most {dev.max_storage_binding}")
            w = {k: dev.buffer(4 * B * m * n, f"{name}.{k}{(m, n)}") for k in extra_mn}
            w.update({k: dev.buffer(4 * B * (m, n)[side] ** 2, f"{name}.{k}{(m, n)}")
                      for k, side in self.factor_states.items()})
            w.update({k: dev.buffer(4 * B * big, f"{name}.{k}{(m, n)}") for k in extra_big})
            self._work[m, n] = w
            self._slot.update({t: slot for slot, t in enumerate(ts)})

    def _runs(self, key) -> list:
        """Per shape, runs of consecutive tensors with a grad this step and the same ``key(t)`` (batched together):
        (shape, tensors, key, [] for the pieces' rows)."""
        runs = []
        for shape, ts in self._groups.items():
            run, key0 = [], None
            for t in ts + [None]:
                k = None if t is None or not self._active[t] else key(t)
                if run and k != key0:
                    runs.append((shape, run, key0, []))
                    run = []
                if k is not None:
                    run.append(t)
                key0 = k
        return runs

    def _factors(self, wanted: dict) -> dict:
        """``{t: names}`` -> ``{t: {name: matrix}}``: tensors' factors (or other square matrices of their shape's
        buffers, named ending in their side: ``M_0``), downloaded in one batched transfer."""
        out, items = {}, []
        for t, names in wanted.items():
            shape, slot = self._shapes[self._names[t]], self._slot[t]
            out[t] = {}
            for k in names:
                s = shape[self.factor_states.get(k, int(k[-1]))]
                m = out[t][k] = np.empty((s, s), F32)
                items.append((self._work[shape][k], 4 * slot * s * s, m.reshape(-1).view(np.uint8)))
        self.device.transfer.download(items)
        return out

    def _put_factors(self, t, factors: dict) -> None:
        shape, slot = self._shapes[self._names[t]], self._slot[t]
        for k, v in factors.items():
            v = np.ascontiguousarray(v, F32)
            self.device.queue.write_buffer(self._work[shape][k], slot * v.nbytes, v)

    def state_dict(self, dequantize: bool = False) -> dict:
        with self.lock:
            sd = super().state_dict(dequantize=dequantize)
            if self.factor_states:
                got = self._factors({t: tuple(self.factor_states) for t, n in enumerate(self._names)
                                     if n in sd["state"]})
                for t, f in got.items():
                    sd["state"][self._names[t]].update(f)
            return sd

    def load_state_dict(self, sd: dict, cast: bool = False, params: dict | None = None) -> None:
        with self.lock:
            super().load_state_dict(sd, cast, params)  # (validates everything first)
            # (a tensor without state gets zeros; its first step makes its factors)
            for t, n in enumerate(self._names if self.factor_states else ()):
                st, shape = sd["state"].get(n, {}), self._shapes[n]
                self._put_factors(t, {k: (np.asarray(st[k], F32) if k in st else np.zeros((shape[s],) * 2, F32))
                                      for k, s in self.factor_states.items()})
