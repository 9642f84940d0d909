"""`rlx-gpu bench` runs on the adapter at a tiny size and its JSON has every documented key."""
import json
import re
import subprocess
import sys
from types import SimpleNamespace

import pytest

from rlx_gpu.tools import bench
from rlx_gpu.tools.bench.rows import MATRIX, plan

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
           "--copy-mb", "4", "--repeats", "2", "--matrix-div", "32", "--json", str(out), "--plot", str(svg),
           "--no-latency"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    rep = json.loads(out.read_text())
    assert {"date", "adapter", "driver", "versions", "copy_gbps", "rows", "skipped"} <= set(rep)
    # every optimizer on both sets, but Partition on one tensor (it needs a model's matrices and vectors)
    assert len(rep["rows"]) == 2 * len(bench.OPTIMIZERS) - 1
    assert [(s["optimizer"], s["param_set"]) for s in rep["skipped"]] == [("partition", "single:65536")]
    assert {r["optimizer"] for r in rep["rows"]} == set(bench.OPTIMIZERS)
    for row in rep["rows"]:
        assert KEYS <= set(row)
        assert row["ms_per_step"] > 0
        if row["optimizer"] in MATRIX:  # no bytes model: the time per step and what it compares with
            assert row["gbps"] is None and row["frac_of_copy"] is None
        else:
            assert 0 < row["frac_of_copy"] and row["bytes_per_step"] > 0
        assert (row["numpy_ms"] is None) == (row["optimizer"] == "partition")  # (a twin for every optimizer)
    scaled = [r for r in rep["rows"] if r["param_set"] == "gpt2-124m" and r["optimizer"] not in MATRIX]
    assert all(r["scaled"] and r["tensors"] == 148 for r in scaled)
    assert "scaled to" in r.stderr and "| optimizer |" in r.stdout
    # one progress line per row, with the time so far and an estimate of what is left (stderr is not a terminal)
    progress = [ln for ln in r.stderr.splitlines() if ln.startswith("[")]
    assert len(progress) == len(rep["rows"]) and progress[-1].endswith("so far, done]")
    assert all(re.search(r"\[\d+:\d\d so far, about \d+:\d\d left\]$", ln) for ln in progress[:-1])
    assert svg.read_text().startswith("<svg")


