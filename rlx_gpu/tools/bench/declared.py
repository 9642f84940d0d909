"""Bench rows made from the declarations: an elementwise optimizer with one pass and no row in
:data:`rlx_gpu.tools.bench.shapes.OPTIMIZERS` is benched with its default options, its state accesses counted from
its pass's reads and writes, and no torch baseline (a row written there adds a baseline or a bytes model of its
own, as LAMB's and MARS's passes need)."""
from __future__ import annotations

__all__ = ["state_accesses", "declared_rows"]


def state_accesses(cls, opts: dict | None = None) -> int:
    """State elements read and written per parameter element by ``cls``'s passes, for a group with ``opts`` (the
    state buffers such a group has, and the grad-like arenas such as Sophia-H's estimate)."""
    group = {**cls.spec.defaults, **{k: v for k, v in (opts or {}).items() if k in cls.spec.defaults}}
    have = set(cls.spec.state_names(group)) | set(cls.grad_like)
    return sum(sum(s in have for s in p.reads) + sum(s in have for s in p.writes) for p in cls.passes)


def declared_rows(table: dict) -> dict:
    """``name -> row`` (shapes.OPTIMIZERS's form) for each single-pass elementwise declaration ``table`` lacks."""
    from ... import optim
    from ...optim.matrix import MatrixOptimizer
    have = {row[0] for row in table.values()}
    rows = {}
    for name in optim.__all__:
        cls = getattr(optim, name)
        if cls.shader and not issubclass(cls, MatrixOptimizer) and len(cls.passes) == 1 and name not in have:
            rows[name.lower()] = (name, {}, state_accesses(cls), None)
    return rows
