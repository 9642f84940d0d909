"""Timing-only variants of the QAT export and fake-quant kernels for ``qat_bench.py --diagnose`` (issue 28, PERF_NOTES
57's Next: split what the second pass, the update pass's amax notes and the standalone kernels spend). Their results
are WRONG ON PURPOSE: each rewrites generated shader text, so nothing in the package can reach them; a rewrite that
no longer matches raises (a diagnostic that rewrote nothing would time the default under another name).

Optimizer modules (``qat_encode_cached``, the second pass's codes; the update driver):
  enc-nostore     the codes computed, stored only where a word equals an (almost) impossible value (loads and ALU stay)
  enc-fixscale    a fixed scale and reciprocal (no scale loads from workgroup memory or the atomic buffer)
  enc-constentry  the table entry's chain of atomic loads replaced by its words baked into the text per tensor
  upd-noamax      the update pass's amax notes (``qat_note``: workgroup atomics per vec4) removed
Standalone kernels (``qat_kernels.wgsl``'s first entries ``fq_affine``, ``fq_fp8``):
  noalu           no arithmetic: each vec4 loaded and stored through the same indexing (a copy)
  nostore         the same arithmetic, the output stored only where lane x equals an impossible value
  chan-one        the channel's two divisions skipped when there is one channel (the same bits: a candidate fix)
  chan-vec4       fq_affine's channel and qp read once a vec4, not per element (right only where inner % 4 == 0,
                  as in the bench's tensors; the loop order kept, unlike kernels.FAST)
"""
from __future__ import annotations

import re

import numpy as np

from rlx_gpu.addons.qat import kernels as qk
from rlx_gpu.core.qatspec import parse_qat
from rlx_gpu.runtime import kernels as rk
from rlx_gpu.runtime import params as prm_decl
from rlx_gpu.runtime import source as src

OPT_DIAGNOSTICS = ("enc-nostore", "enc-fixscale", "enc-constentry", "upd-noamax")
FQ_DIAGNOSTICS = ("noalu", "nostore", "chan-one", "chan-vec4")
_ENC = "fn qat_encode_cached("
_STORE = "qat_put(q.code + e * q.bits / 32u, word);"
_SCALES = ("if (cached) { sc = qat_cached_scales(q, p, 4u * j, c0); } else { sc = qat_lane_scales(q, p, 4u * j); }")
_ENTRY = "let q = qat_entry(select(0u, blk.tensor, live), live);"
_NOTE = re.compile(r"qat_note\(qe, qc0, qpos, [^;]*\);")
_CHAN = "fn chan(e: u32) -> u32 { return (e / args.inner) % args.channels; }"
_FQ_VEC = "yout[i] = vec4<f32>(fq1(v.x, e), fq1(v.y, e + 1u), fq1(v.z, e + 2u), fq1(v.w, e + 3u));"
_FQ_STORE = re.compile(r"(yout\[i\] = )(vec4<f32>\((?:fq1|fake_quant_fp8)\(v\.x[^;]*\));")


def _in_encode(text: str, old: str, new: str) -> str:
    head, sep, body = text.partition(_ENC)
    if not sep or old not in body:
        raise RuntimeError(f"qatdiag: qat_encode_cached no longer holds {old!r}")
    return head + sep + body.replace(old, new)


def baked_entry(words: np.ndarray) -> str:
    """``qat_entry_baked``: qat_entry with every exported tensor's entry words as literals (a switch on the tensor)."""
    n, ent = int(words[0]), int(words[2])
    cases = []
    for t in range(n):
        k = int(words[16 + t])
        if not k:
            continue
        b = ent + 8 * (k - 1)
        f, L, ch, c0, code, vals = (int(w) for w in words[b + 1: b + 7])
        cases.append(f"        case {t}u: {{ q.per_channel = {str(bool(f & 1)).lower()}; q.fused = {str(bool(f & 2)).lower()}"
                     f" && !refresh; q.bits = {(f >> 8) & 255}u; q.values = {(f >> 16) & 3}u; q.L = {max(L, 1)}u; "
                     f"q.channels = {ch}u; q.amax = {int(words[3]) + c0}u; q.inv = {int(words[4]) + c0}u; "
                     f"q.scale = {int(words[7]) + c0}u; q.code = {code}u; q.vals = {vals}u; q.on = true; }}")
    return ("fn qat_entry_baked(t: u32, live: bool) -> QatEntry {\n    var q: QatEntry;\n"
            "    let refresh = qat_w(6u) == 1u;\n    q.eps = bitcast<f32>(%du);\n    q.L = 1u;\n"
            "    switch (select(%du, t, live)) {\n%s\n        default: { q.on = false; }\n    }\n"
            "    q.on = q.on && (refresh || has(rec(t), ACTIVE));\n    return q;\n}\n"
            % (int(words[5]), 0xFFFFFFFF, "\n".join(cases)))


