"""Block-quantized states in the NumPy twins (``state_bits=8`` or ``4``): the twin keeps each quantized state as
codes and absmax (:mod:`rlx_gpu.core.quant`), dequantizes them before ``_update`` and quantizes the result, as the
kernels do inside the update."""
from __future__ import annotations

import numpy as np

from ..core import quant

F32 = np.float32


class QuantizedTwin:
    """The twins' side of ``state_bits``: which tensors are quantized, fresh quantized state, the update wrapped in
    dequantize/quantize, and state-dict conversion."""

    def _qbits(self, name: str) -> int:
        """0, 8 or 4: the bits of tensor ``name``'s quantized states."""
        bits = self.precision.get("state_bits")
        if not bits or self.params[name].size < self.precision["min_quantized_size"]:
            return 0
        return bits

    def _holds(self, st: dict, s: str) -> bool:
        return s in st or s + "_codes" in st

    def _new_qstate(self, name: str, s: str, st: dict) -> None:
        bits, signed = self._qbits(name), self.quantizable[s]
        shape = self.params[name].shape
        st.update(quant.entries(s, np.zeros(shape, np.uint8), np.zeros(quant.num_blocks(self.params[name].size, bits),
                                                                          F32), bits, signed))

    def _quantized_work(self, st: dict, bits: int, shape: tuple):
        """(float32 working states: the quantized ones dequantized, and the store that quantizes them back into
        codes and absmax) for ``_apply``; ``shape``: the param's."""
        qs = [s for s in self.quantizable if s + "_codes" in st]
        work = {k: v for k, v in st.items() if not k.endswith(quant.QKEYS)}
        for s in qs:
            codes = quant.element_codes(st[s + "_codes"], shape, bits)
            work[s] = quant.dequantize(codes, st[s + "_absmax"], bits, self.quantizable[s])

        def store(work):
            for s in qs:
                codes, st[s + "_absmax"] = quant.quantize(work.pop(s), bits, self.quantizable[s])
                st[s + "_codes"] = quant.stored_codes(codes, bits)
            st.update(work)
        return work, store

    def _dequantized(self, state: dict) -> dict:
        """``state`` with every quantized state as a float32 array of its name."""
        out = {}
        for n, st in state.items():
            st = dict(st)
            for s, signed in self.quantizable.items():
                if s + "_codes" in st:
                    bits = {256: 8, 16: 4}[st[s + "_qmap"].size]
                    codes = quant.element_codes(st.pop(s + "_codes"), self.params[n].shape, bits)
                    st.pop(s + "_qmap")
                    st[s] = quant.dequantize(codes, st.pop(s + "_absmax"), bits, signed)
            out[n] = st
        return out

    def _qbits_of(self, name: str) -> int:
        return self._qbits(name) if name in self.params else 0
