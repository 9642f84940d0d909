"""Tensor-core GEMMs from WGSL on Dawn's subgroup matrices (issue 24): every kernel variant worth trying, timed with
GPU timestamps at 4096^3 and at GPT-2's 768-wide shapes, each checked against NumPy float64 of its float16 operands;
Newton-Schulz (5 steps) on GPT-2 124M's 48 hidden matrices; torch's f32/tf32/f16/bf16 matmul, its Newton-Schulz and
torch.optim.Muon on the same card. The kernels are the package's own (rlx_gpu/linalg/tc*.py), run on a Dawn device
made here (wgpudawn; the package cannot select Dawn yet), one with Dawn's robustness on and one without it.

    source .gl/gpu_env.sh && python3 benchmarks/tc_gemm_bench.py     # on the H200: <= 6 minutes, JSON lines in $OUT
    python benchmarks/tc_gemm_bench.py --check                       # here: every kernel through Tint (Null backend)

Compile errors are printed and written whole. The last lines are a summary table.
"""
import argparse
import json
import os
import sys
import time
from dataclasses import asdict
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from rlx_gpu.linalg.tcconfig import TcConfig  # noqa: E402  (pure Python: imports no wgpu)

B = TcConfig(subgroup=32, edges=False, store="direct")
# name -> config at 4096^3 (NN, f32 out): blocks and subgroup grids, then one knob at a time on the 4-subgroup 128^2
VARIANTS = {
    "128x128 4sg 4x4": B,
    "128x128 8sg 2x4": B.with_(wm=4, wn=2, tm=2, tn=4),
    "128x128 8sg 4x2": B.with_(wm=2, wn=4, tm=4, tn=2),
    "128x256 8sg bk16": B.with_(wm=2, wn=4, bk=16),
    "128x256 8sg s1": B.with_(wm=2, wn=4, stages=1),
    "256x128 8sg bk16": B.with_(wm=4, wn=2, bk=16),
    "64x64 4sg 2x2": B.with_(tm=2, tn=2),
    "128x64 4sg 4x2": B.with_(tn=2),
    "64x128 4sg 2x4": B.with_(tm=2),
    "s1": B.with_(stages=1),
    "bk16": B.with_(bk=16),
    "bk64 s1": B.with_(bk=64, stages=1),
    "pad0": B.with_(pad=0),
    "smem h4": B.with_(smem="h4"),
    "coop copies": B.with_(stage="coop"),
    "f16 loads": B.with_(stage="f16"),
    "no swizzle": B.with_(swizzle=1),
    "scratch store": B.with_(store="scratch"),
    "scratch 2 slots": B.with_(store="scratch", slots=2),
    "bounds checks": B.with_(edges=True, store="scratch"),
    "8sg 2x4 pad0": B.with_(wm=4, wn=2, tm=2, tn=4, pad=0),
    "direct 1sg 4x4 (probe)": B.with_(wm=1, wn=1, stage="direct"),
    "direct 4sg 4x4": B.with_(stage="direct"),
}
BIG = (4096, 4096, 4096, 1, False, False, "f32", False)
SMALL = ("64x64 4sg 2x2", "128x64 4sg 4x2", "64x128 4sg 2x4")
# (M, N, K, batch, ta, tb, out, d): GPT-2's widths, and the three GEMMs of Newton-Schulz on 24 768x3072 matrices
SHAPES = {"768^3": (768, 768, 768, 1, False, False, "f32", False),
          "768^3 x48": (768, 768, 768, 48, False, False, "f32", False),
          "768x3072x768 x48": (768, 3072, 768, 48, False, False, "f32", False),
          "ns A=XX^T 768x768x3072 NT x24": (768, 768, 3072, 24, False, True, "f16", False),
          "ns B=bA+cAA 768^3 +D x24": (768, 768, 768, 24, False, False, "f16", True),
          "ns X'=aX+BX 768x3072x768 +D x24": (768, 3072, 768, 24, False, False, "f16", True),
          "ns tall A=X^TX 768x768x3072 TN x12": (768, 768, 3072, 12, True, False, "f16", False)}
HIDDEN = [(768, 2304), (768, 768), (768, 3072), (3072, 768)]  # x12: GPT-2 124M's hidden matrices
FAST = ["disable_robustness", "disable_workgroup_init"]


