"""ZeRO-1 over torch.distributed (gloo on localhost) and MPI (mpi4py under mpirun), ranks as processes on the adapter
the rest of the suite uses (``RLX_GPU_ADAPTER`` else the best, on ``RLX_GPU_IMPLEMENTATION``: the ranks inherit
both): 2 and 3 ranks with
different local grads give, after every step, the params of the single-process optimizer stepping the averaged
grads (the mean is the same float32 sums on every rank: bit for bit with 2 ranks, where the sum of two terms has
one order; with 3, gloo's ring may add in another order: 1e-6 relative), every rank holds the same params, and an
inf on one rank skips the step on all."""
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import rlx_gpu

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch", reason="torch.distributed is the transport")
WORKER = Path(__file__).with_name("zero_worker.py")
SHAPES = {"a": (37, 5), "b": (11,), "c": (4, 4, 3), "d": (1,)}


def need_mpi():
    """MPI needs an MPI runtime (mpirun) and mpi4py: skipped where they are missing, except where
    RLX_GPU_REQUIRE_MPI is set (.ci/run installs both and sets it: there it must run)."""
    import importlib.util
    import shutil
    if shutil.which("mpirun") and importlib.util.find_spec("mpi4py"):
        return
    if os.environ.get("RLX_GPU_REQUIRE_MPI"):
        pytest.fail("RLX_GPU_REQUIRE_MPI is set but mpirun or mpi4py is missing")
    pytest.skip("no MPI runtime (mpirun) or no mpi4py")


def run(tmp_path, world, cls_name, steps, opts, first=0, restore="-", save="-", mpi=False):
    if mpi:
        need_mpi()
    out = tmp_path / "zero.npz"
    args = [str(WORKER), str(out), cls_name, str(steps), repr(opts), str(first), str(restore), str(save)]
    if mpi:  # (OpenMPI as root needs --allow-run-as-root; more ranks than cores --oversubscribe)
        chosen = [a for v in ("RLX_GPU_ADAPTER", "RLX_GPU_IMPLEMENTATION") if v in os.environ for a in ("-x", v)]
        cmd = ["mpirun", "-n", str(world), "--oversubscribe", "-x", "ZERO_BACKEND=mpi", "-x", "XDG_RUNTIME_DIR",
               "-x", "PATH", *chosen] + (["--allow-run-as-root"] if os.geteuid() == 0 else []) + [sys.executable] + args
    else:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={world}"] + args
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=dict(os.environ, ZERO_BACKEND="mpi")
                       if mpi else None)
    assert r.returncode == 0, r.stderr[-3000:]
    return [dict(np.load(tmp_path / f"zero.rank{k}.npz")) for k in range(world)]


def averaged(s, world):
    gs = [{n: np.random.default_rng(100 * s + r).standard_normal(v).astype(np.float32) for n, v in SHAPES.items()}
          for r in range(world)]
    if s == 3:
        gs[-1]["a"][0, 0] = np.inf
    total = {n: gs[0][n].copy() for n in SHAPES}
    for g in gs[1:]:
        for n in SHAPES:
            total[n] = total[n] + g[n]
    return {n: total[n] / np.float32(world) for n in SHAPES}


@pytest.mark.parametrize("world,cls_name,opts,mpi", [(2, "AdamW", {"skip_nonfinite": True}, False),
                                                     (3, "SGD", {"momentum": 0.9, "lr": 0.1, "skip_nonfinite": True},
                                                      False),
                                                     (2, "AdamW", {"skip_nonfinite": True}, True),
                                                     (3, "SGD", {"momentum": 0.9, "lr": 0.1, "skip_nonfinite": True},
                                                      True),
                                                     (2, "AdamW", {"scaler": 1024.0}, False)],
                         ids=["gloo-2", "gloo-3", "mpi-2", "mpi-3", "gloo-2-gradscaler"])
