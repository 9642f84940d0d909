"""The ``rlx-gpu`` command: help, version, unknown commands, ``info``; and no XDG_RUNTIME_DIR noise."""
import json
import os
import subprocess
import sys

import pytest

import rlx_gpu

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