def for_shape(cfg: TcConfig, shape) -> TcConfig:
    """``cfg`` applied to a shape of :data:`SHAPES` (its transposes, output, D; the fragment store where allowed)."""
    M, N, K, batch, ta, tb, out, d = shape
    store = cfg.store if out == "f32" and not d and not cfg.edges else "scratch"
    return cfg.with_(ta=ta, tb=tb, out=out, epi="d" if d else "none", store=store)


def all_configs():
    """Every kernel configuration this script may run (tests/test_tc.py compiles them all with Tint): the variants,
    on every shape, and choose_config's own for Newton-Schulz at the workgroup-memory limits an adapter may have."""
    from rlx_gpu.linalg import tc
    out = [c.with_(mode="subgroup-matrix") for c in VARIANTS.values()]
    out += [for_shape(c, s) for c in VARIANTS.values() for s in SHAPES.values()]
    for limit in (16384, 32768, 49152, 65536):
        dev = type("Limits", (), {"limits": {"max-compute-workgroup-storage-size": limit}, "features": set()})
        for M, N, K, _, ta, tb, o, d in SHAPES.values():
            out.append(tc.choose_config(dev, "subgroup-matrix", M, N, K, ta=ta, tb=tb, out=o, epi="d" if d else "none",
                                        base=B.with_(store="scratch")))
        out += [tc.fit(c, limit) for c in out]
    return list(dict.fromkeys(out))


def make_devices() -> dict:
    """Dawn on Vulkan with the toggles subgroup matrices need: "default" (Dawn's robustness, as the package would
    run) and "fast" (robustness and workgroup zero-initialisation off); timestamps unquantised on both."""
    import wgpudawn
    wgpudawn.install_as_wgpu()
    import wgpu
    from wgpudawn.backends.dawn import extras

    from rlx_gpu.runtime.device import Device
    extras.set_instance_extras(backends=["Vulkan"], enable_toggles=["allow_unsafe_apis", "vulkan_enable_f16_on_nvidia"])
    adapter = wgpu.gpu.request_adapter_sync(power_preference="high-performance")
    lim = adapter.limits
    keys = ("max-storage-buffer-binding-size", "max-buffer-size", "max-compute-workgroup-storage-size",
            "max-compute-invocations-per-workgroup", "max-compute-workgroup-size-x",
            "max-storage-buffers-per-shader-stage")
    feats = [f for f in ("chromium-experimental-subgroup-matrix", "subgroups", "shader-f16", "timestamp-query")
             if f in adapter.features]
    devs = {}
    for name, toggles in (("default", []), ("fast", FAST)):
        if devs:  # (an adapter gives one device: WebGPU marks it consumed)
            adapter = wgpu.gpu.request_adapter_sync(power_preference="high-performance")
        d = extras.request_device_sync(adapter, required_features=feats, required_limits={k: lim[k] for k in keys},
                                       enable_toggles=toggles, disable_toggles=["timestamp_quantization"])
        devs[name] = Device(adapter, _device=d)
    return devs


def gpu_ms(dev, record, reps: int, repeats: int = 5) -> float:
    """Median GPU milliseconds of ``record(pass)`` over ``repeats`` timed compute passes of ``reps`` calls each (one
    warm-up pass first): timestamps written at the start and the end of each pass."""
    from rlx_gpu.runtime.kernels import ComputePass
    u = dev.wgpu.BufferUsage
    qs = dev.device.create_query_set(type="timestamp", count=2 * (repeats + 1))
    res = dev.device.create_buffer(size=16 * (repeats + 1), usage=u.QUERY_RESOLVE | u.COPY_SRC)
    enc = dev.device.create_command_encoder()
    for r in range(repeats + 1):
        cp = ComputePass.__new__(ComputePass)  # a ComputePass whose pass writes timestamps
        cp.compute = enc.begin_compute_pass(timestamp_writes={
            "query_set": qs, "beginning_of_pass_write_index": 2 * r, "end_of_pass_write_index": 2 * r + 1})
        cp.args_buffer, cp._base, cp._cap, cp.gated, cp.args = None, 0, 0, False, []
        for _ in range(reps):
            record(cp)
        cp.end()
    enc.resolve_query_set(qs, 0, 2 * (repeats + 1), res, 0)
    dev.submit(enc)
    t = dev.read(res, 0, res.size).view(np.uint64).astype(np.float64)
    return float(np.median((t[3::2] - t[2::2]) / reps) * 1e-6)