def test_zero_equals_single_process_on_averaged_grads(tmp_path, world, cls_name, opts, mpi):
    """(MPI through mpi4py and an MPI runtime, which .ci/run installs: never skipped there.) With a GradScaler
    (``scaler.step(zero, grads)``, grads carrying its power-of-two scale, which backs off at the inf and grows every
    2 clean steps) the params are those of the unscaled run bit for bit: scaling by a power of two commutes with
    rounding."""
    steps = 6
    ranks = run(tmp_path, world, cls_name, steps, opts, mpi=mpi)
    if "scaler" in opts:
        assert [float(ranks[0][f"scale@{s}"]) for s in range(steps)] == [1024, 1024, 2048, 2048, 1024, 1024]
        opts = {"skip_nonfinite": True}
    rng = np.random.default_rng(0)
    params = {n: rng.standard_normal(s).astype(np.float32) for n, s in SHAPES.items()}
    ref = getattr(rlx_gpu, cls_name)(params, **opts)
    for s in range(steps):
        ref.step(averaged(s, world))
        assert all(bool(r[f"skipped@{s}"]) == (s == 3) for r in ranks)
        for n in SHAPES:
            want = ref.params[n].numpy()
            for r in ranks:
                if world == 2:
                    assert np.array_equal(r[f"{n}@{s}"], want), (s, n)
                else:
                    np.testing.assert_allclose(r[f"{n}@{s}"], want, rtol=1e-6, atol=1e-7, err_msg=f"{s} {n}")
    full = sum(int(np.prod(v)) for v in SHAPES.values())
    per = [int(r["state_bytes"]) for r in ranks]
    assert max(per) < full * 4 * (2 if cls_name == "AdamW" else 1)  # (each rank: its shard's state only)


def test_refuses_what_it_cannot_shard():
    from rlx_gpu.compression import TopK
    from rlx_gpu.distributed import ZeroRedundancyOptimizer, shard_ranges, tensor_ranges
    assert shard_ranges(10, 3) == [(0, 3), (3, 6), (6, 10)]
    assert tensor_ranges([4, 1, 5, 2], 2) == [(0, 5), (5, 12)]
    assert tensor_ranges([10, 1], 3) == [(0, 0), (0, 10), (10, 11)]  # (a rank may own nothing)
    with pytest.raises(ValueError, match="SparseAdam is not supported"):
        ZeroRedundancyOptimizer({"w": np.ones(3, np.float32)}, optimizer_class=rlx_gpu.SparseAdam)
    with pytest.raises(TypeError, match="grad_compression must be None or rlx_gpu.compression.TopK"):
        ZeroRedundancyOptimizer({"w": np.ones(3, np.float32)}, grad_compression=0.01)
    for bad in (0.0, 1.5):
        with pytest.raises(ValueError, match="ratio must be in"):
            TopK(bad)
    with pytest.raises(TypeError, match="ratio must be a number"):
        TopK("1%")


def test_checkpoints_reshard_2_to_3_to_1(tmp_path):
    """Saved by 2 ranks after 3 steps, restored by 3 ranks for 2 more (the first of them skipped on an inf), then
    loaded into one process: every step equals the single-process AdamW on the averaged grads (of 2 ranks, then of
    3; 1e-6: three terms summed by gloo's ring), and so do the step counts and moments."""
    opts = {"skip_nonfinite": True}
    run(tmp_path, 2, "AdamW", 3, opts, 0, "-", tmp_path / "ck2")
    ranks = run(tmp_path, 3, "AdamW", 2, opts, 3, tmp_path / "ck2", tmp_path / "ck2")  # (the 2-rank files go)
    assert sorted(p.name for p in tmp_path.glob("ck2.rank*")) == [f"ck2.rank{r}-of-3.npz" for r in range(3)]
    rng = np.random.default_rng(0)
    params = {n: rng.standard_normal(s).astype(np.float32) for n, s in SHAPES.items()}
    ref = rlx_gpu.AdamW(params, **opts)
    for s in range(3):
        ref.step(averaged(s, 2))
    for s in (3, 4):
        ref.step(averaged(s, 3))
        for n in SHAPES:
            for r in ranks:
                np.testing.assert_allclose(r[f"{n}@{s}"], ref.params[n].numpy(), rtol=1e-6, atol=1e-7)
    from rlx_gpu.distributed import single_process_state
    params, state = single_process_state(tmp_path / "ck2")
    one = rlx_gpu.AdamW(params)
    one.load_state_dict({"state": state, "param_groups": one.state_dict()["param_groups"]})
    mine = ref.state_dict()["state"]
    for n in SHAPES:
        assert one.state_dict()["state"][n]["step"] == mine[n]["step"] == 4  # (step 3 was skipped)
        np.testing.assert_allclose(one.state_dict()["state"][n]["exp_avg_sq"], mine[n]["exp_avg_sq"], rtol=1e-5,
                                   atol=1e-9)


