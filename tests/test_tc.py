"""The tensor-core GEMM (rlx_gpu/linalg/tc*.py): the emulated path (the same kernel, fragment operations written
out) against NumPy float64 on the CPU adapter; every generated kernel compiled by Tint (Dawn's Null backend, which
has the subgroup-matrix feature but no GPU); the subgroup-matrix path itself on a Dawn adapter that offers it (a
child process: tests/tc_worker.py), skipped elsewhere unless RLX_GPU_REQUIRE_SUBGROUP_MATRIX=1 makes that a failure.

Tolerances (relative to the largest entry of the float64 reference of the same float16 operands): float32 results
2e-6 emulated (measured 2e-7 to 3e-7: products of f16 are exact in f32, sums of at most 128 terms) and 1e-5 on
subgroup matrices (the tensor cores' accumulation order and rounding are the hardware's); float16 results 6e-4
(one rounding: 2^-11 relative, plus the f32 sums; measured 2.9e-4 to 3.7e-4). Newton-Schulz in float16 with f32
sums, 5 steps: 2.5e-3 absolute of the float32 iteration (entries O(1); measured 6.6e-4 to 8.6e-4 on wide and tall
batches, 1.6e-3 with a square one; gemm16's f16 sums give 2.6e-3 to 4.3e-3)."""
import importlib.util
import json
import os
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pytest

from rlx_gpu import linalg
from rlx_gpu.linalg import tc
from rlx_gpu.linalg.tcconfig import TcConfig
from rlx_gpu.linalg.tcgen import generate
from rlx_gpu.runtime.params import Params
from tc_cases import (GEMM_CASES, GROUPED_CASES, NS_CASES, NS_GROUPED, LimitsDevice, case_configs, gemm_case,
                      grouped_case, ns_case)

HERE = Path(__file__).resolve().parent
TOL = {("emulated", "f32"): 2e-6, ("subgroup-matrix", "f32"): 1e-5, ("emulated", "f16"): 6e-4,
       ("subgroup-matrix", "f16"): 6e-4}
NS_TOL = 2.5e-3


def _needs_f16(device):
    if "shader-f16" not in device.features:
        pytest.skip(f"{device.name} has no shader-f16")


@pytest.mark.gpu
@pytest.mark.parametrize("case", GEMM_CASES, ids=lambda c: f"{c['M']}x{c['N']}x{c['K']}")
def test_emulated_gemm_against_numpy(case, device):
    _needs_f16(device)
    r = gemm_case(device, "emulated", **case)
    assert r["rel_err"] <= TOL[("emulated", r["out"])], r


@pytest.mark.gpu
@pytest.mark.parametrize("shapes,out", GROUPED_CASES, ids=["f16", "f32"])
def test_emulated_grouped_gemm_against_numpy(shapes, out, device):
    """Problems of several shapes, offsets, alphas and betas in one dispatch."""
    _needs_f16(device)
    r = grouped_case(device, "emulated", shapes, out=out)
    assert r["rel_err"] <= TOL[("emulated", out)], r


@pytest.mark.gpu
@pytest.mark.parametrize("shape", NS_CASES + [None])
def test_emulated_newton_schulz_against_float32(shape, device):
    """One batch wide and tall, and (None) three shapes at once, grouped."""
    _needs_f16(device)
    assert ns_case(device, "emulated", shape, shapes=None if shape else NS_GROUPED)["abs_err"] <= NS_TOL