@pytest.mark.gpu
def test_list_prints_the_rows_without_timing():
    r = subprocess.run([sys.executable, "-m", "rlx_gpu", "bench", "--list", "--sets", "gpt2-124m,gpt2-1.5b",
                        "--precisions", "fp32,bf16", "--memory-gb", "64", "--matrix-div", "1", "--matrix-layers", "0"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert len(lines) == 1 + 2 * 2 * len(bench.OPTIMIZERS) and "copy bandwidth" not in r.stderr
    assert "soap fp32 on gpt2-1.5b: skipped: a side of 6400 is above 3072" in r.stdout
    assert "muon bf16 on gpt2-124m: skipped: Muon steps float32 params and states only" in r.stdout
    assert "muon fp32 on gpt2-124m: 48 tensors, 84,934,656 params\n" in r.stdout
    assert "stiefel fp32 on gpt2-124m: 48 tensors, 5,308,416 params (scaled to 0.0625" in r.stdout


def test_defaults_depend_on_the_adapter():
    cpu = bench.adapter_defaults(bench.parse_args([]), SimpleNamespace(info={"type": "CPU"}))
    gpu = bench.adapter_defaults(bench.parse_args([]), SimpleNamespace(info={"type": "DiscreteGPU"}))
    assert gpu.sets == bench.DEFAULT_SETS and gpu.repeats == 5 and gpu.matrix_div == 1 and gpu.matrix_layers == 0
    assert cpu.sets == "single:262144,gpt2-124m" and cpu.memory_gb == 0.05 and cpu.matrix_layers == 1
    given = bench.adapter_defaults(bench.parse_args(["--repeats", "7", "--sets", "gpt2-1.5b"]),
                                   SimpleNamespace(info={"type": "CPU"}))
    assert given.repeats == 7 and given.sets == "gpt2-1.5b"


def test_help_says_each_default_once():
    r = subprocess.run([sys.executable, "-m", "rlx_gpu", "bench", "--help"], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0 and "(default: None)" not in r.stdout
    entries = re.split(r"\n  (?=-)", r.stdout.split("options:", 1)[1])
    assert len(entries) > 15
    for e in entries:
        assert e.count("(default") <= 1, e


def test_sparse_rows_move_only_the_touched_rows():
    # SparseAdam, float32, one (64, 8) table: every 16th row (4 rows of 8) read and written: 2*4 (param) + 4 (grad)
    # + 4*4 (m, v read and written) bytes per element, and a 4-byte row number per row
    assert bench.min_bytes("sparseadam", "fp32", [("e", (64, 8))]) == 4 * 8 * 28 + 4 * 4
    assert bench.min_bytes("adamw", "fp32", [("e", (64, 8))]) == 64 * 8 * 28
    assert all(bench.min_bytes(o, "fp32", [("e", (64, 8))]) is None for o in MATRIX)


def test_reducing_optimizers_count_their_second_reads():
    # LAMB: its default clip reads g (4 B in fp32); pass 1 reads p, g and reads/writes m, v (24 B); the apply pass
    # reads p, m, v and writes p (16 B)
    shapes = [("w", (64, 8)), ("b", (8,))]
    n = 64 * 8 + 8
    assert bench.min_bytes("lamb", "fp32", shapes) == n * (4 + 40)
    assert bench.min_bytes("lamb", "bf16", shapes) == n * (2 + 12 + 8)
    # with master weights: pass 1 reads the master, g (2) and m, v (16); pass 2 reads the master and m, v, writes
    # the master and the 16-bit param
    assert bench.min_bytes("lamb", "bf16-master", shapes) == n * (2 + (4 + 2 + 16) + (4 + 8 + 4 + 2))
    # MARS: the norm pass reads g and g_prev of the matrix only; the update moves 36 B (fp32)
    assert bench.min_bytes("mars", "fp32", shapes) == n * 36 + 64 * 8 * 8
    assert bench.min_bytes("mars", "bf16", shapes) == n * 18 + 64 * 8 * 4
    # Adafactor: a matrix's p read twice and written, g read three times (rows/cols, update_norm, apply); a vector's
    # p the same, g twice, its second moment read and written (update_norm) and read (apply)
    assert bench.min_bytes("adafactor", "fp32", shapes) == 64 * 8 * 24 + 8 * (12 + 8 + 12)
    assert bench.min_bytes("adafactor", "bf16", shapes) == 64 * 8 * 12 + 8 * (6 + 4 + 12)
    assert bench.min_bytes("adafactor", "bf16-master", shapes) == 64 * 8 * (12 + 2 + 6) + 8 * (12 + 2 + 4 + 12)


def test_progress_line_per_row_with_an_estimate():
    import io
    plans = plan(["adamw", "sgd"], ["fp32"], ["single:1000"], 1e9, 1)
    with bench.Progress(plans, stream=io.StringIO()) as pr:
        first, last = pr.done(plans[0], "1.0 ms/step"), pr.done(plans[1], "2.0 ms/step")
    assert first.startswith("[1/2] adamw fp32 on single:1000: 1 tensor, 1,000 params: 1.0 ms/step [0:")
    assert first.endswith(" left]") and last.endswith("so far, done]") and pr.bar is None
    assert bench.clock(65) == "1:05" and bench.clock(3725) == "1:02:05"


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


def test_a_failing_variant_is_an_error_line_not_the_end(capsys):
    """tools/bench/guarded.py: a figure that raises is printed as one error line, measured no more and left out of
    the medians; the others are measured every round; the rounds stop at the budget (at least one)."""
    import math
    import time

    from rlx_gpu.tools.bench.guarded import attempt, loud, rounds_until
    errors, calls = {}, []

    def bad():
        calls.append("bad")
        raise RuntimeError("shader did not compile\nsecond line")
    figs = {"good_ms": loud(errors, "good_ms", lambda: 2.0), "bad_ms": loud(errors, "bad_ms", bad)}
    med, got = rounds_until(figs, 3, None)
    assert med == {"good_ms": 2.0} and got["good_ms"] == [2.0] * 3 and calls == ["bad"]
    assert all(math.isnan(v) for v in got["bad_ms"]) and errors == {"bad_ms": "RuntimeError: shader did not compile"}
    assert "bad_ms error: RuntimeError: shader did not compile" in capsys.readouterr().out
    assert attempt(errors, "x", lambda: 5) == 5 and "x" not in errors
    slow = {"s_ms": loud({}, "s_ms", lambda: time.sleep(0.2) or 1.0)}
    assert len(rounds_until(slow, 10, 0.5)[1]["s_ms"]) == 2  # (a third round would end past 0.5 s)


def test_matrix_h200_driver_reads_a_cut_short_job():
    """benchmarks/matrix_h200.py: a job killed at its limit still reports the figures it printed (medians), its first
    steps and errors; the table gives each figure's ratio to its job's baseline."""
    import importlib.util
    from pathlib import Path
    spec = importlib.util.spec_from_file_location(
        "matrix_h200", Path(__file__).resolve().parents[1] / "benchmarks" / "matrix_h200.py")
    drv = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(drv)
    rep = drv.from_lines("soap_f32_first_step_ms 900.5 ms\nsoap_f16_ms error: ValueError: no shader-f16\n"
                         "soap_f32_ms 50.0 ms\npo_soap_ms 150.0 ms\nsoap_f32_ms 70.0 ms\nsoap_f32_ms 60.0 ms\n")
    assert rep["figures"] == {"soap_f32_ms": 60.0, "po_soap_ms": 150.0}
    assert rep["first_step"] == {"soap_f32_first_step_ms": 900.5}
    assert rep["errors"] == {"soap_f16_ms": "ValueError: no shader-f16"}
    text = drv.table({"soap": (rep, "cut at 100 s", 100.0)})
    assert re.search(r"soap_f32_ms +60\.00 +2\.50 +900\.5", text) and "error soap_f16_ms: ValueError" in text


def test_bench_rows_agree_with_the_declarations():
    """The state accesses a row's bytes model counts are the declaration's (its passes' reads and writes) for every
    single-pass elementwise optimizer; one without a row gets one from its declaration (tools/bench/declared.py)."""
    import rlx_gpu
    from rlx_gpu.tools.bench.declared import declared_rows, state_accesses
    checked = 0
    for name, (cls_name, kw, accesses, _) in bench.OPTIMIZERS.items():
        cls = getattr(rlx_gpu, cls_name, None)
        if getattr(cls, "shader", None) and accesses is not None and len(cls.passes) == 1 and "state_bits" not in kw:
            assert accesses == state_accesses(cls, kw), name
            checked += 1
    assert checked >= 10
    table = {k: v for k, v in bench.OPTIMIZERS.items() if v[0] != "Lion"}
    assert declared_rows(table) == {"lion": ("Lion", {}, 2, None)}  # (Lion's row as a new declaration gets it)
