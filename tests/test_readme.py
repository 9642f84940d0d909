"""Every ```python block of README.md runs as written: in order, in one namespace, in a fresh process (torch
imported first where it is installed, as the README's "Import order" asks; blocks that use torch skip without
it)."""
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"


def blocks():
    return re.findall(r"^```python\n(.*?)^```", README.read_text(), flags=re.S | re.M)


def test_readme_has_python_blocks():
    assert len(blocks()) >= 5


@pytest.mark.gpu
def test_readme_python_blocks_run(tmp_path):
    try:
        import torch  # noqa: F401
        have_torch = True
    except ImportError:
        have_torch = False
    parts = ["try:\n    import torch, torch.optim\nexcept ImportError:\n    pass"]
    for i, code in enumerate(blocks()):
        if "import torch" in code and not have_torch:
            continue
        parts.append(f"print('--- block {i}', flush=True)\n" + code)
    script = tmp_path / "readme_blocks.py"
    script.write_text("\n".join(parts))
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert r.returncode == 0, textwrap.shorten(r.stdout[-1500:], 1500) + "\n" + r.stderr[-3000:]
    assert r.stdout.count("--- block") == len(parts) - 1
    assert "bfloat16 bfloat16" in r.stdout and "[1. 1. 1.]" in r.stdout
