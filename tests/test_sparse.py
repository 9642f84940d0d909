"""Row-sparse grads (rlx_gpu.RowSparse): SparseAdam, and SGD/Adagrad with sparse grads, against torch (twin) and
the twin (GPU), with repeated and duplicate rows, untouched rows unchanged, tensors split over chunks, dense and
sparse tensors in one optimizer, grads uploaded once (upload_sparse), and bad input.

Tolerances: torch's CPU float32 sqrt on vectors is not always correctly rounded (torch.sqrt of 1.9887395e-05
gives 0.0044595283, NumPy 0.0044595287), so SparseAdam and Adagrad agree with torch to 2e-6 relative over 20 steps;
SGD without momentum, whose torch update is one fused multiply-add per entry, bit for bit; SGD with momentum,
whose torch buffer is a sparse tensor of every past entry (a dense one here, as its decay touches every row),
1e-5. GPU against twin:
SparseAdam bit for bit on the CPU adapter; SGD and Adagrad use WGSL's fma, which an adapter need not fuse
(llvmpipe does not): 1e-6 relative; other adapters 1e-5."""
import numpy as np
import pytest

import rlx_gpu
from helpers import snapshot

pytestmark = [pytest.mark.gpu, pytest.mark.filterwarnings("ignore:Sparse invariant checks")]
torch = pytest.importorskip("torch", reason="torch.optim is the oracle")

CASES = [("SparseAdam", {"lr": 0.01}), ("SparseAdam", {"lr": 0.01, "maximize": True, "betas": (0.8, 0.99)}),
         ("Adagrad", {"lr": 0.1}), ("Adagrad", {"lr": 0.1, "lr_decay": 0.01, "maximize": True,
                                                "initial_accumulator_value": 0.1}),
         ("SGD", {"lr": 0.1}), ("SGD", {"lr": 0.1, "maximize": True}), ("SGD", {"lr": 0.1, "momentum": 0.9}),
         ("SGD", {"lr": 0.1, "momentum": 0.9, "nesterov": True})]


def batches(rows, row_shape, steps, seed):
    rng = np.random.default_rng(seed)
    for s in range(steps):
        n = int(rng.integers(0, 12)) if s != 4 else 0  # step 4: an empty grad
        idx = rng.integers(0, rows, n)
        idx = np.concatenate([idx, idx[:3], idx[:1]]).astype(np.int64)  # rows repeated up to three times
        yield idx, rng.standard_normal((idx.size, *row_shape)).astype(np.float32)


def tol(cls_name, opts, gpu_side, device=None):
    if not gpu_side:
        if opts.get("momentum"):  # torch keeps the history as uncoalesced entries, summed in another order
            return 1e-5, 1e-6
        return (0, 0) if cls_name == "SGD" else (2e-6, 1e-7)
    if device is not None and device.info["type"] != "CPU":
        return 1e-5, 1e-6
    return (0, 0) if cls_name == "SparseAdam" or opts.get("momentum") else (1e-6, 1e-7)


def close(a, b, rtol_atol, msg):
    rtol, atol = rtol_atol
    if rtol == 0:
        assert np.array_equal(a, b), msg
    else:
        np.testing.assert_allclose(a, b, rtol=rtol, atol=atol, err_msg=msg)


