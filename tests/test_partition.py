"""rlx_gpu.Partition: Muon on the hidden matrices and AdamW on the rest, as one optimizer. Against the parts run
separately (the NumPy twins, with the global clip's factor computed on the host): params every step within 1e-6
(the global norm is summed per part on the device, then combined); an inf in one part skips every part (params and
state bit-identical); a GradScaler; one submission per step; state dicts and checkpoints; bad input."""
import numpy as np
import pytest

import rlx_gpu

pytestmark = pytest.mark.gpu
SHAPES = {"h.0": (32, 16), "h.1": (16, 32), "h.2": (32, 16), "emb": (50, 16), "b": (16,)}
PARTS = {"muon": (rlx_gpu.Muon, {"lr": 0.02}), "adamw": (rlx_gpu.AdamW, {"lr": 1e-2, "weight_decay": 0.01})}


def label(name, shape):
    return "muon" if name.startswith("h.") else "adamw"


def params(seed=0):
    rng = np.random.default_rng(seed)
    return {n: rng.standard_normal(s).astype(np.float32) for n, s in SHAPES.items()}


def grads(s):
    rng = np.random.default_rng(100 + s)
    g = {n: rng.standard_normal(v).astype(np.float32) for n, v in SHAPES.items()}
    if s == 3:
        g["emb"][0, 0] = np.inf
    return g


def twins(p):
    mu = rlx_gpu.reference.Muon({k: v for k, v in p.items() if label(k, v.shape) == "muon"}, lr=0.02)
    ad = rlx_gpu.reference.AdamW({k: v for k, v in p.items() if label(k, v.shape) == "adamw"}, lr=1e-2,
                                 weight_decay=0.01)
    return mu, ad


@pytest.mark.parametrize("clip", [None, 0.5])
def test_equals_the_parts_run_separately(device, clip):
    p = params()
    part = rlx_gpu.Partition(p, label, PARTS, device=device, clip_grad_norm=clip, skip_nonfinite=True)
    mu, ad = twins(p)
    for s in range(8):
        g = grads(s)
        part.step(g)
        if s == 3:  # (the inf in AdamW's part: both parts skip)
            assert part.last_step_skipped and all(q.last_step_skipped for q in part.parts.values())
            continue
        c = 1.0
        if clip is not None:
            total = np.sqrt(sum(np.sum(x.astype(np.float64) ** 2) for x in g.values()))
            c = np.float32(min(clip / (total + 1e-6), 1.0))
            assert abs(part.last_grad_norm() - total) <= 1e-5 * total
        mu.step({k: g[k] * np.float32(c) for k in mu.params})
        ad.step({k: g[k] * np.float32(c) for k in ad.params})
        got = part.read_params()
        for k in SHAPES:
            want = mu.params[k] if k in mu.params else ad.params[k]
            np.testing.assert_allclose(got[k], want, atol=1e-6, rtol=1e-6, err_msg=f"{s} {k}")


def test_a_skip_leaves_every_part_unchanged(device):
    part = rlx_gpu.Partition(params(), label, PARTS, device=device, skip_nonfinite=True)
    for s in range(3):
        part.step(grads(s))
    before = (part.read_params(), part.state_dict())
    part.step(grads(3))
    after = (part.read_params(), part.state_dict())
    assert part.last_step_skipped
    for k in SHAPES:
        assert np.array_equal(before[0][k], after[0][k])
    for lab in part.parts:
        for n, st in before[1]["parts"][lab]["state"].items():
            for key, v in st.items():
                assert np.array_equal(np.asarray(v), np.asarray(after[1]["parts"][lab]["state"][n][key])), (n, key)


def test_gradscaler(device):
    """Grads carrying a power-of-two scale, through rlx_gpu.GradScaler: the params of the unscaled run bit for bit
    (the inf step skipped in both parts, the scale backed off once)."""
    plain = rlx_gpu.Partition(params(), label, PARTS, device=device, skip_nonfinite=True)
    scaled = rlx_gpu.Partition(params(), label, PARTS, device=device)
    scaler = rlx_gpu.GradScaler(init_scale=1024.0, growth_interval=1000)
    for s in range(6):
        g = grads(s)
        plain.step(g)
        sc = np.float32(scaler.get_scale())
        scaler.step(scaled, {k: v * sc for k, v in g.items()})
        scaler.update()
    assert scaler.get_scale() == 512.0
    a, b = plain.read_params(), scaled.read_params()
    for k in SHAPES:
        assert np.array_equal(a[k], b[k]), k


def test_one_submission_per_step(device):
    part = rlx_gpu.Partition(params(), label, PARTS, device=device, clip_grad_norm=1.0, skip_nonfinite=True)
    for n, g in grads(0).items():
        part.grads[n].write(g)
    calls = []
    real = part.device.submit
    part.device.submit = lambda enc: (calls.append(1), real(enc))[1]
    try:
        part.step()
    finally:
        del part.device.submit
    assert len(calls) == 1


