"""SOAP: the twin against pytorch_optimizer.SOAP (4.1.0), the GPU class against the twin (every param and state
buffer, every step, through preconditioner refreshes), a real task, the step's surroundings, and bad input.

Full-rank gradients: a rank-deficient GG has no unique eigenbasis (the first step's g^T g of a wide matrix has
rank m < n), so no two implementations agree there. Square matrices are compared from the first step; for the others
the first step's eigenbasis is shared (loaded from the other side) and everything after it, refreshes included, is
compared. Q's columns are compared up to sign (eigenvectors and QR fix no sign; it cancels in the update).

Tolerances (float32; the products summed in other orders, the decompositions in float64 here and float32 in the
oracle; measured over 12 steps with refreshes after steps 4, 7 and 10): params 1e-5 twin vs oracle (measured 3.0e-6
with normalize_gradient, 1.1e-6 without) and GPU vs twin (measured 4.4e-6 with normalize_gradient, 1.1e-6 without:
a tensor's first update is Adam's sign-like first step in the rotated space, where projected entries near zero take
their sign from rounding); exp_avg 1e-6 (measured 6e-8; GPU vs
twin exact); exp_avg_sq and GG 1e-4 relative to their largest entry (measured 1.0e-5); Q 1e-4 (measured 6.5e-6: an
eigenvector's error is rounding over its eigenvalue gap)."""
import numpy as np
import pytest

import rlx_gpu
from rlx_gpu.linalg import eigen, householder, record
from rlx_gpu.reference import SOAP as Twin
from helpers import partition_with_adamw, resumed, snapshot

pytestmark = pytest.mark.gpu
SQUARE = {"a": (16, 16), "b": (16, 16), "c": (24, 24)}
WIDE = {"w": (12, 20), "t": (24, 8), "s": (10, 10)}
OPTS = [{}, {"normalize_gradient": True, "weight_decay": 0.1},
        {"correct_bias": False, "shampoo_beta": 0.9, "betas": (0.9, 0.99)}]
IDS = ["defaults", "normalize-wd", "no-bias-correction"]


def params(shapes, seed=0):
    rng = np.random.default_rng(seed)
    return {k: rng.standard_normal(s).astype(np.float32) for k, s in shapes.items()}


def close_state(a: dict, b: dict, what: str, q_tol=1e-4) -> None:
    np.testing.assert_allclose(a["exp_avg"], b["exp_avg"], atol=1e-6, err_msg=what)
    for k in ("exp_avg_sq", "GG_0", "GG_1"):
        scale = max(1.0, float(np.abs(b[k]).max()))
        np.testing.assert_allclose(a[k], b[k], atol=1e-4 * scale, err_msg=f"{what} {k}")
    for k in ("Q_0", "Q_1"):
        qa, qb = np.asarray(a[k]), np.asarray(b[k])
        signs = np.sign((qa * qb).sum(axis=0))
        np.testing.assert_allclose(qa * signs, qb, atol=q_tol, err_msg=f"{what} {k}")


def oracle_state(st) -> dict:
    return {"exp_avg": st["exp_avg"].numpy(), "exp_avg_sq": st["exp_avg_sq"].numpy(), "GG_0": st["GG"][0].numpy(),
            "GG_1": st["GG"][1].numpy(), "Q_0": st["Q"][0].numpy(), "Q_1": st["Q"][1].numpy()}


