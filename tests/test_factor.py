"""The blocked factorisations on the GPU (rlx_gpu/linalg/factor.py, householder.py, eigen.py, half.py) against NumPy
in float64: Cholesky, the triangular solves, LU with partial pivoting, the products with a triangular factor, the
Householder QR (rank-deficient and ill-conditioned matrices too, where Cholesky-QR breaks down), the eigenbases of
g g^T and g^T g, and the float16 path's conversions and products. Sizes past one 32-column block and past one
workgroup of 256 threads; batches of two or three matrices (each its own).

Tolerances (float32; relative to the largest entry of the reference): Cholesky and the solves 5e-6 (measured 1.2e-6
at n = 77), LU 2e-5 on matrices with condition number below 10 (measured 3e-6), the triangular products 3e-6
(measured 1.1e-6 at 600); QR: Q^T Q = I within 2e-6 (measured 5.4e-7) and Q R = A within 5e-6 (measured 3.2e-6)
whatever the conditioning, Q equal to NumPy's within 2e-6 where that is well defined; eigenbases: relative residual
||G Q - Q diag(Q^T G Q)|| / ||G|| within 1e-4 (the issue's bound; measured 1e-6 to 3.5e-6), orthonormal within
2e-6. float16 products: 1.5e-3 relative on the emulated tensor-core kernel (f32 sums; measured 4.4e-4), 3e-3 on
gemm16 (partial sums of 16 in f16; measured 9.7e-4)."""
import numpy as np
import pytest

from rlx_gpu.linalg import eigen, factor, half, householder
from rlx_gpu.linalg import record as gemms
from rlx_gpu.linalg.factor import Mat, Rec

pytestmark = pytest.mark.gpu


def up(dev, x):
    return dev.buffer(max(4, x.nbytes), "test", data=np.ascontiguousarray(x))


def down(dev, buf, shape, dtype=np.float32):
    n = int(np.prod(shape))
    return dev.read(buf, 0, n * np.dtype(dtype).itemsize, out=np.empty(n, dtype)).reshape(shape)


def record(dev, batch, fn):
    enc, keep = dev.device.create_command_encoder(), []
    fn(Rec(dev, enc, batch, keep, {}))
    dev.submit(enc)
    dev.sync()


def rel(got, want):
    return float(np.abs(got - want).max() / np.abs(want).max())


@pytest.mark.parametrize("trsm_wide", [0, 128], ids=["trsm0", "trsm128"])
@pytest.mark.parametrize("n", [5, 40, 77, 200])
def test_cholesky_and_triangular_solves(device, n, trsm_wide, monkeypatch):
    """(``trsm_wide``: factor.WIDE, trsm_right's outer blocks; the same tolerances.)"""
    monkeypatch.setattr(factor, "WIDE", trsm_wide)
    rng = np.random.default_rng(n)
    B, rows, q = 2, 300, 13
    a = rng.standard_normal((B, n + 3, n))
    g = (np.einsum("bij,bik->bjk", a, a) + 0.1 * np.eye(n)).astype(np.float32)
    L = np.linalg.cholesky(g.astype(np.float64))
    buf, pan = up(device, g), device.buffer(4 * B * rows * 128, "panel")
    record(device, B, lambda r: factor.cholesky(r, Mat(buf, 0, n * n, n), n, pan))
    assert rel(np.tril(down(device, buf, (B, n, n))), L) <= 5e-6
    y = rng.standard_normal((B, rows, n)).astype(np.float32)
    u = (np.triu(rng.standard_normal((B, n, n))) + 3 * np.eye(n)).astype(np.float32)
    for factor_, lower_t, want in ((L.astype(np.float32), True, np.linalg.solve(L, y.transpose(0, 2, 1))),
                                   (u, False, np.linalg.solve(u.transpose(0, 2, 1), y.transpose(0, 2, 1)))):
        yb, fb = up(device, y), up(device, factor_)
        mats = (Mat(yb, 0, rows * n, n), Mat(fb, 0, n * n, n))
        record(device, B, lambda r, mats=mats, lower_t=lower_t: factor.trsm_right(r, *mats, rows, n, pan,
                                                                                  lower_t=lower_t))
        assert rel(down(device, yb, (B, rows, n)), want.transpose(0, 2, 1)) <= 5e-6, lower_t
    x = rng.standard_normal((B, n, q)).astype(np.float32)
    lo = (np.tril(rng.standard_normal((B, n, n))) + 3 * np.eye(n)).astype(np.float32)
    for t, upper in ((u, True), (lo, False)):
        xb, tb = up(device, x), up(device, t)
        mats = (Mat(xb, 0, n * q, q), Mat(tb, 0, n * n, n))
        record(device, B, lambda r, mats=mats, upper=upper: factor.trsm_left(r, *mats, n, q, pan, upper=upper))
        assert rel(down(device, xb, (B, n, q)), np.linalg.solve(t.astype(np.float64), x)) <= 5e-6, upper


