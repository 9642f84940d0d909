"""Tensor-core GEMMs from WGSL on Dawn's subgroup matrices (issue 24), second run: every kernel variant worth trying
at 4096^3 and at GPT-2's 768-wide shapes, Newton-Schulz's epilogues (D loaded before the K loop, packed f16 stores,
scratch slots, symmetric results), Newton-Schulz on GPT-2 124M's 48 hidden matrices (all shapes grouped in one set
of dispatches, per shape, without symmetry, the tiled gemm16), a Muon step (float16 on tensor cores, float32)
against torch.optim.Muon; torch's f32/tf32/f16/bf16 matmul on the same card. GPU timestamps; every kernel checked
against NumPy float64 of its float16 operands before it is timed. Three Dawn devices: "fast" (robustness and
workgroup zero-initialisation off), "norobust" (robustness off: RLX_GPU_DAWN_DISABLE_ROBUSTNESS=1's device) and
"default" (as the package runs by default).

    source .gl/gpu_env.sh && python3 benchmarks/tc_gemm_bench.py   # on the H200: <= 5 minutes, JSON lines in $OUT
    python benchmarks/tc_gemm_bench.py --check                      # here: every kernel through Tint (Null backend)
    python benchmarks/tc_gemm_bench.py --dry                        # here: the whole script, emulated, on llvmpipe

Compile errors are printed and written whole. The last lines are a summary and the decisions the data makes.
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
sys.path[:0] = [str(ROOT), str(ROOT / "tests"), str(ROOT / "benchmarks")]

from rlx_gpu.linalg.tcconfig import TcConfig  # noqa: E402  (pure Python: imports no wgpu)

B = TcConfig(subgroup=32, edges=False, store="direct", stages=1)  # "s1": the first run's best (223 TF/s fast)
# name -> config at 4096^3 (NN, f32 out): the first run's best and one or two knobs at a time around it
VARIANTS = {
    "s1": B,
    "s1 h4": B.with_(smem="h4"),
    "s1 pf": B.with_(prefetch=True),
    "s1 pf h4": B.with_(prefetch=True, smem="h4"),
    "bk16 s1": B.with_(bk=16),
    "bk16 s1 h4": B.with_(bk=16, smem="h4"),
    "bk16 s1 pf h4": B.with_(bk=16, smem="h4", prefetch=True),
    "bk64 s1 pf h4": B.with_(bk=64, smem="h4", prefetch=True),
    "8sg 2x4 s1": B.with_(wm=4, wn=2, tm=2, tn=4),
    "8sg 4x2 s1": B.with_(wm=2, wn=4, tm=4, tn=2),
    "8sg 2x4 s1 pf h4": B.with_(wm=4, wn=2, tm=2, tn=4, prefetch=True, smem="h4"),
    "128x256 8sg s1": B.with_(wm=2, wn=4),
    "128x256 8sg s1 pf h4": B.with_(wm=2, wn=4, prefetch=True, smem="h4"),
    "256x128 8sg s1": B.with_(wm=4, wn=2),
    "256x128 8sg s1 pf h4": B.with_(wm=4, wn=2, prefetch=True, smem="h4"),
    "256x256 16sg s1 h4": B.with_(wm=4, wn=4, smem="h4"),
    "s1 w16": B.with_(swizzle=16),
    "s1 w4": B.with_(swizzle=4),
    "s1 pad16": B.with_(pad=16),
    "s2 (first default)": B.with_(stages=2),
    "s2 bk16 h4": B.with_(stages=2, bk=16, smem="h4"),
    "64x128 s1": B.with_(tm=2),
    "128x64 s1": B.with_(tn=2),
    "64x64 s1": B.with_(tm=2, tn=2),
}
BIG = "4096^3"
SMALL = ("64x128 s1", "128x64 s1", "64x64 s1")
# (M, N, K, batch, ta, tb, out, d, sym): GPT-2's widths, and the GEMMs of Newton-Schulz on 24 768x3072 matrices
SHAPES = {BIG: (4096, 4096, 4096, 1, False, False, "f32", False, False),
          "768^3": (768, 768, 768, 1, False, False, "f32", False, False),
          "768^3 x48": (768, 768, 768, 48, False, False, "f32", False, False),
          "768x3072x768 x48": (768, 3072, 768, 48, False, False, "f32", False, False),
          "ns A=XX^T 768x768x3072 NT x24": (768, 768, 3072, 24, False, True, "f16", False, True),
          "ns B=bA+cAA 768^3 +D x24": (768, 768, 768, 24, False, False, "f16", True, True),
          "ns X'=aX+BX 768x3072x768 +D x24": (768, 3072, 768, 24, False, False, "f16", True, False)}
NS_SHAPES = {"A": "ns A=XX^T 768x768x3072 NT x24", "B": "ns B=bA+cAA 768^3 +D x24",
             "X": "ns X'=aX+BX 768x3072x768 +D x24"}
# Newton-Schulz's epilogues, changed after choose_config (its choice: "auto")
EPILOGUES = {"auto": {}, "D at end, 1 slot (first run)": dict(d_at="end", cvec=False, slots=1),
             "D start, scalar stores": dict(cvec=False), "2 slots": dict(slots=2), "4 slots": dict(slots=4),
             "not sym": dict(sym=False)}
HIDDEN = [(768, 2304), (768, 768), (768, 3072), (3072, 768)]  # x12: GPT-2 124M's hidden matrices
DEVICES = {"fast": ["disable_robustness", "disable_workgroup_init"], "norobust": ["disable_robustness"],
           "default": []}
COEFF = (3.4445, -4.775, 2.0315)
MODE, REPS, REPEATS = "subgroup-matrix", 50, 5  # (--dry: emulated, one call, two repeats)


def for_shape(dev, cfg: TcConfig, shape, **override) -> TcConfig:
    """choose_config's kernel for a shape of :data:`SHAPES` from ``cfg`` (D before the K loop, packed stores, the
    fragment store where allowed; symmetric where the shape is), with ``override`` changed after it."""
    from rlx_gpu.linalg import tc
    M, N, K, batch, ta, tb, out, d, sym = shape
    got = tc.choose_config(dev, cfg.mode, M, N, K, ta=ta, tb=tb, out=out, epi="d" if d else "none", base=cfg,
                           sym=sym)
    return got.with_(**override).check()


def all_configs():
    """Every kernel configuration this script may run (tests/test_tc.py compiles them all with Tint)."""
    from rlx_gpu.linalg import tcns
    from tc_cases import LimitsDevice
    dev, out = LimitsDevice(49152), []
    for c in VARIANTS.values():
        c = c.with_(mode="subgroup-matrix")
        out += [for_shape(dev, c, s) for s in SHAPES.values()]
        out += [for_shape(dev, c, SHAPES[NS_SHAPES[st]], **e) for st in "BX" for e in EPILOGUES.values()
                if st == "B" or "sym" not in str(e)]
    jobs = [tcns.Job(None, 0, 12, m, n) for m, n in HIDDEN]
    for bases in (None, {st: VARIANTS[v].with_(mode="subgroup-matrix") for st, v in zip("ABX", VARIANTS)}):
        out += tcns.stage_configs(dev, jobs, "subgroup-matrix", bases).values()
    return list(dict.fromkeys(out))


def make_devices() -> dict:
    """Dawn on Vulkan with the package's toggles and features, one device per entry of :data:`DEVICES` (Dawn's
    device toggles), timestamps unquantised."""
    import rlx_gpu
    from rlx_gpu.runtime import implementation as impl
    from rlx_gpu.runtime.device import Device
    rlx_gpu.set_implementation("dawn")
    wgpu = impl.wgpu()
    from wgpudawn.backends.dawn import extras
    devs = {}
    for name, toggles in DEVICES.items():
        adapter = wgpu.gpu.request_adapter_sync(power_preference="high-performance")  # (one device per adapter)
        lim, have = adapter.limits, impl.features(adapter)
        feats = [f for f in (*impl.FEATURES, "mappable-primary-buffers") if f in have]  # (the last: CPU adapters)
        d = extras.request_device_sync(adapter, required_features=[impl.native_feature(f) for f in feats],
                                       required_limits={k: lim[k] for k in impl.LIMITS if k in lim},
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


def f16_buffers(dev, count: int, n, seed, _made={}):  # noqa: B006 (a deliberate per-process cache)
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
        self.rows, self.ok, self.devs = [], {}, {}  # ok: (device, variant, shape) -> TF/s of a correct kernel
        try:
            self.devs = make_devices()
        except Exception:  # (torch's figures still come)
            import traceback
            self.rec("device_error", error=traceback.format_exc())

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
        from wgpudawn.backends.dawn import extras
        for name, dev in self.devs.items():
            self.rec("device", device=name, adapter=dev.name, info=dev.info, configs=dev.subgroup_matrix_configs,
                     toggles=extras.get_toggles(dev.device), features=sorted(dev.features),
                     limits={k: dev.limits[k] for k in ("max-compute-workgroup-storage-size",
                                                         "max-compute-invocations-per-workgroup",
                                                         "max-storage-buffer-binding-size")})
        phases = [("torch", self.torch_baselines)]
        if self.devs and all(tc.subgroup_matrix_size(d) or MODE == "emulated" for d in self.devs.values()):
            phases += [("gemm 4096", self.gemm_4096), ("gemm 768", self.gemm_768), ("epilogues", self.epilogues),
                       ("newton-schulz", self.newton_schulz), ("muon", self.muon)]
        else:
            self.rec("skipped", phase="wgsl", why="no Dawn device with an f16 16x16x16 subgroup-matrix config")
        for name, fn in phases:
            if self.left() <= 0:
                self.rec("skipped", phase=name, why="budget")
                continue
            try:
                fn()
            except Exception:  # one phase failing must not lose the others
                import traceback
                self.rec("phase_error", phase=name, error=traceback.format_exc())
        from tc_bench_report import summary
        summary(self.rows, self.ok)
        return 0

    # -- phases ----------------------------------------------------------------------------------------------------
    def torch_baselines(self):
        torch = self.torch
        if torch is None:
            self.rec("skipped", phase="torch", why="no CUDA torch")
            return
        from rlx_gpu.tools.bench.baselines import cuda_ms
        for sname, (M, N, K, batch, ta, tb, *_) in SHAPES.items():
            for dt, tf32 in (("float16", False), ("bfloat16", False), ("float32", False), ("float32", True)):
                torch.backends.cuda.matmul.allow_tf32 = tf32
                t = getattr(torch, dt)
                a = torch.randn(batch, *((K, M) if ta else (M, K)), device="cuda", dtype=t)
                b = torch.randn(batch, *((N, K) if tb else (K, N)), device="cuda", dtype=t)
                ms = cuda_ms(torch, lambda a=a, b=b, ta=ta, tb=tb: torch.matmul(a.mT if ta else a, b.mT if tb else b), 5,
                             steps=10, warmup=2)
                self.rec("torch_gemm", shape=sname, dtype=dt + ("+tf32" if tf32 else ""), ms=ms,
                         tflops=2 * M * N * K * batch / ms / 1e9)
        torch.backends.cuda.matmul.allow_tf32 = False
        rng = np.random.default_rng(0)
        mats = [torch.tensor(rng.standard_normal(s).astype(np.float32), device="cuda") for s in HIDDEN * 12]
        try:
            from torch.optim._muon import _zeropower_via_newtonschulz as zp
            self.rec("torch_ns", what="torch _zeropower_via_newtonschulz (bf16) per matrix, 48 GPT-2 matrices",
                     ms=cuda_ms(torch, lambda: [zp(g, COEFF, 5, 1e-7) for g in mats], 5, steps=3, warmup=2))
            params = [torch.nn.Parameter(m.clone()) for m in mats]
            for p in params:
                p.grad = torch.randn_like(p) * 1e-3
            opt = torch.optim.Muon(params, lr=0.02)
            self.rec("torch_muon", what="torch.optim.Muon step, 48 GPT-2 matrices",
                     ms=cuda_ms(torch, opt.step, 5, steps=3, warmup=2))
        except Exception as e:  # (a torch without Muon)
            self.rec("torch_ns", error=f"{type(e).__name__}: {e}")

    def time_gemm(self, devname, label, cfg, sname, check=True, **override):
        """Compile, check at a small size, time at shape ``sname``: one record."""
        from rlx_gpu.linalg import tc
        from tc_cases import gemm_case
        dev = self.devs[devname]
        shape = SHAPES[sname]
        M, N, K, batch, ta, tb, out, d, sym = shape
        ob = 4 if out == "f32" else 2
        batch = max(1, min(batch, dev.max_storage_binding // (max(M * K, K * N) * 2), dev.max_storage_binding //
                           (M * N * ob)))  # (a batch that fits one binding: Dawn may allow 128 MiB)
        row = {"device": devname, "variant": label, "shape": sname, "dims": [M, N, K, batch], **({"epilogue": override} if override
                                                                                  else {})}
        try:
            cfg = for_shape(dev, cfg.with_(mode=MODE), shape, **override)
            row["config"] = cfg.name()
            if check:
                r = gemm_case(dev, MODE, M=2 * cfg.bm, N=2 * cfg.bn, K=4 * cfg.bk, batch=2, ta=ta, tb=tb, out=out,
                              d=d, alpha=0.75, beta=0.5 if d else 0.0, config=cfg, sym=cfg.sym)
                row["rel_err"] = r["rel_err"]
            a, b = f16_buffers(dev, batch * M * K, 1, 1)[0], f16_buffers(dev, batch * K * N, 1, 2)[0]
            c = f16_buffers(dev, batch * M * N * ob // 2, 1, 3)[0]  # (C's bytes, of whichever dtype)
            dd = f16_buffers(dev, batch * M * N * (2 if cfg.dtype_d == "f32" else 1), 1, 4)[0] if d else None
            cache, keep = {}, []
            rec = lambda cp: tc.tc_gemm(dev, cp, a, b, c, M, N, K, mode=MODE, ta=ta, tb=tb, batch=batch,  # noqa: E731
                                        out=out, d=dd, beta=0.5 if d else 0.0, config=cfg, keep=keep, cache=cache,
                                        sym=cfg.sym)
            flop = 2.0 * M * N * K * batch
            ms = gpu_ms(dev, rec, reps=min(REPS, max(2, int(30e9 / flop))), repeats=REPEATS)
            row.update(ms=ms, tflops=flop / ms / 1e9)
        except Exception as e:  # a compile error (printed whole) or a device error: recorded, the run goes on
            return self.rec("gemm", **row, error=str(e))
        good = row.get("rel_err", 0.0) <= (1e-5 if out == "f32" else 1e-3)
        row["correct"] = good
        if good:
            self.ok[(devname, label + (f" {override}" if override else ""), sname)] = row["tflops"]
        self.rec("gemm", **row)

    def best(self, devname, sname, n):
        got = sorted(((t, v) for (d, v, s), t in self.ok.items() if d == devname and s == sname and "{" not in v),
                     reverse=True)
        return [v for _, v in got[:n]]

    def gemm_4096(self):
        for label, cfg in VARIANTS.items():
            if self.left() > 150:
                self.time_gemm("fast", label, cfg, BIG)
        for devname in ("norobust", "default"):  # the best kernels with Dawn's robustness (and zero-init) back
            for label in self.best("fast", BIG, 4):
                if self.left() > 130:
                    self.time_gemm(devname, label, VARIANTS[label], BIG, check=False)
        dev = self.devs["default"]
        from rlx_gpu.linalg.record import gemm
        n = SHAPES[BIG][0]
        bufs, c = f16_buffers(dev, n * n, 2, 2), dev.buffer(n * n * 2, "c16")
        ms = gpu_ms(dev, lambda cp: gemm(dev, cp, bufs[0], bufs[1], c, n, n, n, f16=True, keep=[], cache={}),
                    min(5, REPS), REPEATS)
        self.rec("gemm16_tiled", device="default", shape=[n] * 3, ms=ms, tflops=2 * n ** 3 / ms / 1e9)

    def gemm_768(self):
        cands = list(dict.fromkeys(self.best("fast", BIG, 5) + list(SMALL)))
        for sname in SHAPES:
            for label in cands if sname != BIG else []:
                if self.left() > 100:
                    self.time_gemm("fast", label, VARIANTS[label], sname)
            for devname in ("default", "norobust") if sname != BIG else []:
                for label in self.best("fast", sname, 2):
                    if self.left() > 95:
                        self.time_gemm(devname, label, VARIANTS[label], sname, check=False)

    def epilogues(self):
        """Newton-Schulz's B and X' GEMMs with each epilogue of :data:`EPILOGUES`, the best two kernels of each."""
        for st in "BX":
            for label in self.best("fast", NS_SHAPES[st], 2):
                for e in EPILOGUES.values():
                    if e and self.left() > 75 and (st == "B" or "sym" not in e):
                        self.time_gemm("fast", label, VARIANTS[label], NS_SHAPES[st], **e)

    def ns_runs(self):
        """(label, ns_tc options) of the Newton-Schulz runs: choose_config's kernels; each stage's best kernel from
        the NS shapes; per shape (no grouping); without symmetric A and B."""
        bases = {st: VARIANTS[(self.best("fast", NS_SHAPES[st], 1) or ["s1"])[0]].with_(mode=MODE)
                 for st in "ABX"}
        return [("grouped, choose_config", {}), ("grouped, best per stage", {"bases": bases}),
                ("per shape", {"per_shape": True}), ("grouped, not sym", {"sym": False})]

    def newton_schulz(self):
        """5 steps on GPT-2's 48 hidden matrices (12 per shape), f32 in and out, on ns_tc (the package's path) in each
        of :meth:`ns_runs`' ways and on the tiled gemm16; checked against the float32 iteration on 2 of each."""
        from rlx_gpu.linalg import tcns
        from rlx_gpu.linalg.record import ns_encode16
        from tc_cases import ns_case
        for devname in ("fast", "norobust", "default"):
            dev = self.devs[devname]
            rng = np.random.default_rng(5)
            xs = [dev.buffer(4 * 12 * m * n, f"ns{m}x{n}", data=rng.standard_normal(12 * m * n).astype(np.float32))
                  for m, n in HIDDEN]
            jobs = [tcns.Job(x, 0, 12, m, n) for (m, n), x in zip(HIDDEN, xs)]
            runs = self.ns_runs() + ([("tiled gemm16", None)] if devname != "norobust" else [])
            for label, opts in runs:
                if self.left() < 25:
                    break
                cache, keep = {}, []

                def rec(cp, opts=opts, cache=cache, keep=keep, jobs=jobs, dev=dev):
                    if opts is None:
                        for j in jobs:
                            ns_encode16(dev, cp, j.x, 0, 12, j.m, j.n, 5, COEFF, 1e-7, keep, cache)
                        return
                    o = dict(opts)
                    for part in ([[j] for j in jobs] if o.pop("per_shape", False) else [jobs]):
                        tcns.ns_tc(dev, cp, part, 5, COEFF, 1e-7, keep, MODE, cache, **o)
                row = {"device": devname, "gemms": label}
                try:
                    row["ms"] = gpu_ms(dev, rec, min(3, REPS), REPEATS)
                    row["tflops_effective"] = NS_FLOP / row["ms"] / 1e9
                    if opts is not None:
                        row["configs"] = {k: c.name() for k, c in tcns.stage_configs(
                            dev, jobs, MODE, opts.get("bases"), opts.get("sym", True)).items()}
                except Exception as e:
                    row["error"] = str(e)
                self.rec("ns_gpt2", **row)
        dev = self.devs["default"]
        if self.left() > 15:
            self.rec("ns_check", device="default", **ns_case(dev, MODE, None, shapes=[(2, m, n) for m, n in HIDDEN]))

    def muon(self):
        """A Muon step on GPT-2's 48 hidden matrices: float16 Newton-Schulz on tensor cores on each device, float32
        on the default one (the package's Timer: GPU timestamps around the steps)."""
        import rlx_gpu
        from rlx_gpu.tools.bench.timing import Timer
        rng = np.random.default_rng(2)
        params = {f"w{i}": (rng.standard_normal(s) * 0.02).astype(np.float32) for i, s in enumerate(HIDDEN * 12)}
        grads = {k: (rng.standard_normal(v.shape) * 1e-3).astype(np.float32) for k, v in params.items()}
        for devname, dt in (("fast", "float16"), ("norobust", "float16"), ("default", "float16"),
                            ("default", "float32")):
            if self.left() < 8:
                break
            dev = self.devs[devname]
            row = {"device": devname, "ns_dtype": dt}
            try:
                opt = rlx_gpu.Muon(params, lr=0.02, ns_dtype=dt, device=dev)
                opt.write_grads(grads)
                opt.step()  # (the compilations out of the probe: else it times 1 step a run, host latency included)
                dev.sync()
                row["ns_path"] = opt.ns_path if dt == "float16" else "tiled"
                row["ms"] = Timer(dev).calibrated(opt.step, 3, probe=1)[0] * 1e3
                del opt
            except Exception as e:
                row["error"] = str(e)
            self.rec("muon", **row)