@pytest.mark.gpu
def test_linalg_paths(device, monkeypatch):
    _needs_f16(device)
    rng = np.random.default_rng(3)
    a, b = rng.standard_normal((2, 64, 32)).astype(np.float16), rng.standard_normal((2, 32, 64)).astype(np.float16)
    ref = a.astype(np.float64) @ b
    got = linalg.matmul(a, b, device=device, path="emulated")
    assert got.dtype == np.float16 and np.abs(got - ref).max() <= 6e-4 * np.abs(ref).max()
    x = rng.standard_normal((64, 128)).astype(np.float32)  # (the kernels of NS_CASES)
    o = linalg.newton_schulz_orth(x, ns_dtype="float16", device=device, path="emulated")
    assert np.abs(o - linalg.newton_schulz_orth(x, device=device)).max() <= NS_TOL
    sm = tc.subgroup_matrix_size(device) is not None
    assert linalg.gemm_path("float16", device) == ("subgroup-matrix" if sm else "tiled")
    assert linalg.gemm_path("float32", device) == "tiled"
    with pytest.raises(ValueError, match="float16 work"):
        linalg.matmul(x, x.T.copy(), device=device, path="emulated")
    with pytest.raises(ValueError, match="path must be one of"):
        linalg.matmul(a, b, device=device, path="tensor")
    if not sm:
        with pytest.raises(ValueError, match="offers no subgroup matrices"):
            linalg.matmul(a, b, device=device, path="subgroup-matrix")
        monkeypatch.setenv(tc.REQUIRE_ENV, "1")
        with pytest.raises(ValueError, match=tc.REQUIRE_ENV):
            linalg.newton_schulz_orth(x, ns_dtype="float16", device=device)


def test_config_and_params():
    with pytest.raises(ValueError, match="store='direct' needs"):
        TcConfig(store="direct", out="f16", edges=False).check()
    with pytest.raises(ValueError, match="stage='coop' needs edges=False"):
        TcConfig(stage="coop").check()
    with pytest.raises(ValueError, match="mode"):
        TcConfig(mode="tensor").check()
    src = generate(TcConfig(epi="d", out="f16"))
    assert "struct GemmParams" in src and "p.alpha" in src and "prm[" not in src and "deprecated" not in src
    P = Params("P", "M", "scale:f32")
    assert P.wgsl() == "struct P { M: u32, scale: f32, }"
    assert list(P.pack(M=7, scale=0.5)) == [7, int(np.float32(0.5).view(np.uint32))]
    with pytest.raises(KeyError, match=r"missing \['scale'\], unknown \['N'\]"):
        P.pack(M=1, N=2)
    with pytest.raises(ValueError, match="does not fit a u32"):
        P.pack(M=-1, scale=0.0)
    with pytest.raises(ValueError, match="repeats"):
        Params("Q", "a", "a:f32")
    assert P.unpack(P.pack(M=7, scale=0.1).tobytes()) == {"M": 7, "scale": np.float32(0.1)} and P.offset("scale") == 4
    with pytest.raises(KeyError, match="no field 'N'"):
        P.offset("N")
    with pytest.raises(ValueError, match="fewer than"):
        P.unpack(np.zeros(1, np.uint32))


def test_choose_config_fits_and_aligns():
    dev = LimitsDevice(16384)
    cfg = tc.choose_config(dev, "emulated", 4096, 4096, 4096, base=TcConfig())  # (its store: scratch)
    assert cfg.smem_bytes() <= 16384 and not cfg.edges and cfg.stage == "vec8" and cfg.store == "scratch"
    cfg = tc.choose_config(dev, "emulated", 4096, 4096, 4096)  # (no base: the fragment store where allowed)
    assert cfg.store == "direct" and cfg.smem_bytes() <= 16384
    cfg = tc.choose_config(dev, "emulated", 100, 64, 37, ta=True)
    assert cfg.edges and cfg.stage == "f16" and cfg.store == "scratch"
    # rows of 37 in rows strided by 40: 8-wide loads would read past a row's end (so one f16 per load)
    assert tc.choose_config(dev, "emulated", 64, 64, 37, lds=(40, 64, 64)).stage == "f16"
    assert tc.choose_config(dev, "emulated", 64, 64, 40, lds=(48, 64, 64)).stage == "vec8"
    # D before the K loop and packed f16 stores where the blocks are whole and alpha != 0; else D at the end
    cfg = tc.choose_config(dev, "subgroup-matrix", 256, 256, 256, out="f16", epi="d")
    assert (cfg.d_at, cfg.d_type, cfg.cvec, cfg.store) == ("start", "f16", True, "scratch")
    assert tc.choose_config(dev, "subgroup-matrix", 256, 256, 256, epi="d").store == "direct"
    assert tc.choose_config(dev, "subgroup-matrix", 256, 256, 256, out="f16", epi="d", alpha=0.0).d_at == "end"
    cfg = tc.choose_config(dev, "subgroup-matrix", 250, 256, 256, out="f16", epi="d")
    assert (cfg.d_at, cfg.cvec, cfg.edges) == ("end", False, True)
    assert tc.choose_config(dev, "emulated", 256, 256, 256, sym=True).sym
    assert not tc.choose_config(dev, "emulated", 256, 256, 256, sym=True, base=TcConfig(tm=2)).sym  # (not square)
    probs = [tc.Problem(128, 128, 64), tc.Problem(64, 64, 64, offsets=(4, 0, 0, 0))]  # (A's offset: not 8-aligned)
    cfg = tc.choose_config(dev, "emulated", 0, 0, 0, problems=probs)
    assert cfg.groups == 2 and cfg.stage == "f16"


