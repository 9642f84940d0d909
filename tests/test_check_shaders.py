"""`rlx-gpu check-shaders`: shipped shaders pass every available validator; broken fixtures fail at the right
file and line in each validator that catches them; the naga-CLI wrapper against a stand-in executable."""
import importlib.util
import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from rlx_gpu.tools import check
from rlx_gpu.tools.check import sources as check_sources
from rlx_gpu.runtime import source as kernels

FIX = Path(__file__).resolve().parent / "fixtures"
WGSL = FIX / "wgsl"
HAVE_TINT = importlib.util.find_spec("wgpudawn") is not None
needs_tint = pytest.mark.skipif(not HAVE_TINT, reason="wgpudawn (Tint) not installed: pip install rlx_gpu[check]")

# fixture -> {validator: (file, line, col)} for each validator that must catch it; others must pass it.
BROKEN = {
    "type_error.wgsl": {"wgpu": ("type_error.wgsl", 5, 9), "tint": ("type_error.wgsl", 5, 9)},
    "undeclared.wgsl": {"wgpu": ("undeclared.wgsl", 5, 12), "tint": ("undeclared.wgsl", 5, 12)},
    "wrong_access.wgsl": {"wgpu": ("wrong_access.wgsl", 6, 5), "tint": ("wrong_access.wgsl", 6, 15)},
    # portability: only one compiler catches each
    "nonuniform_barrier.wgsl": {"tint": ("nonuniform_barrier.wgsl", 7, 9)},
    "storage_pointer_param.wgsl": {"wgpu": ("storage_pointer_param.wgsl", 4, 1)},
    # more storage buffers than WebGPU's default limit: caught where the check uses the default limits
    "too_many_bindings.wgsl": {"tint": ("too_many_bindings.wgsl", None, None)},
    # an error inside an included file is reported at that file's line
    "uses_bad_helper.wgsl": {"wgpu": ("bad_helper.wgsl", 3, 16), "tint": ("bad_helper.wgsl", 3, 16)},
}


def cli(*args, env=None, timeout=300):
    return subprocess.run([sys.executable, "-m", "rlx_gpu", "check-shaders", *args], capture_output=True, text=True,
                          timeout=timeout, env=env)


def test_every_shipped_file_is_in_a_checked_module():
    """With no paths, the modules the runtime generates are checked; every shipped file is part of one."""
    covered = {Path(f).name for s in check_sources.shipped() for f, _ in s.origin if f != "<generated>"}
    assert covered == {p.name for p in kernels.shader_dir().glob("*.wgsl")}


@pytest.mark.gpu
def test_shipped_shaders_pass_wgpu():
    res = check.run([], ["wgpu"])
    assert len(res) == len(check_sources.shipped())
    assert all(r.status == "pass" for r in res), check.report(res)


@needs_tint
def test_shipped_shaders_pass_tint():
    res = check.run([], ["tint"])
    assert res and all(r.status == "pass" for r in res), check.report(res)


def test_runtime_constants_are_the_ones_the_optimizers_use():
    import rlx_gpu
    by_label = {s.label: s for s in check_sources.shipped()}
    for cls in (rlx_gpu.Adam, rlx_gpu.SGD, rlx_gpu.RMSprop, rlx_gpu.Adagrad, rlx_gpu.LAMB, rlx_gpu.Adafactor):
        assert by_label[f"{cls.__name__} (float32)"].constants == {"WG": cls.WG, "EPT": cls.EPT, **cls.constants}
    text = check.with_defaults(kernels.load_source("engine.wgsl"), {"WG": 128, "EPT": 3})
    assert "override WG: u32 = 128u;" in text and "override EPT: u32 = 3u;" in text