@pytest.mark.parametrize("opts", OPTS, ids=IDS)
@pytest.mark.parametrize("shapes", [SQUARE, WIDE], ids=["square", "non-square"])
def test_twin_equals_pytorch_optimizer(opts, shapes):
    torch = pytest.importorskip("torch", reason="pytorch_optimizer runs on torch")
    po = pytest.importorskip("pytorch_optimizer", reason="pytorch_optimizer is the oracle (CI installs it)")
    p0 = params(shapes)
    kw = dict(lr=1e-2, precondition_frequency=3, **opts)
    twin = Twin(p0, **kw)
    tp = {n: torch.nn.Parameter(torch.tensor(v)) for n, v in p0.items()}
    oracle = po.SOAP(list(tp.values()), **kw)
    rng = np.random.default_rng(1)
    for s in range(12):  # (refreshes after steps 4, 7 and 10)
        g = {n: rng.standard_normal(v.shape).astype(np.float32) for n, v in p0.items()}
        for n, t in tp.items():
            t.grad = torch.tensor(g[n])
        oracle.step()
        twin.step(g)
        if s == 0 and shapes is WIDE:  # the first eigenbasis of a rank-deficient GG: the oracle's
            for n, t in tp.items():
                twin.state[n]["Q_0"][...] = oracle.state[t]["Q"][0].numpy()
                twin.state[n]["Q_1"][...] = oracle.state[t]["Q"][1].numpy()
        for n, t in tp.items():
            np.testing.assert_allclose(twin.params[n], t.detach().numpy(), atol=1e-5, err_msg=f"{s} {n}")
            close_state(twin.state[n], oracle_state(oracle.state[t]), f"{s} {n}")


@pytest.mark.parametrize("opts", OPTS, ids=IDS)
def test_gpu_equals_twin(device, opts):
    shapes = {**SQUARE, **WIDE}
    p0 = params(shapes, 2)
    kw = dict(lr=1e-2, precondition_frequency=3, **opts)
    gpu, twin = rlx_gpu.SOAP(p0, device=device, **kw), Twin(p0, **kw)
    rng = np.random.default_rng(3)
    for s in range(12):
        g = {n: rng.standard_normal(v.shape).astype(np.float32) for n, v in p0.items()}
        if s in (1, 5):
            del g["b"]  # (a tensor without a grad: its step count falls behind, its first step later in a run)
        gpu.step(g)
        twin.step(g)
        if s == 0:  # the square ones' first eigenbases compared; then the non-square ones' shared (the twin's)
            st = gpu.state_dict()["state"]
            for n in SQUARE:
                close_state(st[n], twin.state[n], f"first step {n}")
            gpu.load_state_dict(twin.state_dict())
        got, st = gpu.read_params(), gpu.state_dict()["state"]
        for n in p0:
            np.testing.assert_allclose(got[n], twin.params[n], atol=1e-5, err_msg=f"{s} {n}")
            close_state(st[n], twin.state[n], f"{s} {n}")
            assert st[n]["step"] == twin.state[n]["step"] == s + 1 - (n == "b") * ((s >= 1) + (s >= 5))


def test_learns_a_least_squares_task(device):
    """min |X W - Y|^2 over W (64 x 32) from a noiseless teacher: SOAP drives the loss down by 100x in 150 steps."""
    rng = np.random.default_rng(4)
    x = rng.standard_normal((256, 64)).astype(np.float32)
    x[:, :8] *= 10.0  # (badly conditioned inputs: what a preconditioner is for)
    w_true = rng.standard_normal((64, 32)).astype(np.float32)
    y = x @ w_true
    opt = rlx_gpu.SOAP({"w": np.zeros((64, 32), np.float32)}, lr=0.05, weight_decay=0.0, device=device)
    losses = []
    for _ in range(150):
        w = opt.read_params()["w"]
        r = x @ w - y
        losses.append(float((r ** 2).mean()))
        opt.step({"w": (2 * x.T @ r / r.size).astype(np.float32)})
    assert losses[-1] < losses[0] / 100, (losses[0], losses[-1])