def test_a_rank_that_dies(tmp_path):
    """The last of 2 ranks exits before step 2: the other's step raises a RuntimeError that says a rank died or did
    not answer, and its params and state stay as they were."""
    out = tmp_path / "zero.npz"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", str(WORKER),
           str(out), "AdamW", "4", "{}", "0", "-", "-", "2"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    text = r.stdout + r.stderr
    assert "CAUGHT: ZeroRedundancyOptimizer (rank 0 of 2): the grads' reduce-scatter failed: another rank died" in text, \
        text[-3000:]
    assert "UNCHANGED" in text


def test_bad_input_changes_nothing(tmp_path):
    """A missing grad is a KeyError; a checkpoint of another optimizer class is refused before the params change;
    ranks given different tensors are told so."""
    out = tmp_path / "zero.npz"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", str(WORKER),
           str(out), "AdamW", "1", "{}", "0", "-", str(tmp_path / "ck"), "-1", "checks"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    text = r.stdout + r.stderr
    assert r.returncode == 0, text[-3000:]
    for line in ("missing grad: KeyError, unchanged", "other class: ValueError, unchanged",
                 "different tensors: ValueError"):
        assert text.count(line) == 2, (line, text[-3000:])



@pytest.mark.parametrize("cls_name,opts", [
    ("LAMB", {"clip_grad_norm": 1.0, "skip_nonfinite": True, "weight_decay": 0.01}),
    ("Adafactor", {"clip_grad_norm": 1.0, "skip_nonfinite": True, "lr": 0.01}),
    ("AdamW", {"clip_grad_norm": 1.0, "skip_nonfinite": True})])
def test_per_tensor_optimizers_and_clip(tmp_path, cls_name, opts):
    """LAMB and Adafactor keep every tensor whole on one rank (their trust ratio, norms and factors are of the whole
    tensor); with the global clip and the inf skip, 2 ranks follow the single-process optimizer on the averaged
    grads within 1e-6 (the clip's norm: float64 on the host here, float32 sums on the device there)."""
    steps = 6
    ranks = run(tmp_path, 2, cls_name, steps, opts)
    rng = np.random.default_rng(0)
    params = {n: rng.standard_normal(s).astype(np.float32) for n, s in SHAPES.items()}
    ref = getattr(rlx_gpu, cls_name)(params, **opts)
    for s in range(steps):
        ref.step(averaged(s, 2))
        assert all(bool(r[f"skipped@{s}"]) == (s == 3) for r in ranks)
        for n in SHAPES:
            for r in ranks:
                np.testing.assert_allclose(r[f"{n}@{s}"], ref.params[n].numpy(), rtol=1e-6, atol=1e-7,
                                           err_msg=f"{s} {n}")
    if cls_name == "LAMB":  # (whole tensors: "a" on rank 0, the rest on rank 1; each holds its own tensors' state)
        assert 2 * 4 * 37 * 5 <= int(ranks[0]["state_bytes"]) < 2 * 4 * 245  # (arena padding included)


