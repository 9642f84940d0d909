"""The package's shape: no import circles (imports inside functions count; only ``if TYPE_CHECKING:`` blocks are
exempt), layers that import only downwards, short modules and short functions."""
import ast
import functools
import re
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[1] / "rlx_gpu"
# each layer is a folder of the package and may import only itself and the layers before it
LAYERS = ["core", "runtime", "engine", "linalg", "reference", "optim", "addons", "tools"]
MAX_LINES = 330  # "about 300"
# A function's lines (its def to its last line, docstring included): today's longest outside the exemptions below
# are 57-60 (Optimizer.__init__, the bench's parse_args).
MAX_FUNCTION_LINES = 60
FUNCTION_EXEMPT: dict = {}  # "module path::function": why it is longer (none now: the emitters were folded)


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


def functions():
    """(``path::name``, lines) of every function of the package."""
    for p in sorted(PKG.rglob("*.py")):
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                yield f"{p.relative_to(PKG)}::{node.name}", node.end_lineno - node.lineno + 1


def test_functions_are_short():
    """Every function has at most MAX_FUNCTION_LINES lines but the few exempt (each with its reason), and every
    exemption is still needed."""
    found = list(functions())
    long = sorted(f"{name} has {n} lines" for name, n in found if n > MAX_FUNCTION_LINES and name not in FUNCTION_EXEMPT)
    assert not long, "split these functions:\n" + "\n".join(long)
    lengths = {}
    for name, n in found:
        lengths[name] = max(n, lengths.get(name, 0))
    stale = [name for name in FUNCTION_EXEMPT if lengths.get(name, 0) <= MAX_FUNCTION_LINES]
    assert not stale, f"exempt but short now (remove the exemption): {stale}"


def drawn_layers(text: str) -> dict:
    """docs/architecture.md's table: layer -> the layers it says it imports directly."""
    section = text.split("\n## Layers and pieces\n", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `(\w+)/` \| (.*) \|$", section, re.M)
    return {name: {w for w in re.findall(r"\w+", deps) if w in LAYERS} for name, deps in rows}


def test_architecture_drawing_is_the_import_graph():
    """docs/architecture.md's drawing names every layer, and its table says what each layer imports directly, as
    the code does."""
    text = (PKG.parent / "docs" / "architecture.md").read_text()
    g, direct = graph(), {lay: set() for lay in LAYERS}
    for m, deps in g.items():
        if layer(m) != "facade":
            direct[layer(m)] |= {layer(d) for d in deps if layer(d) not in ("facade", layer(m))}
    assert drawn_layers(text) == direct
    drawing = text.split("\n## Layers and pieces\n", 1)[1].split("```", 2)[1]
    assert all(f"{lay}/" in drawing for lay in LAYERS)


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def engine_private_names() -> set:
    """The private attributes and methods the classes below the add-ons define (``self._x = ...``, ``def _x``,
    ``_x = ...`` in a class body): what an engine object keeps to itself."""
    names = set()
    for lay in LAYERS[:LAYERS.index("addons")]:
        for p in (PKG / lay).rglob("*.py"):
            for node in ast.walk(ast.parse(p.read_text())):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and _private(node.name):
                    names.add(node.name)
                elif (isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store) and _private(node.attr)
                      and isinstance(node.value, ast.Name) and node.value.id == "self"):
                    names.add(node.attr)
                elif isinstance(node, ast.ClassDef):
                    for st in node.body:
                        targets = st.targets if isinstance(st, ast.Assign) else [getattr(st, "target", None)]
                        names |= {t.id for t in targets if isinstance(t, ast.Name) and _private(t.id)}
    return names


def test_addons_and_tools_use_public_engine_api_only():
    """addons/ and tools/ reach no private attribute of an engine object (``opt._hyper``, ``inner._grad_mul``,
    ``getattr(opt, "_x")``): only their own objects' (``self._x``, or a name no lower layer defines)."""
    private = engine_private_names()
    assert {"_hyper", "_grad_mul", "_step_begin", "_names"} <= private  # (the check sees what it must)
    bad = []
    for lay in ("addons", "tools"):
        for p in sorted((PKG / lay).rglob("*.py")):
            for node in ast.walk(ast.parse(p.read_text())):
                own = isinstance(getattr(node, "value", None), ast.Name) and node.value.id in ("self", "cls")
                if isinstance(node, ast.Attribute) and node.attr in private and not own:
                    bad.append(f"{p.relative_to(PKG)}:{node.lineno}: {ast.unparse(node)}")
                elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                      and node.func.id in ("getattr", "setattr", "hasattr", "delattr") and len(node.args) > 1
                      and isinstance(node.args[1], ast.Constant) and node.args[1].value in private
                      and not (isinstance(node.args[0], ast.Name) and node.args[0].id in ("self", "cls"))):
                    bad.append(f"{p.relative_to(PKG)}:{node.lineno}: {ast.unparse(node)}")
    assert not bad, "private engine attributes reached from add-ons or tools:\n" + "\n".join(bad)