@pytest.mark.parametrize("validator", ["wgpu", pytest.param("tint", marks=needs_tint)])
@pytest.mark.parametrize("name", sorted(BROKEN))
def test_broken_fixtures(name, validator):
    if validator == "wgpu":
        from conftest import ADAPTER
        if not ADAPTER:
            pytest.skip("no WebGPU adapter")
    (res,) = check.run([str(WGSL / name)], [validator])
    want = BROKEN[name].get(validator)
    if want is None:
        assert res.status == "pass", check.report([res])
        return
    assert res.status == "fail", check.report([res])
    d = res.diagnostics[0]
    assert (Path(d.file).name, d.line, d.column) == want, check.report([res])
    assert d.message


@pytest.mark.gpu
def test_cli_exit_status_and_json():
    r = cli(str(WGSL / "type_error.wgsl"), "--validator", "wgpu")
    assert r.returncode == 1 and "type_error.wgsl:5:9" in r.stdout and "FAIL" in r.stdout
    r = cli("--validator", "wgpu", "--json")
    assert r.returncode == 0, r.stdout + r.stderr
    rep = json.loads(r.stdout)
    assert rep["ok"] and all(x["status"] == "pass" for x in rep["results"])
    assert cli("--validator", "nope").returncode == 2
    assert cli("no/such/file.wgsl").returncode == 2


def test_validator_all_reports_missing_naga(monkeypatch):
    monkeypatch.delenv("RLX_GPU_NAGA", raising=False)
    monkeypatch.setenv("PATH", "/nonexistent")
    (res,) = check.check_naga_cli([check.load(WGSL / "type_error.wgsl", {})], 5)
    assert res.status == "unavailable" and "cargo install naga-cli" in res.reason