@pytest.mark.parametrize("cls_name,opts", CASES)
def test_against_torch_and_twin(cls_name, opts, device):
    shape = (50, 3, 4)
    p0 = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    tp = torch.nn.Parameter(torch.tensor(p0))
    to = getattr(torch.optim, cls_name)([tp], **opts)
    gpu = getattr(rlx_gpu, cls_name)({"emb": p0}, **opts, device=device)
    twin = getattr(rlx_gpu.reference, cls_name)({"emb": p0}, **opts)
    touched = set()
    for idx, vals in batches(shape[0], shape[1:], 20, 2):
        tp.grad = torch.sparse_coo_tensor(torch.tensor(idx)[None], torch.tensor(vals), shape)
        to.step()
        g = {"emb": rlx_gpu.RowSparse(idx, vals)}
        gpu.step(g)
        twin.step(g)
        touched |= set(idx.tolist())
    close(twin.params["emb"], tp.detach().numpy(), tol(cls_name, opts, False), "twin vs torch")
    close(gpu.params["emb"].numpy(), twin.params["emb"], tol(cls_name, opts, True, device), "GPU vs twin")
    for k, v in to.state[tp].items():
        if torch.is_tensor(v) and v.numel() > 1:
            close(twin.state["emb"][k], v.to_dense().numpy(), (1e-5, 1e-6), k)
    untouched = sorted(set(range(shape[0])) - touched)
    assert untouched and np.array_equal(gpu.params["emb"].numpy()[untouched], p0[untouched])
    if cls_name != "SGD":
        assert gpu.state_dict()["state"]["emb"]["step"] == to.state[tp]["step"] == 20


@pytest.mark.parametrize("dim", [3, 4])
def test_untouched_rows_and_state_bit_identical_and_split_chunks(dim, device):
    """A 40,000-row table over 64 KiB chunks (rows of 3 straddle chunk boundaries; rows of 4 take the kernel that
    steps four columns a thread): rows no grad touched keep their params and state bits, the others match the
    twin."""
    small = device.with_binding_cap(64 * 1024)
    shape = (40000, dim)
    p0 = np.random.default_rng(3).standard_normal(shape).astype(np.float32)
    gpu = rlx_gpu.SparseAdam({"emb": p0}, lr=0.1, device=small)
    twin = rlx_gpu.reference.SparseAdam({"emb": p0}, lr=0.1)
    assert len(gpu.params["emb"].bindings()) > 1
    rng = np.random.default_rng(4)
    rows = np.array([0, 4095, 4096, 5461, 5462, 10922, 16383, 39999])  # (16384 floats a chunk: 5461, 10922 straddle)
    for _ in range(5):
        idx = np.concatenate([rows, rng.integers(0, shape[0], 50)])
        vals = rng.standard_normal((idx.size, dim)).astype(np.float32)
        gpu.step({"emb": rlx_gpu.RowSparse(idx, vals)})
        twin.step({"emb": rlx_gpu.RowSparse(idx, vals)})
    close(gpu.params["emb"].numpy(), twin.params["emb"], tol("SparseAdam", {}, True, device), "params")
    st = gpu.state_dict()["state"]["emb"]
    for k in ("exp_avg", "exp_avg_sq"):
        close(st[k], twin.state["emb"][k], tol("SparseAdam", {}, True, device), k)
    same = np.all(gpu.params["emb"].numpy() == p0, axis=1)
    assert same.sum() >= shape[0] - 8 - 250 and (st["exp_avg"][same] == 0).all()


def test_dense_and_sparse_in_one_optimizer_and_uploaded_grads(device):
    """Adagrad over an embedding (sparse grads) and a dense matrix; a sparse grad uploaded once and stepped three
    times equals three steps with the host RowSparse."""
    rng = np.random.default_rng(5)
    params = {"emb": rng.standard_normal((30, 4)).astype(np.float32), "w": rng.standard_normal((4, 4)).astype(np.float32)}
    gpu = rlx_gpu.Adagrad(params, lr=0.1, device=device)
    twin = rlx_gpu.reference.Adagrad(params, lr=0.1)
    for _ in range(4):
        idx = rng.integers(0, 30, 6)
        g = {"emb": rlx_gpu.RowSparse(idx, rng.standard_normal((6, 4)).astype(np.float32)),
             "w": rng.standard_normal((4, 4)).astype(np.float32)}
        gpu.step(g)
        twin.step(g)
    for n in params:
        close(gpu.params[n].numpy(), twin.params[n], tol("Adagrad", {}, True, device), n)
    rs = rlx_gpu.RowSparse(np.array([1, 2, 2]), rng.standard_normal((3, 4)).astype(np.float32))
    other = rlx_gpu.Adagrad(gpu.read_params(), lr=0.1, device=device)
    other.load_state_dict(gpu.state_dict())
    up = gpu.upload_sparse({"emb": rs})
    for _ in range(3):
        gpu.step(up)
        other.step({"emb": rs})
    assert snapshot(gpu) == snapshot(other)
    with pytest.raises(ValueError, match="uploaded for 'emb'"):
        gpu.step({"w": up["emb"]})


