"""Buckets: an optimizer's tensors grouped by what their arenas hold (torch's grouping by dtype, apex's g_16/g_bf/g_32).

Each bucket has one :class:`~rlx_gpu.runtime.Layout` over its tensors and typed arenas on it: params (the tensors'
dtype), grads (theirs, or float32), float32 master copies (16-bit params with ``master_weights``), one per state
buffer (``state_dtype``), made when first needed. With ``state_bits``, tensors of at least ``min_quantized_size``
elements go to buckets whose quantizable states are :class:`~rlx_gpu.runtime.qarena.QArena` (codes and
absmax) and whose layout starts every tensor at a multiple of the quantization block. Its kernels are compiled
for its :class:`Signature`, and one dispatch per chunk steps all its tensors. Block numbers run on from bucket to bucket, so per-block scratch and
per-tensor block ranges are global.
"""
from __future__ import annotations

from ..core.lowp import DTYPES, F32
from ..core.quant import BLOCK
from ..runtime.arena import Arena
from ..runtime.layout import Layout
from ..runtime.qarena import QArena
from .codegen import Signature

__all__ = ["Bucket", "make_buckets"]


class Bucket:
    """Tensors ``ids`` (global indices) of element counts ``sizes`` whose arenas have signature ``sig``."""

    def __init__(self, device, sig: Signature, ids, sizes, block: int, block_base: int, label: str,
                 quantizable=None):
        self.device, self.sig, self.ids = device, sig, list(ids)
        self.local = {t: i for i, t in enumerate(self.ids)}
        sizes_bytes = {sig.param.itemsize, sig.grad.itemsize, sig.state.itemsize} | ({4} if sig.master else set())
        self.layout = Layout(sizes, ids=self.ids, alignment=device.alignment, max_binding=device.max_storage_binding,
                             itemsizes=tuple(sorted(sizes_bytes)), block=block, block_base=block_base,
                             elem_align=BLOCK[sig.qbits] if sig.qbits else 4)
        self.quantizable = dict(quantizable or {}) if sig.qbits else {}  # state -> signed
        self.label = label
        self.param = Arena(device, self.layout, f"{label}.params", sig.param)
        self.grad = Arena(device, self.layout, f"{label}.grads", sig.grad)
        self.master = Arena(device, self.layout, f"{label}.master", F32) if sig.master else None
        self.states: dict[str, Arena] = {}
        self.blocks = [device.buffer(b.nbytes, f"{label}.blocks[{c}]", data=b) for c, b in enumerate(self.layout.blocks)]

    def state(self, name: str, dtype=None):
        """The arena of state buffer ``name`` (made, zero-filled, on first use; a QArena if quantized)."""
        if name not in self.states:
            label = f"{self.label}.{name}"
            self.states[name] = QArena(self.device, self.layout, label, self.sig.qbits, self.quantizable[name]) \
                if name in self.quantizable else Arena(self.device, self.layout, label, dtype or self.sig.state)
        return self.states[name]

    @property
    def nbytes(self) -> dict:
        out = {"params": self.param.nbytes, "grads": self.grad.nbytes,
               "state": sum(a.nbytes for a in self.states.values()) + (self.master.nbytes if self.master else 0)}
        return out


def make_buckets(device, label: str, dtypes: list, sizes: list, options: dict, block: int,
                 quantizable=None, names=()) -> list[Bucket]:
    """Tensors bucketed by signature, in order of first appearance; ``dtypes`` are the params' DTypes, ``names``
    their names (the tensors ``qat=`` names get buckets of their own, whose update pass is the export's)."""
    grad_dt = DTYPES[options["grad_dtype"]] if options["grad_dtype"] else None
    state_dt = DTYPES[options["state_dtype"]]
    exported = options.get("qat") if isinstance(options.get("qat"), dict) else {}
    groups: dict = {}
    for t, d in enumerate(dtypes):
        q = options.get("state_bits") or 0
        q = q if q and sizes[t] >= options["min_quantized_size"] else 0
        sig = Signature(d, grad_dt or d, state_dt, bool(options["master_weights"] and d.low), device.native_f16, q,
                        t < len(names) and names[t] in exported)
        groups.setdefault(sig, []).append(t)
    out, base = [], 0
    for sig, ids in groups.items():
        tag = sig.param.name + (f".q{sig.qbits}" if sig.qbits else "") + (".qat" if sig.qat else "")
        b = Bucket(device, sig, ids, [sizes[t] for t in ids], block, base,
                   label if len(groups) == 1 else f"{label}.{tag}", quantizable)
        base = b.layout.block_end
        out.append(b)
    return out