def test_around_the_step(device, tmp_path):
    """An inf grad with skip_nonfinite leaves params and every state buffer (factors and bases included)
    bit-identical, also at a step that would refresh; clip and lr_scale follow the twin; a checkpoint resumes bit
    for bit; Partition routes SOAP and AdamW in one submission."""
    p0 = params(SQUARE, 5)
    opts = dict(lr=1e-2, precondition_frequency=2, clip_grad_norm=1.0, skip_nonfinite=True)
    gpu, twin = rlx_gpu.SOAP(p0, device=device, **opts), Twin(p0, **opts)
    gpu.set_lr_scale({"b": 0.5})
    twin.set_lr_scale({"b": 0.5})
    rng = np.random.default_rng(6)
    for s in range(7):
        g = {n: rng.standard_normal(v.shape).astype(np.float32) for n, v in p0.items()}
        if s in (0, 3):  # (a first step and a refresh step, skipped)
            g["a"][0, 0] = np.inf
            before = snapshot(gpu)
        gpu.step(g)
        twin.step(g)
        if s in (0, 3):
            assert gpu.last_step_skipped and twin.last_step_skipped
            assert snapshot(gpu) == before
        for n in p0:
            np.testing.assert_allclose(gpu.read_params()[n], twin.params[n], atol=2e-6, err_msg=f"{s} {n}")
    gpu, other = resumed(gpu, tmp_path / "ck", rng, 3, device)  # (its next step refreshes)
    assert snapshot(gpu) == snapshot(other)

    partition_with_adamw(rlx_gpu.SOAP, Twin, p0, device, rng, atol=2e-6)


def test_bad_input(device):
    good = np.ones((4, 4), np.float32)
    with pytest.raises(ValueError, match=r"'v' has shape \(5,\)"):
        rlx_gpu.SOAP({"w": good, "v": np.ones(5, np.float32)}, device=device)
    with pytest.raises(ValueError, match="precondition_frequency"):
        rlx_gpu.SOAP({"w": good}, precondition_frequency=0, device=device)
    with pytest.raises(ValueError, match="shampoo_beta"):
        Twin({"w": good}, shampoo_beta=1.5)
    with pytest.raises(ValueError, match="float16"):
        rlx_gpu.SOAP({"w": good.astype(np.float16)}, device=device)
    opt = rlx_gpu.SOAP({"w": good}, device=device)
    before = snapshot(opt)
    with pytest.raises(ValueError):
        opt.step({"w": np.ones((4, 5), np.float32)})
    assert snapshot(opt) == before


def test_nonfinite_grads_without_the_check(device):
    """An inf grad in an unchecked first step: the factors become NaN on both sides (LAPACK is not asked to
    decompose them, which would raise after the step was taken), and the twin agrees on which entries are NaN."""
    p0 = params({"w": (6, 6)}, 8)
    gpu, twin = rlx_gpu.SOAP(p0, device=device), Twin(p0)
    g = {"w": np.ones((6, 6), np.float32)}
    g["w"][0, 0] = np.inf
    for _ in range(2):
        gpu.step(g)
        twin.step(g)
    st = gpu.state_dict()["state"]["w"]
    assert np.isnan(st["Q_0"]).all() and np.isnan(twin.state["w"]["Q_0"]).all()
    np.testing.assert_array_equal(np.isnan(gpu.read_params()["w"]), np.isnan(twin.params["w"]))


# -- the device's decompositions (decompositions="device", the default) against the host's float64 ones ----------
# Tolerances: the first step's bases' relative residual ||GG Q - Q diag(Q^T GG Q)|| / ||GG|| 1e-4 (the issue's
# bound; measured 1.3e-6 to 2.1e-6 here); over 12 steps with refreshes after steps 4, 7 and 10 the device path
# follows the host path within 1e-4 on params and Q (the bound; measured 1.2e-6 and 4.5e-7: the difference
# is float32 QR against float64 QR of the same float32 M).


FIRST = {"old": (None, 0.0), "grad0-stop1e-7": (0, 1e-7), "grad0-stop1e-6": (0, 1e-6)}


