"""NumPy twin of SparseAdam (torch.optim.SparseAdam): lazy Adam for row-sparse grads (:class:`rlx_gpu.RowSparse`).

    rows touched by the grad only (duplicates summed), with the tensor's own step count t:
    m += (g - m)*(1-b1);  v += (g*g - v)*(1-b2);  p -= lr*sqrt(1-b2^t)/(1-b1^t) * m / (sqrt(v) + eps)
"""
from __future__ import annotations

from .base import ReferenceOptimizer
from .sparse import adam_scalars


class SparseAdam(ReferenceOptimizer):
    """Lazy Adam for sparse grads (embeddings), as torch.optim.SparseAdam: no weight decay, no dense grads."""
    complex_refusal = ValueError  # (torch refuses complex params at construction, with a ValueError)
    defaults = dict(lr=1e-3, betas=(0.9, 0.999), eps=1e-8, maximize=False)
    all_state_names = ("exp_avg", "exp_avg_sq")
    sparse_kind, sparse_states = "adam", ("exp_avg", "exp_avg_sq")
    dense_refusal = "SparseAdam does not support dense gradients, please consider Adam instead (torch)"

    @classmethod
    def check(cls, group):
        if not group["lr"] > 0:
            raise ValueError(f"Invalid learning rate: {group['lr']}")
        if not group["eps"] > 0:
            raise ValueError(f"Invalid epsilon value: {group['eps']}")

    @classmethod
    def sparse_scalars(cls, group, step, scale):
        return adam_scalars(group, step, scale)

    def _update(self, p, g, st, group, fresh):
        raise AssertionError("SparseAdam has no dense update")  # (step refuses dense grads first)