@pytest.mark.parametrize("n", [7, 70])
def test_lu_solve_pivots(device, n):
    """[M | T] -> M^-1 T: M well conditioned but with zeros (and tiny entries) where a pivot-free LU divides."""
    rng = np.random.default_rng(n)
    B, q = 3, 9
    m = (np.eye(n) + 0.3 * rng.standard_normal((B, n, n)) / np.sqrt(n))[:, rng.permutation(n)]  # rows permuted
    m[:, 0, 0] = 0.0
    m[:, 1, 1] = 1e-9
    t = rng.standard_normal((B, n, q))
    W = n + q
    ab = up(device, np.concatenate([m, t], axis=2).astype(np.float32))
    bufs = [device.buffer(4 * B * W * 32, k) for k in ("p1", "p2")]
    piv, uc = device.buffer(4 * B * 32, "piv"), device.buffer(4 * B * n * n, "u")
    record(device, B, lambda r: factor.lu_solve(r, Mat(ab, 0, n * W, W), n, q, bufs, piv, uc))
    assert rel(down(device, ab, (B, n, W))[:, :, n:], np.linalg.solve(m, t)) <= 2e-5


@pytest.mark.parametrize("s", [300, 600])
def test_products_with_a_triangle(device, s):
    rng = np.random.default_rng(s)
    B, o = 2, 70
    U = np.triu(rng.standard_normal((B, s, s))).astype(np.float32)
    X, Y = rng.standard_normal((B, s, o)).astype(np.float32), rng.standard_normal((B, o, s)).astype(np.float32)
    T = lambda a: a.transpose(0, 2, 1)  # noqa: E731
    cases = [("a_upper", False, False, U, X, s, o, s, U @ X), ("a_lower", True, False, U, X, s, o, s, T(U) @ X),
             ("b_upper", False, False, Y, U, o, s, s, Y @ U), ("b_lower", False, True, Y, U, o, s, s, Y @ T(U)),
             ("both_upper", False, False, U, U, s, s, s, U @ U)]
    for tri, ta, tb, a, b, M, N, K, want in cases:
        ab, bb, cb = up(device, a), up(device, b), up(device, np.zeros((B, M, N), np.float32))
        args = (Mat(ab, 0, a[0].size, a.shape[2]), Mat(bb, 0, b[0].size, b.shape[2]), Mat(cb, 0, M * N, N), M, N, K)
        kw = dict(ta=ta, tb=tb, tri=tri)
        record(device, B, lambda r, args=args, kw=kw: factor.tri_gemm(r, *args, **kw))
        assert rel(down(device, cb, (B, M, N)), want) <= 3e-6, tri


def householder_q(device, a, width=None):
    """(``width``: the calls' own block width, default householder.WIDE's.)"""
    B, s, c = a.shape
    ab = up(device, a.astype(np.float32))
    junk = np.random.default_rng(1).standard_normal(B * s * c).astype(np.float32)  # (V's buffer not zeroed)
    vs = device.buffer(4 * B * s * c, "hh", data=junk)
    tb, qb = (device.buffer(4 * B * k, "hh") for k in (householder.t_floats(c, width), s * s))
    work = tuple(device.buffer(4 * B * householder.work_floats(s, width), "w") for _ in range(2))

    def run(r):
        A, Q = Mat(ab, 0, s * c, c), Mat(qb, 0, s * s, s)
        householder.qr(r, A, s, c, Mat(vs, 0, s * c, c), tb, work, width)
        householder.form_q(r, Q, s, c, s, Mat(vs, 0, s * c, c), tb, work, width)
        householder.positive_r(r, Q, A, s, c)
    record(device, B, run)
    r_ = np.triu(down(device, ab, (B, s, c))[:, :c, :])
    return down(device, qb, (B, s, s)), r_ * np.where(np.diagonal(r_, axis1=1, axis2=2) < 0, -1, 1)[:, :, None]