@pytest.mark.parametrize("first", list(FIRST))
def test_first_step_bases_on_the_device(device, first, monkeypatch):
    """(``first``: eigen.GRAD_WIDE and eigen.STOP, the first step's switches; the same tolerances.)"""
    monkeypatch.setattr(eigen, "GRAD_WIDE", FIRST[first][0])
    monkeypatch.setattr(eigen, "STOP", FIRST[first][1])
    p0 = params({**SQUARE, **WIDE, "x": (40, 150)}, 21)
    gpu = rlx_gpu.SOAP(p0, device=device)
    rng = np.random.default_rng(22)
    g = {n: rng.standard_normal(v.shape).astype(np.float32) for n, v in p0.items()}
    gpu.step(g)
    st = gpu.state_dict()["state"]
    for n, v in g.items():
        for q, gg in ((st[n]["Q_0"], v @ v.T), (st[n]["Q_1"], v.T @ v)):
            q, gg = q.astype(np.float64), gg.astype(np.float64)
            lam = np.einsum("ij,ij->j", q, gg @ q)
            assert np.linalg.norm(gg @ q - q * lam) / np.linalg.norm(gg) <= 1e-4, n
            assert np.abs(q.T @ q - np.eye(len(q))).max() <= 2e-6 and np.all(np.diff(lam) <= 1e-5 * lam[0]), n


@pytest.mark.parametrize("hh_wide,first,panel,split", [(0, "old", 256, 256), (128, "old", 256, 256),
                                                       (128, "grad0-stop1e-6", 256, 256), (128, "old", 1024, 256),
                                                       (128, "old", 1024, 16)],
                         ids=["wide0", "wide128", "wide128-grad0-stop1e-6", "wide128-panel1024",
                              "wide128-panel1024-split16"])
def test_device_decompositions_follow_the_host_path(device, hh_wide, first, panel, split, monkeypatch):
    """(``hh_wide``: householder.WIDE, the QR's updates in blocks of 128; a side of 72 then has three panels
    composed in one block, the same tolerances; ``first``: the first step's switches, :data:`FIRST`; ``panel``:
    householder.PANEL, the panels' threads; ``split``: linalg.record.SPLIT_K, 16 so that these sides' GEMMs split
    K as the H200's do.)"""
    monkeypatch.setattr(householder, "WIDE", hh_wide)
    monkeypatch.setattr(householder, "PANEL", panel)
    monkeypatch.setattr(record, "SPLIT_K", split)
    monkeypatch.setattr(eigen, "GRAD_WIDE", FIRST[first][0])
    monkeypatch.setattr(eigen, "STOP", FIRST[first][1])
    p0 = params({**SQUARE, **WIDE, **({"x": (40, 72)} if hh_wide else {})}, 23)
    kw = dict(lr=1e-2, precondition_frequency=3)
    dev_, host = rlx_gpu.SOAP(p0, device=device, **kw), rlx_gpu.SOAP(p0, device=device, decompositions="host", **kw)
    rng = np.random.default_rng(24)
    for s in range(12):
        g = {n: rng.standard_normal(v.shape).astype(np.float32) for n, v in p0.items()}
        dev_.step(g)
        host.step(g)
        a, b = dev_.state_dict(), host.state_dict()
        if s == 0:  # (the non-square ones' first bases are not unique: the host's shared)
            for n in (n for n, v in p0.items() if v.shape[0] != v.shape[1] or n == "s"):
                a["state"][n].update({k: b["state"][n][k] for k in ("Q_0", "Q_1")})
            dev_.load_state_dict(a)
        for n in p0:
            np.testing.assert_allclose(dev_.read_params()[n], host.read_params()[n], atol=1e-4, err_msg=f"{s} {n}")
            close_state(a["state"][n], b["state"][n], f"{s} {n}", q_tol=1e-4)


