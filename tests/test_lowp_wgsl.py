"""shaders/lowp.wgsl's float16 conversions against NumPy on every float16: ``unpack4_f16`` (vector operations, no
branches) and ``unpack1_f16`` (the scalar ``h2f``) widen each of the 65,536 bit patterns to NumPy's float32 (NaNs
keep their payload and sign), and ``pack4_f16`` rounds each back to its own bits."""
import numpy as np
import pytest

from rlx_gpu.runtime.source import load_source
from helpers import run_main

pytestmark = pytest.mark.gpu

_MAIN = """
@group(0) @binding(0) var<storage, read_write> halves: array<vec2<u32>>;
@group(0) @binding(1) var<storage, read_write> wide: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read_write> one: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read_write> back: array<vec2<u32>>;
@compute @workgroup_size(64) fn main(@builtin(global_invocation_id) g: vec3<u32>) {
    let i = g.x;
    if (i >= arrayLength(&halves)) { return; }
    let w = halves[i];
    wide[i] = unpack4_f16(w);
    one[i] = vec4<f32>(unpack1_f16(w, 0u), unpack1_f16(w, 1u), unpack1_f16(w, 2u), unpack1_f16(w, 3u));
    back[i] = pack4_f16(wide[i]);
}
"""


def _run(device, bits: np.ndarray):
    n = bits.size // 4
    out = run_main(device, "lowp-test", "\n".join([load_source("lowp.wgsl"), _MAIN]), {"halves": bits},
                   {"wide": 16 * n, "one": 16 * n, "back": bits.nbytes}, -(-n // 64))
    return [out[b].view(np.uint32)[:n * 4] for b in ("wide", "one")] + [out["back"].view(np.uint16)[:n * 4]]


def test_every_float16_widens_and_packs_back_exactly(device):
    bits = np.arange(65536, dtype=np.uint16)
    wide, one, back = _run(device, bits)
    want = bits.view(np.float16).astype(np.float32).view(np.uint32)  # (NumPy: NaN payload and sign kept)
    nan = np.isnan(bits.view(np.float16))
    for got, what in ((wide, "unpack4_f16"), (one, "unpack1_f16")):
        bad = np.nonzero(got != want)[0]
        assert bad.size == 0, f"{what}: {bad.size} halves differ, e.g. {bits[bad[0]]:#06x}: {got[bad[0]]:#010x}"
    np.testing.assert_array_equal(back[~nan], bits[~nan])
    assert (np.isnan(back[nan].view(np.float16))).all()
