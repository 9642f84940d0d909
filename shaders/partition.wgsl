// rlx_gpu.Partition: one global clip and one inf/NaN verdict over the parts of a step recorded in one submission
// (rlx_gpu/partition.py). Each part's own reduction has left, in its global record, the norm of its grads (already
// unscaled by its loss scale) and its inf/NaN flag; this single thread makes them global in every part's record:
//   total = sqrt(sum of total_k^2);  c = min(max_norm / (total + 1e-6), 1) (NaN kept);  grad_mul_k = c * inv_scale_k
//   nonfinite_k = OR of every part's flag
// prm: a CombineParams (declared in rlx_gpu/engine/joint.py, whose struct the runtime appends to this text): parts,
// with_norm (1/0), max_norm, the global record's words grad_mul, total_norm, nonfinite and inv_scale, then base:
// each part's global record's first word.

@group(0) @binding(0) var<storage, read_write> h0: array<u32>;
@group(0) @binding(1) var<storage, read_write> h1: array<u32>;
@group(0) @binding(2) var<storage, read_write> h2: array<u32>;
@group(0) @binding(3) var<storage, read_write> h3: array<u32>;
@group(0) @binding(4) var<storage, read> prm: CombineParams;

fn rd(k: u32, w: u32) -> u32 {
    let i = prm.base[k] + w;
    if (k == 0u) { return h0[i]; }
    if (k == 1u) { return h1[i]; }
    if (k == 2u) { return h2[i]; }
    return h3[i];
}

fn wr(k: u32, w: u32, v: u32) {
    let i = prm.base[k] + w;
    if (k == 0u) { h0[i] = v; } else if (k == 1u) { h1[i] = v; } else if (k == 2u) { h2[i] = v; } else { h3[i] = v; }
}

fn is_nan(x: f32) -> bool { return (bitcast<u32>(x) & 0x7fffffffu) > 0x7f800000u; }

@compute @workgroup_size(1)
fn combine() {
    let parts = prm.parts;
    var sq = 0.0;
    var bad = 0u;
    for (var k = 0u; k < parts; k++) {
        let t = bitcast<f32>(rd(k, prm.total_norm));
        sq = sq + t * t;
        bad = bad | rd(k, prm.nonfinite);
    }
    let total = sqrt(sq);
    let q = prm.max_norm / (total + 1e-6);
    let c = select(min(q, 1.0), q, is_nan(q));
    for (var k = 0u; k < parts; k++) {
        wr(k, prm.nonfinite, bad);
        if (prm.with_norm != 0u) {
            wr(k, prm.grad_mul, bitcast<u32>(c * bitcast<f32>(rd(k, prm.inv_scale))));
            wr(k, prm.total_norm, bitcast<u32>(total));
        }
    }
}