def test_refresh_of_rank_deficient_factors(device):
    """Rank-one grads: GG of rank one, so M = GG Q is rank-deficient at every refresh (Cholesky-QR breaks down
    there); the device's Householder QR keeps the bases orthonormal and everything finite."""
    rng = np.random.default_rng(25)
    p0 = params({"w": (24, 40)}, 26)
    gpu = rlx_gpu.SOAP(p0, precondition_frequency=2, device=device)
    u, v = rng.standard_normal(24), rng.standard_normal(40)
    for s in range(6):
        gpu.step({"w": (np.outer(u, v) * (1 + 0.1 * s)).astype(np.float32)})
    st = gpu.state_dict()["state"]["w"]
    for k in ("Q_0", "Q_1"):
        assert np.abs(st[k].T @ st[k] - np.eye(len(st[k]))).max() <= 1e-5, k
    assert np.isfinite(gpu.read_params()["w"]).all()


# -- matmul_dtype="float16": the products' inputs in float16 (tests/test_factor.py for the primitives) ---------------
# "auto" runs the tensor-core GEMM where the adapter has subgroup matrices and gemm16 elsewhere, "emulated" the
# tensor-core kernel written out. gemm16 sums 16 products at a time in float16 FMAs, which NVIDIA's driver rounds to
# float16 each (llvmpipe's results sit closer to float32 sums; benchmarks/soap_f16_first_step.py simulates both:
# float16 sums give about 2.5 times the float32 sums' error).
#
# The first update (step 1) is Adam's sign-like first step in the rotated space: u_ij = m~_ij / |g~_ij| with
# m~ = Q_0^T m Q_1 and g~ = Q_0^T g Q_1 each projected in float16 (m = (1 - b1) g rounded apart), so where |g~_ij| is
# within float16's error of zero the entry is a ratio of two rounding errors (Cauchy-like: unbounded, whatever the
# adapter), and one such entry decides a Frobenius error of the whole update (0.04-0.06 on llvmpipe, 0.17 on the
# H200: a comparison with a fixed bound there tests luck). So step 1 is compared in the rotated space on the
# well-posed entries, with a bound derived from float16's unit roundoff u = 2^-11 and the shapes (m x n):
#   the projection of x sums K = m + n + 4 rounded terms per entry (x, Q_0, Q_1 rounded to f16, the m then the n
#   products summed, the intermediate rounded once); by the probabilistic rounding-error bound (Higham and Mary
#   2019) its error is within d_ij = LAM * sqrt(K) * u * T_ij, T_ij = sqrt(sum_kl (Q_0[k,i] x[k,l] Q_1[l,j])^2) the
#   root sum of squares of the terms, for LAM = 3 (probability 1 - 2 exp(-LAM^2 / 2) per entry, per sum);
#   well-posed: |g~_ij| > WELL d_ij (WELL = 10: 7% of the entries left out; the rest move by at most 2/9);
#   there the ratio moves by at most D_ij = 2 d_ij / (|g~_ij| - d_ij);
#   projecting the update back adds, in Frobenius norm, E = LAM * sqrt(K) * u * || sqrt(Q_0^2 U^2 Q_1^2^T) ||;
#   both updates scaled to unit RMS over the well-posed entries (the normalization the step applies, and lr, drop
#   out), their relative difference is at most 2 (||D|| + E) / sqrt(#well-posed).
# (Simulated over 300 random 12 x 20 cases with float16 sums (benchmarks/soap_f16_first_step.py): errors 0.003 median,
# 0.0045 at most, bounds 0.10 to 0.18; measured on llvmpipe: 0.001 to 0.004 against bounds 0.11 to 0.14, and an update
# with one column's projection lost is 0.19 to 0.36 apart.) Displacements that include that update still hold its ill-
# posed entries (on the H200's gemm16, 12 steps' displacement came out 0.055 apart): the later steps are compared by
# their own displacement, from each run's params after it, 5e-2 (llvmpipe: 3.4e-4 to 1.2e-3; over all 12 steps 1e-2 to
# 1.6e-2); GG 2e-3 and exp_avg_sq 1e-2 relative to their largest entry (measured 4.4e-4 and 3.6e-3).
# test_gpu_equals_pytorch_optimizer still compares every step's displacement: 0.15, then 5e-2 after 12 steps.
# gemm16 ("tiled") sums 16 products in f16 before its float32 accumulators: where f16 arithmetic is rounded as f16
# (the H200 on wgpu-native) the later steps came out 0.055 to 0.061 apart ("a"; llvmpipe computes f16 in f32: 1e-3):
# 0.1 for that path (fitted to the H200's 0.061 with margin, not derived; a lost projection is 0.19 to 0.36 apart).
F16_TOL = {**dict.fromkeys(("subgroup-matrix", "emulated"), (0.15, 5e-2)), "tiled": (0.15, 0.1)}
LAM, WELL, U16 = 3.0, 10.0, 2.0 ** -11


