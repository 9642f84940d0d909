"""Every GPU optimizer reaches the minimum of a parabola and of the Rosenbrock function from a fixed start.

The tolerance and the settings of each are in the table; they are what these algorithms reach in the given
number of steps in float32 (measured with the NumPy twins, whose parity with the GPU is tested elsewhere).
"""
import numpy as np
import pytest

import rlx_gpu
from optimizer_db import DB

pytestmark = pytest.mark.gpu

C = np.array([1.0, -2.0, 0.5], np.float32)  # parabola 0.5*|x - C|^2 from x = 0


def rosenbrock(x):
    a, b = float(x[0]), float(x[1])
    return (1 - a) ** 2 + 100 * (b - a * a) ** 2


def rosen_grad(x):
    a, b = x
    return np.array([-2 * (1 - a) - 400 * a * (b - a * a), 200 * (b - a * a)], np.float32)


def rosen_hess_diag(x):
    a, b = x
    return np.array([2 - 400 * b + 1200 * a * a, 200.0], np.float32)


# name: (options for the parabola, |x - C|_inf tolerance after 400 steps,
#        options for Rosenbrock from (-1, 1), tolerance on f after 1500 steps (None: not expected)),
# from tests/optimizer_db.py's rows. Rosenbrock's valley is chaotic for these step sizes: on llvmpipe Adam ends at
# f = 1.5e-8 (bit-identical to the twin), on an H200 (FMA, approximate division) above 1e-4; the bounds hold on both.
TABLE = {r.name: (*r.parabola, *(r.rosenbrock or (None, None))) for r in DB}
# Optimizers whose own rule is for matrices (MARS) get the problem as a 1 x n matrix.
MATRIX_FORM = {r.name for r in DB if r.matrix_form}


def run(cls, x0, grad, hess, steps, **opts):
    shape = (1, x0.size) if cls.__name__ in MATRIX_FORM else x0.shape
    opt = cls({"x": x0.reshape(shape)}, **opts)
    x = x0.copy()
    for s in range(steps):
        if hess is not None and hasattr(opt, "update_hessian") and s % 10 == 0:
            opt.update_hessian({"x": hess(x).reshape(shape)})
        opt.step({"x": grad(x).reshape(shape)})
        x = opt.read_params()["x"].reshape(x0.shape)
    return x


@pytest.mark.parametrize("name", sorted(TABLE))
def test_parabola(name, device):
    opts, tol, _, _ = TABLE[name]
    x = run(getattr(rlx_gpu, name), np.zeros(3, np.float32), lambda x: x - C, lambda x: np.ones(3, np.float32),
            400, **opts, device=device)
    assert np.abs(x - C).max() < tol, x


@pytest.mark.parametrize("name", sorted(n for n in TABLE if TABLE[n][2] is not None))
def test_rosenbrock(name, device):
    _, _, opts, tol = TABLE[name]
    x = run(getattr(rlx_gpu, name), np.array([-1.0, 1.0], np.float32), rosen_grad, rosen_hess_diag, 1500,
            **opts, device=device)
    assert rosenbrock(x) < tol, (x, rosenbrock(x))