def f16_buffers(dev, count: int, n, seed, _made={}):
    """``n`` float16 buffers of ``count`` random values (kept per device and size: the variants share them)."""
    from rlx_gpu.linalg import tc
    key = (id(dev), int(count), n, seed)
    if key not in _made:
        block = np.random.default_rng(seed).standard_normal(1 << 20).astype(np.float16)
        _made[key] = [tc.as_f16_buffer(dev, np.resize(np.roll(block, i), key[1]), f"x{i}") for i in range(n)]
    return _made[key]


class Bench:
    """One run: the devices, the records (JSON lines to $OUT/tc_gemm_bench.jsonl) and the phases in order of worth."""

    def __init__(self, budget: float):
        import torch  # (before any wgpu device: see docs/guides/pytorch.md, "Import order")
        self.torch = torch if torch.cuda.is_available() else None
        self.t0, self.budget = time.time(), budget
        out = Path(os.environ.get("OUT", "/tmp"))
        out.mkdir(parents=True, exist_ok=True)
        self.log = open(out / "tc_gemm_bench.jsonl", "w")
        self.rows = []
        try:
            self.devs = make_devices()
        except Exception:  # (torch's figures still come)
            import traceback
            self.devs = {}
            self.rec("device_error", error=traceback.format_exc())
        self.ok = {}  # (device, variant, shape) -> TF/s of a correct kernel

    def rec(self, case, **kw):
        kw = {"case": case, "t": round(time.time() - self.t0, 1), **kw}
        line = json.dumps(kw, default=str)
        whole = "error" in kw or len(line) < 4000  # (compile errors whole; long device records cut here only)
        print(line if whole else line[:4000] + " ...(whole in the JSON file)", flush=True)
        self.log.write(line + "\n")
        self.log.flush()
        self.rows.append(kw)

    def left(self) -> float:
        return self.budget - (time.time() - self.t0)

    def run(self):
        from rlx_gpu.linalg import tc
        for name, dev in self.devs.items():
            from wgpudawn.backends.dawn import extras
            self.rec("device", device=name, adapter=dev.name, info=dev.info, configs=tc.subgroup_matrix_configs(dev),
                     toggles=extras.get_toggles(dev.device), features=sorted(dev.features),
                     limits={k: dev.limits[k] for k in ("max-compute-workgroup-storage-size",
                                                         "max-compute-invocations-per-workgroup",
                                                         "max-storage-buffer-binding-size")})
        phases = [("torch", self.torch_baselines)]
        if self.devs and all(tc.subgroup_matrix_size(d) or MODE == "emulated" for d in self.devs.values()):
            phases += [("gemm 4096", self.gemm_4096), ("gemm 768", self.gemm_768),
                       ("newton-schulz", self.newton_schulz)]
        else:
            self.rec("skipped", phase="wgsl", why="no Dawn device with an f16 16x16x16 subgroup-matrix config")
        for name, fn in phases:
            if self.left() <= 0:
                self.rec("skipped", phase=name, why="budget")
                continue
            try:
                fn()
            except Exception as e:  # one phase failing must not lose the others
                import traceback
                self.rec("phase_error", phase=name, error=traceback.format_exc())
        self.summary()
        return 0

    # -- phases ----------------------------------------------------------------------------------------------------
    def torch_baselines(self):
        torch = self.torch
        if torch is None:
            self.rec("skipped", phase="torch", why="no CUDA torch")
            return
        from rlx_gpu.tools.bench.baselines import cuda_ms
        shapes = {"4096^3": BIG, **SHAPES}
        for sname, (M, N, K, batch, ta, tb, out, d) in shapes.items():
            for dt, tf32 in (("float16", False), ("bfloat16", False), ("float32", False), ("float32", True)):
                torch.backends.cuda.matmul.allow_tf32 = tf32
                t = getattr(torch, dt)
                a = torch.randn(batch, *((K, M) if ta else (M, K)), device="cuda", dtype=t)
                b = torch.randn(batch, *((N, K) if tb else (K, N)), device="cuda", dtype=t)
                fn = (lambda: torch.matmul(a.mT if ta else a, b.mT if tb else b))
                ms = cuda_ms(torch, fn, 5, steps=10, warmup=2)
                self.rec("torch_gemm", shape=sname, dtype=dt + ("+tf32" if tf32 else ""), ms=ms,
                         tflops=2 * M * N * K * batch / ms / 1e9)
        torch.backends.cuda.matmul.allow_tf32 = False
        rng = np.random.default_rng(0)
        mats = [torch.tensor(rng.standard_normal(s).astype(np.float32), device="cuda") for s in HIDDEN * 12]
        coeff = (3.4445, -4.775, 2.0315)
        try:
            from torch.optim._muon import _zeropower_via_newtonschulz as zp
            self.rec("torch_ns", what="torch _zeropower_via_newtonschulz (bf16) per matrix, 48 GPT-2 matrices",
                     ms=cuda_ms(torch, lambda: [zp(g, coeff, 5, 1e-7) for g in mats], 5, steps=3, warmup=2))
            params = [torch.nn.Parameter(m.clone()) for m in mats]
            for p in params:
                p.grad = torch.randn_like(p) * 1e-3
            opt = torch.optim.Muon(params, lr=0.02)
            self.rec("torch_muon", what="torch.optim.Muon step, 48 GPT-2 matrices",
                     ms=cuda_ms(torch, opt.step, 5, steps=3, warmup=2))
        except Exception as e:  # (a torch without Muon)
            self.rec("torch_ns", error=f"{type(e).__name__}: {e}")

    def time_gemm(self, devname, label, cfg, shape, check=True):
        """Compile, check at a small size, time at ``shape``: one record."""
        from rlx_gpu.linalg import tc
        from rlx_gpu.linalg.tcgen import generate
        from tc_cases import gemm_case
        dev = self.devs[devname]
        cfg = cfg.with_(mode=MODE)
        M, N, K, batch, ta, tb, out, d = shape
        ob = 4 if out == "f32" else 2
        batch = max(1, min(batch, dev.max_storage_binding // (max(M * K, K * N) * 2), dev.max_storage_binding //
                           (M * N * ob)))  # (a batch that fits one binding: Dawn may allow 128 MiB)
        cfg = tc.fit(cfg, dev.limits["max-compute-workgroup-storage-size"])  # (K steps and stages fewer if need be)
        row = {"device": devname, "variant": label, "config": cfg.name(), "shape": [M, N, K, batch]}
        if cfg.smem_bytes() > dev.limits["max-compute-workgroup-storage-size"]:
            return self.rec("gemm", **row, skipped=f"{cfg.smem_bytes()} bytes of workgroup memory")
        try:
            mod = dev.shader_module(generate(cfg), cfg.name())
            info = mod.get_compilation_info_sync()
            warn = [m.message for m in getattr(info, "messages", info)]
            if check:
                r = gemm_case(dev, MODE, M=2 * cfg.bm, N=2 * cfg.bn, K=4 * cfg.bk, batch=2, ta=ta, tb=tb,
                              out=out, d=d, alpha=0.75, beta=0.5 if d else 0.0, config=cfg)
                row["rel_err"] = r["rel_err"]
            a, b = f16_buffers(dev, batch * M * K, 1, 1)[0], f16_buffers(dev, batch * K * N, 1, 2)[0]
            c = f16_buffers(dev, batch * M * N * ob // 2, 1, 3)[0]  # (C's bytes, of whichever dtype)
            dd = f16_buffers(dev, batch * M * N, 1, 4)[0] if d else None
            cache, keep = {}, []
            rec = lambda cp: tc.tc_gemm(dev, cp, a, b, c, M, N, K, mode=MODE, ta=ta, tb=tb,  # noqa: E731
                                        batch=batch, out=out, d=dd, beta=0.5 if d else 0.0, config=cfg, keep=keep,
                                        cache=cache)
            flop = 2.0 * M * N * K * batch
            ms = gpu_ms(dev, rec, reps=min(REPS, max(2, int(30e9 / flop))), repeats=REPEATS)
            row.update(ms=ms, tflops=flop / ms / 1e9, warnings=warn or None)
        except Exception as e:  # a compile error (printed whole) or a device error: recorded, the run goes on
            return self.rec("gemm", **row, error=str(e))
        good = row.get("rel_err", 0.0) <= (1e-5 if out == "f32" else 1e-3)
        row["correct"] = good
        if good:
            self.ok[(devname, label, str(shape))] = row["tflops"]
        self.rec("gemm", **row)

    def best(self, devname, shape, n):
        got = sorted(((t, v) for (d, v, s), t in self.ok.items() if d == devname and s == str(shape)), reverse=True)
        return [v for _, v in got[:n]]

    def gemm_4096(self):
        shape = BIG
        for label, cfg in VARIANTS.items():
            if self.left() > 60:
                self.time_gemm("fast", label, cfg, shape)
        for label in self.best("fast", shape, 4):  # the same kernels with Dawn's robustness on
            self.time_gemm("default", label, VARIANTS[label], shape, check=False)
        dev = self.devs["default"]
        from rlx_gpu.linalg.record import gemm
        n = BIG[0]
        bufs, c = f16_buffers(dev, n * n, 2, 2), dev.buffer(n * n * 2, "c16")
        ms = gpu_ms(dev, lambda cp: gemm(dev, cp, bufs[0], bufs[1], c, n, n, n, f16=True, keep=[], cache={}),
                    min(5, REPS), REPEATS)
        self.rec("gemm16_tiled", device="default", shape=[n] * 3, ms=ms, tflops=2 * n ** 3 / ms / 1e9)

    def gemm_768(self):
        cands = list(dict.fromkeys(self.best("fast", BIG, 5) + list(SMALL)))
        for sname, shape in SHAPES.items():
            for label in cands:
                if self.left() > 45:
                    self.time_gemm("fast", label, for_shape(VARIANTS[label], shape), shape)
            for label in self.best("fast", shape, 2):
                if self.left() > 40:
                    self.time_gemm("default", label, for_shape(VARIANTS[label], shape), shape, check=False)

    def newton_schulz(self):
        """5 steps on GPT-2's 48 hidden matrices (12 per shape, batched per shape as Muon does; tall ones on X^T
        through the transposed GEMMs), f32 in and out, f16 matrices with f32 sums; the tiled gemm16 path beside it.
        "grouped": each shape's 17 dispatches in turn; "interleaved": the four shapes' stages in turn (independent
        dispatches next to each other). Checked against the float32 iteration on two matrices of each shape."""
        from rlx_gpu.linalg import tc
        from rlx_gpu.linalg.record import ns16_stages
        from tc_cases import ns_case
        coeff = (3.4445, -4.775, 2.0315)
        ns_shapes = [s for n, s in SHAPES.items() if n.startswith("ns")]
        picks = {"choose_config": None}
        for label in dict.fromkeys(sum((self.best("fast", s, 2) for s in ns_shapes), [])):
            picks[label] = VARIANTS[label]
        for devname in ("fast", "default"):
            dev = self.devs[devname]
            rng = np.random.default_rng(5)
            xs = [dev.buffer(4 * 12 * m * n, f"ns{m}x{n}", data=rng.standard_normal(12 * m * n).astype(np.float32))
                  for m, n in HIDDEN]
            runs = [(k, v, "grouped") for k, v in picks.items()] + [("choose_config", None, "interleaved"),
                                                                     ("tiled gemm16", "tiled", "grouped")]
            for label, base, order in runs:
                if self.left() < 10:
                    break
                cache, keep = {}, []

                def rec(cp, base=base, cache=cache, keep=keep, order=order):
                    gens = [ns16_stages(dev, cp, x, 0, 12, m, n, 5, coeff, 1e-7, keep, cache, mm=None if base == "tiled"
                                        else tc.tc_mm(dev, MODE, 12, keep, cache, configs=_configs_for(base, m, n)))
                            for (m, n), x in zip(HIDDEN, xs)]
                    for g in gens if order == "grouped" else []:
                        for _ in g:
                            pass
                    while gens and order == "interleaved":  # one stage of each in turn
                        gens = [g for g in gens if next(g, StopIteration) is not StopIteration]
                try:
                    row = {"device": devname, "gemms": label, "order": order,
                           "ms": gpu_ms(dev, rec, min(3, REPS), REPEATS)}
                    row["tflops_effective"] = NS_FLOP / row["ms"] / 1e9
                except Exception as e:
                    row = {"device": devname, "gemms": label, "order": order, "error": str(e)}
                self.rec("ns_gpt2", **row)
        dev = self.devs["default"]
        for m, n in HIDDEN if self.left() > 5 else []:
            self.rec("ns_check", device="default", **ns_case(dev, MODE, (2, m, n)))

    def summary(self):
        print("\n== summary (TF/s; ms) ==")
        for r in self.rows:
            if r["case"] in ("gemm", "torch_gemm", "gemm16_tiled") and "tflops" in r:
                name = r.get("variant") or r.get("dtype") or "tiled gemm16"
                ok = "" if r.get("correct", True) else "  WRONG rel_err %.1e" % r["rel_err"]
                print(f"{r['case']:12s} {r.get('device', 'cuda'):8s} {str(r['shape']):28s} {name:28s} "
                      f"{r['tflops']:8.1f} {r['ms']:9.3f}{ok}")
            elif r["case"] in ("ns_gpt2", "torch_ns", "torch_muon") and "ms" in r:
                what = f"{r['gemms']} ({r['order']})" if "gemms" in r else r.get("what")
                print(f"{r['case']:12s} {r.get('device', 'cuda'):8s} {what:60s} {r['ms']:9.3f}")
            elif "error" in r:
                print(f"{r['case']:12s} ERROR {r.get('variant', r.get('phase', ''))}: {str(r['error'])[:300]}")


def dry_run():
    """--dry: shapes / 8 (batches of 2), four variants, the emulated kernels, no torch (a CPU has no CUDA)."""
    global MODE, VARIANTS, SHAPES, HIDDEN, NS_FLOP, BIG, REPS, REPEATS
    MODE, REPS, REPEATS = "emulated", 1, 2
    BIG = (512, 512, 512, 1, False, False, "f32", False)
    VARIANTS = {k: v for i, (k, v) in enumerate(VARIANTS.items()) if i < 2 or k in SMALL or k == "bounds checks"}
    SHAPES = {k: (M // 8, N // 8, K // 8, min(b, 2), *rest) for k, (M, N, K, b, *rest) in SHAPES.items()}
    HIDDEN = [(m // 8, n // 8) for m, n in HIDDEN]
    NS_FLOP = _ns_flop(HIDDEN)


MODE, REPS, REPEATS = "subgroup-matrix", 50, 5  # (--dry: one call, two repeats)


def _ns_flop(hidden):
    return 5 * 12 * sum(4 * min(m, n) ** 2 * max(m, n) + 2 * min(m, n) ** 3 for m, n in hidden)


# Newton-Schulz's FLOP per step on a wide m x n (m <= n): X X^T (2 m^2 n), A A (2 m^3), B X (2 m^2 n)
NS_FLOP = _ns_flop(HIDDEN)


def _configs_for(base, m, n):
    """Newton-Schulz's three GEMM shapes on a (12, m, n) batch, each given ``base`` (None: choose_config's)."""
    if base is None:
        return None
    base = base.with_(mode=MODE)
    s, L, tall = min(m, n), max(m, n), m > n
    shapes = [(s, s, L, tall, not tall, False), (s, s, s, False, False, True),
              (m, n, n if tall else m, False, False, True)]
    return {(M, N, K, ta, tb): for_shape(base, (M, N, K, 12, ta, tb, "f16", d)) for M, N, K, ta, tb, d in shapes}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="only compile every kernel with Tint (Dawn's Null backend)")
    ap.add_argument("--budget", type=float, default=330.0, help="seconds of measuring before the rest is skipped")
    ap.add_argument("--dry", action="store_true", help="here: the whole script on llvmpipe (Dawn), the emulated "
                    "kernels, shapes / 8, a few variants: the Python, not the speed")
    args = ap.parse_args()
    if args.check:
        import subprocess
        cfgs = [asdict(c) for c in all_configs()]
        r = subprocess.run([sys.executable, str(ROOT / "tests" / "tc_worker.py"), "compile"], input=json.dumps(cfgs),
                           capture_output=True, text=True)
        lines = [json.loads(x) for x in r.stdout.splitlines() if x.startswith("{")]
        bad = [x for x in lines if x.get("error") or x.get("warnings")]
        print(json.dumps(bad, indent=1) if bad else f"{len(lines)} of {len(cfgs)} kernels compiled with Tint, clean")
        return 1 if bad or len(lines) != len(cfgs) else 0
    if args.dry:
        dry_run()
    return Bench(args.budget).run()


if __name__ == "__main__":
    sys.exit(main())
