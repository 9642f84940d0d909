"""Host <-> device transfers of an optimizer's parameters and grads: one batched transfer per bucket."""
from __future__ import annotations

import numpy as np

from ..core.groups import check_grads
from ..core.lowp import round_rne
from ..core.sync import locked
from ..runtime.arena import check_out


class HostIOMixin:
    """``read_params``, ``write_params``, ``write_grads`` of the GPU optimizers."""

    def _write_params(self, arrays: dict, init_master: bool = False) -> None:
        """Upload ``{tensor index: array of its dtype}``, one batched transfer per bucket; with ``init_master``
        also set the float32 master copies from them."""
        for b in self.buckets:
            mine = [(b.local[t], a) for t, a in arrays.items() if t in b.local]
            if mine:
                b.param.write_many(mine)
                if init_master and b.master is not None:
                    b.master.write_many([(i, np.asarray(a).astype(np.float32)) for i, a in mine])

    @locked
    def read_params(self, names=None, out: dict | None = None) -> dict:
        """Host copies of the parameters (all, or ``names``), in their dtypes, one batched transfer per bucket.

        ``out``: a dict of arrays (e.g. the previous result) to fill instead of new ones; in a training loop this
        saves the page faults of fresh memory."""
        if out is not None and names is None:
            names = list(out)
        names = [names] if isinstance(names, str) else list(self._names if names is None else names)
        for n in names:
            if n not in self._index:
                raise KeyError(f"{type(self).__name__}.read_params: unknown tensor {n!r}")
        res = {}
        for b in self.buckets:
            mine = [n for n in names if self._index[n] in b.local]
            if not mine:
                continue
            outs = None
            if out is not None:
                for n in mine:
                    check_out(n, out[n], self._shapes[n], b.sig.param)
                outs = [out[n].reshape(-1) for n in mine]
            flat = b.param.read_many([b.local[self._index[n]] for n in mine], outs)
            res.update({n: (out[n] if out is not None else f.reshape(self._shapes[n])) for n, f in zip(mine, flat)})
        return {n: res[n] for n in names}

    @locked
    def write_params(self, params: dict) -> None:
        """Upload several parameters (dict name -> array of the tensor's shape and dtype) in one transfer; checked
        before anything changes (``opt.params[name].write(array)`` writes one). Master copies follow, and so do
        the torch tensors an optimizer was built from."""
        self._upload_params(params)
        self._torch_epilogue(params)  # (built from torch tensors: they get the values too)

    def _upload_params(self, params: dict) -> None:
        check_grads(type(self).__name__, params, self._shapes, call="write_params", noun="param",
                    dtypes=lambda n: (self._dtypes[self._index[n]].np,))
        self.spec.check_param_values(f"{type(self).__name__}.write_params", params)
        self._write_params({self._index[n]: a for n, a in params.items()}, init_master=True)

    @locked
    def write_grads(self, grads: dict) -> None:
        """Upload several grads (dict name -> NumPy array of the slot's dtype or float32) into the device grad
        slots, one batched transfer per bucket; checked before anything changes (``step(grads)`` does this too)."""
        check_grads(type(self).__name__, grads, self._shapes, dtypes=self._grad_dtypes())
        self._write_host_grads(grads)

    def _write_host_grads(self, grads: dict) -> None:
        per: dict = {}
        for k, g in grads.items():
            b, i = self._where[self._index[k]]
            if g.dtype != b.sig.grad.np:  # float32 into a 16-bit slot: rounded to nearest even
                g = round_rne(g, b.sig.grad)
            per.setdefault(id(b), (b, []))[1].append((i, g))
        for b, pairs in per.values():
            b.grad.write_many(pairs)

    def _grad_dtypes(self) -> dict:
        """Per tensor, the NumPy dtypes a grad may come in: its slot's dtype first, then the param's or float32."""
        out = {}
        for n, (b, _) in zip(self._names, self._where):
            slot = b.sig.grad.np
            other = np.dtype(np.float32) if slot != np.float32 else b.sig.param.np
            out[n] = (slot, other) if other != slot else (slot,)
        return out

