"""The table every generic test runs through: one row per optimizer, with its option sets.

A new optimizer joins the suite by adding a row here (GPU class, twin class, option sets).
"""
import rlx_gpu
from rlx_gpu import reference as R

# (GPU class, twin class, option sets, hyperparameters valid for a second param group)
TABLE = [
    (rlx_gpu.Adam, R.Adam, [{}, {"weight_decay": 0.1}, {"amsgrad": True}, {"maximize": True},
                            {"amsgrad": True, "weight_decay": 0.05, "maximize": True, "betas": (0.8, 0.99)}],
     {"lr": 3e-3, "betas": (0.5, 0.9), "weight_decay": 0.2}),
    (rlx_gpu.AdamW, R.AdamW, [{}, {"weight_decay": 0.0}, {"amsgrad": True}, {"maximize": True, "eps": 1e-3}],
     {"lr": 3e-3, "weight_decay": 0.3, "amsgrad": True}),
    (rlx_gpu.SGD, R.SGD, [{}, {"momentum": 0.9}, {"momentum": 0.9, "dampening": 0.3},
                          {"momentum": 0.9, "nesterov": True}, {"momentum": 0.5, "weight_decay": 0.1},
                          {"maximize": True, "momentum": 0.9, "weight_decay": 0.01}],
     {"lr": 0.05, "momentum": 0.7, "nesterov": True}),
    (rlx_gpu.RMSprop, R.RMSprop, [{}, {"centered": True}, {"momentum": 0.9}, {"alpha": 0.3},
                                  {"centered": True, "momentum": 0.5, "weight_decay": 0.1},
                                  {"maximize": True, "weight_decay": 0.01}],
     {"lr": 1e-3, "centered": True, "momentum": 0.3}),
    (rlx_gpu.Adagrad, R.Adagrad, [{}, {"lr_decay": 0.1}, {"initial_accumulator_value": 0.5},
                                  {"weight_decay": 0.1, "maximize": True}],
     {"lr": 0.1, "lr_decay": 0.05, "initial_accumulator_value": 0.1}),
    (rlx_gpu.LAMB, R.LAMB, [{}, {"bias_correction": False}, {"weight_decay": 0.0},
                            {"maximize": True, "weight_decay": 0.1}],
     {"lr": 1e-2, "weight_decay": 0.0, "betas": (0.5, 0.9)}),
    (rlx_gpu.NAdamW, R.NAdamW, [{}, {"weight_decay": 0.0}, {"maximize": True, "momentum_decay": 0.1}],
     {"lr": 1e-3, "betas": (0.8, 0.99), "weight_decay": 0.1}),
    (rlx_gpu.RAdam, R.RAdam, [{}, {"weight_decay": 0.1}, {"weight_decay": 0.1, "decoupled_weight_decay": True},
                              {"maximize": True, "betas": (0.9, 0.9)}],
     {"lr": 3e-3, "betas": (0.5, 0.99), "weight_decay": 0.05}),
    (rlx_gpu.QHAdamW, R.QHAdamW, [{}, {"nus": (0.7, 1.0), "betas": (0.995, 0.999)}, {"nus": (0.5, 0.8)},
                                  {"weight_decay": 0.1, "eps": 0.0, "nus": (0.7, 0.9)}],
     {"lr": 3e-3, "nus": (0.3, 0.6), "weight_decay": 0.01}),
    (rlx_gpu.Lion, R.Lion, [{}, {"weight_decay": 0.1}, {"betas": (0.95, 0.98), "lr": 3e-4}],
     {"lr": 1e-3, "betas": (0.5, 0.9), "weight_decay": 0.2}),
    (rlx_gpu.Mars, R.Mars, [{}, {"weight_decay": 0.1, "gamma": 0.1}, {"lr": 1e-2, "betas_1d": (0.8, 0.9)}],
     {"lr": 1e-3, "gamma": 0.05, "weight_decay_1d": 0.0}),
    (rlx_gpu.Adafactor, R.Adafactor, [{}, {"weight_decay": 0.1, "lr": 0.05}, {"maximize": True, "d": 1.5},
                                      {"eps": (1e-20, 1e-2), "beta2_decay": -0.5}],
     {"lr": 1e-3, "d": 2.0, "weight_decay": 0.01}),
    (rlx_gpu.SophiaH, R.SophiaH, [{}, {"weight_decay": 0.0}, {"maximize": True, "rho": 0.5}],
     {"lr": 1e-3, "rho": 0.1, "betas": (0.9, 0.95)}),
]

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
