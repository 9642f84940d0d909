"""The package's shape: no import circles (imports inside functions count; only ``if TYPE_CHECKING:`` blocks are
exempt), layers that import only downwards, and short modules."""
import ast
import functools
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[1] / "rlx_gpu"
# each layer is a folder of the package and may import only itself and the layers before it
LAYERS = ["core", "runtime", "engine", "linalg", "reference", "optim", "addons", "tools"]
MAX_LINES = 330  # "about 300"


def module_name(path: Path) -> str:
    rel = path.relative_to(PKG.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def layer(mod: str) -> str:
    """A module's layer: the package folder it is in; the modules at the package's top are its facade (the
    public paths: ``rlx_gpu`` itself, ``rlx_gpu.torch``, ``rlx_gpu.clip``, ...)."""
    parts = mod.split(".")
    return parts[1] if len(parts) > 2 or (len(parts) == 2 and (PKG / parts[1]).is_dir()) else "facade"


def imports(path: Path, mod: str) -> set:
    """Every rlx_gpu module ``path`` imports (anywhere in the file but under ``if TYPE_CHECKING:``)."""
    tree = ast.parse(path.read_text())
    skip = {id(n) for node in ast.walk(tree) if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
            for n in ast.walk(node)}
    pkg = mod if path.name == "__init__.py" else mod.rsplit(".", 1)[0]
    out = set()
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.startswith("rlx_gpu")}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = pkg.split(".")
                base = base[:len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.startswith("rlx_gpu"):
                subs = {f"{target}.{a.name}" for a in node.names}
                out |= subs if subs & MODULES else {target}  # `from . import module` needs the module only
    return out


MODULES = set()


@functools.cache
def graph() -> dict:
    mods = {module_name(p): p for p in PKG.rglob("*.py")}
    MODULES.update(mods)
    g = {}
    for m, p in mods.items():
        deps = set()
        for t in imports(p, m):
            while t and t not in mods:
                t = t.rsplit(".", 1)[0] if "." in t else ""
            if t and t != m:
                deps.add(t)
        g[m] = deps
    return g


def test_no_import_cycles():
    g = graph()
    seen, stack, cycles = set(), [], []

    def visit(m):
        if m in stack:
            cycles.append(stack[stack.index(m):] + [m])
            return
        if m in seen:
            return
        seen.add(m)
        stack.append(m)
        for d in sorted(g[m]):
            visit(d)
        stack.pop()

    for m in sorted(g):
        visit(m)
    assert not cycles, "import cycles:\n" + "\n".join(" -> ".join(c) for c in cycles)


def test_layers_import_only_downwards():
    g = graph()
    rank = {name: i for i, name in enumerate(LAYERS)}
    bad = []
    for m, deps in g.items():
        lm = layer(m)
        if lm == "facade":
            continue
        for d in deps:
            ld = layer(d)
            # (the tools may read the package's version from the facade's root)
            if (ld == "facade" and not (lm == "tools" and d == "rlx_gpu")) or (ld != "facade" and rank[ld] > rank[lm]):
                bad.append(f"{m} ({lm}) imports {d} ({ld})")
    assert not bad, "\n".join(bad)


def test_every_folder_is_a_layer():
    """The folder names are the layers: a new folder must be placed among them."""
    folders = {p.name for p in PKG.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert folders == set(LAYERS), f"folders that are not layers: {sorted(folders - set(LAYERS))}"


@pytest.mark.parametrize("path", sorted(p for p in PKG.glob("*.py") if p.name != "__init__.py"), ids=lambda p: p.name)
def test_facade_modules_are_thin(path):
    """A module at the package's top is only a public path to a module in a layer: imports, no code of its own."""
    tree = ast.parse(path.read_text())
    allowed = (ast.Import, ast.ImportFrom, ast.Assign, ast.Expr, ast.If)
    assert all(isinstance(n, allowed) for n in tree.body), f"{path.name} defines code; move it into a layer"
    assert not any(isinstance(n, (ast.FunctionDef, ast.ClassDef)) for n in ast.walk(tree)), path.name


@pytest.mark.parametrize("path", sorted(PKG.rglob("*.py")), ids=lambda p: str(p.relative_to(PKG)))
def test_modules_are_short(path):
    n = len(path.read_text().splitlines())
    assert n <= MAX_LINES, f"{path.name} has {n} lines"
