"""A kernel's parameters declared once, by name: the WGSL ``struct`` the kernel reads (``p.M``, ``p.alpha``) and the
packer that writes its buffer come from the same list, so no word index is written anywhere.

    GEMM = Params("GemmParams", "M", "N", "K", "alpha:f32")
    GEMM.wgsl()                  # struct GemmParams { M: u32, N: u32, K: u32, alpha: f32, }
    GEMM.pack(M=4, N=4, K=8, alpha=0.5)   # uint32 words in declaration order (f32 fields as their bits)

The kernel binds it as ``var<storage, read> p: GemmParams;`` (storage, like every binding the runtime makes).
"""
from __future__ import annotations

import numpy as np

__all__ = ["Params"]

_KINDS = ("u32", "f32")


class Params:
    """Named 32-bit parameters of a kernel: ``"name"`` (u32) or ``"name:f32"``, in this order."""

    def __init__(self, struct: str, *fields: str):
        typed = [(f.split(":")[0], f.split(":")[1] if ":" in f else "u32") for f in fields]
        names = [n for n, _ in typed]
        if len(set(names)) != len(names):
            raise ValueError(f"Params {struct}: a field name repeats in {names}")
        bad = [f for f, (_, k) in zip(fields, typed) if k not in _KINDS]
        if bad:
            raise ValueError(f"Params {struct}: fields {bad} have a kind other than {_KINDS}")
        self.struct, self.fields = struct, tuple(typed)
        self.names = tuple(names)

    def wgsl(self) -> str:
        """The WGSL struct declaration."""
        members = " ".join(f"{n}: {k}," for n, k in self.fields)
        return f"struct {self.struct} {{ {members} }}"

    def pack(self, **values) -> np.ndarray:
        """The buffer's words from every field by name (u32 fields: ints in [0, 2^32); f32: rounded once)."""
        missing = [n for n in self.names if n not in values]
        extra = sorted(set(values) - set(self.names))
        if missing or extra:
            raise KeyError(f"Params {self.struct}: missing {missing}, unknown {extra}")
        out = np.zeros(len(self.fields), np.uint32)
        for i, (n, k) in enumerate(self.fields):
            v = values[n]
            if k == "f32":
                out[i] = np.array(v, np.float32).view(np.uint32)
            else:
                if not 0 <= int(v) < 2 ** 32:
                    raise ValueError(f"Params {self.struct}: {n} = {v} does not fit a u32")
                out[i] = int(v)
        return out
