"""Records: the per-tensor scalars the kernels read, declared once by name, from which come both the Python packer
and the WGSL prelude (``struct Rec``, ``rec(t)``, flag and word-offset constants). No positional index appears
anywhere else.

The ``hyper`` buffer holds one record of ``REC`` 32-bit words per tensor, then one global record (the step's grad
multiplier and clipping; the same stride). A record's first words are the engine's own (:data:`ENGINE_FIELDS`),
then the optimizer's float fields, in declaration order. Its ``flags`` word carries the engine's bits
(:data:`ENGINE_FLAGS`), one bit per state buffer (``HAS_<STATE>``: the tensor has that state), then the
optimizer's own flags.
"""
from __future__ import annotations

import struct

import numpy as np

__all__ = ["Record", "ENGINE_FIELDS", "ENGINE_FLAGS"]

# (name, kind): "u32" words the engine writes, "f32" the optimizer's scalars; "dev" words kernels write on the device
ENGINE_FIELDS = (("flags", "u32"), ("first_block", "u32"), ("num_blocks", "u32"), ("rkey", "u32"),
                 ("tensor_scalar", "dev"))
ENGINE_FLAGS = ("active", "maximize", "master", "sr")
# The global record: the grad multiplier every kernel applies (1/loss scale, times the clip factor once a clip pass
# has run), the clip's settings and results, the inf/NaN check's result, and where 1/scale comes from.
GLOBAL_FIELDS = (("grad_mul", "f32"), ("max_norm", "f32"), ("norm_kind", "u32"), ("norm_p", "f32"),
                 ("count_all", "u32"), ("total_norm", "f32"), ("nonfinite", "u32"), ("inv_scale", "f32"),
                 ("device_scale", "u32"))


def _wgsl_name(name: str) -> str:
    return name.upper()


class Words:
    """Named words of a record: offsets, the WGSL struct and loader, and packing from named columns."""

    def __init__(self, fields, struct: str, loader: str | None):
        self.fields = tuple(fields)
        self.offset = {n: i for i, (n, _) in enumerate(self.fields)}
        self.kind = dict(self.fields)
        self.struct, self.loader = struct, loader

    def __len__(self):
        return len(self.fields)

    def wgsl(self, base: str) -> str:
        """``const <STRUCT>_<FIELD>: u32`` offsets, and (with a loader) the ``struct`` and ``fn <loader> -> <struct>``."""
        lines = [f"const {self.struct.upper()}_{_wgsl_name(n)}: u32 = {i}u;" for i, (n, _) in enumerate(self.fields)]
        if self.loader is None:
            return "\n".join(lines)
        members = ", ".join(f"{n}: {'u32' if k == 'u32' else 'f32'}" for n, k in self.fields)
        lines.append(f"struct {self.struct} {{ {members} }}")
        vals = ", ".join(f"hyper[b + {i}u]" if k == "u32" else f"bitcast<f32>(hyper[b + {i}u])"
                         for i, (_, k) in enumerate(self.fields))
        lines.append(f"fn {self.loader} -> {self.struct} {{ let b = {base}; return {self.struct}({vals}); }}")
        return "\n".join(lines)