def test_defaults_are_the_h200_runs_best():
    """The kernels choose_config and ns_tc start from on subgroup matrices are the second H200 run's best
    (benchmarks/logs/h200_tc_gemm_bench_second.jsonl: "s1 h4" at 4096^3 and batched 768-wide shapes, 64 x 128 for
    one 768^3 matrix, Newton-Schulz's B on K steps of 16), and every one of them compiles with Tint."""
    from rlx_gpu.linalg import tcns
    dev, sm = LimitsDevice(49152), "subgroup-matrix"
    big = tc.choose_config(dev, sm, 4096, 4096, 4096)
    assert (big.bm, big.bn, big.bk, big.stages, big.smem, big.store, big.edges) == (128, 128, 32, 1, "h4", "direct",
                                                                                     False)
    one = tc.choose_config(dev, sm, 768, 768, 768)  # 36 blocks of 128 x 128
    assert (one.bm, one.bn, one.smem) == (64, 128, "h")
    many = tc.choose_config(dev, sm, 0, 0, 0, problems=[tc.Problem(768, 768, 768, 48)])
    assert (many.bm, many.bn, many.smem) == (128, 128, "h4")
    assert tc.choose_config(dev, sm, 768, 768, 768, sym=True).sym  # (symmetric: square blocks kept)
    ragged = tc.choose_config(dev, sm, 2050, 2000, 100, ta=True, out="f16", epi="d")
    assert (ragged.bm, ragged.smem, ragged.edges) == (128, "h4", True)
    jobs = [tcns.Job(None, 0, 12, m, n) for m, n in ((768, 2304), (768, 768), (768, 3072), (3072, 768))]
    st = tcns.stage_configs(dev, jobs, sm)
    assert [(c.bm, c.bk, c.smem, c.sym) for c in st.values()] == [(128, 32, "h4", True), (128, 16, "h4", True),
                                                                  (128, 32, "h4", False)]
    assert tcns.stage_configs(dev, jobs, sm, bases={"B": TcConfig(stages=1)})["B"].bk == 32  # (a caller's base)
    assert tcns.stage_configs(dev, jobs, "emulated")["B"].bk == tc.DEFAULT_EMULATED.bk
    lines = _worker("compile", [asdict(c) for c in (big, one, many, ragged, *st.values())])
    if lines and "unavailable" in lines[0]:
        pytest.skip(f"Tint (wgpudawn) unavailable: {lines[0]['unavailable']}")
    assert len(lines) == 7 and not [x for x in lines if x.get("error") or x.get("warnings")], lines