@pytest.fixture(params=[(0, 256, 256), (128, 256, 256), (128, 1024, 256), (128, 1024, 16), (128, 1024, 0)],
                ids=["wide0", "wide128", "wide128-panel1024", "wide128-panel1024-split16", "wide128-panel1024-nosplit"])
def wide(request, monkeypatch):
    """householder.WIDE off and on (the default), householder.PANEL = 1024 (the panels' threads), and the GEMMs'
    split K (linalg.record.SPLIT_K: 256 the default, which these sides' K's are too short for; 16, so that the
    panels' and blocks' V^T X split here as the H200's sides of 768-3072 do; 0: SPLIT off): the same tolerances
    every way."""
    monkeypatch.setattr(householder, "WIDE", request.param[0])
    monkeypatch.setattr(householder, "PANEL", request.param[1])
    monkeypatch.setattr(gemms, "SPLIT", bool(request.param[2]))
    monkeypatch.setattr(gemms, "SPLIT_K", request.param[2] or 256)
    return request.param[0]


def test_panel_threads_run_where_the_device_allows_them(device, monkeypatch):
    """PANEL = 1024 compiles hh_panel with PT = 1024 where the device has 1024 invocations a workgroup (llvmpipe and
    the H200 do), 256 (no constant: the first version) otherwise; another value is refused by name."""
    lim = min(device.limits["max-compute-invocations-per-workgroup"], device.limits["max-compute-workgroup-size-x"])
    monkeypatch.setattr(householder, "PANEL", 1024)
    assert householder.panel_constants(device) == ({"PT": 1024} if lim >= 1024 else {})
    monkeypatch.setattr(householder, "PANEL", 256)
    assert householder.panel_constants(device) == {}
    monkeypatch.setattr(householder, "PANEL", 512)
    with pytest.raises(ValueError, match="householder.PANEL"):
        householder.panel_constants(device)


@pytest.mark.parametrize("shape", [(5, 5), (77, 30), (300, 40), (70, 70), (300, 160)])
def test_householder_qr(device, shape, wide):
    rng = np.random.default_rng(shape[0])
    a = rng.standard_normal((2,) + shape)
    if shape == (70, 70):  # rank-deficient: a repeated column and ten zero ones
        a[:, :, 5] = a[:, :, 3]
        a[:, :, 10:20] = 0
    q, r = householder_q(device, a)
    for z in range(2):
        assert np.abs(q[z].T @ q[z] - np.eye(shape[0])).max() <= 2e-6
        assert rel(q[z][:, :shape[1]] @ r[z], a[z]) <= 5e-6
        if shape != (70, 70):
            q64, r64 = np.linalg.qr(a[z])
            assert np.abs(q[z][:, :shape[1]] - q64 * np.sign(np.diag(r64))).max() <= 2e-6


def test_householder_where_cholesky_qr_fails(device, wide):
    """SOAP's refresh factors M = GG Q, whose Gram matrix Q^T GG^2 Q squares GG's condition number: at 1e7 (and for
    a rank-deficient GG) Cholesky-QR's Cholesky meets a non-positive pivot in float32, Householder's Q stays
    orthonormal to rounding and reproduces M."""
    from rlx_gpu import linalg
    rng = np.random.default_rng(9)
    u, _ = np.linalg.qr(rng.standard_normal((96, 96)))
    v, _ = np.linalg.qr(rng.standard_normal((96, 96)))
    m = ((u * np.logspace(0, -7, 96)) @ v.T)[None]
    q, r = householder_q(device, m)
    assert np.abs(q[0].T @ q[0] - np.eye(96)).max() <= 2e-6 and rel(q[0] @ r[0], m[0]) <= 5e-6
    chol = linalg.cholesky_qr(m[0].astype(np.float32), device=device)
    assert not np.isfinite(chol).all() or np.abs(chol.T @ chol - np.eye(96)).max() > 1e-2