def dry_run():
    """--dry: shapes / 8 (batches of 2), a few variants, the emulated kernels, no torch (a CPU has no CUDA)."""
    global MODE, VARIANTS, SHAPES, HIDDEN, NS_FLOP, REPS, REPEATS, DEVICES
    MODE, REPS, REPEATS = "emulated", 1, 2
    VARIANTS = {k: v.with_(tm=2, tn=2) for i, (k, v) in enumerate(VARIANTS.items()) if i < 3 or k in SMALL}
    SHAPES = {k: (M // 8, N // 8, K // 8, min(b, 2), *rest) for k, (M, N, K, b, *rest) in SHAPES.items()}
    HIDDEN = [(m // 8, n // 8) for m, n in HIDDEN]
    NS_FLOP = _ns_flop(HIDDEN)
    DEVICES = {"fast": [], "norobust": [], "default": []}  # (llvmpipe: Dawn's toggles change nothing there)
    os.environ["RLX_GPU_GEMM_PATH"] = MODE  # (Muon's float16 path: the emulated kernel)


def _ns_flop(hidden):
    return 5 * 12 * sum(4 * min(m, n) ** 2 * max(m, n) + 2 * min(m, n) ** 3 for m, n in hidden)


# Newton-Schulz's FLOP per step on a wide m x n (m <= n): X X^T (2 m^2 n), A A (2 m^3), B X (2 m^2 n), counted in
# full (the symmetric products compute about half of theirs)
NS_FLOP = _ns_flop(HIDDEN)


def check() -> int:
    """--check: every kernel of :func:`all_configs` through Tint (tests/tc_worker.py on Dawn's Null backend)."""
    import subprocess
    cfgs = [asdict(c) for c in all_configs()]
    r = subprocess.run([sys.executable, str(ROOT / "tests" / "tc_worker.py"), "compile"], input=json.dumps(cfgs),
                       capture_output=True, text=True)
    lines = [json.loads(x) for x in r.stdout.splitlines() if x.startswith("{")]
    bad = [x for x in lines if x.get("error") or x.get("warnings")]
    print(json.dumps(bad, indent=1) if bad else f"{len(lines)} of {len(cfgs)} kernels compiled with Tint, clean")
    return 1 if bad or len(lines) != len(cfgs) else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="only compile every kernel with Tint (Dawn's Null backend)")
    ap.add_argument("--budget", type=float, default=270.0, help="seconds of measuring before the rest is skipped")
    ap.add_argument("--dry", action="store_true", help="here: the whole script on llvmpipe (Dawn), the emulated "
                    "kernels, shapes / 8, a few variants: the Python, not the speed")
    args = ap.parse_args()
    if args.check:
        return check()
    if args.dry:
        dry_run()
    return Bench(args.budget).run()


if __name__ == "__main__":
    sys.exit(main())
