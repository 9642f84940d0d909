"""benchmarks/qdiag.py, the timing-only rewrites of ``kernel_variants.py`` (x-search, x-decode, x-maps, x-bmax,
x-floor): each applies to the module of every closed form the quantized buckets can take (the scalar searches
``q_code_<tag>`` and vlog's four-value ``q_code4_<tag>``), the rewritten module compiles and steps, and a rewrite
that matches nothing raises (a diagnostic that rewrote nothing would time the default under another name)."""
from pathlib import Path

import numpy as np
import pytest

import rlx_gpu
from helpers import load_script
from rlx_gpu.engine.qsearch import FORMS

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"
pytestmark = pytest.mark.gpu


def _qdiag():
    return load_script(BENCH / "qdiag.py", "qdiag")


def _cls(bits: int, form: str):
    return type("AdamW", (rlx_gpu.AdamW,), {"QCLOSED": {4: True, 8: True}, f"QFORM{bits}": form})


def _module(cls, device, bits: int) -> str:
    """The quantized bucket's module after two steps (its state buffers made: the step that loads codes)."""
    p = {"w": np.linspace(-1, 1, 4096, dtype=np.float32)}
    o = cls(p, state_bits=bits, min_quantized_size=1, device=device)
    for _ in range(2):
        o.step({"w": np.full(4096, 0.5, np.float32)})
    return o._module(o.buckets[0])


@pytest.mark.parametrize("bits,form", [(b, f) for b in (8, 4) for f in FORMS[b]])
def test_every_rewrite_applies_to_every_form(bits, form, device):
    qd = _qdiag()
    text = _module(_cls(bits, form), device, bits)
    out = {which: qd.rewrite(text, which) for which in qd.DIAGNOSTICS}
    assert all(t != text for t in out.values()) and len(set(out.values())) == len(out)
    assert "return min(" in out["x-search"] and "q_m_" not in out["x-decode"].split("@compute")[1]


def test_a_rewrite_that_matches_nothing_raises():
    qd = _qdiag()
    for which in qd.DIAGNOSTICS:
        with pytest.raises(RuntimeError, match="no longer matches the rewrite"):
            qd.rewrite("fn main() {}", which)


@pytest.mark.parametrize("which", ["x-search", "x-maps", "x-bmax", "x-floor"])
def test_the_default_rewritten_compiles_and_steps(which, device):
    """The default 8-bit class (its QFORM8) through the rewrite, as kernel_variants builds it: it compiles and
    steps; its values are wrong on purpose, so only that they are finite is checked."""
    qd = _qdiag()
    base = rlx_gpu.AdamW
    cls = qd.diagnostic_class(base, which, {k: getattr(base, k) for k in ("QCLOSED", "QFORM8", "QFORM4")})
    p = {"w": np.linspace(-1, 1, 4096, dtype=np.float32)}
    o = cls(p, state_bits=8, min_quantized_size=1, device=device)
    for _ in range(3):
        o.step({"w": np.full(4096, 0.5, np.float32)})
    assert np.isfinite(o.read_params()["w"]).all()


def test_kernel_variants_times_the_variants_in_the_order_given(monkeypatch):
    """``--variants b,a`` times b first in each round (it used to take variants()' own order whatever was given,
    so a run meant to put a variant first did not); names not of the row are left out, each switch set once."""
    monkeypatch.syspath_prepend(str(BENCH))  # (kernel_variants imports qdiag from its folder)
    kv = load_script(BENCH / "kernel_variants.py", "kernel_variants")
    assert kv.timed_variants("adamw8bit", "fp32", "-qhoist,default,-qredux") == ["-qhoist", "default", "-qredux"]
    assert kv.timed_variants("adamw8bit", "fp32", "+qhoist,default") == ["+qhoist"]  # (+qhoist: the default's)
    assert kv.timed_variants("adamw8bit", "fp32", "x-maps,-wide,default,+qfull") == ["x-maps", "default"]
