"""The optimizers' ``qat=`` export: after every step the codes, scales and values of each chosen tensor equal
quantizing its updated weights separately (reference/qat.py's export_copy, itself torch.ao's symmetric qparams
and torch's fake-quantize codes), bit for bit, for every optimizer that supports it; with skipped steps, tensors
without grads, chunked arenas, master weights, bfloat16 params, lr_scale, checkpoints and state dicts."""
import ml_dtypes
import numpy as np
import pytest

import rlx_gpu
from rlx_gpu.reference import qat as R

from cases import TABLE

pytestmark = pytest.mark.gpu
SPEC = {"w": "int8/channel/values", "b": "int4", "v": "int4/channel/values-bf16", "e": "int8",
        "m": "int8/channel/values", "n": "int4/channel/values-bf16"}
# exported in the update pass itself: whole channels fit a workgroup (rows of 128 and 64, a 7- and a 5000-element
# tensor); w (rows of 129) and v (rows of 555: not a whole number of int4 words) take the second pass
FUSED = {"b", "e", "m", "n"}
BF16 = np.dtype(ml_dtypes.bfloat16)


def params(rng, dtype=np.float32):
    p = {"w": rng.standard_normal((37, 129)), "b": rng.standard_normal(7), "v": rng.standard_normal((9, 555)),
         "e": rng.standard_normal(5000) * 3, "other": rng.standard_normal(11), "m": rng.standard_normal((37, 128)),
         "n": rng.standard_normal((9, 64)) * 0.1}
    return {k: v.astype(np.float32).astype(dtype) for k, v in p.items()}


def weights(opt, name):
    """The weights the copy is made of: the float32 master copy where there is one, else the stored params."""
    st = opt.state_dict()["state"].get(name, {})
    return np.asarray(st["master_param"] if "master_param" in st else opt.params[name].numpy(), np.float32)


def check(opt, names=None):
    for n in names or opt.qat:
        q = opt.qat[n]
        w = weights(opt, n)
        codes, scale = R.export_copy(w, q.spec.bits, "channel" if q.spec.per_channel else "tensor")
        assert (q.scale().view(np.uint32) == scale.view(np.uint32)).all(), n
        assert (q.codes() == codes).all(), n
        if q.spec.values:
            want = codes.astype(np.float32) * (scale.reshape(-1, *[1] * (w.ndim - 1)) if q.spec.per_channel
                                               else scale[0])
            if q.spec.values == "bfloat16":
                want = want.astype(BF16).astype(np.float32)
            assert (q.values().view(np.uint32) == want.view(np.uint32)).all(), n


def snapshot(opt):
    return {n: (q.packed().copy(), q.scale().copy(), q.values().copy() if q.spec.values else None)
            for n, q in opt.qat.items()}


def same(a, b):
    return all((x[0] == y[0]).all() and (x[1].view(np.uint32) == y[1].view(np.uint32)).all() and
               (x[2] is None or (x[2].view(np.uint32) == y[2].view(np.uint32)).all())
               for x, y in zip(a.values(), b.values()))


def grads(rng, p, names=None, dtype=np.float32):
    return {n: rng.standard_normal(a.shape).astype(np.float32).astype(dtype) for n, a in p.items()
            if names is None or n in names}


UNSUPPORTED = ("Adafactor",)  # (its update is custom passes over factored moments)


@pytest.mark.parametrize("cls,options", [(row[0], row[2][-1]) for row in TABLE], ids=lambda v: getattr(v, "__name__", ""))
def test_export_equals_quantizing_the_updated_weights(device, cls, options):
    """Every optimizer of the generic table with its last option set: 3 steps, one with some grads missing."""
    rng = np.random.default_rng(0)
    p = params(rng)
    if cls.__name__ in UNSUPPORTED:
        with pytest.raises(ValueError, match="one elementwise pass"):
            cls(p, **options, qat=SPEC, device=device)
        return
    opt = cls(p, **options, qat=SPEC, device=device)
    assert {n for n, q in opt.qat.items() if q.fused} == FUSED
    check(opt)  # (the copy of the initial weights)
    for k in range(3):
        opt.step(grads(rng, p, None if k != 1 else ("w", "e", "other")))
        if cls.__name__ == "SophiaH":
            opt.update_hessian({n: np.abs(g) for n, g in grads(rng, p).items()})
        check(opt)


