"""What docs/gen_pages.py writes into the site, as plain functions (tests/test_docs_site.py checks them without
mkdocs): the API reference (every public name), one page per optimizer from its declaration and twin, the shared
options, the list of code blocks that need hardware CI lacks, and the
fenced code blocks of every page."""
from __future__ import annotations

import ast
import importlib
import inspect
import re
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"

# The public modules, each a page of the API reference: (public path, one line).
API = {
    "rlx_gpu": "the optimizers, their base, devices, tensors, WGSL programs, clipping, loss scaling, state dicts",
    "rlx_gpu.reference": "the NumPy twins: each optimizer's readable specification",
    "rlx_gpu.schedules": "learning-rate schedules with torch.optim.lr_scheduler's semantics",
    "rlx_gpu.linalg": "matrix algebra on the device: GEMM, Newton-Schulz, Cholesky-QR",
    "rlx_gpu.qat": "quantization-aware training: fake quantization, its gradients and torch.ao's observers",
    "rlx_gpu.distributed": "ZeRO-1 over torch.distributed or MPI",
    "rlx_gpu.compression": "top-k gradient compression with error feedback",
    "rlx_gpu.torch": "torch.optim.Optimizer subclasses over the same engine (needs torch)",
}
# A code block that needs hardware CI lacks starts with this comment; the reasons allowed.
NEEDS = re.compile(r"^\s*(?:#|//)\s*needs:\s*(.+?)\s*$")
HARDWARE = ("several GPUs", "a real GPU", "Metal", "DX12")
FENCE = re.compile(r"^(?P<indent>[ ]*)```(?P<lang>[\w+-]*)[^\n]*\n(?P<code>.*?)^(?P=indent)```[ ]*$", re.S | re.M)


def public(module: str) -> list:
    """The public names of a module: its ``__all__`` (modules among them excluded: they have pages of their own).
    ``rlx_gpu.torch`` (which imports torch) has one class per optimizer (``rlx_gpu.optim``'s names) and Partition."""
    if module == "rlx_gpu.torch":
        return public("rlx_gpu.optim") + ["Partition"]
    mod = importlib.import_module(module)
    return [n for n in mod.__all__ if not inspect.ismodule(getattr(mod, n))]


def defined_at(module: str, name: str) -> str:
    """The dotted path where a public object is defined (``rlx_gpu.AdamW`` -> ``rlx_gpu.optim.adam.AdamW``)."""
    mod = importlib.import_module(module)
    obj = getattr(mod, name)
    if not hasattr(obj, "__qualname__"):  # a constant: the module attribute
        return f"{mod.__name__}.{name}"
    return f"{obj.__module__}.{obj.__qualname__}"


def constant_doc(module: str, name: str) -> str:
    """The docstring written after a module constant's assignment (what mkdocstrings shows for it)."""
    path = Path(importlib.import_module(module).__file__)
    body = ast.parse(path.read_text()).body
    for node, after in zip(body, body[1:]):
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == name for t in node.targets):
            if isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant):
                return str(after.value.value)
    return ""


def plain(doc: str) -> str:
    """A docstring's reST roles (``:class:`X```) as Markdown code."""
    return re.sub(r":(?:class|mod|func|meth|attr):`~?([^`]+)`", r"`\1`", doc or "")


def torch_page() -> str:
    """``rlx_gpu.torch`` from its source (the docs build imports no torch): its docstring and its classes."""
    doc = ast.get_docstring(ast.parse((ROOT / "rlx_gpu" / "addons" / "torch.py").read_text()))
    lines = ["# `rlx_gpu.torch`", "", plain(doc), "", "| class | wraps |", "|---|---|"]
    lines += [f"| `rlx_gpu.torch.{n}` | [`rlx_gpu.{n}`]({'rlx_gpu.md' if n == 'Partition' else f'../optimizers/{n}.md'}) "
              "as a `torch.optim.Optimizer`: the same constructor, hyperparameters and state |"
              for n in public("rlx_gpu.torch")]
    return "\n".join(lines) + "\n"


def api_page(module: str) -> str:
    if module == "rlx_gpu.torch":
        return torch_page()
    mod = importlib.import_module(module)
    lines = [f"# `{module}`", "", plain(inspect.getdoc(mod) or ""), ""]
    for name in public(module):
        lines += [f"## `{module}.{name}`", "", f"::: {defined_at(module, name)}", "    options:",
                  "      show_root_heading: false", ""]
    return "\n".join(lines)


def _rule_and_args(doc: str) -> tuple[str, str, str]:
    """(summary, the update rule and notes before ``Args:``, the ``Args:`` and ``State`` lines) of a GPU class."""
    doc = doc.split("\nOptions (every optimizer):", 1)[0]
    summary, _, rest = doc.partition("\n")
    body, _, args = rest.partition("Args:")
    return " ".join(summary.split()), textwrap.dedent(body).strip("\n"), textwrap.dedent(args).strip("\n")


def _markdown(text: str) -> str:
    """Indented lines (the update rule) as a code block, the rest as paragraphs."""
    out, block = [], []
    for ln in text.splitlines() + [""]:
        if ln.startswith("    ") or (block and ln.strip() and ln.startswith(" ")):
            block.append(ln[4:])
            continue
        if block:
            out += ["```text", *block, "```", ""]
            block = []
        out.append(plain(ln))
    return "\n".join(out).strip() + "\n"


