"""A kernel's parameters declared once, by name: the WGSL ``struct`` the kernel reads (``p.M``, ``p.alpha``) and the
packer that writes its buffer come from the same list, so no word index is written anywhere.

    GEMM = Params("GemmParams", "M", "N", "K", "alpha:f32")
    GEMM.wgsl()                  # struct GemmParams { M: u32, N: u32, K: u32, alpha: f32, }
    GEMM.pack(M=4, N=4, K=8, alpha=0.5)   # uint32 words in declaration order (f32 fields as their bits)

The kernel binds it as ``var<storage, read> p: GemmParams;`` (storage, like every binding the runtime makes).
``tail="rec"`` ends the struct with a runtime-sized ``rec: array<u32>`` (``pack(..., rec=[...])``).

A shipped shader's structs are declared with :func:`declare` by the module that dispatches it; the runtime
(``shipped_kernel``) and ``rlx-gpu check-shaders`` put them after the shader's text (:func:`structs`; WGSL
declares in any order, and directives such as ``enable f16;`` must come first).
"""
from __future__ import annotations

import numpy as np

__all__ = ["Params", "declare", "structs"]

_KINDS = ("u32", "f32")
_SHADERS: dict = {}  # shader file -> [Params] (declare)


class Params:
    """Named 32-bit parameters of a kernel: ``"name"`` (u32) or ``"name:f32"``, in this order; ``tail``: the name
    of a trailing ``array<u32>`` of any length."""

    def __init__(self, struct: str, *fields: str, tail: str | None = None):
        typed = [(f.split(":")[0], f.split(":")[1] if ":" in f else "u32") for f in fields]
        names = [n for n, _ in typed] + ([tail] if tail else [])
        if len(set(names)) != len(names):
            raise ValueError(f"Params {struct}: a field name repeats in {names}")
        bad = [f for f, (_, k) in zip(fields, typed) if k not in _KINDS]
        if bad:
            raise ValueError(f"Params {struct}: fields {bad} have a kind other than {_KINDS}")
        self.struct, self.fields, self.tail = struct, tuple(typed), tail
        self.names = tuple(n for n, _ in typed)

    @property
    def nbytes(self) -> int:
        """The fixed fields' bytes (the tail's words follow them)."""
        return 4 * len(self.fields)

    def wgsl(self) -> str:
        """The WGSL struct declaration."""
        members = " ".join(f"{n}: {k}," for n, k in self.fields)
        tail = f" {self.tail}: array<u32>," if self.tail else ""
        return f"struct {self.struct} {{ {members}{tail} }}"

    def pack(self, **values) -> np.ndarray:
        """The buffer's words from every field by name (u32 fields: ints in [0, 2^32); f32: rounded once)."""
        names = self.names + ((self.tail,) if self.tail else ())
        missing = [n for n in names if n not in values]
        extra = sorted(set(values) - set(names))
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
        if self.tail:
            rest = np.asarray(values[self.tail], np.int64).reshape(-1)
            if rest.size and not (0 <= rest.min() and rest.max() < 2 ** 32):
                raise ValueError(f"Params {self.struct}: {self.tail} holds a value that does not fit a u32")
            out = np.concatenate([out, rest.astype(np.uint32)])
        return out


    def offset(self, name: str) -> int:
        """The byte offset of field ``name`` (for a write of one field into a buffer)."""
        if name not in self.names:
            raise KeyError(f"Params {self.struct}: no field {name!r} (it has {list(self.names)})")
        return 4 * self.names.index(name)

    def unpack(self, data) -> dict:
        """The fixed fields by name from a buffer's bytes or words (u32 fields as ints, f32 as float32)."""
        w = np.frombuffer(np.ascontiguousarray(data).tobytes(), np.uint32)[:len(self.fields)]
        if w.size < len(self.fields):
            raise ValueError(f"Params {self.struct}: {4 * w.size} bytes hold fewer than its {len(self.fields)} fields")
        return {n: (w[i:i + 1].view(np.float32)[0] if k == "f32" else int(w[i])) for i, (n, k) in enumerate(self.fields)}


def declare(shader: str, *params: Params) -> None:
    """Register the structs shipped shader ``shader`` reads (a struct name declared twice must be the same one)."""
    have = _SHADERS.setdefault(shader, {})
    for p in params:
        old = have.get(p.struct)
        if old is not None and old.wgsl() != p.wgsl():
            raise ValueError(f"Params {p.struct}: declared twice for {shader} with different fields")
        have[p.struct] = p


def structs(shader: str) -> str:
    """The WGSL structs declared for ``shader`` (empty if none), one a line."""
    return "\n".join(p.wgsl() for p in _SHADERS.get(shader, {}).values())
