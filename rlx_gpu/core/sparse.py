"""Row-sparse gradients (an embedding's grad touches a few rows of its table): :class:`RowSparse`, its checks, and
torch's two ways of applying one: coalesced (duplicate rows summed in the order given, as ``Tensor.coalesce``:
SparseAdam, Adagrad) or entry by entry (``param.add_(sparse, alpha)`` without coalescing: SGD)."""
from __future__ import annotations

import numpy as np

__all__ = ["RowSparse", "check_sparse", "split_sparse", "coalesce", "grouped", "parts", "densify", "refuse_dense",
           "check_use", "route", "RUN"]

RUN = 4096  # the most entries of one row that one GPU thread adds in one dispatch (SGD's entry-by-entry sums)


class RowSparse:
    """A gradient that is zero except in some rows of the tensor's first dimension.

    ``indices``: int64 (or any integer) array of ``n`` row numbers; ``values``: float32 array of shape ``(n,
    *row_shape)``. Rows may repeat: duplicates are summed (torch's ``coalesce``). ``sparse_dims`` (default 1): a
    row is an index into the tensor's first ``sparse_dims`` dimensions, flattened in C order (``row_shape`` is then
    the shape after them). ``RowSparse.from_torch(t)`` takes a torch sparse COO tensor with any number of sparse
    dimensions (``nn.Embedding(sparse=True)``'s grad: one; ``dense.to_sparse()``: all of them)."""

    __slots__ = ("indices", "values", "sparse_dims")

    def __init__(self, indices, values, sparse_dims: int = 1):
        self.indices, self.values, self.sparse_dims = indices, values, sparse_dims

    @classmethod
    def from_torch(cls, t) -> "RowSparse":
        if not getattr(t, "is_sparse", False) or t.sparse_dim() < 1:
            raise TypeError("RowSparse.from_torch: expected a torch sparse COO tensor")
        if t.device.type == "meta":
            raise ValueError("RowSparse.from_torch: the tensor is on torch's meta device (it has no values)")
        k, idx = t.sparse_dim(), t._indices().cpu().numpy()
        rows = np.ravel_multi_index(tuple(idx), tuple(t.shape[:k])) if idx.size else np.zeros(0, np.int64)
        return cls(np.asarray(rows, np.int64), t._values().detach().cpu().numpy(), sparse_dims=k)

    def __repr__(self):
        return f"RowSparse({np.shape(self.indices)[0] if np.ndim(self.indices) else '?'} rows)"


def split_sparse(grads, owner: str = "step"):
    """``(dense grads, {name: RowSparse})`` of a ``step`` argument (a dict, or None: no sparse ones); anything
    else is a TypeError naming ``owner``."""
    if grads is not None and not isinstance(grads, dict):
        raise TypeError(f"{owner}.step: grads must be a dict name -> array (or None: the grad slots), got "
                        f"{type(grads).__name__}")
    if grads is None or not any(isinstance(g, RowSparse) for g in grads.values()):
        return grads, {}
    return ({k: g for k, g in grads.items() if not isinstance(g, RowSparse)},
            {k: g for k, g in grads.items() if isinstance(g, RowSparse)})


def check_sparse(owner: str, name: str, g: RowSparse, shape: tuple) -> tuple[np.ndarray, np.ndarray]:
    """(row indices as int64, values as float32 (n, row length)) of a RowSparse grad for a tensor of ``shape``;
    TypeError / ValueError naming the tensor otherwise."""
    where = f"{owner}.step: sparse grad for {name!r}"
    idx, vals, k = g.indices, g.values, getattr(g, "sparse_dims", 1)
    if not isinstance(idx, np.ndarray) or idx.dtype.kind not in "iu":
        raise TypeError(f"{where}: indices must be an integer NumPy array, got "
                        f"{getattr(idx, 'dtype', type(idx).__name__)}")
    if not isinstance(vals, np.ndarray) or vals.dtype != np.float32:
        raise TypeError(f"{where}: values must be a float32 NumPy array, got {getattr(vals, 'dtype', type(vals).__name__)}")
    if not isinstance(k, int) or not 1 <= k <= max(1, len(shape)):
        raise ValueError(f"{where}: sparse_dims must be an int in [1, {len(shape)}], got {k!r}")
    if len(shape) < 1:
        raise ValueError(f"{where}: a 0-d tensor has no rows")
    if idx.ndim != 1:
        raise ValueError(f"{where}: indices must be 1-d, got shape {idx.shape}")
    rows, row_shape = int(np.prod(shape[:k], dtype=np.int64)), tuple(shape[k:])
    if vals.shape != (idx.size, *row_shape):
        raise ValueError(f"{where}: values have shape {vals.shape}, expected {(idx.size, *row_shape)} "
                         f"({idx.size} rows of shape {row_shape})")
    if idx.size and (int(idx.min()) < 0 or int(idx.max()) >= rows):
        bad = int(idx.min()) if int(idx.min()) < 0 else int(idx.max())
        raise ValueError(f"{where}: row index {bad} is out of range for {rows} rows")
    return idx.astype(np.int64), vals.reshape(idx.size, int(np.prod(row_shape, dtype=np.int64)))


