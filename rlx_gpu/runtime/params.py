"""A kernel's parameters declared once, by name: the WGSL ``struct`` the kernel reads (``p.M``, ``p.alpha``) and the
packer that writes its buffer come from the same list, so no word index is written anywhere.

    GEMM = Params("GemmParams", "M", "N", "K", "alpha:f32")
    GEMM.wgsl()                  # struct GemmParams { M: u32, N: u32, K: u32, alpha: f32, }
    GEMM.pack(M=4, N=4, K=8, alpha=0.5)   # uint32 words in declaration order (f32 fields as their bits)

The kernel binds it as ``var<storage, read> p: GemmParams;`` (storage, like every binding the runtime makes).
``tail="rec"`` ends the struct with a runtime-sized ``rec: array<u32>`` (``pack(..., rec=[...])``); a field
``"log:u32[64]"`` is a fixed array of 64 words (packed from a sequence, unpacked as an array). ``pack_rows`` packs a
table of such structs (``array<T>`` in WGSL) from columns (``column`` reads one back); ``pack_vec4s`` packs one
into whole vec4s, for a shader that keeps several tables in one ``array<vec4<u32>>`` and reads an entry with the
generated ``reader`` (``declare(..., read_from={"tables": [...]})``).

A shipped shader's structs (and the u32 constants it shares with the host) are declared with :func:`declare` by
the module that dispatches it; the runtime (``shipped_kernel``, the engine's generated modules) and ``rlx-gpu
check-shaders`` put them after the shader's text (:func:`structs`; WGSL declares in any order, and directives such
as ``enable f16;`` must come first).
"""
from __future__ import annotations

import re

import numpy as np

__all__ = ["Params", "declare", "structs"]

_KINDS = ("u32", "f32")
_SHADERS: dict = {}  # shader file -> {struct name: Params} (declare)
_CONSTS: dict = {}   # shader file -> {constant name: u32} (declare)
_READERS: dict = {}  # shader file -> {(array, struct): WGSL function} (declare's read_from)
_FIELD = re.compile(r"(\w+)(?::(\w+))?(?:\[(\d+)\])?$")


