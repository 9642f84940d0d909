"""What the matrix optimizers' twins share (Muon, SOAP, Kron): 2-D float32 params only, checked at construction with
a ValueError naming the tensor."""
from __future__ import annotations

from .base import F32, ReferenceOptimizer


def matrices_only(owner: str, algorithm: str, shapes: dict) -> None:
    """ValueError naming the first tensor that is not 2-D (the matrix optimizers take matrices only)."""
    for n, s in shapes.items():
        if len(s) != 2:
            raise ValueError(f"{owner}: {algorithm} only supports 2D parameters; {n!r} has shape {tuple(s)} "
                             "(route the others to another optimizer, e.g. with rlx_gpu.Partition)")


def check_matmul_dtype(owner: str, group: dict) -> None:
    """ValueError unless the group's ``matmul_dtype`` is "float32" or "float16" (the twins compute in float32
    whatever it says: they are the spec the GPU classes' float16 path is measured against)."""
    if group["matmul_dtype"] not in ("float32", "float16"):
        raise ValueError(f"{owner}: matmul_dtype must be 'float32' or 'float16', got {group['matmul_dtype']!r}")


class MatrixTwin(ReferenceOptimizer):
    """A twin of 2-D float32 params: ``check_shapes`` (the class's; the GPU class asks the same) and the dtype."""

    @classmethod
    def check_shapes(cls, owner: str, shapes: dict, groups=()) -> None:
        """ValueError naming the first tensor of ``shapes`` this optimizer cannot take (``groups``: its param groups,
        for limits that are hyperparameters)."""
        matrices_only(owner, cls.__name__, shapes)

    def __init__(self, params, *args, **kwargs):
        super().__init__(params, *args, **kwargs)
        name = type(self).__name__
        self._check_matrices()
        for n, p in self.params.items():
            if p.dtype != F32:
                raise ValueError(f"{name}: {n!r} is {p.dtype}; {name} keeps float32 params")

    def _check_matrices(self) -> None:
        self.check_shapes(type(self).__name__, self._shapes, self.param_groups)
