"""WGSL source: the shipped files, includes and reflection.

Shaders live in ``shaders/*.wgsl`` (shipped in the wheel as ``rlx_gpu/shaders``). The only textual templating
is a line ``// #include "name.wgsl"``: each file is expanded once (a later include of it is left out, as with an
include guard), and a missing file, an include loop, includes nested deeper than :data:`MAX_INCLUDE_DEPTH` or
more than :data:`MAX_SOURCE_BYTES` of text fail loudly (so a hostile chain of includes costs linear time).
Bindings are read from their ``@group(0) @binding(N) var<storage, MODE> NAME`` declarations, and
:func:`used_bindings` follows an entry point's calls to the bindings it touches, so a pipeline's layout holds only
those (WebGPU's limit of storage buffers per stage applies per pipeline). Typed bindings (float32, float16 or
bfloat16 elements behind float32 accessors) are :mod:`rlx_gpu.runtime.typed`'s.
"""
from __future__ import annotations

import functools
import re
from pathlib import Path

__all__ = ["shader_dir", "resolve", "load_source", "bindings", "resources", "entry_points", "used_bindings",
           "used_names", "MAX_SOURCE_BYTES", "MAX_INCLUDE_DEPTH"]

MAX_SOURCE_BYTES = 8 << 20  # the text of one module with its includes (the largest generated one is ~100 KB)
MAX_INCLUDE_DEPTH = 64

_INCLUDE = re.compile(r'^[ \t]*//[ \t]*#include[ \t]+"([\w.\-]+)"[ \t]*$', re.M)
_BINDING = re.compile(
    r"@group\(0\)\s*@binding\((\d+)\)\s*var<storage\s*,\s*(read|read_write)\s*>\s*(\w+)\s*:")
# any resource declaration: (group, binding, address space or None (a handle), name)
_RESOURCE = re.compile(r"@(?:group\((\d+)\)\s*@binding\((\d+)\)|binding\((\d+)\)\s*@group\((\d+)\))"
                       r"\s*var\s*(?:<\s*(\w+)[^>]*>)?\s*(\w+)\s*:")
_ENTRY = re.compile(r"@compute\s+@workgroup_size\([^)]*\)\s*fn\s+(\w+)")
_FN = re.compile(r"\bfn\s+(\w+)\s*\(")
_IDENT = re.compile(r"\b[A-Za-z_]\w*\b")
_COMMENT = re.compile(r"//[^\n]*")


def shader_dir() -> Path:
    """The folder holding the shipped ``.wgsl`` files (inside the installed package, else the checkout)."""
    here = Path(__file__).resolve().parent.parent
    for cand in (here / "shaders", here.parent / "shaders"):
        if cand.is_dir() and any(cand.glob("*.wgsl")):
            return cand
    raise FileNotFoundError(f"rlx_gpu: no shaders folder next to {here} (looked in rlx_gpu/shaders and shaders/)")


def resolve(path: Path, search: tuple = ()) -> tuple[str, list]:
    """``path``'s text with includes resolved, and for each output line its (file, line) of origin.

    An include is looked up next to the including file, then in ``search`` folders. Each file is expanded once
    (a later include of the same file becomes a comment); a missing one fails loudly (FileNotFoundError), and so
    do an include loop, nesting deeper than MAX_INCLUDE_DEPTH and a text past MAX_SOURCE_BYTES (ValueError)."""
    out, origin = [], []
    _expand(Path(path), tuple(search), (), set(), [0], out, origin)
    return "\n".join(out) + "\n", origin


def _expand(path: Path, search: tuple, stack: tuple, done: set, size: list, out: list, origin: list) -> None:
    key = path.resolve()
    if key in stack:
        chain = " -> ".join(p.name for p in (*stack[stack.index(key):], key))
        raise ValueError(f"rlx_gpu: include loop: {chain}")
    if len(stack) >= MAX_INCLUDE_DEPTH:
        raise ValueError(f"rlx_gpu: includes nested deeper than {MAX_INCLUDE_DEPTH} (at {path.name})")
    if not path.is_file():
        raise FileNotFoundError(f"rlx_gpu: shader {path.name!r} not found in {path.parent}")
    size[0] += path.stat().st_size
    if size[0] > MAX_SOURCE_BYTES:
        raise ValueError(f"rlx_gpu: {path.name}: the source with its includes is over {MAX_SOURCE_BYTES} bytes")
    done.add(key)
    for i, line in enumerate(path.read_text().splitlines(), 1):
        m = _INCLUDE.match(line)
        if not m:
            out.append(line)
            origin.append((str(path), i))
            continue
        name = m.group(1)
        cand = [d / name for d in (path.parent, *search) if (d / name).is_file()]
        if not cand:
            raise FileNotFoundError(f"rlx_gpu: shader {name!r} not found (included from {path.name}:{i})")
        if cand[0].resolve() in done and cand[0].resolve() not in (*stack, key):
            out.append(f"// ---- {name}: included above ----")
            origin.append((str(path), i))
            continue
        out.append(f"// ---- begin {name} ----")
        origin.append((str(path), i))
        _expand(cand[0], search, (*stack, key), done, size, out, origin)
        out.append(f"// ---- end {name} ----")
        origin.append((str(path), i))


@functools.lru_cache(maxsize=None)
def load_source(name: str) -> str:
    """The WGSL text of shipped shader ``name`` with its includes resolved."""
    return resolve(shader_dir() / name)[0]


def bindings(source: str) -> dict[str, tuple[int, bool]]:
    """``name -> (binding index, read_only)`` for every group-0 storage binding in ``source``."""
    return {name: (int(idx), mode == "read") for idx, mode, name in _BINDING.findall(source)}


def entry_points(source: str) -> list[str]:
    return _ENTRY.findall(source)


def _functions(source: str) -> dict[str, str]:
    """Function name -> body text (braces matched; comments removed)."""
    text = _COMMENT.sub("", source)
    out = {}
    for m in _FN.finditer(text):
        start = text.find("{", m.end())
        depth, i = 0, start
        while i < len(text):
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            i += 1
            if depth == 0:
                break
        out[m.group(1)] = text[m.end():i]  # parameters and body
    return out


def resources(source: str) -> dict[str, tuple[int, int, str]]:
    """``name -> (group, binding, kind)`` for every resource declared in ``source`` (kind: the address space,
    ``"storage"`` or ``"uniform"``, or ``"handle"`` for textures and samplers)."""
    out = {}
    for g1, b1, b2, g2, space, name in _RESOURCE.findall(source):
        out[name] = (int(g1 or g2), int(b1 or b2), space or "handle")
    return out


@functools.lru_cache(maxsize=256)
def used_names(source: str, entry: str) -> frozenset:
    """Every identifier entry point ``entry`` mentions, through the functions it calls."""
    fns = _functions(source)
    seen, todo, used = set(), [entry], set()
    while todo:
        f = todo.pop()
        if f in seen or f not in fns:
            continue
        seen.add(f)
        ids = set(_IDENT.findall(fns[f]))
        used |= ids
        todo += [i for i in ids if i in fns]
    return frozenset(used)


def used_bindings(source: str, entry: str) -> frozenset:
    """The bindings entry point ``entry`` uses, through the functions it calls."""
    return used_names(source, entry) & frozenset(bindings(source))