class Params:
    """Named 32-bit parameters of a kernel: ``"name"`` (u32) or ``"name:f32"``, in this order; ``tail``: the name
    of a trailing ``array<u32>`` of any length."""

    def __init__(self, struct: str, *fields: str, tail: str | None = None):
        parsed = [_FIELD.match(f) for f in fields]
        bad = [f for f, m in zip(fields, parsed) if m is None or (m.group(2) or "u32") not in _KINDS
               or m.group(3) == "0"]
        if bad:
            raise ValueError(f"Params {struct}: fields {bad} are not name, name:kind or name:kind[count] with a kind "
                             f"in {_KINDS} and a count > 0")
        typed = [(m.group(1), m.group(2) or "u32") for m in parsed]
        names = [n for n, _ in typed] + ([tail] if tail else [])
        if len(set(names)) != len(names):
            raise ValueError(f"Params {struct}: a field name repeats in {names}")
        self.struct, self.fields, self.tail = struct, tuple(typed), tail
        self.names = tuple(n for n, _ in typed)
        self.counts = tuple(int(m.group(3)) if m.group(3) else 0 for m in parsed)  # (0: a scalar)
        ends = np.cumsum([max(c, 1) for c in self.counts], dtype=np.int64)
        self._at = dict(zip(self.names, (int(e) - max(c, 1) for e, c in zip(ends, self.counts))))
        self.words = int(ends[-1]) if len(ends) else 0  # the fixed fields' words

    @property
    def nbytes(self) -> int:
        """The fixed fields' bytes (the tail's words follow them)."""
        return 4 * self.words

    def wgsl(self) -> str:
        """The WGSL struct declaration."""
        members = " ".join(f"{n}: array<{k}, {c}>," if c else f"{n}: {k},"
                           for (n, k), c in zip(self.fields, self.counts))
        tail = f" {self.tail}: array<u32>," if self.tail else ""
        return f"struct {self.struct} {{ {members}{tail} }}"

    def pack(self, **values) -> np.ndarray:
        """The buffer's words from every field by name (u32 fields: ints in [0, 2^32); f32: rounded once)."""
        names = self.names + ((self.tail,) if self.tail else ())
        missing = [n for n in names if n not in values]
        extra = sorted(set(values) - set(names))
        if missing or extra:
            raise KeyError(f"Params {self.struct}: missing {missing}, unknown {extra}")
        out = np.zeros(self.words, np.uint32)
        for (n, k), c in zip(self.fields, self.counts):
            v, i = values[n], self._at[n]
            if c:  # (a fixed array)
                v = np.asarray(v)
                if v.shape != (c,):
                    raise ValueError(f"Params {self.struct}: {n} must be {c} values, got shape {v.shape}")
                out[i:i + c] = self._words(n, k, v)
            elif k == "f32":
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


    def _words(self, n: str, k: str, v: np.ndarray) -> np.ndarray:
        """Values of field ``n`` (kind ``k``) as words: f32 rounded once, u32 checked to fit."""
        if k == "f32":
            return v.astype(np.float32).view(np.uint32)
        if v.size and not (np.all(v == np.floor(v)) and v.min() >= 0 and v.max() < 2 ** 32):
            raise ValueError(f"Params {self.struct}: {n} = {v if v.size > 1 else v[0]} does not fit a u32")
        return v.astype(np.uint32)

    def pack_rows(self, **columns) -> np.ndarray:
        """A table of these structs (``array<Struct>`` in WGSL), (rows, words): every scalar field by name, as one
        value for all rows or one per row."""
        if self.tail or any(self.counts):
            raise ValueError(f"Params {self.struct}: pack_rows packs scalar fields only")
        missing, extra = [n for n in self.names if n not in columns], sorted(set(columns) - set(self.names))
        if missing or extra:
            raise KeyError(f"Params {self.struct}: missing {missing}, unknown {extra}")
        rows = max((np.size(v) for v in columns.values() if np.ndim(v)), default=1)
        out = np.zeros((rows, self.words), np.uint32)
        for n, k in self.fields:
            v = np.asarray(columns[n])
            if v.shape not in ((), (rows,)):
                raise ValueError(f"Params {self.struct}: {n} must be one value or {rows}, got shape {v.shape}")
            out[:, self._at[n]] = self._words(n, k, np.broadcast_to(v, (rows,)))
        return out

    def column(self, rows: np.ndarray, name: str) -> np.ndarray:
        """Scalar field ``name`` of every struct of a table of :meth:`pack_rows` (a view of its column)."""
        if name not in self.names or self.counts[self.names.index(name)]:
            raise KeyError(f"Params {self.struct}: no scalar field {name!r} (it has {list(self.names)})")
        return rows[:, self._at[name]]

    def reader(self, array: str) -> str:
        """A WGSL function ``{array}_{struct}(i)`` returning this struct from the ``array<vec4<u32>>`` named ``array``,
        its words at vec4s i, i+1, ... (one 16-byte load each; scalar fields only, f32 ones by bitcast)."""
        if self.tail or any(self.counts):
            raise ValueError(f"Params {self.struct}: a reader reads scalar fields only")
        n = -(-self.words // 4)
        loads = " ".join(f"let v{j} = {array}[i{f' + {j}u' if j else ''}];" for j in range(n))
        lanes = [f"v{self._at[f] // 4}.{'xyzw'[self._at[f] % 4]}" for f in self.names]
        args = ", ".join(f"bitcast<f32>({v})" if k == "f32" else v for v, (_, k) in zip(lanes, self.fields))
        return f"fn {array}_{self.struct}(i: u32) -> {self.struct} {{ {loads} return {self.struct}({args}); }}"

    def pack_vec4s(self, **columns) -> np.ndarray:
        """:meth:`pack_rows` padded to whole vec4s, (rows * ceil(words/4), 4): the table its :meth:`reader` reads."""
        t = self.pack_rows(**columns)
        pad = -self.words % 4
        return np.pad(t, ((0, 0), (0, pad))).reshape(-1, 4)

    @property
    def vec4s(self) -> int:
        """The vec4s one struct takes in a table of :meth:`pack_vec4s`."""
        return -(-self.words // 4)

    def offset(self, name: str) -> int:
        """The byte offset of field ``name`` (the tail's: the fixed fields' bytes), for a write of one field into a
        buffer or a copy of a range."""
        if name == self.tail:
            return self.nbytes
        if name not in self.names:
            raise KeyError(f"Params {self.struct}: no field {name!r} (it has {list(self.names)})")
        return 4 * self._at[name]

    def unpack(self, data) -> dict:
        """The fixed fields by name from a buffer's bytes or words (u32 fields as ints, f32 as float32, arrays as
        arrays of those)."""
        w = np.frombuffer(np.ascontiguousarray(data).tobytes(), np.uint32)[:self.words]
        if w.size < self.words:
            raise ValueError(f"Params {self.struct}: {4 * w.size} bytes hold fewer than its {self.words} words")
        out = {}
        for (n, k), c in zip(self.fields, self.counts):
            v = w[self._at[n]:self._at[n] + max(c, 1)]
            v = v.view(np.float32) if k == "f32" else v.astype(np.int64)
            out[n] = v.copy() if c else (v[0] if k == "f32" else int(v[0]))
        return out


def declare(shader: str, *params: Params, read_from: dict | None = None, **consts: int) -> None:
    """Register the structs shipped shader ``shader`` reads (a struct name declared twice must be the same one), and
    u32 constants it shares with the host (``LOG=64``: ``const LOG: u32 = 64u;``; the same value if declared twice).
    ``read_from``: {array name: structs} read from that ``array<vec4<u32>>`` binding (:meth:`Params.reader`)."""
    for array, ps in (read_from or {}).items():
        params += tuple(ps)
        _READERS.setdefault(shader, {}).update({(array, p.struct): p.reader(array) for p in ps})
    have = _SHADERS.setdefault(shader, {})
    for p in params:
        old = have.get(p.struct)
        if old is not None and old.wgsl() != p.wgsl():
            raise ValueError(f"Params {p.struct}: declared twice for {shader} with different fields")
        have[p.struct] = p
    known = _CONSTS.setdefault(shader, {})
    for name, v in consts.items():
        if not (isinstance(v, (int, np.integer)) and 0 <= v < 2 ** 32) or known.get(name, v) != v:
            raise ValueError(f"{shader}: constant {name} = {v!r} is not a u32 or was declared with another value")
        known[name] = int(v)


def structs(shader: str) -> str:
    """The WGSL structs and constants declared for ``shader`` (empty if none), one a line."""
    consts = [f"const {n}: u32 = {v}u;" for n, v in _CONSTS.get(shader, {}).items()]
    readers = list(_READERS.get(shader, {}).values())
    return "\n".join([p.wgsl() for p in _SHADERS.get(shader, {}).values()] + consts + readers)