def test_state_schedules_and_checkpoints(device, tmp_path):
    part = rlx_gpu.Partition(params(), label, PARTS, device=device)
    for s in range(2):
        part.step(grads(s))
    assert [g["lr"] for g in part.param_groups] == [0.02, 1e-2]
    part.param_groups[1]["lr"] = 5e-3  # (a schedule writes the groups: AdamW's part)
    assert part.parts["adamw"].param_groups[0]["lr"] == 5e-3
    part.save(tmp_path / "ck")
    other = rlx_gpu.Partition(params(1), label, PARTS, device=device)
    other.restore(tmp_path / "ck")
    other.param_groups[1]["lr"] = 5e-3
    twin_sd = part.state_dict()
    for q in (part, other):
        q.step(grads(4))
    a, b = part.read_params(), other.read_params()
    for k in SHAPES:
        assert np.array_equal(a[k], b[k]), k
    third = rlx_gpu.Partition(params(1), label, PARTS, device=device)
    third.load_state_dict(twin_sd)
    with pytest.raises(ValueError, match="expected"):
        third.load_state_dict({"parts": {"muon": twin_sd["parts"]["muon"]}})


def test_bad_input(device):
    with pytest.raises(ValueError, match="label gave 'sgd' for 'b'"):
        rlx_gpu.Partition(params(), lambda n, s: "sgd" if n == "b" else label(n, s), PARTS, device=device)
    with pytest.raises(ValueError, match="sets \\['clip_grad_norm'\\]; give them to Partition"):
        rlx_gpu.Partition(params(), label, {"muon": (rlx_gpu.Muon, {"clip_grad_norm": 1.0}),
                                            "adamw": (rlx_gpu.AdamW, {})}, device=device)
    with pytest.raises(ValueError, match="1 to 4 sub-optimizers"):
        rlx_gpu.Partition(params(), label, {str(i): (rlx_gpu.SGD, {}) for i in range(5)}, device=device)
    with pytest.raises(TypeError, match="'b' must be a NumPy array"):
        rlx_gpu.Partition({**params(), "b": [1.0, 2.0]}, label, PARTS, device=device)
    # issue 21 item 15: a part name that cannot name its file (save wrote part of the checkpoint, then failed)
    for bad in ({"mu/on": PARTS["muon"], "adamw": PARTS["adamw"]}, {"": PARTS["muon"], "adamw": PARTS["adamw"]},
                {"muon": PARTS["muon"], "ad\0amw": PARTS["adamw"]}):
        with pytest.raises(ValueError, match="cannot name its checkpoint file"):
            rlx_gpu.Partition(params(), lambda n, s, b=bad: list(b)[label(n, s) == "adamw"], bad, device=device)
    with pytest.raises(ValueError, match="would share"):
        rlx_gpu.Partition(params(), lambda n, s: 1 if label(n, s) == "muon" else "1",
                          {1: PARTS["muon"], "1": PARTS["adamw"]}, device=device)
    part = rlx_gpu.Partition(params(), label, PARTS, device=device)
    before = part.read_params()
    with pytest.raises(KeyError, match="unknown tensor"):
        part.step({"nope": np.zeros(3, np.float32)})
    with pytest.raises(ValueError):
        part.step({"emb": np.zeros((3, 3), np.float32), "h.0": np.zeros((32, 16), np.float32)})
    after = part.read_params()
    assert all(np.array_equal(before[k], after[k]) for k in SHAPES)


def test_mars_vectors_through_partition(device):
    """MARS's `*_1d` hyperparameters are deprecated (a DeprecationWarning; they still work): Partition routes the
    vectors to AdamW instead, and the two agree within 1e-6 over 10 steps (AdamW's moment is a lerp, MARS's 1-D
    branch b1 m + (1 - b1) g: a rounding apart)."""
    shapes = {"w": (24, 16), "v": (16,), "u": (24,)}
    rng = np.random.default_rng(9)
    p = {n: rng.standard_normal(s).astype(np.float32) for n, s in shapes.items()}
    with pytest.warns(DeprecationWarning, match="lr_1d, weight_decay_1d are deprecated"):
        old = rlx_gpu.Mars(p, lr=1e-2, lr_1d=5e-3, weight_decay_1d=0.05, device=device)
    with pytest.warns(DeprecationWarning):
        rlx_gpu.reference.Mars(p, lr_1d=5e-3)
    new = rlx_gpu.Partition(p, lambda n, s: "mat" if len(s) == 2 else "vec",
                            {"mat": (rlx_gpu.Mars, {"lr": 1e-2}),
                             "vec": (rlx_gpu.AdamW, {"lr": 5e-3, "betas": (0.9, 0.95), "weight_decay": 0.05})},
                            device=device)
    for s in range(10):
        g = {n: rng.standard_normal(v).astype(np.float32) for n, v in shapes.items()}
        old.step(g)
        new.step(g)
        a, b = old.read_params(), new.read_params()
        for n in shapes:
            np.testing.assert_allclose(a[n], b[n], atol=1e-6, rtol=1e-6, err_msg=f"{s} {n}")