class Record:
    """An optimizer's record: the engine's fields, then ``fields`` (float32 scalars, or ``"name:u32"`` for an
    integer word, in this order); flags are the engine's, one per state in ``states``, then ``flags``."""

    def __init__(self, *fields: str, flags: tuple = (), states: tuple = ()):
        typed = [(f.split(":")[0], "u32" if f.endswith(":u32") else "f32") for f in fields]
        names = [n for n, _ in ENGINE_FIELDS] + [n for n, _ in typed]
        if len(set(names)) != len(names):
            raise ValueError(f"record fields repeat a name: {names}")
        self.fields = tuple(n for n, _ in typed)
        self.states = tuple(states)
        self.flag_names = ENGINE_FLAGS + tuple(f"has_{s}" for s in self.states) + tuple(flags)
        if len(self.flag_names) > 32:
            raise ValueError("more than 32 record flags")
        self.bit = {n: 1 << i for i, n in enumerate(self.flag_names)}
        self.tensor = Words(ENGINE_FIELDS + tuple(typed), "Rec", "rec(t: u32)")
        self.size = max(len(self.tensor), len(GLOBAL_FIELDS))  # REC: the global record has the same stride
        self.glob = Words(GLOBAL_FIELDS, "Glob", None)  # (offsets only: kernels read and write single words)
        self._one_plans: dict = {}  # (pack_one's: column names -> their struct and offsets)

    def flags(self, n: int, named: dict) -> np.ndarray:
        """The flags word of ``n`` tensors from ``{flag name: bool or bool array}``."""
        out = np.zeros(n, np.uint32)
        for name, on in named.items():
            if isinstance(on, (bool, np.bool_)):
                if on:
                    out |= np.uint32(self.bit[name])
            else:
                out |= np.asarray(on, bool).astype(np.uint32) * np.uint32(self.bit[name])
        return out

    def pack(self, n: int, columns: dict, flags: np.ndarray, words: dict) -> np.ndarray:
        """``(n, REC)`` uint32 words: float ``columns`` (name -> scalar or array, float64 rounded once to
        float32), the ``flags`` word, and engine u32 ``words`` (name -> array)."""
        out = np.zeros((n, self.size), np.uint32)
        f32 = out.view(np.float32)
        for name, v in columns.items():
            if type(v) is not float and np.ndim(v) > 1:  # (fill's columns over a rows x tensors grid)
                v = np.asarray(v).reshape(-1)
            kind = self.tensor.kind.get(name)
            if kind is None:
                raise KeyError(f"record has no field {name!r}; fields: {self.fields}")
            if kind == "f32":  # (each float64 value rounded once to float32, by the assignment's cast)
                f32[:, self.tensor.offset[name]] = v if type(v) is float or (
                    type(v) is np.ndarray and v.dtype == np.float64) else np.asarray(v, np.float64)
            else:
                out[:, self.tensor.offset[name]] = np.asarray(v, np.float64) if np.ndim(v) else v
        out[:, self.tensor.offset["flags"]] = flags
        for name, v in words.items():
            out[:, self.tensor.offset[name]] = v
        return out

    def pack_one(self, columns: dict, named: dict) -> np.ndarray | None:
        """One tensor's ``pack`` (``(REC,)`` words) from float ``columns`` of one value each (floats, float64
        scalars or one-element float64 arrays) and flags ``named`` (name -> bool or one-element array), with few NumPy calls;
        None where a column is anything else or overflows float32 (then ``pack`` it)."""
        plan = self._one_plans.get(tuple(columns))
        if plan is None:
            if any(self.tensor.kind.get(n) != "f32" for n in columns) or len(self._one_plans) > 16:
                return None
            plan = self._one_plans[tuple(columns)] = (struct.Struct(f"<{len(columns)}f"),
                                                      np.array([self.tensor.offset[n] for n in columns], np.intp))
        vals = [v if type(v) is float or type(v) is np.float64 else v.item() if type(v) is np.ndarray and
                v.dtype == np.float64 and v.size == 1 else None for v in columns.values()]
        if None in vals:
            return None
        try:  # (struct's "f" rounds each float64 once to float32, as pack's cast; past float32's range it raises)
            words = np.frombuffer(plan[0].pack(*vals), np.uint32)
        except OverflowError:
            return None
        out = np.zeros(self.size, np.uint32)
        out[plan[1]] = words
        bits = 0
        for name, on in named.items():
            if on:
                bits |= self.bit[name]
        out[self.tensor.offset["flags"]] = bits
        return out

    def pack_global(self, **values) -> np.ndarray:
        """The global record's words from named values (float fields as float32, u32 fields as ints)."""
        g = np.zeros(self.size, np.uint32)
        for name, v in values.items():
            g[self.glob.offset[name]] = np.float32(v).view(np.uint32) if self.glob.kind[name] == "f32" else int(v)
        return g

    def global_word(self, name: str) -> int:
        """Index of a global-record word within the global record."""
        return self.glob.offset[name]

    def wgsl(self) -> str:
        """The prelude every kernel of this optimizer includes (after the ``hyper`` binding's declaration)."""
        lines = [f"const REC: u32 = {self.size}u;"]
        lines += [f"const {_wgsl_name(n)}: u32 = {b}u;" for n, b in self.bit.items()]
        lines.append(self.tensor.wgsl("t * REC"))
        lines.append(self.glob.wgsl("glob_base()"))
        return "\n".join(lines)