def test_householder_width_per_call(device, monkeypatch):
    """qr and form_q given their own width: wide=0 under WIDE=128 the bits of WIDE=0 (the old code, which
    eigen.GRAD_WIDE = 0 relies on), wide=128 under WIDE=0 those of WIDE=128; the two widths' bits differ here."""
    a = np.random.default_rng(9).standard_normal((2, 300, 160))
    got = {}
    for module, call in ((0, None), (128, 0), (128, None), (0, 128)):
        monkeypatch.setattr(householder, "WIDE", module)
        got[module, call] = householder_q(device, a, call)
    for x, y in [*zip(got[0, None], got[128, 0]), *zip(got[128, None], got[0, 128])]:
        np.testing.assert_array_equal(x, y)
    assert not np.array_equal(got[0, None][0], got[128, None][0])
    with pytest.raises(ValueError, match="multiple of 32"):
        householder.t_floats(160, 48)


def residual(g, q):
    lam = np.einsum("ij,ij->j", q, g @ q)
    return np.linalg.norm(g @ q - q * lam) / np.linalg.norm(g), lam


@pytest.mark.parametrize("shape", [(16, 16), (12, 20), (24, 8), (40, 33), (64, 300)])
def test_gram_bases(device, shape, wide):
    """The eigenvectors of g g^T and g^T g by descending eigenvalue, for full-rank and rank-deficient g (two equal
    rows and a zero one in the second matrix): residual, orthonormality, order, eigenvalues."""
    check_gram_bases(device, *shape)


@pytest.mark.parametrize("grad_wide,stop", [(0, 1e-7), (128, 1e-6), (0, 1e-5)], ids=["g0-s1e-7", "g128-s1e-6",
                                                                                       "g0-s1e-5"])
@pytest.mark.parametrize("shape", [(24, 8), (40, 33), (64, 300)])
def test_gram_bases_with_the_first_step_switches(device, monkeypatch, shape, grad_wide, stop):
    """eigen.GRAD_WIDE (the grad's QR's own width, WIDE 128 around it) and eigen.STOP (the Jacobi's end): the same
    checks and tolerances."""
    monkeypatch.setattr(eigen, "GRAD_WIDE", grad_wide)
    monkeypatch.setattr(eigen, "STOP", stop)
    check_gram_bases(device, *shape)


def test_jacobi_stop_ends_sweeps_early(device, monkeypatch):
    """eigen.STOP > 0: a matrix's sweeps end sooner (its last is the first whose count, in cnt, is zero: the rounds
    after it skip the matrix), the bases within the same tolerances; a bad value is refused."""
    B, m, n = 2, 64, 200

    def sweeps(stop):
        monkeypatch.setattr(eigen, "STOP", stop)
        _, w = check_gram_bases(device, m, n, B=B, full_rank=True)
        cnt = down(device, w["cnt"], (2 + B * (eigen.SWEEPS + 1),), np.uint32)[2:2 + B * eigen.SWEEPS]
        per = cnt.reshape(B, eigen.SWEEPS)
        return [1 + int(np.argmax(c == 0)) if (c == 0).any() else eigen.SWEEPS for c in per]
    off, on = sweeps(0.0), sweeps(1e-6)
    assert all(a < b for a, b in zip(on, off)), (on, off)
    with pytest.raises(ValueError, match="stop must be"):
        record(device, 1, lambda r: eigen.jacobi(r, Mat(device.buffer(64, "f"), 0, 16, 4), Mat(
            device.buffer(64, "u"), 0, 16, 4), 4, device.buffer(4 * (3 + eigen.SWEEPS), "c"), stop=-1.0))


def check_gram_bases(device, m, n, B=2, full_rank=False):
    """test_gram_bases' checks for B (m, n) g (the second rank-deficient unless ``full_rank``); g and the work
    buffers."""
    rng = np.random.default_rng(m * n)
    g = rng.standard_normal((B, m, n)).astype(np.float32)
    if not full_rank:
        g[1, 1] = g[1, 0]
        g[1, 2] = 0.0
    gb, q0b, q1b = up(device, g), device.buffer(4 * B * m * m, "q0"), device.buffer(4 * B * n * n, "q1")
    w = eigen.gram_work(device, B, m, n, "test")
    record(device, B, lambda r: eigen.gram_bases(r, Mat(gb, 0, m * n, n), m, n, Mat(q0b, 0, m * m, m),
                                                 Mat(q1b, 0, n * n, n), w))
    for q, gram in ((down(device, q0b, (B, m, m)), g @ g.transpose(0, 2, 1)),
                    (down(device, q1b, (B, n, n)), g.transpose(0, 2, 1) @ g)):
        for z in range(B):
            res, lam = residual(gram[z].astype(np.float64), q[z].astype(np.float64))
            assert res <= 1e-4, (z, res)
            assert np.abs(q[z].T @ q[z] - np.eye(len(q[z]))).max() <= 2e-6
            assert np.all(np.diff(lam) <= 1e-5 * lam[0])
            np.testing.assert_allclose(lam, np.linalg.eigvalsh(gram[z].astype(np.float64))[::-1], atol=2e-5 * lam[0])
    return g, w


