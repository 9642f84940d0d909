"""tests/optimizer_db.py's rows and the packages' exports agree with the declarations in the source: every
elementwise optimizer has exactly one row, and ``rlx_gpu.optim``, ``rlx_gpu.reference`` and ``rlx_gpu`` export
every declared optimizer and twin (their ``__all__`` lists are derived, so this reads the source itself)."""
import ast
from pathlib import Path

import pytest

import rlx_gpu
from optimizer_db import DB
from rlx_gpu.core.options import OPTIONS
from rlx_gpu.optim.matrix import MatrixOptimizer

PKG = Path(rlx_gpu.__file__).resolve().parent


def declared(folder: str, attr: str) -> set:
    """Public classes in ``rlx_gpu/<folder>/*.py`` whose body assigns ``attr`` (a declaration's ``spec``, a
    twin's ``defaults``)."""
    out = set()
    for p in (PKG / folder).glob("*.py"):
        for node in ast.parse(p.read_text()).body:
            if isinstance(node, ast.ClassDef) and not node.name.startswith("_") and any(
                    isinstance(st, (ast.Assign, ast.AnnAssign)) and attr in ast.unparse(st).split("=")[0].split()
                    for st in node.body):
                out.add(node.name)
    return out


def test_exports_are_the_declarations():
    gpu = declared("optim", "spec")
    assert gpu and set(rlx_gpu.optim.__all__) == gpu
    assert gpu <= set(rlx_gpu.__all__) and all(getattr(rlx_gpu, n) is getattr(rlx_gpu.optim, n) for n in gpu)
    twins = declared("reference", "defaults")
    assert set(rlx_gpu.reference.__all__) == twins | {"Partition", "ReferenceOptimizer"}
    for n in gpu:  # each declaration follows the twin of its name
        assert getattr(rlx_gpu, n).spec is getattr(rlx_gpu.reference, n), n


def test_every_elementwise_optimizer_has_one_row():
    names = [r.name for r in DB]
    assert len(names) == len(set(names)), names
    elementwise = {n for n in rlx_gpu.optim.__all__ if getattr(rlx_gpu, n).shader
                   and not issubclass(getattr(rlx_gpu, n), MatrixOptimizer)}
    assert set(names) == elementwise


@pytest.mark.parametrize("row", DB, ids=lambda r: r.name)
def test_row_names_only_real_hyperparameters(row):
    known = set(row.defaults) | {o.name for o in OPTIONS}
    used = [row.group2, row.parabola[0], *(row.rosenbrock or ({},))[:1], *row.option_sets,
            *(kw for kw, _ in row.bad_hyper), row.denormal_hyper]
    for kw in used:
        assert set(kw) <= known, (row.name, sorted(set(kw) - known))
    assert row.option_sets[0] == {}, "the first option set is the defaults"
    assert row.paper and row.peer