def first_update_apart(q0, q1, g, dp_gpu, dp_twin):
    """(the relative difference of the two first updates over the well-posed rotated entries, its bound: above)."""
    q0, q1, g = (np.asarray(v, np.float64) for v in (q0, q1, g))
    k = sum(g.shape) + 4
    gp = q0.T @ g @ q1
    d = LAM * np.sqrt(k) * U16 * np.sqrt((q0 ** 2).T @ g ** 2 @ q1 ** 2)
    well = np.abs(gp) > WELL * d
    rg, rt = (q0.T @ np.asarray(x, np.float64) @ q1 for x in (dp_gpu, dp_twin))
    rg, rt = rg / np.sqrt(np.mean(rg[well] ** 2)), rt / np.sqrt(np.mean(rt[well] ** 2))
    e = LAM * np.sqrt(k) * U16 * np.linalg.norm(np.sqrt(q0 ** 2 @ rg ** 2 @ (q1 ** 2).T))
    bound = 2 * (np.linalg.norm(2 * d[well] / (np.abs(gp[well]) - d[well])) + e) / np.sqrt(well.sum())
    assert well.mean() > 0.8, well.mean()  # (the ill-posed entries are the few near zero)
    return np.linalg.norm(rg[well] - rt[well]) / np.linalg.norm(rt[well]), bound


def float16_soap(p0, device, path, **kw):
    if "shader-f16" not in device.features:
        pytest.skip(f"{device.name} has no shader-f16")
    gpu = rlx_gpu.SOAP(p0, device=device, matmul_dtype="float16", **kw)
    if path != "auto":
        gpu._mm_path = path
    return gpu, F16_TOL[gpu._mm_path]


@pytest.mark.parametrize("path", ["auto", "emulated"])
def test_float16_path_follows_the_twin(device, path):
    p0 = params({**SQUARE, **WIDE}, 27)
    kw = dict(lr=1e-2, precondition_frequency=3, normalize_gradient=True)
    gpu, (_, later) = float16_soap(p0, device, path, **kw)
    twin = Twin(p0, **kw)
    rng, after1 = np.random.default_rng(28), {}
    for s in range(12):
        g = {n: (rng.standard_normal(v.shape) * 1e-3).astype(np.float32) for n, v in p0.items()}
        gpu.step(g)
        twin.step(g)
        if s == 0:  # (the rank-deficient first bases shared, the float16 setting kept)
            sd = twin.state_dict()
            sd["param_groups"][0]["matmul_dtype"] = "float16"
            gpu.load_state_dict(sd)
            bases = {n: (twin.state[n]["Q_0"].copy(), twin.state[n]["Q_1"].copy()) for n in p0}  # (step 1's)
            continue
        if s == 1 or s == 11:
            got = gpu.read_params()
        for n in p0:
            if s == 1:
                err, bound = first_update_apart(*bases[n], g[n], got[n] - p0[n], twin.params[n] - p0[n])
                assert err <= bound, (s, n, err, bound)
                after1[n] = (got[n].copy(), twin.params[n].copy())
            elif s == 11:  # (the later steps' displacements, from both runs' params after the update checked above)
                g1, t1 = after1[n]
                err = np.linalg.norm((got[n] - g1) - (twin.params[n] - t1)) / np.linalg.norm(twin.params[n] - t1)
                assert err <= later, (s, n, err)
    st = gpu.state_dict()["state"]
    for n in p0:
        for k, tol in (("GG_0", 2e-3), ("GG_1", 2e-3)):
            want = twin.state[n][k]
            assert np.abs(st[n][k] - want).max() <= tol * np.abs(want).max(), (n, k)
        err, frac, total = rotated_state_apart(st[n], twin.state[n])
        print(f"exp_avg_sq {n}: matched {frac:.2f} of the entries, apart {err:.2e} of the largest, sums {total:.2e}")
        assert err <= 1e-2 and total <= 1e-2 and frac >= 0.5, (n, err, total, frac)


