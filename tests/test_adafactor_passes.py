"""benchmarks/adafactor_passes.py: its prefix classes run the first k of Adafactor's passes (the whole list gives
Adafactor's own bits, fewer give other results), and the script runs at a tiny size with every pass in its JSON."""
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import rlx_gpu
from helpers import load_script

pytestmark = pytest.mark.gpu
ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "adafactor_passes.py"
# (the script run as a file imports rlx_gpu from sys.path: this checkout's, not an installed one's)
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}


def _script():
    return load_script(SCRIPT, "adafactor_passes")


def test_prefixes_run_the_first_passes(device):
    mod, n = _script(), len(rlx_gpu.Adafactor.passes)
    rng = np.random.default_rng(0)
    p0 = {"w": rng.standard_normal((24, 40)).astype(np.float32), "b": rng.standard_normal(40).astype(np.float32)}
    g = {k: rng.standard_normal(v.shape).astype(np.float32) for k, v in p0.items()}
    got = {}
    for k in (n - 1, n):
        cls = mod.prefix_class(k)
        assert mod.prefix_class(k, 16).FINISH == 16 and mod.prefix_class(k, 16).constants["FL"] == 16
        assert [p.entry for p in cls.passes] == [p.entry for p in rlx_gpu.Adafactor.passes[:k]]
        opt = cls(p0, device=device)
        opt.step(g)
        got[k] = opt.read_params()
    ref = rlx_gpu.Adafactor(p0, device=device)
    ref.step(g)
    want = ref.read_params()
    for name in p0:
        np.testing.assert_array_equal(got[n][name], want[name])  # (all passes: the same bits)
        np.testing.assert_array_equal(got[n - 1][name], p0[name])  # (no apply pass: the params untouched)


def test_tiny_run_has_every_pass(tmp_path):
    out = tmp_path / "a.json"
    r = subprocess.run([sys.executable, str(SCRIPT), "--set", "gpt2:1,64", "--precisions", "fp32", "--rounds", "1",
                        "--repeats", "1", "--finish", "1,16", "--json", str(out)], capture_output=True, text=True,
                       timeout=900, env=ENV)
    assert r.returncode == 0, r.stderr[-3000:]
    rep = json.loads(out.read_text())
    assert list(rep["rows"]) == ["fp32 finish1", "fp32 finish16"]  # (--finish: a row per Adafactor.FINISH)
    for row in rep["rows"].values():
        assert list(row) == [p.entry for p in rlx_gpu.Adafactor.passes]
        assert all(v["prefix_ms"] > 0 for v in row.values())


def test_variants_are_the_switches_named(tmp_path):
    """``--variants``: each name's class attributes (sums of them too), a row per variant in the same run; an
    unknown name refused before anything runs, naming it."""
    mod = _script()
    assert mod.variant_switches("default") == {} and mod.variant_switches("finish8") == {"FINISH": 8}
    assert mod.variant_switches("+recip+ptloads") == {"RECIP": True, "PTLOADS": True}
    assert mod.variant_switches("-recip+ptloads") == {"RECIP": False, "PTLOADS": True}
    assert mod.variant_switches("+cscale+recip") == {"CSCALE": True, "RECIP": True}
    assert mod.variant_switches("x-dir") == {"XK": 1} and mod.variant_switches("x-red") == {"XRED": True}
    cls = mod.prefix_class(2, **mod.variant_switches("+recip"))
    assert cls.RECIP and cls.constants["RC"] == 1 and len(cls.passes) == 2
    with pytest.raises(ValueError, match="unknown variant 'recip'"):
        mod.variant_switches("recip")
    out = tmp_path / "v.json"
    r = subprocess.run([sys.executable, str(SCRIPT), "--set", "gpt2:1,64", "--precisions", "fp32", "--rounds", "1",
                        "--repeats", "1", "--variants", "default,+recip+ptloads,x-dir,+cscale", "--json", str(out)],
                       capture_output=True, text=True, timeout=900, env=ENV)
    assert r.returncode == 0, r.stderr[-3000:]
    assert list(json.loads(out.read_text())["rows"]) == ["fp32 default", "fp32 +recip+ptloads", "fp32 x-dir",
                                                         "fp32 +cscale"]
    bad = subprocess.run([sys.executable, str(SCRIPT), "--variants", "default,+nope"], capture_output=True, text=True,
                         timeout=300, env=ENV)
    assert bad.returncode == 2 and "unknown variant '+nope'" in bad.stderr


def test_knockouts_change_what_they_name(device):
    """The timing-only knock-outs: each full step gives other params than the default (they leave out work), x-red
    only update_norm's sums (its pass reduces nothing, the others as they were); the default's knock-out constant
    is 0 (shaders/adafactor.wgsl's XK), so no class of the package reaches them."""
    mod = _script()
    n = len(rlx_gpu.Adafactor.passes)
    assert "XK" not in rlx_gpu.Adafactor.constants and "XK" not in mod.prefix_class(n).constants
    red = mod.prefix_class(n, **mod.variant_switches("x-red"))
    full = mod.prefix_class(n)
    assert [p.reduce for p in red.passes] == ["" if p.entry == "update_norm" else p.reduce for p in full.passes]
    rng = np.random.default_rng(1)
    p0 = {"w": rng.standard_normal((24, 40)).astype(np.float32), "b": rng.standard_normal(40).astype(np.float32)}
    g = {k: rng.standard_normal(v.shape).astype(np.float32) for k, v in p0.items()}

    def step(cls):
        opt = cls(p0, device=device)
        opt.step(g)
        return opt.read_params()["w"]
    want = step(full)
    for name in mod.KNOCKOUTS:
        assert not np.array_equal(step(mod.prefix_class(n, **mod.variant_switches(name))), want), name