def test_bad_sparse_input_changes_nothing(device):
    params = {"emb": np.ones((10, 3), np.float32)}
    sa = rlx_gpu.SparseAdam(params, device=device)
    sa.step({"emb": rlx_gpu.RowSparse(np.array([1]), np.ones((1, 3), np.float32))})
    before = snapshot(sa)
    bad = [(np.array([10]), np.ones((1, 3), np.float32), ValueError, "row index 10 is out of range for 10 rows"),
           (np.array([-1]), np.ones((1, 3), np.float32), ValueError, "out of range"),
           (np.array([1]), np.ones((1, 4), np.float32), ValueError, r"values have shape \(1, 4\), expected \(1, 3\)"),
           (np.array([1.0]), np.ones((1, 3), np.float32), TypeError, "indices must be an integer"),
           (np.array([1]), np.ones((1, 3)), TypeError, "values must be a float32")]
    for idx, vals, err, msg in bad:
        with pytest.raises(err, match=msg):
            sa.step({"emb": rlx_gpu.RowSparse(idx, vals)})
    with pytest.raises(RuntimeError, match="SparseAdam does not support dense gradients"):  # (torch's type)
        sa.step({"emb": np.ones((10, 3), np.float32)})
    assert snapshot(sa) == before
    rs = {"emb": rlx_gpu.RowSparse(np.array([1]), np.ones((1, 3), np.float32))}
    for cls, kw, err, msg in [  # (what torch refuses is torch's RuntimeError; our own limits are ValueErrors)
            (rlx_gpu.Adam, {}, RuntimeError, "Adam does not support sparse gradients, please consider SparseAdam"),
            (rlx_gpu.SGD, {"weight_decay": 0.1}, RuntimeError, "with weight_decay: torch refuses it"),
            (rlx_gpu.Adagrad, {"weight_decay": 0.1}, RuntimeError, "weight_decay option is not compatible"),
            (rlx_gpu.SGD, {"clip_grad_norm": 1.0}, ValueError, "cannot be clipped")]:
        opt = cls(params, **kw, device=device)
        b = snapshot(opt)
        with pytest.raises(err, match=msg):
            opt.step(rs)
        with pytest.raises(err, match=msg):
            getattr(rlx_gpu.reference, cls.__name__)(params, **kw).step(rs)
        assert snapshot(opt) == b


def test_from_torch_embedding(device):
    """nn.Embedding(sparse=True)'s grad through RowSparse.from_torch, SparseAdam against torch's."""
    emb = torch.nn.Embedding(20, 5, sparse=True)
    p0 = emb.weight.detach().numpy().copy()
    to = torch.optim.SparseAdam(emb.parameters(), lr=0.01)
    gpu = rlx_gpu.SparseAdam({"w": p0}, lr=0.01, device=device)
    for _ in range(5):
        emb.zero_grad()
        emb(torch.tensor([[1, 2, 2, 7], [3, 1, 1, 1]])).pow(2).sum().backward()
        gpu.step({"w": rlx_gpu.RowSparse.from_torch(emb.weight.grad)})
        to.step()
    np.testing.assert_allclose(gpu.params["w"].numpy(), emb.weight.detach().numpy(), rtol=2e-6, atol=1e-7)


def test_from_torch_refuses_a_meta_tensor():
    """issue 21 item 15: a sparse tensor on torch's meta device (no values: torch's NotImplementedError before) is a
    ValueError saying so; a dense tensor a TypeError."""
    meta = torch.sparse_coo_tensor(torch.tensor([[0, 2]]), torch.ones(2, 3), (4, 3)).to("meta")
    with pytest.raises(ValueError, match="meta device"):
        rlx_gpu.RowSparse.from_torch(meta)
    with pytest.raises(TypeError, match="sparse COO tensor"):
        rlx_gpu.RowSparse.from_torch(torch.ones(4, 3))