def compressed_reference(world, steps, ratio, opts, cls_name="AdamW"):
    """The spec of a compressed ZeRO run (rlx_gpu.reference.topk): each rank's twin compresses its grads, the lists
    are averaged in rank order, the single-process optimizer steps the mean (a step with inf/NaN anywhere is
    skipped before anything is selected, so the residuals stay)."""
    from rlx_gpu.reference.topk import TopKTwin, average_lists
    rng = np.random.default_rng(0)
    params = {n: rng.standard_normal(s).astype(np.float32) for n, s in SHAPES.items()}
    ref = getattr(rlx_gpu, cls_name)(params, **opts)
    twins = [TopKTwin(SHAPES, ratio, True) for _ in range(world)]
    numel = sum(int(np.prod(v)) for v in SHAPES.values())
    out = []
    for s in range(steps):
        gs = [{n: np.random.default_rng(100 * s + r).standard_normal(v).astype(np.float32) for n, v in SHAPES.items()}
              for r in range(world)]
        if s == 3:
            gs[-1]["a"][0, 0] = np.inf
        if s != 3:
            flat = average_lists([t.compress(g) for t, g in zip(twins, gs)], numel)
            off, mean = 0, {}
            for n, v in SHAPES.items():
                mean[n] = flat[off:off + int(np.prod(v))].reshape(v)
                off += int(np.prod(v))
            ref.step(mean)
        out.append({n: ref.params[n].numpy() for n in SHAPES})
    return out


@pytest.mark.parametrize("ratio,extra", [(1.0, {"skip_nonfinite": True}), (0.05, {"skip_nonfinite": True}),
                                         (0.05, {"scaler": 1024.0})], ids=["1.0", "0.05", "0.05-gradscaler"])
def test_topk_follows_its_spec(tmp_path, ratio, extra):
    """Top-k with error feedback over 2 ranks: every step's params equal the spec's (twins selecting the entries,
    the mean in rank order, AdamW on it) bit for bit; at ratio 1.0 that is the uncompressed ZeRO (the same mean:
    (a + b) * 0.5 = (a + b) / 2); the inf on one rank at step 3 skips the step everywhere. With a GradScaler the
    grads are unscaled before they join the residual (a power-of-two scale: the same bits as without it)."""
    opts = {**extra, "topk": (ratio, True)}
    steps = 6
    ranks = run(tmp_path, 2, "AdamW", steps, opts)
    want = compressed_reference(2, steps, ratio, {"skip_nonfinite": True})
    for s in range(steps):
        assert all(bool(r[f"skipped@{s}"]) == (s == 3) for r in ranks)
        for n in SHAPES:
            for r in ranks:
                assert np.array_equal(r[f"{n}@{s}"], want[s][n]), (s, n)
    if ratio == 1.0:
        plain = run(tmp_path, 2, "AdamW", steps, {"skip_nonfinite": True})
        for s in range(steps):
            for n in SHAPES:
                assert np.array_equal(plain[0][f"{n}@{s}"], ranks[0][f"{n}@{s}"]), (s, n)


def test_topk_with_clip_over_three_ranks(tmp_path):
    """3 ranks, 10% top-k, the global clip: within 1e-6 of the spec (the norm: per-workgroup float32 sums on each
    rank's device, all-reduced)."""
    opts = {"skip_nonfinite": True, "clip_grad_norm": 0.5}
    steps = 6
    ranks = run(tmp_path, 3, "AdamW", steps, {**opts, "topk": (0.1, True)})
    want = compressed_reference(3, steps, 0.1, opts)
    for s in range(steps):
        for n in SHAPES:
            for r in ranks:
                np.testing.assert_allclose(r[f"{n}@{s}"], want[s][n], rtol=1e-6, atol=1e-7, err_msg=f"{s} {n}")