# -- the naga CLI wrapper against a stand-in ---------------------------------------------------------
@pytest.fixture
def fake_naga(tmp_path, monkeypatch):
    exe = tmp_path / "bin" / "naga"
    exe.parent.mkdir()
    exe.write_text(f"#!{sys.executable}\n" + (FIX / "fake_naga.py").read_text())
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    log = tmp_path / "naga.log"
    monkeypatch.setenv("PATH", f"{exe.parent}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.delenv("RLX_GPU_NAGA", raising=False)
    monkeypatch.setenv("FAKE_NAGA_LOG", str(log))
    return exe, log


def test_naga_cli_success_validates_and_translates(fake_naga):
    exe, log = fake_naga
    lamb = next(s for s in check_sources.shipped() if s.label == "LAMB (float32)")
    src = check_sources.Source(lamb.path, lamb.code, lamb.origin, lamb.entries, {"WG": 128, "EPT": 3}, lamb.label)
    (res,) = check.check_naga_cli([src], 10)
    assert res.status == "pass", check.report([res])
    calls = log.read_text().splitlines()
    assert len(calls) == 1 + 3 + 3  # validate; SPIR-V, MSL, HLSL; GLSL per entry point
    outs = [c.split()[1] for c in calls[1:]]
    assert [Path(o).suffix for o in outs[:3]] == [".spv", ".metal", ".hlsl"]
    assert {c.split("--entry-point ")[1].split()[0] for c in calls[4:]} == {"pass_moments", "pass_trust_ratio",
                                                                             "pass_apply"}
    assert Path(calls[0].split()[0]).name == "lamb.wgsl"
    seen = Path(str(log) + ".src").read_text()  # the generated module, the given constants written in
    assert "override WG: u32 = 128u;" in seen and "override EPT: u32 = 3u;" in seen and "---- begin engine.wgsl ----" in seen


def test_naga_cli_failure_maps_line(fake_naga, monkeypatch):
    monkeypatch.setenv("FAKE_NAGA_MODE", "fail")
    (res,) = check.check_naga_cli([check.load(WGSL / "type_error.wgsl", {})], 10)
    assert res.status == "fail"
    d = res.diagnostics[0]
    assert (Path(d.file).name, d.line, d.column) == ("type_error.wgsl", 5, 9)
    assert "expected to be `f32`" in d.message and d.target is None


def test_naga_cli_translation_failure_names_target(fake_naga, monkeypatch):
    monkeypatch.setenv("FAKE_NAGA_MODE", "msl")
    (res,) = check.check_naga_cli([check.load(WGSL / "type_error.wgsl", {})], 10)
    assert res.status == "fail" and [d.target for d in res.diagnostics] == ["MSL"]


def test_naga_cli_hang_times_out(fake_naga, monkeypatch):
    monkeypatch.setenv("FAKE_NAGA_MODE", "hang")
    (res,) = check.check_naga_cli([check.load(WGSL / "type_error.wgsl", {})], 1)
    assert res.status == "fail" and "timed out after 1 s" in res.diagnostics[0].message


def test_naga_cli_missing_binary_named_by_env(monkeypatch):
    monkeypatch.setenv("RLX_GPU_NAGA", "/no/such/naga")
    (res,) = check.check_naga_cli([check.load(WGSL / "type_error.wgsl", {})], 5)
    assert res.status == "unavailable" and "/no/such/naga" in res.reason


def test_naga_cli_via_command_exit_status(fake_naga, monkeypatch):
    monkeypatch.setenv("FAKE_NAGA_MODE", "fail")
    r = cli(str(WGSL / "type_error.wgsl"), "--validator", "naga-cli", env=dict(os.environ))
    assert r.returncode == 1 and "[naga-cli] " in r.stdout and "type_error.wgsl:5:9" in r.stdout


HEAD = "@group(0) @binding(0) var<storage, read_write> x: array<f32>;\n@compute @workgroup_size(1) fn main() { x[0] = "


def _hostile(folder):
    """Shaders that crash naga's stack (nested parentheses, a 30,000-term sum), an include loop, a good one."""
    (folder / "nested.wgsl").write_text(HEAD + "(" * 5000 + "1.0" + ")" * 5000 + "; }\n")
    (folder / "long.wgsl").write_text(HEAD + " + ".join(f"x[{i % 7}]" for i in range(30000)) + "; }\n")
    (folder / "loop_a.wgsl").write_text('// #include "loop_b.wgsl"\n')
    (folder / "loop_b.wgsl").write_text('// #include "loop_a.wgsl"\n')
    (folder / "ok.wgsl").write_text(HEAD + "1.0; }\n")


@pytest.mark.parametrize("validator", [pytest.param("wgpu", marks=pytest.mark.gpu), pytest.param("tint", marks=needs_tint)])
def test_hostile_shaders_fail_their_file_and_never_crash_the_command(tmp_path, validator):
    _hostile(tmp_path)
    r = cli("--validator", validator, "--json", str(tmp_path))
    assert r.returncode == 1, r.stderr[-2000:]
    report = json.loads(r.stdout)
    status = {Path(x["file"]).name: x for x in report["results"]}
    assert status["ok.wgsl"]["status"] == "pass"  # the files after a crash are still checked
    for name in ("nested.wgsl", "long.wgsl", "loop_a.wgsl", "loop_b.wgsl"):
        assert status[name]["status"] == "fail" and status[name]["diagnostics"][0]["message"], name
    assert "include loop: loop_a.wgsl -> loop_b.wgsl -> loop_a.wgsl" in status["loop_a.wgsl"]["diagnostics"][0]["message"]


def _laughs(folder, depth=22):
    """issue 21 item 1: a "billion laughs" of includes: each file includes the next twice (2**22 copies of the last
    one if every include were expanded), the last declares a function."""
    for i in range(depth):
        (folder / f"lol{i}.wgsl").write_text(f'// #include "lol{i + 1}.wgsl"\n// #include "lol{i + 1}.wgsl"\n')
    (folder / f"lol{depth}.wgsl").write_text("fn lol() -> f32 { return 1.0; }\n")


def test_include_expansion_is_bounded(tmp_path):
    """issue 21 item 1: each file is expanded once (linear time and size, in the parent process); nesting past
    MAX_INCLUDE_DEPTH and text past MAX_SOURCE_BYTES fail their file with a message."""
    _laughs(tmp_path, 12)  # (in process: deep enough to tell, shallow enough to fail fast on an unbounded expansion)
    code, origin = kernels.resolve(tmp_path / "lol0.wgsl")
    assert code.count("fn lol()") == 1 and len(origin) == len(code.splitlines()) < 100
    deep = tmp_path / "deep"
    deep.mkdir()
    for i in range(kernels.MAX_INCLUDE_DEPTH + 1):
        (deep / f"d{i}.wgsl").write_text(f'// #include "d{i + 1}.wgsl"\n')
    (deep / f"d{kernels.MAX_INCLUDE_DEPTH + 1}.wgsl").write_text("\n")
    with pytest.raises(ValueError, match="nested deeper than"):
        kernels.resolve(deep / "d0.wgsl")
    huge = tmp_path / "huge"
    huge.mkdir()
    (huge / "big.wgsl").write_text("// x\n" * (kernels.MAX_SOURCE_BYTES // 5 + 1))
    (huge / "top.wgsl").write_text('// #include "big.wgsl"\n')
    sources, failed = check_sources.collect([str(huge / "top.wgsl"), str(deep / "d0.wgsl")])
    assert not sources and [Path(p).name for p, _ in failed] == ["top.wgsl", "d0.wgsl"]
    assert "bytes" in failed[0][1] and "deeper" in failed[1][1]


@pytest.mark.parametrize("validator", [pytest.param("wgpu", marks=pytest.mark.gpu), pytest.param("tint", marks=needs_tint)])
def test_billion_laughs_of_includes_finishes_fast(tmp_path, validator):
    """issue 21 item 1: the command on the 23 files of _laughs finishes well inside the limit (before: 34 s and
    450 MB at depth 18; depth 22 did not finish in 200 s), every file checked."""
    _laughs(tmp_path)
    r = cli("--validator", validator, "--json", str(tmp_path), timeout=120)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    report = json.loads(r.stdout)
    assert len(report["results"]) == 23 and all(x["status"] == "pass" for x in report["results"])


def test_validator_that_hangs_is_a_failure_of_that_file(tmp_path, monkeypatch):
    """A child that stops answering: its file fails with the timeout, the rest are checked by a new child."""
    _hostile(tmp_path)
    sources = [check.load(tmp_path / n, {}) for n in ("ok.wgsl", "nested.wgsl")]
    real = check._job
    monkeypatch.setattr(check, "_job", lambda s: dict(real(s), code="HANG") if s.path.name == "ok.wgsl" else real(s))
    fake = tmp_path / "fake_validate.py"
    fake.write_text("import json, sys, time\nreq = json.loads(sys.stdin.read())\nprint(json.dumps({'ready': True}), "
                    "flush=True)\nfor j in req['jobs']:\n    if j['code'] == 'HANG': time.sleep(60)\n"
                    "    print(json.dumps({'label': j['label'], 'errors': []}), flush=True)\n")
    real_popen = check.subprocess.Popen
    monkeypatch.setattr(check.subprocess, "Popen", lambda args, **kw: real_popen([sys.executable, str(fake)], **kw))
    res = check.check_in_child("wgpu", sources, None, timeout=2.0)
    assert [r.status for r in res] == ["fail", "pass"]
    assert "did not finish this file in 2 s" in res[0].diagnostics[0].message


def test_bad_timeout_and_unknown_validator_are_usage_errors():
    for args in (("--timeout", "nan"), ("--timeout", "-1"), ("--timeout", "inf"), ("--validator", "nope")):
        r = cli(*args)
        assert r.returncode == 2 and "usage:" in r.stderr and "Traceback" not in r.stderr, args


@pytest.mark.gpu
def test_no_validator_available_is_exit_2_not_a_silent_pass():
    r = cli("--validator", "wgpu", "--device", "nosuchgpu")
    assert r.returncode == 2, r.stdout[-2000:]
    assert "could not be checked by any requested validator" in r.stderr
    r = cli("--validator", "wgpu", "--device", "nosuchgpu", "--json")
    assert r.returncode == 2 and json.loads(r.stdout)["ok"] is False
