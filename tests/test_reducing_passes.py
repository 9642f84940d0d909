"""benchmarks/reducing_passes.py: its prefix classes run the first k of LAMB's and MARS's passes (the whole list
gives the class's own bits, all but the last leaves the params as they were), its per-pass bytes add up to
``min_bytes`` (with LAMB's clip read), and the script runs at a tiny size with every pass (and LAMB's clip) in its
JSON."""
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import rlx_gpu
from helpers import load_script
from rlx_gpu.tools.bench.shapes import ITEMSIZE, PRECISIONS, gpt2_shapes, min_bytes

pytestmark = pytest.mark.gpu
SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "reducing_passes.py"


def _script():
    return load_script(SCRIPT, "reducing_passes")


@pytest.mark.parametrize("name", ["LAMB", "Mars"])
def test_prefixes_run_the_first_passes(name, device):
    mod, base = _script(), getattr(rlx_gpu, name)
    n = len(base.passes)
    rng = np.random.default_rng(0)
    p0 = {"w": rng.standard_normal((24, 40)).astype(np.float32), "b": rng.standard_normal(40).astype(np.float32)}
    g = {k: rng.standard_normal(v.shape).astype(np.float32) for k, v in p0.items()}
    got = {}
    for k in (n - 1, n):
        cls = mod.prefix_class(base, k, {"F16ROUND": True})
        assert [p.entry for p in cls.passes] == [p.entry for p in base.passes[:k]] and cls.F16ROUND
        opt = cls(p0, device=device)
        opt.step(g)
        got[k] = opt.read_params()
    ref = base(p0, device=device)
    ref.step(g)
    want = ref.read_params()
    for t in p0:
        np.testing.assert_array_equal(got[n][t], want[t])  # (all passes: the same bits)
        np.testing.assert_array_equal(got[n - 1][t], p0[t])  # (no last pass: the params untouched)


@pytest.mark.parametrize("precision", ["fp32", "bf16", "f16", "bf16-master"])
@pytest.mark.parametrize("opt", ["lamb", "mars"])
def test_pass_bytes_add_up_to_min_bytes(opt, precision):
    mod, shapes = _script(), gpt2_shapes(1, 64)
    base = getattr(rlx_gpu, {"lamb": "LAMB", "mars": "Mars"}[opt])
    clip = ITEMSIZE[PRECISIONS[precision][1]] * sum(int(np.prod(s)) for _, s in shapes) if mod.clipped(opt) else 0
    assert mod.clipped(opt) == (opt == "lamb")
    assert sum(mod.pass_bytes(p, precision, shapes) for p in base.passes) + clip == min_bytes(opt, precision, shapes)


def test_tiny_run_has_every_pass(tmp_path):
    out = tmp_path / "r.json"
    r = subprocess.run([sys.executable, str(SCRIPT), "--set", "gpt2:1,64", "--precisions", "f16", "--rounds", "1",
                        "--repeats", "1", "--variant", "F16ROUND=1", "--json", str(out)], capture_output=True,
                       text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    rep = json.loads(out.read_text())
    assert rep["switches"] == {"F16ROUND": True} and rep["left_out"] == []
    assert list(rep["rows"]) == ["lamb f16", "mars f16"]
    assert list(rep["rows"]["lamb f16"]) == [p.entry for p in rlx_gpu.LAMB.passes] + ["clip"]
    assert list(rep["rows"]["mars f16"]) == [p.entry for p in rlx_gpu.Mars.passes]
    for row in rep["rows"].values():
        assert all(v["prefix_ms"] > 0 for v in row.values())
        assert all(v["bytes"] > 0 for k, v in row.items() if k not in ("trust_ratio", "scale"))