def test_gram_bases_of_nonfinite_input_are_nan(device):
    g = np.ones((2, 6, 9), np.float32)
    g[0, 2, 3] = np.inf
    gb, q0b, q1b = up(device, g), device.buffer(4 * 2 * 36, "q0"), device.buffer(4 * 2 * 81, "q1")
    w = eigen.gram_work(device, 2, 6, 9, "test")
    record(device, 2, lambda r: eigen.gram_bases(r, Mat(gb, 0, 54, 9), 6, 9, Mat(q0b, 0, 36, 6), Mat(q1b, 0, 81, 9),
                                                 w))
    q0, q1 = down(device, q0b, (2, 6, 6)), down(device, q1b, (2, 9, 9))
    assert np.isnan(q0[0]).all() and np.isnan(q1[0]).all()
    assert np.isfinite(q0[1]).all() and np.isfinite(q1[1]).all()


@pytest.mark.parametrize("path", ["tiled", "emulated"])
def test_float16_products(device, path):
    """Matrices of very different magnitudes (1e-30, 1, 1e4: f16 alone would flush the first to zero and overflow
    on the third's products) converted with their own power-of-two scales, multiplied in float16 with float32 sums,
    the scales undone."""
    if "shader-f16" not in device.features:
        pytest.skip(f"{device.name} has no shader-f16")
    rng = np.random.default_rng(4)
    B, M, N, K = 3, 70, 50, 90
    a = (rng.standard_normal((B, M, K)) * np.array([1e-30, 1.0, 1e4])[:, None, None]).astype(np.float32)
    b = (rng.standard_normal((B, N, K)) * 1e-2).astype(np.float32)
    ab, bb, c = up(device, a), up(device, b), device.buffer(4 * B * M * N, "c")
    a16, b16, scr = (device.buffer(2 * B * k + 4, "h") for k in (M * K, N * K, M * N))
    sc = half.Scales.make(device, B, 2, "test")

    def run(r):
        half.to_half(r, Mat(ab, 0, M * K, K), Mat(a16, 0, M * K, K), M, K, sc, 0)
        half.to_half(r, Mat(bb, 0, N * K, K), Mat(b16, 0, N * K, K), N, K, sc, 1)
        half.mm16(r, path, Mat(a16, 0, M * K, K), Mat(b16, 0, N * K, K), Mat(c, 0, M * N, N), M, N, K, tb=True,
                  scratch=scr)
        half.unscale(r, Mat(c, 0, M * N, N), M, N, sc, [(0, 0), (1, 0)])
    record(device, B, run)
    got, want = down(device, c, (B, M, N)), a.astype(np.float64) @ b.transpose(0, 2, 1)
    inv = down(device, sc.inv, (2, B))
    assert all(np.log2(v) == np.round(np.log2(v)) for v in inv.reshape(-1))  # (powers of two: exact)
    for z in range(B):
        assert rel(got[z], want[z]) <= (1.5e-3 if path == "emulated" else 3e-3), (z, rel(got[z], want[z]))


def test_householder_work_buffers_too_small(device, monkeypatch):
    """Buffers made for WIDE=0 used with WIDE=128 (the switch set after they were made): a clear error."""
    s = c = 70
    monkeypatch.setattr(householder, "WIDE", 0)
    vs, tb, a = (device.buffer(4 * k, "hh") for k in (s * c, householder.t_floats(c), s * c))
    work = tuple(device.buffer(4 * householder.work_floats(s), "w") for _ in range(2))
    monkeypatch.setattr(householder, "WIDE", 128)
    with pytest.raises(ValueError, match="tbuf holds"):
        record(device, 1, lambda r: householder.qr(r, Mat(a, 0, s * c, c), s, c, Mat(vs, 0, s * c, c), tb, work))
