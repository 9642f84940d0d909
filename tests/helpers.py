import numpy as np

from cases import ATOL, RTOL


def make_params(sizes, seed=0, prefix="t"):
    rng = np.random.default_rng(seed)
    return {f"{prefix}{i}": rng.standard_normal(s).astype(np.float32) for i, s in enumerate(sizes)}


def make_grads(params, rng, drop=()):
    return {n: rng.standard_normal(p.shape).astype(np.float32) for n, p in params.items() if n not in drop}


def _close(actual, desired, msg):
    atol = ATOL * max(1.0, float(np.abs(desired).max(initial=0.0)))
    np.testing.assert_allclose(actual, desired, rtol=RTOL, atol=atol, err_msg=msg)


def assert_same(gpu, twin, what=""):
    """Every parameter and every state buffer (and step count) of a GPU optimizer against its twin."""
    for n, p in twin.params.items():
        _close(gpu.params[n].numpy(), p, f"{what} param {n}")
    gs, ts = gpu.state_dict()["state"], twin.state_dict()["state"]
    assert gs.keys() == ts.keys(), f"{what}: tensors with state differ: {sorted(gs)} vs {sorted(ts)}"
    for n in ts:
        assert gs[n].keys() == ts[n].keys(), f"{what}: state names of {n}: {sorted(gs[n])} vs {sorted(ts[n])}"
        assert gs[n]["step"] == ts[n]["step"], f"{what}: step of {n}"
        for k, v in ts[n].items():
            if k != "step":
                _close(gs[n][k], v, f"{what} {k} of {n}")
