"""The soak in its reduced form (the full one: ``python benchmarks/soak.py``, figures in docs/guides/reliability.md,
Soak): 1,500 checked, clipped, scheduled steps with inf steps and checkpoints, then 40 optimizers made and
dropped; resident memory may grow by at most 16 MB and the late steps may be at most 10% slower than the early, each
window's median against a control optimizer stepped between the same steps (the machine's own drift divided out)."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

SOAK = Path(__file__).resolve().parents[1] / "benchmarks" / "soak.py"


def soak():
    r = subprocess.run([sys.executable, str(SOAK), "--steps", "1500", "--checkpoint-every", "300", "--optimizers", "40",
                        "--window", "300"], capture_output=True, text=True, timeout=900)
    assert r.stdout.strip(), r.stderr[-3000:]
    return r, json.loads(r.stdout)


@pytest.mark.gpu
@pytest.mark.serial  # (another worker's load in one window and not the other skews the slowdown: 0.29 seen on Dawn)
def test_reduced_soak():
    r, out = soak()
    assert out["loop_rss_growth_mb"] <= 16 and out["churn_rss_growth_mb"] <= 16, out
    if out["slowdown"] > 0.10:  # (against the control: a few percent from run to run) one more run decides
        r, out = soak()
    assert out["slowdown"] <= 0.10, out
    assert r.returncode == 0, r.stderr[-2000:]