def convergence() -> dict:
    """tests/optimizer_db.py's convergence settings: name -> (parabola options, tolerance, Rosenbrock options,
    tolerance), as tests/test_convergence.py runs them."""
    import facts
    return {r.name: (*r.parabola, *(r.rosenbrock or (None, None))) for r in facts.DB}


def optimizer_page(name: str, facts: dict) -> str:
    import rlx_gpu
    gpu, twin = getattr(rlx_gpu, name), getattr(rlx_gpu.reference, name)
    paper, peer, rows = facts[name]
    summary, rule, args = _rule_and_args(inspect.getdoc(gpu))
    lines = [f"# {name}", "", plain(summary), "", f"**Paper:** {paper}.  ", f"**Semantics of:** {peer}.  ",
             f"**Classes:** `rlx_gpu.{name}` (GPU), `rlx_gpu.reference.{name}` (the NumPy twin, its specification; "
             f"source `rlx_gpu/reference/{Path(inspect.getfile(twin)).name}`).", "", "## Update rule", "",
             _markdown(rule), "## Hyperparameters", "", "| name | default |", "|---|---|"]
    lines += [f"| `{k}` | `{v!r}` |" for k, v in twin.defaults.items()]
    lines += ["", "```text", args, "```", "", "## State", "",
              "Per tensor: `step` and " + ", ".join(f"`{s}`" for s in twin.all_state_names)
              + " (which of them a tensor gets depends on its group's settings; see above). Every optimizer also "
              "takes [the shared options](options.md).", "", "## Measured agreement", "",
              "| compared | bound | test |", "|---|---|---|"]
    lines += [f"| {r['what']} | {r['tol']} | `{r['test']}` |" for r in rows]
    conv = convergence().get(name)
    if conv:
        lines.append(f"| the minimum of a parabola after 400 steps ({_opts(conv[0])}) | max error {conv[1]:g} "
                     "| `tests/test_convergence.py::test_parabola` |")
        if conv[2] is not None:
            lines.append(f"| Rosenbrock from (-1, 1) after 1,500 steps ({_opts(conv[2])}) | f ≤ {conv[3]:g} "
                         "| `tests/test_convergence.py::test_rosenbrock` |")
    return "\n".join(lines) + "\n"


def _opts(d: dict) -> str:
    return ", ".join(f"{k}={v!r}" for k, v in d.items())


def optimizers() -> list:
    """The optimizer classes, in ``rlx_gpu.__all__``'s order."""
    import rlx_gpu
    return [n for n in rlx_gpu.__all__ if isinstance(getattr(rlx_gpu, n), type)
            and issubclass(getattr(rlx_gpu, n), rlx_gpu.Optimizer) and n != "Optimizer"]


def optimizer_index(facts: dict) -> str:
    import rlx_gpu
    lines = ["# Optimizers", "", "One page each, made from the class's docstring, its twin's declaration (defaults, "
             "state names) and the tests that measure its agreement.", "", "| optimizer | what | semantics of |",
             "|---|---|---|"]
    for n in optimizers():
        summary = plain(_rule_and_args(inspect.getdoc(getattr(rlx_gpu, n)))[0])
        lines.append(f"| [{n}]({n}.md) | {summary} | {facts[n][1]} |")
    return "\n".join(lines) + "\n"


def optimizer_nav() -> str:
    """The Optimizers section of the site's nav (literate-nav's SUMMARY.md): the index, the shared options, then a
    page per optimizer in ``rlx_gpu.__all__``'s order, so a new optimizer needs no line in mkdocs.yml."""
    lines = ["- [Optimizers](index.md)", "- [Shared options](options.md)"]
    return "\n".join(lines + [f"- [{n}]({n}.md)" for n in optimizers()]) + "\n"


def options_page() -> str:
    from rlx_gpu.core.options import OPTIONS
    lines = ["# Options every optimizer takes", "", "Keyword-only, declared once (`rlx_gpu/core/options.py`), listed "
             "in each class's `help()`; `opt.options` holds their values.", "", "| option | default | what |",
             "|---|---|---|"]
    lines += [f"| `{o.name}` | `{o.default!r}` | {plain(o.doc)}{' (GPU classes only)' if o.gpu_only else ''} |"
              for o in OPTIONS]
    return "\n".join(lines) + "\n"


def pages() -> list:
    """Every Markdown page written by hand, below docs/."""
    return sorted(p for p in DOCS.rglob("*.md"))


def blocks(path: Path) -> list:
    """The fenced code blocks of a page: [(language, code, needs or None)], in order."""
    out = []
    for m in FENCE.finditer(path.read_text()):
        code = textwrap.dedent(m.group("code"))
        first = code.lstrip().splitlines()[0] if code.strip() else ""
        need = NEEDS.match(first)
        out.append((m.group("lang"), code, need.group(1) if need else None))
    return out


def hardware_page() -> str:
    lines = ["# Examples that need hardware CI lacks", "",
             "CI runs every code block of these pages (`tests/test_docs_site.py`) on the CPU Vulkan adapter "
             "(llvmpipe), except the blocks below, whose first line says what they need "
             f"(`# needs: ...`: {', '.join(HARDWARE)}).", "", "| page | needs | first line |", "|---|---|---|"]
    for p in pages():
        for _, code, need in blocks(p):
            if need:
                body = [ln for ln in code.splitlines()[1:] if ln.strip()]
                lines.append(f"| [{p.relative_to(DOCS)}]({p.relative_to(DOCS)}) | {need} | "
                             f"`{(body[0] if body else '').strip().replace('|', '¦')}` |")
    return "\n".join(lines) + "\n"