def test_a_skipped_step_and_a_tensor_without_grad_leave_the_copy(device):
    rng = np.random.default_rng(1)
    p = params(rng)
    opt = rlx_gpu.AdamW(p, lr=1e-2, qat=SPEC, skip_nonfinite=True, device=device)
    opt.step(grads(rng, p))
    before = snapshot(opt)
    bad = grads(rng, p)
    bad["w"][3, 4] = np.nan
    opt.step(bad)
    assert opt.last_step_skipped and same(before, snapshot(opt))
    opt.step(grads(rng, p, ("w", "other")))  # b, v, e have no grad: their copies stay
    after = snapshot(opt)
    assert all((after[n][0] == before[n][0]).all() for n in ("b", "v", "e"))
    assert not (after["w"][0] == before["w"][0]).all()
    check(opt)


def test_chunked_master_bf16_and_lr_scale(device):
    """Tensors split over chunks (a 64 KiB binding cap), bfloat16 params with float32 master weights (the copy
    follows the master) and without (the stored bf16 values, stochastically rounded), and lr_scale."""
    small = device.with_binding_cap(64 * 1024)
    rng = np.random.default_rng(2)
    p = params(rng)
    p["big"] = rng.standard_normal((40, 1000)).astype(np.float32)  # 40,000 elements: three chunks
    spec = dict(SPEC, big="int4/channel/values")
    for kw, dt in (({}, np.float32), ({"master_weights": True}, BF16), ({"stochastic_rounding": True}, BF16)):
        q = {k: v.astype(dt) for k, v in p.items()}
        opt = rlx_gpu.AdamW(q, lr=3e-2, qat=spec, lr_scale={"big": 0.3, "w": 2.0}, device=small, **kw)
        assert len(opt.params["big"].bindings()) > 1 and not opt.qat["big"].fused  # (chunked: the second pass)
        assert {n for n, c in opt.qat.items() if c.fused} == FUSED
        for _ in range(3):
            opt.step(grads(rng, q, dtype=dt))
            check(opt)


ROWS = {"wide": ((3, 3072), "int8/channel"),                # a row longer than a block: a run per row
        "gpt": ((5, 2304), "int4/channel/values"),            # GPT-2's c_attn row length
        "tall": ((300, 32), "int8/channel/values-bf16"),      # 64 rows per run (every workgroup slot)
        "rest": ((130, 32), "int4/channel"),                  # runs of 64, 64 and 2 rows
        "long": ((1, 4100), "int8/channel"),                  # one row, not a multiple of the block
        "max": ((16384,), "int4"),                            # per tensor, the longest run
        "thin": ((300, 8), "int4/channel"),                   # rows too short for the slots: second pass
        "huge": ((20000,), "int8"),                           # per tensor, longer than a run: second pass
        "odd": ((6, 36), "int4/channel")}                     # rows not whole int4 words: second pass


@pytest.mark.parametrize("dtype,kw", [(np.float32, {}), (BF16, {}), (BF16, {"master_weights": True})],
                         ids=["float32", "bfloat16", "bfloat16-master"])
def test_fused_export_equals_the_second_pass(device, dtype, kw):
    """The update pass's own export (whole channels in a workgroup) against the second pass (QAT_FUSE off), bit for
    bit, and both against quantizing the updated weights: rows longer and shorter than a block, every workgroup
    slot, a tensor of one row, the longest per-tensor run, and the shapes that fall back; a skipped step and
    tensors without a grad."""
    rng = np.random.default_rng(5)
    p = {n: (rng.standard_normal(s) * rng.uniform(0.01, 3)).astype(np.float32).astype(dtype)
         for n, (s, _) in ROWS.items()}
    spec = {n: v for n, (_, v) in ROWS.items()}
    second = type("AdamW", (rlx_gpu.AdamW,), {"QAT_FUSE": False})
    fused = rlx_gpu.AdamW(p, lr=1e-2, qat=spec, skip_nonfinite=True, device=device, **kw)
    other = second(p, lr=1e-2, qat=spec, skip_nonfinite=True, device=device, **kw)
    assert {n for n, c in fused.qat.items() if c.fused} == set(ROWS) - {"thin", "huge", "odd"}
    assert not any(c.fused for c in other.qat.values())
    for k in range(4):
        g = grads(rng, p, None if k != 2 else ("wide", "tall", "huge"), dtype)
        if k == 1:
            g["gpt"][0, 0] = np.inf  # (skipped: no copy changes)
        before = snapshot(fused)
        for o in (fused, other):
            o.step(g)
        assert fused.last_step_skipped == (k == 1) and same(snapshot(fused), snapshot(other))
        if k == 1:
            assert same(before, snapshot(fused))
        check(fused)


