"""Sophia-H on the GPU: ``shaders/sophia.wgsl``'s two update functions on the engine's elementwise driver."""
from __future__ import annotations

import numpy as np

from ..core.groups import check_grads
from ..core.lowp import round_rne
from ..core.sync import locked
from ..engine import Optimizer, Pass, by_step
from ..reference import sophia as ref
from ..runtime.arena import DeviceTensor
from ..runtime.kernels import ComputePass


class SophiaH(Optimizer):
    """Sophia with a Hutchinson estimate of the Hessian diagonal (Liu et al. 2023).

        every k steps (the authors use 10), update_hessian({name: u * (H u)}):  h = b2 * h + (1 - b2) * estimate
        each step:  g = -g if maximize;  m = b1 * m + (1 - b1) * g;  p *= 1 - lr * weight_decay
                    p -= lr * sign(m) * min(|m| / max(rho * h, eps), 1)

    Args:
        params: dict name -> array (float32, float16 or bfloat16), torch tensors (``model.parameters()``), or
            a list of param-group dicts.
        lr (1e-4), betas ((0.965, 0.99): momentum b1 and Hessian EMA b2), rho (0.04: the clipping scale gamma),
        eps (1e-15: floor of the preconditioner), weight_decay (0.1, decoupled), maximize (False).
    State: step, exp_avg, hessian. ``update_hessian`` takes your Hutchinson estimates (u Rademacher or Gaussian,
    H u from your autodiff) as NumPy arrays or DeviceTensors, as ``step`` takes grads.
    """
    spec = ref.SophiaH
    WIDE = {**Optimizer.WIDE, "float16": True}  # (off, without pairs, lost in float16: PERF_NOTES 54)
    shader = "sophia.wgsl"
    fields = ("decay", "b1", "omb1", "b2", "omb2", "rho", "eps", "neg_lr")
    flags = ("decay",)
    passes = (Pass("step", fn="update", reads=("exp_avg", "hessian"), writes=("exp_avg",)),)
    other_passes = (Pass("hessian", fn="update_hessian", reads=("hessian",), writes=("hessian",), param="",
                         grad="estimate", signed=False),)
    grad_like = ("estimate",)

    @by_step
    def fill(self, g, t, fresh, sel):
        lr, (b1, b2), wd = g["lr"], g["betas"], g["weight_decay"]
        cols = dict(decay=1 - lr * wd, b1=b1, omb1=1 - b1, b2=b2, omb2=1 - b2, rho=g["rho"], eps=g["eps"], neg_lr=-lr)
        return cols, dict(decay=wd != 0)

    @locked
    def update_hessian(self, estimates: dict) -> None:
        """Fold Hutchinson estimates ``{name: u * (H u)}`` (NumPy arrays or DeviceTensors, as grads) into the
        Hessian EMA ``h = b2*h + (1-b2)*estimate``. Step counts do not change."""
        name = type(self).__name__
        self._settle()  # the records below need settled step counts
        self._validate_groups()
        check_grads(name, estimates, self._shapes, DeviceTensor, self.device, call="update_hessian",
                    noun="estimate", dtypes=self._grad_dtypes())
        self._ensure("estimate")
        self._ensure("hessian")
        active = np.zeros(len(self._names), bool)
        per = {}  # one upload per bucket
        for n, e in estimates.items():
            t = self._index[n]
            active[t] = True
            b, i = self._where[t]
            e = e.numpy() if isinstance(e, DeviceTensor) else e
            per.setdefault(id(b), (b, []))[1].append((i, round_rne(e, b.sig.grad)))
        for b, pairs in per.values():
            b.states["estimate"].write_many(pairs)
        mat = [m | {"hessian"} if a else m for m, a in zip(self._materialized, active)]
        self._pending = {}
        self.device.queue.write_buffer(self._hyper, 0, self._records(active, self._steps,
                                                                     [frozenset()] * len(active), mat))
        enc = self.device.device.create_command_encoder()
        cp = ComputePass(enc)
        for b in self.buckets:
            for c, blk in enumerate(b.layout.blocks):
                k = self.other_passes[0].kernel
                self._kernel(b, k).dispatch(cp, self._bind(k, b, c), len(blk))
        cp.end()
        self.device.submit(enc)
        self._materialized = mat