def test_torch_drop_in_takes_sparse_grads(device):
    """rlx_gpu.torch.SparseAdam over nn.Embedding(sparse=True): its sparse .grad is taken as a RowSparse."""
    emb = torch.nn.Embedding(20, 4, sparse=True)
    ref = torch.nn.Embedding(20, 4, sparse=True)
    ref.load_state_dict(emb.state_dict())
    ours = rlx_gpu.torch.SparseAdam(emb.parameters(), lr=0.01, device=device)
    theirs = torch.optim.SparseAdam(ref.parameters(), lr=0.01)
    x = torch.tensor([[1, 2, 2, 7], [3, 1, 1, 1]])
    for _ in range(4):
        for m, o in ((emb, ours), (ref, theirs)):
            o.zero_grad()
            m(x).pow(2).sum().backward()
            o.step()
    np.testing.assert_allclose(emb.weight.detach().numpy(), ref.weight.detach().numpy(), rtol=2e-6, atol=1e-7)


def test_empty_first_step_then_state_dict_and_uploaded_grads_with_momentum(device):
    """A tensor whose first sparse grad has no rows has zero states (as the twin) and a state dict; an uploaded
    grad is refused once its group's momentum routes sparse grads through the dense step."""
    p = {"emb": np.ones((8, 4), np.float32)}
    empty = {"emb": rlx_gpu.RowSparse(np.zeros(0, np.int64), np.zeros((0, 4), np.float32))}
    gpu, twin = rlx_gpu.SparseAdam(p, device=device), rlx_gpu.reference.SparseAdam(p)
    gpu.step(empty)
    twin.step(empty)
    st, tt = gpu.state_dict()["state"]["emb"], twin.state_dict()["state"]["emb"]
    assert st["step"] == tt["step"] == 1 and not st["exp_avg"].any() and st.keys() == tt.keys()
    sgd = rlx_gpu.SGD(p, lr=0.1, device=device)
    up = sgd.upload_sparse({"emb": rlx_gpu.RowSparse(np.array([1]), np.ones((1, 4), np.float32))})
    sgd.param_groups[0]["momentum"] = 0.9
    before = snapshot(sgd)
    with pytest.raises(ValueError, match="pass the RowSparse to step"):
        sgd.step(up)
    assert snapshot(sgd) == before


@pytest.mark.parametrize("uploaded", [False, True], ids=["host", "upload_sparse"])
def test_70000_repeats_of_one_row(device, uploaded):
    """issue 21 item 4: SGD(lr=1) with 70,000 entries of row 2 (on Mesa 22.3.6's lavapipe, whose loops stop after
    65,535 iterations, row 2 ended at -65535, not -70000): each thread adds at most RUN entries a dispatch, a row with
    more continues in the next, in order, so the GPU equals the twin and torch bit for bit (ones: exactly -70000;
    random values: the same fused multiply-adds in the same order); other rows keep their own few entries."""
    n = 70_000  # (past 65,535; rlx_gpu.core.sparse.RUN entries a thread, 18 dispatches for the one row)
    for vals in (np.ones((n, 2), np.float32), np.random.default_rng(3).standard_normal((n + 3, 2)).astype(np.float32)):
        idx = np.full(len(vals), 2)
        idx[-3:] = [0, 4, 0] if len(vals) > n else 2
        p0 = np.zeros((5, 2), np.float32)
        gpu, twin = rlx_gpu.SGD({"w": p0}, lr=1.0, device=device), rlx_gpu.reference.SGD({"w": p0}, lr=1.0)
        g = rlx_gpu.RowSparse(idx, vals)
        gpu.step(gpu.upload_sparse({"w": g}) if uploaded else {"w": g})
        twin.step({"w": g})
        w = torch.zeros(5, 2)
        w.add_(torch.sparse_coo_tensor(torch.from_numpy(idx)[None], torch.from_numpy(vals), (5, 2)), alpha=-1.0)
        got = gpu.params["w"].numpy()
        if len(vals) == n:
            assert (got[2] == -70000.0).all() and not got[[0, 1, 3, 4]].any()
        np.testing.assert_array_equal(got, twin.params["w"])
        np.testing.assert_array_equal(got, w.numpy())