def test_buckets_of_two_dtypes(device):
    """float32 and bfloat16 tensors in one optimizer (two buckets, one block numbering): both fused and not."""
    rng = np.random.default_rng(6)
    p = {"a": rng.standard_normal((37, 128)).astype(np.float32), "b": rng.standard_normal((9, 64)).astype(BF16),
         "c": rng.standard_normal((5, 129)).astype(BF16), "d": rng.standard_normal(3000).astype(np.float32)}
    spec = {"a": "int8/channel", "b": "int4/channel/values", "c": "int8/channel", "d": "int4"}
    opt = rlx_gpu.AdamW(p, lr=1e-2, qat=spec, device=device)
    assert len(opt.buckets) == 2 and {n for n, c in opt.qat.items() if c.fused} == {"a", "b", "d"}
    for _ in range(3):
        opt.step({n: rng.standard_normal(a.shape).astype(np.float32).astype(a.dtype) for n, a in p.items()})
        check(opt)


def test_a_step_with_every_copy_fused_adds_no_dispatch(device):
    p = {"w": np.ones((64, 256), np.float32), "b": np.ones(10, np.float32)}
    plain = rlx_gpu.AdamW(p, device=device)
    opt = rlx_gpu.AdamW(p, qat={"w": "int8/channel", "b": "int4"}, device=device)
    for o in (plain, opt):
        o.step({n: np.full(a.shape, 0.5, np.float32) for n, a in p.items()})
    assert all(c.fused for c in opt.qat.values()) and len(opt._binds["plan"]) == len(plain._binds["plan"])
    check(opt)


def test_checkpoints_state_dicts_and_writes_refresh_the_copy(device, tmp_path):
    rng = np.random.default_rng(3)
    p = params(rng)
    opt = rlx_gpu.AdamW(p, lr=1e-2, qat=SPEC, device=device)
    for _ in range(2):
        opt.step(grads(rng, p))
    opt.save(tmp_path / "ck.npz")
    again = rlx_gpu.Optimizer.load(tmp_path / "ck.npz", device=device)
    assert sorted(again.qat) == sorted(SPEC) and same(snapshot(opt), snapshot(again))
    fresh = rlx_gpu.AdamW(params(np.random.default_rng(9)), lr=1e-2, qat=SPEC, device=device)
    fresh.load_state_dict(opt.state_dict(), params=opt.read_params())
    assert same(snapshot(opt), snapshot(fresh))
    fresh.write_params({"w": np.zeros((37, 129), np.float32), "m": np.full((37, 128), -2.0, np.float32)})
    assert (fresh.qat["w"].codes() == 0).all() and (fresh.qat["m"].codes() == -127).all()  # (-2 * (1/s): -127.49..)
    check(fresh)


def test_codes_bind_in_your_own_wgsl(device):
    """opt.qat[name].binding(...) in a Program: a kernel dequantizing the int8 codes with the scales gives the
    fake-quantized weights."""
    rng = np.random.default_rng(4)
    w = rng.standard_normal((6, 10)).astype(np.float32)
    opt = rlx_gpu.SGD({"w": w}, lr=0.1, qat={"w": "int8/channel"}, device=device)
    opt.step({"w": rng.standard_normal((6, 10)).astype(np.float32)})
    code = """
    @group(0) @binding(0) var<storage, read> codes: array<u32>;
    @group(0) @binding(1) var<storage, read> scale: array<f32>;
    @group(0) @binding(2) var<storage, read_write> out: array<f32>;
    @compute @workgroup_size(64) fn main(@builtin(global_invocation_id) g: vec3<u32>) {
        let e = g.x;
        if (e >= 60u) { return; }
        let c = i32(codes[e / 4u] << (24u - 8u * (e % 4u))) >> 24u;   // sign-extended int8
        out[e] = f32(c) * scale[e / 10u];
    }"""
    out = device.buffer(240, "out")
    rlx_gpu.Program(device, code, "main")(1, codes=opt.qat["w"].binding("codes"), scale=opt.qat["w"].binding("scale"),
                                           out=out)
    got = device.read(out, 0, 240, out=np.empty(60, np.float32)).reshape(6, 10)
    codes, scale = R.export_copy(opt.params["w"].numpy(), 8, "channel")
    assert (got == codes * scale[:, None]).all()


def test_errors(device):
    p = {"w": np.ones((4, 4), np.float32)}
    with pytest.raises(ValueError, match="int8"):
        rlx_gpu.AdamW(p, qat={"w": "int3"}, device=device)
    with pytest.raises(ValueError, match="not one of the parameters"):
        rlx_gpu.AdamW(p, qat={"x": "int8"}, device=device)
    with pytest.raises(TypeError, match="dict"):
        rlx_gpu.AdamW(p, qat="int8", device=device)
    with pytest.raises(ValueError, match="state_bits"):
        rlx_gpu.AdamW({"w": np.ones((64, 64), np.float32)}, qat={"w": "int8"}, state_bits=8, device=device)
    with pytest.raises(ValueError, match="one elementwise pass"):
        rlx_gpu.Muon(p, qat={"w": "int8"}, device=device)
