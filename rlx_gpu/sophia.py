"""Sophia-H on the GPU (``shaders/sophia.wgsl``; the update rule is in :mod:`rlx_gpu.reference.sophia`)."""
from __future__ import annotations

import numpy as np

from ._groups import check_grads
from .arena import Arena, DeviceTensor
from ._sync import locked
from .optimizer import Optimizer
from .reference import sophia as ref

DECAY = 16


class SophiaH(Optimizer):
    """Sophia with a Hutchinson estimate of the Hessian diagonal (Liu et al. 2023).

    Every k steps (the authors use 10) call ``update_hessian({name: u * (H u)})`` with the caller's
    Hutchinson estimate (u Rademacher or Gaussian, H u from your autodiff); ``step(grads)`` as usual.

    Args:
        params: dict name -> float32 array, or a list of param-group dicts.
        lr: learning rate. betas: momentum rate b1 and Hessian EMA rate b2. rho: the clipping scale gamma.
        eps: floor of the preconditioner. weight_decay: decoupled. maximize: ascend. device: adapter selector.
    """
    spec = ref.SophiaH
    shader = "sophia.wgsl"
    entries = ("step", "update_hessian")
    passes = ("step",)  # update_hessian runs from update_hessian()

    def __init__(self, params, lr=1e-4, betas=(0.965, 0.99), rho=0.04, eps=1e-15, weight_decay=0.1, maximize=False,
                 *, device=None, lr_scale=None, clip_grad_norm=None,
                 skip_nonfinite=False):
        self._estimate = None
        super().__init__(params, device=device, lr_scale=lr_scale, clip_grad_norm=clip_grad_norm, skip_nonfinite=skip_nonfinite, lr=lr, betas=betas, rho=rho, eps=eps, weight_decay=weight_decay,
                         maximize=maximize)

    def _buffers(self, chunk):
        out = super()._buffers(chunk)
        if self._estimate is None:
            out["estimate"] = out["grad"]  # step() never reads it; update_hessian binds the real arena
        else:
            out["estimate"] = self._estimate.buffers[chunk]
        return out

    def _fill(self, g, t, fresh, rec, sel):
        lr, (b1, b2), wd = g["lr"], g["betas"], g["weight_decay"]
        rec[:, 1] = 1 - lr * wd
        rec[:, 2] = b1
        rec[:, 3] = 1 - b1
        rec[:, 4] = b2
        rec[:, 5] = 1 - b2
        rec[:, 6] = g["rho"]
        rec[:, 7] = g["eps"]
        rec[:, 8] = -lr
        return DECAY if wd != 0 else 0

    @locked
    def update_hessian(self, estimates: dict) -> None:
        """Fold Hutchinson estimates ``{name: u * (H u)}`` (NumPy arrays or DeviceTensors) into the Hessian
        EMA ``h = b2*h + (1-b2)*estimate``. Step counts do not change."""
        name = type(self).__name__
        self._settle()  # the records below need settled step counts
        for g in self.param_groups:
            self.spec.validate(g)
        check_grads(name, estimates, self._shapes, DeviceTensor, self.device, call="update_hessian", noun="estimate")
        if self._estimate is None:
            self._estimate = Arena(self.device, self.layout, f"{name}.estimate")
            self._binds.clear()
        self._ensure("hessian")
        host = [(self._index[n], e.numpy() if isinstance(e, DeviceTensor) else e) for n, e in estimates.items()]
        self._estimate.write_many(host)
        active = np.zeros(len(self._names), bool)
        active[[i for i, _ in host]] = True
        self._pending = {}
        self._write_records(active, self._steps, [set() for _ in self._names])
        enc = self.device.device.create_command_encoder()
        self._dispatch(enc, "update_hessian")
        self.device.submit(enc)
        for i, _ in host:
            self._materialized[i] = self._materialized[i] | {"hessian"}
