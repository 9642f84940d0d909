"""Timing-only variants of the quantized drivers for ``kernel_variants.py`` (PERF_NOTES 54: split what an 8-bit or
4-bit step spends on its maps). Their results are WRONG ON PURPOSE: each rewrites the generated module of the
default driver, so nothing in the package can reach them; they exist to time a driver without part of its work.

  x-search  the code search (the class's closed form, a value at a time or vlog's four at once; or the guide's
            guess and one correction step over the midpoints) replaced by a code from |v|/absmax alone (ALU only);
            the decode and the map copy stay
  x-decode  the decode (map[code] per element: a workgroup-memory load each) replaced by code / QN; the search and
            the copy stay
  x-maps    both, with QDIRECT (no workgroup copy): no map, midpoint or guide is read at all (the floor: the
            loads, the update, the block maxima and the stores)
  x-bmax    the block maxima (q_bmax: subgroup reductions or shuffles, and a workgroup combine) replaced by the
            thread's own key: no subgroup operation or barrier between the update and the codes
  x-floor   x-maps and x-bmax: the loads, the update, the keys, a code from |v|/absmax and the stores
"""
from __future__ import annotations

import re

# the body of q_code_s / q_code_u, and of the four-value q_code4_s / q_code4_u ("vlog"), up to the function's
# closing brace at the line start
_SEARCH = re.compile(r"(fn q_code_([su])\(v: f32, a: f32, inv: f32\) -> u32 \{\n)(.*?)(\n\})", re.S)
_SEARCH4 = re.compile(r"(fn q_code4_([su])\(v: vec4<f32>, a: f32, inv: f32\) -> vec4<u32> \{\n)(.*?)(\n\})", re.S)
_DECODE = re.compile(r"vec4<f32>\(q_m_([su])\(c\.x\), q_m_\1\(c\.y\), q_m_\1\(c\.z\), q_m_\1\(c\.w\)\)")
_BMAX = re.compile(r"(fn q_bmax\(k0: vec2<u32>, [^)]*\) -> vec2<u32> \{\n)(.*?)(\n\})", re.S)
# what each diagnostic takes out of the module; one without "search" or "decode" left reads no map (QDIRECT)
PARTS = {"x-search": ("search",), "x-decode": ("decode",), "x-maps": ("search", "decode"), "x-bmax": ("bmax",),
         "x-floor": ("search", "decode", "bmax")}
DIAGNOSTICS = tuple(PARTS)


def _search(out: str) -> tuple:
    out, n = _SEARCH.subn(lambda m: m.group(1) + "    return min(u32(abs(v * inv) * f32(QN - 1u)), QN - 1u);"
                          + m.group(4), out)
    out, n4 = _SEARCH4.subn(lambda m: m.group(1) + "    return min(vec4<u32>(abs(v * inv) * f32(QN - 1u)), "
                            "vec4<u32>(QN - 1u));" + m.group(4), out)
    return out, n + n4


_REWRITES = {"search": _search,
             "decode": lambda out: _DECODE.subn("(vec4<f32>(c) * (1.0 / f32(QN)))", out),
             "bmax": lambda out: _BMAX.subn(lambda m: m.group(1) + "    return k0;" + m.group(3), out)}


def rewrite(text: str, which: str) -> str:
    """The module ``text`` with the diagnostic ``which`` applied (an error if the driver's text has changed so the
    rewrite no longer applies: a diagnostic that rewrote nothing would time the default under another name)."""
    out, parts = text, PARTS.get(which, ())
    for part in parts:
        out, n = _REWRITES[part](out)
        if not n:
            break
    else:
        if parts:
            return out
    raise RuntimeError(f"qdiag {which}: the quantized driver's text no longer matches the rewrite")


def rewritten_class(base: type, attrs: dict, fn, quantized_only: bool = False) -> type:
    """A subclass of optimizer class ``base`` (with the class attributes ``attrs``) whose modules are ``fn`` of the
    base's module text (``quantized_only``: the quantized buckets' modules alone)."""
    def _module(self, bucket):
        text = base._module(self, bucket)
        return fn(text) if bucket.sig.qbits or not quantized_only else text
    return type(base.__name__, (base,), {**attrs, "_module": _module})


def diagnostic_class(base: type, which: str, attrs: dict) -> type:
    """A subclass of optimizer class ``base`` (with the class attributes ``attrs``) whose modules are rewritten."""
    extra = {"QDIRECT": True} if {"search", "decode"} <= set(PARTS[which]) else {}
    return rewritten_class(base, {**attrs, **extra}, lambda text: rewrite(text, which), quantized_only=True)