def rewrite(text: str, which: str, words: np.ndarray | None = None) -> str:
    """The optimizer module ``text`` with the diagnostic ``which`` applied (``words``: the qat buffer's, for
    enc-constentry)."""
    if which == "enc-nostore":
        return _in_encode(text, _STORE, f"if (word == 0x9e3779b9u) {{ {_STORE} }}")
    if which == "enc-fixscale":
        return _in_encode(text, _SCALES, "sc = array<vec4<f32>, 2>(vec4<f32>(0.001), vec4<f32>(1000.0));")
    if which == "enc-constentry":
        return _in_encode(text, _ENTRY, _ENTRY.replace("qat_entry(", "qat_entry_baked(")) + "\n" + baked_entry(words)
    if which == "upd-noamax":
        out, n = _NOTE.subn("", text)
        if not n:
            raise RuntimeError("qatdiag upd-noamax: the update driver no longer calls qat_note")
        return out
    raise ValueError(f"qatdiag: unknown diagnostic {which!r} (expected one of {OPT_DIAGNOSTICS})")


def diagnostic_class(base: type, which: str) -> type:
    """A subclass of optimizer class ``base`` whose exporting buckets' modules are rewritten by ``which``."""
    def _module(self, bucket):
        text = base._module(self, bucket)
        if not bucket.sig.qat:
            return text
        words = None
        if which == "enc-constentry":
            words = self._qat_words(parse_qat(type(self).__name__, self.precision.get("qat"), self._shapes))[0]
        return rewrite(text, which, words)
    return type(base.__name__, (base,), {"_module": _module})


def fq_text(which: str) -> str:
    """qat_kernels.wgsl (with its structs, as shipped_kernel compiles it) with ``which`` applied to the first
    fq_affine and fq_fp8 entries."""
    tail = prm_decl.structs(qk.SHADER)
    code = src.load_source(qk.SHADER)
    code = f"{code}{tail}\n" if tail else code
    if which in ("chan-one", "chan-vec4"):
        old, rep = (_CHAN, _CHAN.replace("{ return", "{ if (args.channels == 1u) { return 0u; } return")) \
            if which == "chan-one" else (_FQ_VEC, "let p = qp[chan(e)];\n        yout[i] = vec4<f32>(" + ", ".join(
                f"fake_quant(v.{c}, p.scale, p.inv_scale, p.zero_point, args.qmin, args.qmax, flag(PER_CHANNEL))"
                for c in "xyzw") + ");")
        if code.count(old) != 1:
            raise RuntimeError(f"qatdiag {which}: qat_kernels.wgsl no longer holds {old!r} once")
        return code.replace(old, rep)
    new = {"noalu": lambda m: m.group(1) + "v;",
           "nostore": lambda m: f"let y = {m.group(2)}; if (y.x == 1234.5678) {{ {m.group(1)}y; }}"}[which]
    out, n = _FQ_STORE.subn(new, code)
    if n != 2:
        raise RuntimeError(f"qatdiag {which}: fq_affine/fq_fp8's stores no longer match the rewrite ({n} of 2)")
    return out


def fq_kernel(dev, which: str, entry: str):
    """The compiled kernel of ``entry`` rewritten by ``which`` (what qat_bench dispatches in place of the shipped)."""
    return rk.get_kernel(dev, f"qatdiag.{which}", fq_text(which), entry, WG=qk.WG, EPT=qk.EPT)