def test_topk_trains_as_well(tmp_path):
    """A small real task (least squares, 2,080 params, two ranks with their own data, SGD momentum 0.9, 600 steps):
    with 1% top-k and error feedback the final error is within 5% of the uncompressed run's."""
    worker = Path(__file__).with_name("zero_train_worker.py")
    got = {}
    for ratio in (0.0, 0.01):
        out = tmp_path / f"mse{ratio}.npy"
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", str(worker),
               str(out), "600", str(ratio)]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
        assert r.returncode == 0, r.stderr[-3000:]
        got[ratio] = float(np.load(out))
    print("final mse", got)
    assert got[0.0] < 0.02  # (the noise floor is 0.01: it trained)
    assert got[0.01] <= 1.05 * got[0.0], got


def test_the_bench_script_runs(tmp_path):
    """benchmarks/zero_bench.py (which launches its ranks) on a small set, both ranks on the suite's adapter (its
    default, ``vulkan:<local rank>``, needs one Vulkan adapter per rank): every part timed."""
    import json
    script = Path(__file__).resolve().parents[1] / "benchmarks" / "zero_bench.py"
    sel = os.environ.get("RLX_GPU_ADAPTER") or rlx_gpu.get_device().name
    r = subprocess.run([sys.executable, str(script), "--sets", "single:5000@1", "--device", sel, "--json",
                        str(tmp_path / "z.json")], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    for rank in (0, 1):
        got = json.loads((tmp_path / f"z.rank{rank}.json").read_text())["sets"][0]
        assert 0.49 < got["state_ratio"] < 0.52 and got["numel"] == 5000  # (arena padding)
        assert all(v > 0 for v in got["topk_0.01"].values())
        assert {"download_grads", "reduce_scatter", "upload_and_step", "all_gather_params"} <= set(got["uncompressed"])


def _rewrite(src, dst, change):
    """A copy of rank file ``src`` at ``dst`` with ``change(members, meta)`` applied (to both, in place)."""
    import json
    with np.load(src) as z:
        members = {k: z[k] for k in z.files}
    meta = json.loads(bytes(members.pop("__meta__")).decode())
    change(members, meta)
    members["__meta__"] = np.frombuffer(json.dumps(meta).encode(), np.uint8)
    np.savez(dst, **members)


def _tampered(tmp_path, ck) -> dict:
    """Copies of a 2-rank LAMB checkpoint, each with one rank file tampered with or corrupted: variant -> (path, the
    file an error must name)."""
    import shutil
    out = {}
    variants = {
        "range": (1, lambda z, m: m.update(range=[0, 245])),  # (rank 1's state would land over rank 0's range)
        "param": (0, lambda z, m: z.update({"param/1": np.float32(3.0)})),  # (broadcast on rank 0, refused on 1)
        "state": (1, lambda z, m: z.update({"tstate/b/exp_avg": np.zeros(10, np.float32)})),
        "stranger": (1, lambda z, m: z.update({"tstate/a/exp_avg": np.zeros((37, 5), np.float32)})),  # (rank 0's)
        "steps": (0, lambda z, m: m.update(steps={"a": -1})),
        "json": (1, None), "cut": (0, None), "zeroed": (1, None), "pickle": (0, None),
    }
    for name, (rank, change) in variants.items():
        folder = tmp_path / name
        folder.mkdir()
        for r in (0, 1):
            shutil.copy(f"{ck}.rank{r}-of-2.npz", folder / f"ck.rank{r}-of-2.npz")
        f = folder / f"ck.rank{rank}-of-2.npz"
        if change is not None:
            _rewrite(f"{ck}.rank{rank}-of-2.npz", f, change)
        elif name == "json":
            with np.load(f) as z:
                members = {k: z[k] for k in z.files}
            members["__meta__"] = np.frombuffer(b'{"format": "rlx_gpu.zero", "version": 2, ', np.uint8)
            np.savez(f, **members)
        elif name == "cut":
            f.write_bytes(f.read_bytes()[:2000])
        elif name == "zeroed":
            f.write_bytes(bytes(f.stat().st_size))
        else:  # (a pickle where a .npz was: np.load would need allow_pickle)
            f.write_bytes(b"\x80\x04\x95" + bytes(64))
        out[name] = (folder / "ck", f)
    return out


def test_tampered_or_corrupted_rank_files_are_refused_by_every_rank(tmp_path):
    """issue 21 items 8 and 14: every rank reads and checks every rank's file before any changes anything, and the
    ranks agree: a range changed to [0, n) (was accepted, rank 1's state over rank 0's), a param replaced by a scalar
    (was broadcast on rank 0 and refused on rank 1 naming another tensor), a state of the wrong shape or of a tensor
    the rank does not hold, a negative step count, broken JSON, a cut file, a zeroed one, a pickle (raw BadZipFile,
    JSONDecodeError, "could not broadcast", "pickled (object) data" before) are each a ValueError naming the file,
    in single_process_state and on both ranks of a restore, which change nothing and can still step together."""
    from rlx_gpu.distributed import read_shards, single_process_state
    run(tmp_path, 2, "LAMB", 2, {}, 0, "-", tmp_path / "ck")
    params, _ = single_process_state(tmp_path / "ck")  # (the genuine files read)
    assert set(params) == set(SHAPES)
    bad = _tampered(tmp_path, tmp_path / "ck")
    for name, (path, f) in bad.items():
        for read in (single_process_state, read_shards):
            with pytest.raises(ValueError) as e:
                read(path)
            assert str(e.value).startswith(str(f)), (name, str(e.value))
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", str(WORKER),
           str(tmp_path / "zero.npz"), "LAMB", "0", "{}", "0", ",".join(str(p) for p, _ in bad.values()), "-", "-1",
           "refused"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    text = r.stdout + r.stderr
    assert r.returncode == 0, text[-3000:]
    for rank in (0, 1):
        for name, (_, f) in bad.items():
            assert f"rank {rank}: REFUSED unchanged: {f}" in text, (rank, name, text[-3000:])
        assert f"rank {rank}: STEPPED" in text and "CHANGED" not in text and "RESTORED" not in text
    # files that read well but whose part one rank's optimizer refuses (here a stand-in that raises, on rank 1):
    # that rank says why, the other, which had loaded its part, puts back what it held
    cmd[-4] = str(tmp_path / "ck")
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=dict(os.environ, ZERO_REFUSE_RANK="1"))
    text = r.stdout + r.stderr
    assert r.returncode == 0, text[-3000:]
    assert f"rank 1: REFUSED unchanged: {tmp_path / 'ck'}: refused for the test" in text, text[-3000:]
    assert "rank 0: REFUSED unchanged: ZeroRedundancyOptimizer.restore (rank 0): another rank refused" in text
    assert "rank 0: STEPPED" in text and "rank 1: STEPPED" in text and "CHANGED" not in text


@pytest.fixture
def one_rank():
    """A process group of this process alone (gloo over an in-memory store), for what needs no second rank."""
    import torch.distributed as dist
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()


def test_a_failed_save_leaves_no_temporary(tmp_path, monkeypatch, one_rank):
    """issue 21 item 10: a ZeRO save on a full disk left its tmp*.npz beside the rank file; now the temporary is
    removed on the error path and the previous file stays."""
    from rlx_gpu.distributed import ZeroRedundancyOptimizer
    zero = ZeroRedundancyOptimizer({"w": np.ones(50, np.float32)}, device="cpu")
    zero.step({"w": np.ones(50, np.float32)})
    zero.save(tmp_path / "ck")
    old = (tmp_path / "ck.rank0-of-1.npz").read_bytes()
    zero.step({"w": np.ones(50, np.float32)})

    def full(f, **kw):
        f.write(b"x" * 1000)
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(np, "savez", full)
    with pytest.raises(OSError, match="No space left"):
        zero.save(tmp_path / "ck")
    assert [p.name for p in tmp_path.iterdir()] == ["ck.rank0-of-1.npz"]
    assert (tmp_path / "ck.rank0-of-1.npz").read_bytes() == old