def rotated_state_apart(got, want, cos=0.999):
    """exp_avg_sq lives in each run's own eigenbasis, whose near-equal eigenvalues' vectors are mixed and ordered by
    rounding: compared where both runs' basis vectors agree (|cos| >= ``cos``, matched one to one), as a fraction of
    the twin's largest entry; and its sum, which no orthogonal basis or reordering changes (each step adds
    (1 - beta2) ||Q0^T g Q1||^2 = (1 - beta2) ||g||^2), relative. Returns (apart, fraction matched, sums apart)."""
    match = []
    for i in (0, 1):
        ov = np.abs(np.asarray(got[f"Q_{i}"], np.float64).T @ np.asarray(want[f"Q_{i}"], np.float64))
        j = ov.argmax(1)
        ok = (ov.max(1) >= cos) & (np.bincount(j, minlength=len(j))[j] == 1)
        match.append((np.flatnonzero(ok), j[ok]))
    (r, pr), (c, pc) = match
    g, w = np.asarray(got["exp_avg_sq"], np.float64), np.asarray(want["exp_avg_sq"], np.float64)
    apart = np.abs(g[np.ix_(r, c)] - w[np.ix_(pr, pc)]).max(initial=0.0) / np.abs(w).max()
    return apart, len(r) * len(c) / w.size, abs(g.sum() - w.sum()) / w.sum()


@pytest.mark.parametrize("matmul_dtype", ["float32", "float16"])
def test_gpu_equals_pytorch_optimizer(device, matmul_dtype):
    """The GPU class itself against the oracle (square matrices: their first eigenbases are unique), both paths
    ("auto"); float32 within 1e-5 as the twin, float16 by F16_TOL's displacement errors."""
    torch = pytest.importorskip("torch", reason="pytorch_optimizer runs on torch")
    po = pytest.importorskip("pytorch_optimizer", reason="pytorch_optimizer is the oracle (CI installs it)")
    p0 = params(SQUARE, 29)
    kw = dict(lr=1e-2, precondition_frequency=3)
    if matmul_dtype == "float16":
        gpu, (first, later) = float16_soap(p0, device, "auto", **kw)
    else:
        gpu = rlx_gpu.SOAP(p0, device=device, **kw)
    tp = {n: torch.nn.Parameter(torch.tensor(v)) for n, v in p0.items()}
    oracle = po.SOAP(list(tp.values()), **kw)
    rng = np.random.default_rng(30)
    for s in range(12):
        g = {n: rng.standard_normal(v.shape).astype(np.float32) for n, v in p0.items()}
        for n, t in tp.items():
            t.grad = torch.tensor(g[n])
        oracle.step()
        gpu.step(g)
        got = gpu.read_params()
        for n, t in tp.items():
            want = t.detach().numpy()
            if matmul_dtype == "float32":
                np.testing.assert_allclose(got[n], want, atol=1e-5, err_msg=f"{s} {n}")
            elif s:
                err = np.linalg.norm(got[n] - want) / np.linalg.norm(want - p0[n])
                assert err <= (later if s == 11 else first), (s, n, err)
