"""SparseAdam on the GPU: ``shaders/sparse.wgsl``'s ``sparse_adam`` over the rows a RowSparse grad touches."""
from __future__ import annotations

from ..engine import Optimizer
from ..reference import sparse_adam as ref


class SparseAdam(Optimizer):
    """Lazy Adam for row-sparse grads (embedding tables): torch.optim.SparseAdam's semantics.

        rows touched by the grad only (duplicates summed), with the tensor's own step count t:
        m += (g - m)*(1-b1);  v += (g*g - v)*(1-b2);  p -= lr*sqrt(1-b2^t)/(1-b1^t) * m / (sqrt(v) + eps)

    ``step({name: rlx_gpu.RowSparse(indices, values)})``: one dispatch per tensor over the touched rows; dense grads
    are refused (as torch). Float32 params and states; no clip, inf/NaN skip or loss scale (sparse grads take none).

    Args:
        params: dict name -> float32 array, torch tensors, or a list of param-group dicts.
        lr (1e-3): learning rate (> 0).  betas ((0.9, 0.999)).  eps (1e-8, > 0).  maximize (False).
    State (torch's names): step, exp_avg, exp_avg_sq.
    """
    spec = ref.SparseAdam
    shader = ""  # (no dense passes: its kernel is shaders/sparse.wgsl's sparse_adam, run by rlx_gpu.engine.sparse)
    passes = ()
