"""benchmarks/matrix_phases.py: each knock-out really removes its phase's work (the step's results change, and the
patched names are restored after it), and the script runs at a tiny size with every row for both WIDE values."""
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import rlx_gpu
from helpers import load_script

pytestmark = pytest.mark.gpu
SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "matrix_phases.py"


def _script():
    return load_script(SCRIPT, "matrix_phases")


def _state(opt):
    st = opt.state_dict()["state"]["w"]
    return np.concatenate([opt.read_params()["w"].ravel(), st["Q_0"].ravel(), st["Q_1"].ravel()])


def _run(device, mod, kind, name):
    """The results of the step a knock-out applies to, without and with it."""
    cls, kw = (rlx_gpu.SOAP, dict(precondition_frequency=1)) if kind != "kron" else (
        rlx_gpu.Kron, dict(precond_update_prob=1.0))
    rng = np.random.default_rng(3)
    p0 = {"w": rng.standard_normal((40, 72)).astype(np.float32)}
    g = [{"w": rng.standard_normal((40, 72)).astype(np.float32)} for _ in range(2)]
    out = []
    for knocked in (False, True):
        opt = cls(p0, device=device, **kw)
        if kind != "soap_first":
            opt.step(g[0])
        with mod.knock(kind, name, opt) if knocked else mod.contextlib.nullcontext():
            opt.step(g[1])
        out.append(_state(opt))
    return out


@pytest.mark.parametrize("kind,name", [(k, n) for k, ns in _script().KNOCK.items() for n in ns])
def test_each_knockout_removes_work(device, kind, name):
    from rlx_gpu.linalg import eigen, half, householder
    from rlx_gpu.optim import kron, soap_basis
    mod = _script()
    names = [(eigen, "qr"), (eigen, "jacobi"), (householder, "panel"), (householder, "apply_block"),
             (soap_basis, "qr"), (soap_basis, "form_q"), (kron, "trsm_right"), (half.FloatProducts, "mm")]
    before = [getattr(o, n) for o, n in names]
    plain, knocked = _run(device, mod, kind, name)
    assert np.isfinite(plain).all()
    assert not np.array_equal(plain, knocked), (kind, name)
    assert [getattr(o, n) for o, n in names] == before


def test_script_runs_at_a_tiny_size(tmp_path):
    p = subprocess.run([sys.executable, str(SCRIPT), "--div", "32", "--matrices", "4", "--steps", "1", "--out",
                        str(tmp_path), "--total", "600"], capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, p.stderr[-2000:]
    rep = json.loads((tmp_path / "matrix_phases.json").read_text())
    assert rep["errors"] == [], rep["errors"]
    rows = {(r["kind"], r["row"]): r["ms"] for r in rep["rows"]}
    want = {("soap", r) for r in ("first_cold", "first", "compile", "first.grad_qr", "first.jacobi", "first.rest",
                                  "plain", "refresh", "refresh.order", "refresh.panels", "refresh.trailing",
                                  "refresh.form_q", "refresh.rest")} | {("kron", r) for r in (
                                      "step", "solves", "bounds", "gemms", "rest")}
    assert set(rows) == want
    assert all(set(v) == {0, 128} and all(np.isfinite(list(v.values()))) for v in
               (dict(zip(map(int, r["ms"]), r["ms"].values())) for r in rep["rows"]))
    assert "soap  float32  refresh.panels" in p.stdout


def test_first_step_variants_at_a_tiny_size(tmp_path):
    """--first-only with values carrying the first step's switches (eigen.GRAD_WIDE, STOP, SWEEPS), twice in turn:
    the first step's rows alone, a column per value, each row's two rounds kept; a bad value refused first."""
    mod = _script()
    assert mod.parse_variant("128:g0:s1e-7:n12") == dict(wide=128, grad_wide=0, stop=1e-7, sweeps=12, panel=None,
                                                         split=None)
    assert mod.parse_variant("0") == dict(wide=0, grad_wide=None, stop=0.0, sweeps=None, panel=None, split=None)
    assert mod.parse_variant("128:p1024")["panel"] == 1024
    assert mod.parse_variant("128:k0")["split"] == 0 and mod.parse_variant("128:p1024:k512")["split"] == 512
    with pytest.raises(ValueError, match="after the width"):
        mod.parse_variant("128:x3")
    values = ["128", "128:g0:s1e-7:n12"]
    p = subprocess.run([sys.executable, str(SCRIPT), "--div", "32", "--matrices", "4", "--only", "soap",
                        "--first-only", "--rounds", "2", "--wide", ",".join(values), "--out", str(tmp_path),
                        "--total", "600"], capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, p.stderr[-2000:]
    rep = json.loads((tmp_path / "matrix_phases.json").read_text())
    assert rep["errors"] == [], rep["errors"]
    assert {r["row"] for r in rep["rows"]} == {"first_cold", "first", "compile", "first.grad_qr", "first.jacobi",
                                               "first.rest"}
    for r in rep["rows"]:
        assert set(r["ms"]) == set(values) and all(len(v) == 2 for v in r["rounds"].values())
        assert all(r["ms"][w] == min(r["rounds"][w]) for w in values)
    assert "wide 128:g0:s1e-7:n12" in p.stdout
