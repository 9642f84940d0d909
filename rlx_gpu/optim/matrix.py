"""What the optimizers that record their own matrix work (Muon, StiefelSGD) share: float32 params and state, the
tensors grouped by shape (each shape's matrices batched in work buffers of one binding), and one small record per
tensor piece (``REC_BYTES`` apart) for their elementwise kernels."""
from __future__ import annotations

from ..engine import Optimizer

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

    def _check_matrices(self) -> None:
        """The subclass's shape checks (2-D tensors at least), before anything is grouped by shape."""
        self.spec.check_shapes(type(self).__name__, self._shapes)

    def _pieces_count(self) -> int:
        return sum(len(b.layout.pieces[i]) for b, i in self._where)
