"""Every example runs and reaches its goal."""
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = sorted((Path(__file__).resolve().parents[1] / "examples").glob("*.py"))


@pytest.mark.gpu
@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_example_runs(path, tmp_path):
    r = subprocess.run([sys.executable, str(path), "--steps", "150"], capture_output=True, text=True, timeout=600,
                       cwd=tmp_path)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert "adapter:" in r.stdout and "final loss" in r.stdout


def test_contributing_diff_is_the_code():
    """CONTRIBUTING.md's "Adding an optimizer" shows the real change that added Lion: its new files are the files
    here, line for line, and every line it adds elsewhere is in the file it names."""
    import re
    root = Path(__file__).resolve().parent.parent
    text = (root / "CONTRIBUTING.md").read_text()
    diff = text.split("```diff\n", 1)[1].split("\n```", 1)[0]
    files = re.split(r"^diff --git a/\S+ b/", diff, flags=re.M)[1:]
    assert len(files) >= 4
    for part in files:
        name = part.split("\n", 1)[0].strip()
        added = [ln[1:] for ln in part.splitlines() if ln.startswith("+") and not ln.startswith("+++")]
        current = (root / name).read_text().splitlines()
        if "new file mode" in part.split("@@", 1)[0]:
            assert added == current, f"CONTRIBUTING.md's {name} is not the file in the repository"
        else:
            missing = [ln for ln in added if ln not in current]
            assert not missing, f"CONTRIBUTING.md adds lines to {name} that it does not hold: {missing}"
