"""Every ```python block of README.md runs as written: in order, in one namespace, in a fresh process (torch
imported first where it is installed, as the README's "Import order" asks; blocks that use torch skip without
it)."""
import re
from pathlib import Path

import pytest
from helpers import run_blocks

README = Path(__file__).resolve().parents[1] / "README.md"


def blocks():
    return re.findall(r"^```python\n(.*?)^```", README.read_text(), flags=re.S | re.M)


def test_readme_has_python_blocks():
    assert len(blocks()) >= 5


@pytest.mark.gpu
def test_readme_python_blocks_run(tmp_path):
    out = run_blocks(blocks(), tmp_path)
    assert "bfloat16 bfloat16" in out and "[1. 1. 1.]" in out
