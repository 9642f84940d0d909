"""The table every generic test runs through: one row per optimizer, with its option sets, read from
``tests/optimizer_db.py`` (a new optimizer joins the suite with its row there).
"""
from optimizer_db import DB

# (GPU class, twin class, option sets, hyperparameters valid for a second param group)
TABLE = [(r.gpu, r.twin, r.option_sets, r.group2) for r in DB]

CASES = [(gpu, twin, opts) for gpu, twin, sets, _ in TABLE for opts in sets]
ROWS = [(gpu, twin, group2) for gpu, twin, _, group2 in TABLE]


def case_id(val):
    if isinstance(val, type):
        return ("ref." if "reference" in val.__module__ else "gpu.") + val.__name__
    if isinstance(val, dict):
        return ",".join(f"{k}={v}" for k, v in val.items()) or "defaults"
    return str(val)


# GPU vs twin: the kernels run the twin's float32 operations in the twin's order, so the only sources of
# difference are the GPU's sqrt and division (WGSL allows 2.5 ULP for division; NVIDIA uses it), FMA
# contraction by the driver's compiler and, for LAMB, the order of the norm sums. Elements that are sums
# of larger terms (momentum buffers) lose their relative precision near zero, so the absolute part of the
# bound scales with the tensor's largest magnitude: |gpu - twin| <= RTOL*|twin| + ATOL*max(1, max|twin|).
# (On llvmpipe all but LAMB agree bit for bit; the bound is for real GPUs.)
RTOL, ATOL = 2e-5, 1e-6