def test_a_sparse_step_past_the_max_binding_and_after_it(device):
    """issue 21 item 12: SparseAdam touching every row of a table whose values pass the device's real max storage
    binding (rows of 1,024 float32, a few rows more than one binding holds: 134 MB on llvmpipe's 128 MiB binding,
    2.1 GB on the H200's 2 GiB one; wgpu's binding-size RuntimeError before, and the oversized values buffer kept, so
    that every later sparse step on the tensor failed, a one-row one too): the values go to the device in parts
    that each fit, the step equals the twin on the rows either side of every part boundary (each row's update is
    its own), and a one-row step follows. Host memory: the params and the values, each once, plus one read-back
    (about 4x the binding: 9 GB on the H200); past a 4 GiB binding that is more than a test should take."""
    L = 1024
    rows = device.max_storage_binding // (4 * L) + 8
    if rows * L * 4 > 4 * 2 ** 30 + 2 ** 26:
        pytest.skip(f"{device.name}: a {device.max_storage_binding} B binding needs a {rows * L * 4} B table")
    p0 = np.zeros((rows, L), np.float32)
    p0[:, 0] = np.arange(rows, dtype=np.float32) / rows
    opt = rlx_gpu.SparseAdam({"emb": p0}, lr=0.01, device=device)
    vals = np.empty((rows, L), np.float32)
    vals[...] = np.linspace(-1.0, 1.0, L, dtype=np.float32)
    vals[:, 1] = p0[:, 0]
    opt.step({"emb": rlx_gpu.RowSparse(np.arange(rows), vals)})
    ends = np.cumsum([k for k, _, _ in opt._sparse_reuse["emb"].parts])
    assert len(ends) >= 2 and ends[-1] == rows, ends  # (the values went in parts)
    sample = np.unique(np.concatenate([np.r_[0:5]] + [np.r_[e - 5:min(e + 5, rows)] for e in ends]))
    twin = rlx_gpu.reference.SparseAdam({"emb": p0[sample]}, lr=0.01)
    del p0
    twin.step({"emb": rlx_gpu.RowSparse(np.arange(sample.size), vals[sample])})
    del vals
    bound = tol("SparseAdam", {}, True, device)  # (bit for bit on the CPU adapter; last bits apart on the H200)
    close(opt.params["emb"].numpy()[sample], twin.params["emb"], bound, "past the binding")
    row = int(np.searchsorted(sample, 3))  # (row 3 of the table, a sampled one)
    opt.step({"emb": rlx_gpu.RowSparse(np.array([3]), np.ones((1, L), np.float32))})
    twin.step({"emb": rlx_gpu.RowSparse(np.array([row]), np.ones((1, L), np.float32))})
    close(opt.params["emb"].numpy()[sample], twin.params["emb"], bound, "a one-row step after it")
    del opt


def test_step_words_are_the_declarations_packing():
    """engine/sparse.py packs a sparse step's scalars directly (every step); they are SPARSE_META.pack's words for
    every optimizer kind, with maximize, and an unknown name is refused."""
    from rlx_gpu.engine.sparse import PIECE, SPARSE_META, STEP, step_words
    for twin in (rlx_gpu.reference.SparseAdam, rlx_gpu.reference.Adagrad, rlx_gpu.reference.SGD):
        group = dict(twin.defaults, lr=0.01)
        for maximize in (False, True):
            scalars = twin.sparse_scalars(group, 3, 0.5)
            fields = {**dict.fromkeys(PIECE + STEP, 0), **scalars, "negate": int(maximize)}
            want = SPARSE_META.pack(**fields, idx=())[len(PIECE):]
            np.testing.assert_array_equal(step_words(dict(group, maximize=maximize), scalars), want)
    with pytest.raises(KeyError, match="unknown scalars"):
        step_words({}, {"lr": 0.1})