def test_config_rules_and_gemm_errors():
    for bad, why in ((dict(cvec=True), "cvec needs"), (dict(sym=True, tm=2), "sym needs square"),
                     (dict(epi="d", d_at="start"), "d_at='start' needs edges=False"), (dict(slots=3), "slots 3"),
                     (dict(prefetch=True), "prefetch needs stages=1"), (dict(groups=65), "groups 65")):
        with pytest.raises(ValueError, match=why):
            TcConfig(**bad).check()
    dev = LimitsDevice(16384)
    with pytest.raises(ValueError, match="needs square results"):
        tc.tc_gemm_grouped(dev, None, None, None, None, [tc.Problem(64, 32, 16)], mode="emulated", sym=True)
    sym_cfg = tc.choose_config(dev, "emulated", 64, 64, 64, sym=True)
    with pytest.raises(ValueError, match="sym=True; given 1, sym=False"):
        tc.tc_gemm(dev, None, None, None, None, 64, 64, 64, mode="emulated", config=sym_cfg)
    with pytest.raises(ValueError, match="D must not be C"):
        tc.tc_gemm(dev, None, None, None, "c", 64, 64, 64, mode="emulated", d="c")


def _worker(cmd, payload, timeout=900):
    r = subprocess.run([sys.executable, str(HERE / "tc_worker.py"), cmd], input=json.dumps(payload),
                       capture_output=True, text=True, timeout=timeout)
    lines = [json.loads(x) for x in r.stdout.splitlines() if x.startswith("{")]
    assert r.returncode == 0, r.stderr[-3000:]
    return lines


