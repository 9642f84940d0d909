"""The documentation site (docs/, mkdocs.yml): every public name in the API reference and documented, a page per
optimizer whose agreement rows cite real tests with the tolerance they write, every Python block of every page run
(in order, one namespace per page, a fresh process), every shell block saying where CI runs it, the blocks that need
hardware CI lacks listed, and the install into an existing virtual environment. (CI builds the site with warnings
as errors: `./run.sh docs` in .ci/run.)"""
import ast
import importlib
import inspect
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import run_blocks

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "docs"))
import docsite  # noqa: E402
import facts  # noqa: E402


@pytest.mark.parametrize("module", list(docsite.API))
def test_every_public_name_is_in_the_api_reference_and_documented(module):
    page = docsite.api_page(module)
    for name in docsite.public(module):
        assert f"`{module}.{name}`" in page, f"{module}.{name} is not in the API reference"
        if module != "rlx_gpu.torch":  # (its classes need torch; tests/test_docs.py checks them)
            obj = getattr(importlib.import_module(module), name)
            doc = inspect.getdoc(obj) if hasattr(obj, "__qualname__") else docsite.constant_doc(module, name)
            assert len(doc or "") >= 40, f"{module}.{name}: {doc!r}"
    mod = importlib.import_module("rlx_gpu")
    submodules = [f"rlx_gpu.{n}" for n in mod.__all__ if inspect.ismodule(getattr(mod, n))]
    assert set(submodules) <= set(docsite.API)


def test_torch_page_lists_exactly_rlx_gpu_torch():
    pytest.importorskip("torch", reason="rlx_gpu.torch imports torch")
    import rlx_gpu.torch as T
    assert docsite.public("rlx_gpu.torch") == list(T.__all__)


def test_every_optimizer_has_a_page_from_its_declaration():
    import rlx_gpu
    assert set(docsite.optimizers()) == set(facts.OPTIMIZERS)
    for name in docsite.optimizers():
        page = docsite.optimizer_page(name, facts.OPTIMIZERS)
        twin = getattr(rlx_gpu.reference, name)
        for h, v in twin.defaults.items():
            assert f"| `{h}` | `{v!r}` |" in page, (name, h)
        for s in twin.all_state_names:
            assert f"`{s}`" in page, (name, s)
        assert "## Update rule" in page and "```text" in page and "| compared | bound | test |" in page
        assert f"- [{name}]({name}.md)" in docsite.optimizer_nav()  # (the site's nav: no line in mkdocs.yml)


def _function(path: Path, name: str):
    tree = ast.parse(path.read_text())
    return next((n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == name), None)


ROWS = [(n, r) for n, (_, _, rows) in facts.OPTIMIZERS.items() for r in rows]


@pytest.mark.parametrize("name,row", ROWS, ids=[f"{n}:{r['test'].split('::')[1]}" for n, r in ROWS])
def test_agreement_rows_cite_real_tests_and_their_tolerances(name, row):
    file, func = row["test"].split("::")
    node = _function(ROOT / file, func)
    assert node is not None, f"{name}: no test {row['test']}"
    source = ((ROOT / row["where"]).read_text() if row["where"]
              else ast.get_source_segment((ROOT / file).read_text(), node))
    assert row["literal"] in source, f"{name}: {row['literal']!r} is not in {row['where'] or row['test']}"


def test_convergence_rows_come_from_the_test_table():
    table = docsite.convergence()
    assert set(table) <= set(facts.OPTIMIZERS) and "Adam" in table
    assert f"max error {table['Adam'][1]:g}" in docsite.optimizer_page("Adam", facts.OPTIMIZERS)


PAGES = [p for p in docsite.pages() if any(lang in ("python", "py") for lang, _, _ in docsite.blocks(p))]


def test_pages_have_python_blocks():
    assert len(PAGES) >= 8 and (ROOT / "docs" / "getting-started.md") in docsite.pages()


# What some pages' blocks print (the outputs their comments state; the README's test held these before the move).
PRINTS = {"guides/mixed-precision.md": "bfloat16 bfloat16", "guides/wgsl.md": "[1. 1. 1.]",
          "guides/webgpu-implementation.md": "choose the implementation before that"}


@pytest.mark.gpu
@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT / "docs")))
def test_python_blocks_run(page, tmp_path):
    out = run_blocks([code for lang, code, need in docsite.blocks(page) if lang in ("python", "py") and not need],
                     tmp_path)
    assert PRINTS.get(str(page.relative_to(ROOT / "docs")), "") in out, out[-2000:]


def test_shell_blocks_say_where_ci_runs_them():
    for page in docsite.pages():
        for lang, code, need in docsite.blocks(page):
            if lang not in ("sh", "bash", "shell", "console") or need:
                continue
            first = code.strip().splitlines()[0]
            assert first.startswith("# runs: "), f"{page.name}: a shell block without '# runs:' or '# needs:'"
            for ref in (w for w in first.split() if "/" in w or w.endswith(".py")):
                path, _, test = ref.strip("(),").partition("::")
                assert (ROOT / path).exists(), f"{page.name}: {path} does not exist"
                if test:
                    assert _function(ROOT / path, test), f"{page.name}: no {ref}"


def test_blocks_that_need_hardware_are_listed():
    needs = [(p, n) for p in docsite.pages() for _, _, n in docsite.blocks(p) if n]
    assert {n for _, n in needs} <= set(docsite.HARDWARE), needs
    assert {"several GPUs", "a real GPU", "Metal", "DX12"} <= {n for _, n in needs}
    listing = docsite.hardware_page()
    assert listing.count("\n| [") == len(needs)


def test_install_into_an_existing_venv(tmp_path):
    """getting-started.md's install: pip install of the checkout into a virtual environment that already has the
    dependencies (made with --system-site-packages, so nothing but the build backend is downloaded)."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True, timeout=120)
    py = venv / "bin" / "python"
    r = subprocess.run([str(py), "-m", "pip", "install", "-q", str(ROOT)], capture_output=True, text=True,
                       timeout=600, cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    r = subprocess.run([str(py), "-c", "import rlx_gpu, pathlib; print(rlx_gpu.__file__)"], capture_output=True,
                       text=True, timeout=120, cwd=tmp_path)
    assert r.returncode == 0 and str(venv) in r.stdout, (r.stdout, r.stderr[-2000:])
    r = subprocess.run([str(venv / "bin" / "rlx-gpu"), "--version"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.startswith("rlx-gpu "), r.stderr[-2000:]
