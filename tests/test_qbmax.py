"""The quantized subgroup driver's block maximum (``q_bmax``, engine/qcodegen._bmax) alone, against NumPy, at every
relation of a block (QTPB = QB / 8 threads) to the adapter's subgroups: blocks of 2 to 32 threads, so on llvmpipe
(8 lanes) a subgroup holds 4 or 2 blocks, exactly one, or a block spans 2 or 4 subgroups (combined through
workgroup memory); on NVIDIA (32 lanes) 16 to 1 blocks a subgroup. Both forms: shuffles, and ``redux``'s
subgroupMax/subgroupAny (where a subgroup lies within a block; shuffles where it holds several). Exact: a maximum
and an any."""
import numpy as np
import pytest

from rlx_gpu.engine import qcodegen
from rlx_gpu.runtime import implementation
from helpers import run_main

pytestmark = pytest.mark.gpu

WG = 64
_MAIN = """
@group(0) @binding(0) var<storage, read_write> keys: array<vec2<u32>>;
@group(0) @binding(1) var<storage, read_write> out: array<vec2<u32>>;
@group(0) @binding(2) var<storage, read_write> out2: array<vec2<u32>>;
@compute @workgroup_size(WG) fn main(@builtin(workgroup_id) wid: vec3<u32>,
        @builtin(local_invocation_index) lid: u32, @builtin(subgroup_invocation_id) sgl: u32,
        @builtin(subgroup_size) sgs: u32, @builtin(subgroup_id) sgi: u32) {
    let v = sgi * sgs + sgl;
    let i = wid.x * WG + v;
    out[i] = q_bmax(keys[i], 0u, v, sgl, sgs, sgi);
    out2[i] = q_bmax(vec2<u32>(keys[i].x >> 1u, keys[i].y), 1u, v, sgl, sgs, sgi);  // (the next turn's slots)
}
"""


@pytest.mark.parametrize("redux", [True, False], ids=["redux", "shuffles"])
@pytest.mark.parametrize("qb", [16, 32, 64, 128, 256])
def test_block_maximum_and_flag(device, qb, redux):
    if "subgroups" not in device.features:
        pytest.skip(f"{device.name}: no subgroups (q_bmax is the subgroup driver's)")
    rng = np.random.default_rng(qb)
    n = 8 * WG
    keys = np.zeros((n, 2), np.uint32)
    keys[:, 0] = rng.integers(0, 0x7F800000, n, dtype=np.uint32)
    keys[rng.random(n) < 0.3, 0] = 0  # (zeros: the key's least value)
    keys[:, 1] = rng.random(n) < 4.0 / qb  # (the +inf flag: in some blocks, not others)
    tpb = qb // 8
    head = "\n".join(["enable subgroups;"] * implementation.subgroup_directive()
                     + [f"const WG: u32 = {WG}u;", f"const QB: u32 = {qb}u;"])
    code = "\n".join([head, *qcodegen._bmax([], {}, redux=redux), _MAIN])
    out = run_main(device, "qbmax-test", code, {"keys": keys}, {"out": keys.nbytes, "out2": keys.nbytes}, n // WG)
    for name, shift in (("out", 0), ("out2", 1)):
        got = out[name].view(np.uint32).reshape(n, 2)
        blocks = keys.reshape(n // tpb, tpb, 2)
        want = np.repeat(np.stack([blocks[..., 0].max(1) >> shift, blocks[..., 1].max(1)], 1), tpb, 0)
        bad = np.nonzero((got != want).any(1))[0]
        assert bad.size == 0, (f"QB={qb} (QTPB={tpb}) on {device.name}, {name}: {bad.size} places differ, e.g. "
                               f"place {bad[0]}: {got[bad[0]]} != {want[bad[0]]}")