def _bench_variants():
    spec = importlib.util.spec_from_file_location("tc_gemm_bench", HERE.parent / "benchmarks" / "tc_gemm_bench.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.all_configs()


def test_every_kernel_compiles_with_tint():
    """Every configuration the tests and the H200 experiment use, in both modes, is valid WGSL for Tint (Dawn's
    compiler): no error and no deprecation warning, before it reaches a GPU."""
    cfgs = [c for m in ("subgroup-matrix", "emulated") for c in case_configs(m)] + _bench_variants()
    cfgs = list(dict.fromkeys(cfgs))
    lines = _worker("compile", [asdict(c) for c in cfgs])
    if lines and "unavailable" in lines[0]:
        pytest.skip(f"Tint (wgpudawn) unavailable: {lines[0]['unavailable']}")
    assert len(lines) == len(cfgs)
    bad = [x for x in lines if x.get("error") or x.get("warnings")]
    assert not bad, json.dumps(bad, indent=1)[:6000]


def test_subgroup_matrix_path_on_the_device():
    """The subgroup-matrix GEMM and Newton-Schulz against NumPy where a Dawn adapter offers subgroup matrices."""
    cases = (GEMM_CASES + [{"grouped": list(g)} for g in GROUPED_CASES] + [{"ns": {"shape": list(s)}} for s in NS_CASES]
             + [{"ns": {"shape": None, "shapes": [list(s) for s in NS_GROUPED]}}])
    lines = _worker("run", cases)
    if lines and "unavailable" in lines[0]:
        if os.environ.get(tc.REQUIRE_ENV, "") not in ("", "0"):
            pytest.fail(f"{tc.REQUIRE_ENV} is set but {lines[0]['unavailable']}")
        pytest.skip(lines[0]["unavailable"])
    results = lines[1:]
    assert len(results) == len(cases), lines
    for r in results:
        ok = r["abs_err"] <= NS_TOL if "abs_err" in r else r["rel_err"] <= TOL[("subgroup-matrix", r["out"])]
        assert ok, r


@pytest.mark.gpu
def test_to_f16_then_the_gemm(device):
    """tcns.to_f16 makes the GEMM's float16 operands from float32 data (scaled; f16's rounding, within half an f16
    ulp of NumPy's), at element offsets; the GEMM of the converted operands against NumPy float64 of them."""
    _needs_f16(device)
    from rlx_gpu.linalg import tcns
    rng = np.random.default_rng(12)
    x = rng.standard_normal(2 * 64 * 96).astype(np.float32)
    xb = device.buffer(x.nbytes + 64, "x", data=np.concatenate([np.zeros(16, np.float32), x]))
    w = device.buffer(x.nbytes, "w")
    enc = device.encoder()
    tcns.to_f16(device, enc, xb, 16, w, 0, x.size, scale=0.5, keep=[])
    c = device.buffer(4 * 64 * 64, "c")
    tc.tc_gemm(device, enc, w, w, c, 64, 64, 96, mode="emulated", offsets=(0, 64 * 96, 0, 0), keep=[])
    device.submit(enc)
    h = device.read(w, 0, x.nbytes // 2).view(np.float16)
    want = (x * np.float32(0.5)).astype(np.float16)
    assert np.all(np.abs(h.astype(np.float64) - want) <= np.abs(want) * 2.0 ** -11 + 2.0 ** -25)
    a, b = h[:64 * 96].reshape(64, 96), h[64 * 96:].reshape(96, 64)
    ref = a.astype(np.float64) @ b
    got = device.read(c).view(np.float32).reshape(64, 64)
    assert np.abs(got - ref).max() <= TOL[("emulated", "f32")] * np.abs(ref).max()


@pytest.mark.gpu
@pytest.mark.parametrize("ns_dtype,cap", [("float16", None), ("float32", None), ("float16", 32768)])
def test_muon_step_switches_change_no_bit(ns_dtype, cap, device, monkeypatch):
    """Muon (float16 Newton-Schulz emulated, and float32) with its records kept, its vec4 kernels and the update
    from Newton-Schulz's float16 result (the defaults) against the same optimizer with all three off (main's way), bit for bit over 4 steps with an lr change and a missing
    grad: wide, tall and odd-sized matrices (the last keep the scalar kernels and the 32 x 32 tiles); the vec4
    kernels and the fused update do run where they may (the elementwise ones on the sizes that are multiples of 4,
    the conversions and the fused update on the wide ones); with bindings capped at 32 KiB, the tensors in several chunks."""
    _needs_f16(device)
    import rlx_gpu
    from rlx_gpu.linalg import tcns
    monkeypatch.setenv(tc.PATH_ENV, "emulated")
    rng = np.random.default_rng(13)
    shapes = {"w": (48, 80), "t": (80, 48), "o": (5, 7), "w2": (48, 80)}
    params = {k: rng.standard_normal(s).astype(np.float32) for k, s in shapes.items()}
    dev = device.with_binding_cap(cap) if cap else device
    new, old = (rlx_gpu.Muon(params, lr=0.02, ns_dtype=ns_dtype, device=dev) for _ in range(2))
    old.reuse_records, old.vec4, old.fuse_out = False, False, False
    chunks = {(id(b), c) for b, i in new._where for c, *_ in b.layout.pieces[i]}
    assert len(chunks) >= 2 if cap else len(chunks) == 1
    for s in range(4):
        g = {k: rng.standard_normal(v).astype(np.float32) for k, v in shapes.items() if (s, k) != (2, "w2")}
        for o in (new, old):
            o.set_lr(0.02 if s < 2 else 0.01)
            o.step(g)
    for k in shapes:
        assert np.array_equal(new.params[k].numpy(), old.params[k].numpy()), k
    vec = {(shape, row[4], row[5]) for shape, *_, rows in new._jobs_kept[1] for row in rows}
    f16 = ns_dtype == "float16"
    assert vec == {((48, 80), True, f16), ((80, 48), True, False), ((5, 7), False, False)}
    for (m, n), entry in (((48, 80), "ns_in4"), ((80, 48), "ns_in"), ((5, 7), "ns_in")):
        job = tcns.Job(None, 0, 2, m, n)
        assert tcns._io(device, job, tcns._layout([job])[0][0], 1e-7, [], None)[1]["ns_in"][0] == entry, (m, n)


def test_shipped_shaders_read_no_positional_words():
    """Every shipped kernel reads its parameters by name (runtime/params.py structs and declared constants): no
    ``prm[n]`` anywhere, and the QAT export's atomic words (``qat_w``) through their declared constants only."""
    import re

    from rlx_gpu.runtime.source import shader_dir
    found = [p.name for p in shader_dir().glob("*.wgsl") if "prm[" in p.read_text()]
    assert not found, f"shaders that read positional parameter words: {found}"
    qat = (shader_dir() / "qat_export.wgsl").read_text()
    assert not re.findall(r"qat_w\((?:b \+ )?\d+u", qat), "qat_export.wgsl reads a word by its number"
