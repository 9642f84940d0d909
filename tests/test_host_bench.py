"""benchmarks/host_bench.py (issue 25's host-path figures) runs at a tiny size with every figure in its JSON, and its
floor replays a step's own native calls: the same GPU work, none of our Python."""
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import rlx_gpu
from helpers import load_script

pytestmark = pytest.mark.gpu
SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "host_bench.py"


def test_tiny_run_has_every_figure(tmp_path):
    out = tmp_path / "h.json"
    r = subprocess.run([sys.executable, str(SCRIPT), "--tensors", "1,3", "--numel", "64", "--steps", "4",
                        "--rounds", "1", "--json", str(out)], capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    rep = json.loads(out.read_text())
    assert [(row["tensors"], row["step"]) for row in rep["rows"]] == [
        (n, kind) for n in (1, 3) for kind in ("plain", "checked", "scheduled", "scheduler")]
    for row in rep["rows"]:
        assert {"call_us", "wall_us", "cpu_us"} <= set(row["ours"]) == set(row["floor"])
        assert row["ratio_call"] > 0 and row["ratio_cpu"] > 0
    assert rep["dropin"]["params"] == 26122 and rep["dropin"]["ratio_cpu"] > 0 and rep["dropin"]["ratio_call_vs_read"] > 0


@pytest.mark.parametrize("kw", [{}, {"clip_grad_norm": 1.0, "skip_nonfinite": True}], ids=str)
def test_floor_replays_the_steps_calls(kw, device):
    hb = load_script(SCRIPT, "host_bench")
    opt = rlx_gpu.AdamW({"w": np.ones(100, np.float32)}, device=device, **kw)
    opt.grads["w"].write(np.ones(100, np.float32))
    opt.step()
    floor = hb.Floor(opt)  # (records the second step)
    after = opt.params["w"].numpy()
    assert floor.calls >= 9 and not any(op[1] == "map_async" for op in floor.ops)
    floor.step()  # the same dispatches again: the params move as a step moves them
    assert not np.array_equal(opt.params["w"].numpy(), after)
