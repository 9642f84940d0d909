"""`rlx-gpu bench` runs on the adapter at a tiny size and its JSON has every documented key."""
import json
import subprocess
import sys

import pytest

from rlx_gpu.tools import bench

KEYS = {"optimizer", "param_set", "numel", "tensors", "ms_per_step", "gbps", "copy_gbps", "frac_of_copy", "torch_ms",
        "ratio_vs_torch", "numpy_ms", "ratio_vs_numpy", "adapter"}


def test_param_sets():
    assert len(bench.param_set("gpt2-124m")) == 148
    assert len(bench.param_set("gpt2-1.5b")) == 580
    assert sum(int(__import__("numpy").prod(s)) for _, s in bench.param_set("gpt2-124m")) == 124_439_808
    assert bench.param_set("single:1000") == [("w", (1000,))]
    with pytest.raises(ValueError, match="unknown param set 'gpt5'"):
        bench.param_set("gpt5")


@pytest.mark.gpu
def test_bench_tiny_run_writes_every_key(tmp_path):
    out, svg = tmp_path / "b.json", tmp_path / "b.svg"
    cmd = [sys.executable, "-m", "rlx_gpu", "bench", "--sets", "single:65536,gpt2-124m", "--memory-gb", "0.01",
           "--copy-mb", "4", "--repeats", "2", "--json", str(out), "--plot", str(svg), "--no-latency"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    rep = json.loads(out.read_text())
    assert {"date", "adapter", "driver", "versions", "copy_gbps", "rows"} <= set(rep)
    assert len(rep["rows"]) == 2 * len(bench.OPTIMIZERS)
    for row in rep["rows"]:
        assert KEYS <= set(row)
        assert row["ms_per_step"] > 0 and 0 < row["frac_of_copy"] and row["numpy_ms"] > 0
    scaled = [r for r in rep["rows"] if r["param_set"] == "gpt2-124m"]
    assert all(r["scaled"] and r["tensors"] == 148 for r in scaled)
    assert "scaled to" in r.stderr and "| optimizer |" in r.stdout
    assert svg.read_text().startswith("<svg")


@pytest.mark.gpu
def test_bench_on_both_implementations(tmp_path, other_implementation):
    """``--implementation both``: each implementation in a child process, the rows merged, every row saying which
    implementation measured it, each one's metadata (versions, copy rate) kept."""
    out = tmp_path / "both.json"
    cmd = [sys.executable, "-m", "rlx_gpu", "bench", "--implementation", "both", "--optimizers", "adamw,sgd", "--sets",
           "single:4096", "--copy-mb", "4", "--repeats", "2", "--no-latency", "--no-numpy", "--json", str(out)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    rep = json.loads(out.read_text())
    assert [(row["implementation"], row["optimizer"]) for row in rep["rows"]] == [
        ("wgpu-native", "adamw"), ("wgpu-native", "sgd"), ("dawn", "adamw"), ("dawn", "sgd")]
    assert rep["implementation"] == "both" and set(rep["implementations"]) == {"wgpu-native", "dawn"}
    assert "wgpu-native" in rep["implementations"]["wgpu-native"]["versions"]
    assert "dawn" in rep["implementations"]["dawn"]["versions"]
    assert all(m["copy_gbps"] > 0 for m in rep["implementations"].values())
    assert "adamw [dawn]" in r.stdout and "on dawn" in r.stdout and "on wgpu-native" in r.stdout


@pytest.mark.parametrize("args", [["--sets", "single:-5"], ["--sets", "single:0"], ["--sets", "single:x"],
                                  ["--sets", "gpt3"], ["--repeats", "0"], ["--copy-mb", "-1"],
                                  ["--memory-gb", "nan"], ["--json", "/nonexistent/x.json"],
                                  ["--plot", "/nonexistent/p.svg"], ["--optimizers", "adamw,nope"], ["--tune", "-3"],
                                  ["--implementation", "metal"]])
def test_bad_arguments_fail_before_any_work(args, tmp_path):
    r = subprocess.run([sys.executable, "-m", "rlx_gpu", "bench", *args, "--no-latency"], capture_output=True,
                       text=True, timeout=60, cwd=tmp_path)
    assert r.returncode == 2, (r.returncode, r.stderr[-1500:])
    assert "usage:" in r.stderr and "Traceback" not in r.stderr and "copy bandwidth" not in r.stderr


def test_no_adapter_is_one_line_and_exit_2():
    r = subprocess.run([sys.executable, "-m", "rlx_gpu", "bench", "--device", "no-such-adapter"], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 2 and "Traceback" not in r.stderr and "no adapter matches" in r.stderr


@pytest.mark.gpu
@pytest.mark.parametrize("script,args,keys", [
    ("muon_bench.py", ["--n", "128", "--div", "32"], {"gemm_tflops", "gemm16_tflops"}),
    ("precond_bench.py", ["--div", "32", "--steps", "2"], {"steps_per_window"}),
    ("stiefel_bench.py", ["--div", "32"], {"matrices"})])
def test_matrix_benches_run_small(script, args, keys, tmp_path):
    """The matrix-optimizer benches at 1/32 of GPT-2's matrices, one round: they run and report their figures (on
    the H200 they also time torch and pytorch_optimizer beside them; here there is no CUDA torch)."""
    from pathlib import Path
    out = tmp_path / "m.json"
    path = Path(__file__).resolve().parents[1] / "benchmarks" / script
    r = subprocess.run([sys.executable, str(path), *args, "--rounds", "1", "--json", str(out)], capture_output=True,
                       text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    rep = json.loads(out.read_text())
    assert keys <= set(rep) and rep["figures"] and all(v > 0 for v in rep["figures"].values())
