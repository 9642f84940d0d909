"""The ``rlx-gpu`` command: help, version, unknown commands, ``info``; and no XDG_RUNTIME_DIR noise."""
import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import rlx_gpu
from rlx_gpu.tools.cli import describe

from conftest import IMPLEMENTATION


def cli(*args, env=None):
    return subprocess.run([sys.executable, "-m", "rlx_gpu", *args], capture_output=True, text=True, timeout=300,
                          env=env)


def test_help_lists_every_command_and_exits_0():
    from rlx_gpu.tools.cli import COMMANDS
    for flag in ("--help", "-h"):
        r = cli(flag)
        assert r.returncode == 0, r.stderr
        for name in COMMANDS:
            assert f"  {name}" in r.stdout


def test_version_no_command_and_unknown_command():
    r = cli("--version")  # (it names the implementation in use's parts: wgpu-py and wgpu-native, or wgpudawn and Dawn)
    first = "wgpu-py" if IMPLEMENTATION == "wgpu-native" else "wgpudawn"
    assert r.returncode == 0 and r.stdout.startswith(f"rlx-gpu {rlx_gpu.__version__} ({first} ")
    r = cli()
    assert r.returncode == 2 and "usage: rlx-gpu" in r.stderr and "commands:" in r.stderr
    r = cli("nosuchcommand")
    assert r.returncode == 2 and "unknown command 'nosuchcommand'" in r.stderr


@pytest.mark.gpu
def test_info_json_and_text():
    r = cli("info", "--json")
    assert r.returncode == 0, r.stderr
    rep = json.loads(r.stdout)
    assert set(rep) >= {"adapters", "selection", "selected", "validators", "versions"}
    assert sum(a["selected"] for a in rep["adapters"]) == 1
    for a in rep["adapters"]:
        assert set(a) >= {"name", "backend", "type", "driver", "selected", "limits", "features"}
        assert a["limits"]["max-storage-buffer-binding-size"] > 0
    assert set(rep["validators"]) == {"naga-cli", "wgpu", "tint"}
    assert rep["versions"]["rlx_gpu"] == rlx_gpu.__version__ and "wgpu-native" in rep["versions"]
    r = cli("info")
    assert r.returncode == 0 and " * " in r.stdout and "shader validators" in r.stdout
    r = cli("info", "--device", "no-such-adapter-anywhere")
    assert r.returncode == 2 and "no adapter matches" in r.stdout


@pytest.mark.gpu
def test_no_xdg_runtime_dir_message(tmp_path):
    """A process without XDG_RUNTIME_DIR gets a private one (no "invalid or not set" lines); a valid one stays."""
    code = ("import os, numpy as np, rlx_gpu; o = rlx_gpu.AdamW({'w': np.ones(4, np.float32)}); "
            "o.step({'w': np.ones(4, np.float32)}); print(os.environ['XDG_RUNTIME_DIR'])")
    env = {k: v for k, v in os.environ.items() if k != "XDG_RUNTIME_DIR"}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 0, r.stderr
    assert "XDG_RUNTIME_DIR" not in r.stderr
    made = r.stdout.strip().splitlines()[-1]
    assert os.path.isdir(made) and (os.stat(made).st_mode & 0o077) == 0
    mine = tmp_path / "xdg"
    mine.mkdir(mode=0o700)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                       env=dict(env, XDG_RUNTIME_DIR=str(mine)))
    assert r.returncode == 0 and r.stdout.strip().splitlines()[-1] == str(mine)


def _help(cmd):
    r = subprocess.run([sys.executable, *cmd, "--help"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return r.stdout


EXAMPLES = sorted((Path(__file__).resolve().parents[1] / "examples").glob("*.py"))


@pytest.mark.parametrize("cmd", [["-m", "rlx_gpu", c] for c in ("info", "bench", "check-shaders")]
                         + [[str(p)] for p in EXAMPLES], ids=lambda c: Path(c[-1]).name)
def test_help_is_plain_text_with_a_whole_description(cmd):
    """No reST markup, no "(default: None)", and the description is the docstring's whole first paragraph (it
    used to be its first line, cut mid-sentence)."""
    text = _help(cmd)
    assert "``" not in text and ":class:" not in text and "(default: None)" not in text, text
    description = " ".join(text.split("\n\n")[1].split())
    assert description.endswith((".", ")")), description
    if cmd[0] != "-m":
        doc = ast.get_docstring(ast.parse(Path(cmd[0]).read_text()))
        assert description == describe(doc)


def test_describe_takes_the_first_paragraph():
    assert describe("One line that goes\non, with ``code``.\n\nMore.") == "One line that goes on, with code."
    assert describe(None) == ""


def test_check_shaders_quiet_prints_only_what_needs_attention():
    from rlx_gpu.tools.check import Diagnostic, Result, report
    results = [Result("a.wgsl", "wgpu", "pass"), Result("b.wgsl", "wgpu", "pass"),
               Result("c.wgsl", "tint", "fail", [Diagnostic("c.wgsl", 3, 4, "bad")]),
               Result("a.wgsl", "naga-cli", "unavailable", reason="no naga")]
    quiet = report(results, quiet=True).splitlines()
    assert quiet == ["FAIL           [tint] c.wgsl:3:4: bad", "not available  [naga-cli] a.wgsl: no naga",
                     "check-shaders: 2 pass, 1 fail, 1 not available"]
    assert len(report(results).splitlines()) == 5


@pytest.mark.gpu
def test_check_shaders_quiet_on_the_package(tmp_path):
    r = cli("check-shaders", "--validator", "wgpu", "--quiet")
    assert r.returncode == 0, r.stdout[-2000:]
    lines = r.stdout.splitlines()
    assert len(lines) == 1 and lines[0].startswith("check-shaders: ") and " 0 fail" in lines[0]
