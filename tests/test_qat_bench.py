"""benchmarks/qat_bench.py --diagnose (issue 28's follow-up): every timing-only rewrite of benchmarks/qatdiag.py
applies to today's generated WGSL, compiles and runs at a tiny size, and a rewrite that no longer matches raises
(a diagnostic that rewrote nothing would time the default under another name)."""
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import load_script

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"


def _qatdiag():
    sys.path.insert(0, str(BENCH))
    try:
        return load_script(BENCH / "qatdiag.py", "qatdiag")
    finally:
        sys.path.remove(str(BENCH))


def test_rewrites_refuse_text_they_do_not_match():
    qd = _qatdiag()
    for which in ("enc-nostore", "enc-fixscale", "enc-constentry"):
        with pytest.raises(RuntimeError, match="no longer holds"):
            qd.rewrite("fn qat_encode_cached() {}", which)
    with pytest.raises(RuntimeError, match="no longer calls qat_note"):
        qd.rewrite("fn main() {}", "upd-noamax")
    with pytest.raises(ValueError, match="unknown diagnostic"):
        qd.rewrite("", "enc-nothing")
    texts = {which: qd.fq_text(which) for which in qd.FQ_DIAGNOSTICS}  # (each raises if its text is gone)
    assert len(set(texts.values())) == len(texts)


@pytest.mark.gpu
def test_diagnose_runs_every_rewrite(tmp_path):
    out = tmp_path / "q.json"
    r = subprocess.run([sys.executable, str(BENCH / "qat_bench.py"), "--diagnose", "--set", "gpt2:1,64", "--elems",
                        "65536", "--repeats", "1", "--rounds", "1", "--json", str(out)],
                       capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    rep = json.loads(out.read_text())
    assert rep["errors"] == {}
    qd = _qatdiag()
    rows = [f"int8_channel_second_pass[new]{{{d}}}" for d in ("enc-nostore", "enc-fixscale", "enc-constentry",
                                                               "upd-noamax")]
    rows += ["int8_channel_fused[new]{upd-noamax}"]
    rows += [f"{k}[first]{{{d}}}_GBps" for k in ("fq_per_tensor", "fq_per_channel", "fq_fp8_e4m3fn", "fq_fp8_e5m2")
             for d in qd.FQ_DIAGNOSTICS if k.startswith("fq_per") or not d.startswith("chan")]
    for row in rows + ["adamw", "int8_channel_second_pass[new]", "int8_channel_fused[new]"]:
        assert math.isfinite(rep["figures"][row]) and rep["figures"][row] > 0, row
    # the default rows are still checked against the twin; the diagnostic ones are marked as such
    assert rep["copy_matches_twin"]["int8_channel_fused[new]"] is True
    assert all(v == "diag" for k, v in rep["copy_matches_twin"].items() if "{" in k)