def coalesce(idx: np.ndarray, vals: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Unique rows (ascending) and their values, duplicates summed in the order given (torch's coalesce)."""
    rows, starts, counts, v = grouped(idx, vals)
    out = v[starts].copy()
    for k in range(1, int(counts.max(initial=1))):  # (left to right within each row, one pass per repeat)
        sel = counts > k
        out[sel] += v[starts[sel] + k]
    return rows, out


def grouped(idx: np.ndarray, vals: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Unique rows (ascending), where each row's entries start and how many there are, and the values ordered by
    row with each row's entries in the order given (for entry-by-entry application)."""
    order = np.argsort(idx, kind="stable")
    rows, starts, counts = np.unique(idx[order], return_index=True, return_counts=True)
    return rows, starts, counts, vals[order]


def parts(idx: np.ndarray, vals: np.ndarray, entrywise: bool, cap: int, run: int = RUN) -> list:
    """A checked sparse grad as the parts its dispatches take, in order: ``[(rows, starts, counts, values)]``, each
    part's rows unique and ascending with at most ``cap`` entries (values rows) in all and at most ``run`` of any
    row (a row with more continues in the next parts, its entries in the order given: applying the parts one after
    another is applying the entries one by one). Not ``entrywise``: duplicates summed first (one entry a row).
    Usually one part, the whole grad."""
    if entrywise:
        rows, starts, counts, v = grouped(idx, vals)
    else:
        rows, v = coalesce(idx, vals)
        starts, counts = np.arange(rows.size), np.ones(rows.size, np.int64)
    run = max(1, min(run, cap))
    out = []
    for r in range(-(-int(counts.max(initial=0)) // run)):
        sel = counts > r * run
        rr, st, ct = rows[sel], starts[sel] + r * run, np.minimum(counts[sel] - r * run, run)
        first = np.concatenate([[0], np.cumsum(ct)[:-1]])
        vr = v if r == 0 and sel.all() and (ct == counts).all() else v[np.repeat(st - first, ct) + np.arange(ct.sum())]
        pid = (np.cumsum(ct) - 1) // (cap - run + 1)  # (a part's entries: at most cap - run + 1 + run - 1)
        cut = np.flatnonzero(np.diff(pid, prepend=-1, append=-1))  # (each part's first row, then the end)
        for a, b in zip(cut[:-1], cut[1:]):
            out.append((rr[a:b], first[a:b] - first[a], ct[a:b], vr[first[a]:first[b - 1] + ct[b - 1]]))
    return out


def densify(idx: np.ndarray, vals: np.ndarray, shape: tuple) -> np.ndarray:
    """The dense float32 grad of a checked sparse one (duplicates summed as torch's coalesce)."""
    rows, v = coalesce(idx, vals)
    size = int(np.prod(shape, dtype=np.int64))
    out = np.zeros((size // vals.shape[1] if vals.shape[1] else 0, vals.shape[1]), np.float32)
    out[rows] = v
    return out.reshape(shape)


def refuse_dense(owner: str, refusal, grads) -> None:
    """SparseAdam takes only sparse grads (as torch's): ``refusal`` is what torch says, None where dense is fine
    (a RuntimeError, as torch's)."""
    if refusal and (grads is None or grads):
        which = "the grad slots" if grads is None else repr(next(iter(grads)))
        raise RuntimeError(f"{owner}.step: {which}: {refusal}")


def check_use(owner: str, spec, sparse: dict, groups, checked: bool, clip) -> None:
    """Sparse grads at all: the optimizer takes them (``spec.sparse_kind`` or a dense route for the group), and the
    step neither clips nor checks for inf/NaN (torch's clip and GradScaler take no sparse grads either)."""
    first = next(iter(sparse))
    if spec.sparse_kind is None and not any(spec.sparse_dense(g) for g in groups):
        raise RuntimeError(f"{owner}.step: {owner} does not support sparse gradients (torch: {spec.sparse_refusal});"
                           f" got one for {first!r}")
    if checked or clip is not None:
        raise ValueError(f"{owner}.step: sparse gradients ({first!r}) cannot be clipped or checked for inf/NaN "
                         "(clip_grad_norm, skip_nonfinite, a loss scale); step them without")


def storage_error(owner: str, name: str) -> ValueError:
    return ValueError(f"{owner}.step: sparse grad for {name!r}: sparse updates need float32 params and float32, "
                      "unquantized states")


def route(owner: str, spec, name: str, g: RowSparse, group: dict, shape: tuple, dense: dict, sparse: dict) -> None:
    """One checked sparse grad into ``dense`` (densified: SGD with momentum, whose torch buffer decays every row)
    or ``sparse`` (``(rows, values)``), after what torch refuses for ``group``."""
    spec.check_sparse(name, group)
    idx, vals = check_sparse(owner, name, g, shape)
    if spec.sparse_dense(group):
        dense[name] = densify(idx, vals, shape)
    else:
        sparse[name] = (idx, vals)

