// MARS-AdamW (Yuan et al. 2024, approximate variant). Three passes, no host round trip:
//   norms   (per chunk, 2-D tensors): c = (g - g_prev)*k + g, k = gamma*b1/(1-b1); per-block sums of c*c
//   scale   (one workgroup per 2-D tensor): s = |c|_F if |c|_F > 1 else 1
//   step    (per chunk): 2-D: c /= s; m = b1*m + (1-b1)*c; v = b2*v + (1-b2)*c*c;
//                        p += -lr*(wd*p + m/((sqrt(v)*(1/sqrt(1-b2^t)) + eps)*(1-b1^t)))
//                        other tensors: AdamW with the 1-D hyperparameters; every tensor: g_prev = g
// Record: flags (4 matrix), 1 k, 2 b1, 3 1-b1, 4 b2, 5 1-b2, 6 1/sqrt(1-b2^t) (2-D) | sqrt(1-b2^t) (1-D),
//         7 eps, 8 1-b1^t, 9 -lr (2-D) | -lr_1d/(1-b1^t) (1-D), 10 wd (2-D) | 1-lr_1d*wd_1d (1-D),
//         14 first block, 15 block count
// #include "common.wgsl"

const MATRIX: u32 = 4u;

@group(0) @binding(4) var<storage, read_write> exp_avg: array<vec4<f32>>;
@group(0) @binding(5) var<storage, read_write> exp_avg_sq: array<vec4<f32>>;
@group(0) @binding(6) var<storage, read_write> last_grad: array<vec4<f32>>;
// scratch: one float per block (sums of c*c), then one norm per tensor; 8 storage buffers in all, the
// WebGPU default limit.
@group(0) @binding(7) var<storage, read_write> scratch: array<f32>;

fn norm_slot(t: u32) -> u32 { return arrayLength(&scratch) - ntensors() + t; }

@compute @workgroup_size(WG)
fn norms(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
         @builtin(local_invocation_index) lid: u32) {
    let blk = block_of(wid, nwg);
    if (blk.x == NONE) { return; }
    let t = blk.x;
    let f = hu(t, 0u);
    if ((f & ACTIVE) == 0u || (f & MATRIX) == 0u) { return; }
    let k = hf(t, 1u);
    var acc = 0.0;
    for (var j = 0u; j < EPT; j++) {
        let i = blk.y + j * WG + lid;
        if (4u * i < blk.z) {
            let g = grad[i] * gscale();
            let c = select((g - last_grad[i]) * k + g, vec4<f32>(0.0), tail(i, blk.z));
            acc = acc + dot(c, c);
        }
    }
    red[lid] = acc;
    reduce(lid);
    if (lid == 0u) { scratch[blk.w] = red[0]; }
}

@compute @workgroup_size(WG)
fn scale(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
         @builtin(local_invocation_index) lid: u32) {
    let t = wid.x + wid.y * nwg.x;
    if (t >= ntensors()) { return; }
    let f = hu(t, 0u);
    if ((f & ACTIVE) == 0u || (f & MATRIX) == 0u) { return; }
    let first = hu(t, 14u); let n = hu(t, 15u);
    var acc = 0.0;
    for (var j = lid; j < n; j = j + WG) { acc = acc + scratch[first + j]; }
    red[lid] = acc;
    reduce(lid);
    if (lid == 0u) {
        let cn = sqrt(red[0]);
        scratch[norm_slot(t)] = select(1.0, cn, cn > 1.0);
    }
}

@compute @workgroup_size(WG)
fn step(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let blk = active_block(wid, nwg);
    if (blk.x == NONE) { return; }
    let t = blk.x;
    let f = hu(t, 0u);
    let k = hf(t, 1u); let b1 = hf(t, 2u); let omb1 = hf(t, 3u); let b2 = hf(t, 4u); let omb2 = hf(t, 5u);
    let c2 = hf(t, 6u); let eps = hf(t, 7u); let bc1 = hf(t, 8u); let nlr = hf(t, 9u); let wd = hf(t, 10u);
    let matrix = (f & MATRIX) != 0u;
    var s = 1.0;
    if (matrix) { s = scratch[norm_slot(t)]; }
    for (var j = 0u; j < EPT; j++) {
        let i = blk.y + j * WG + lid;
        if (4u * i >= blk.z) { break; }
        let keep = tail(i, blk.z);
        let p0 = param[i]; let m0 = exp_avg[i]; let v0 = exp_avg_sq[i]; let l0 = last_grad[i];
        let g = grad[i] * gscale();
        var p: vec4<f32>; var m: vec4<f32>; var v: vec4<f32>;
        if (matrix) {
            let c = ((g - l0) * k + g) / s;
            m = m0 * b1 + omb1 * c;
            v = v0 * b2 + omb2 * c * c;
            let denom = (sqrt(v) * c2 + eps) * bc1;
            p = p0 + nlr * (p0 * wd + m / denom);
        } else {
            m = m0 * b1 + omb1 * g;
            v = v0 * b2 + omb2 * g * g;
            let denom = sqrt(v) / c2 + eps;
            p = p0 * wd;
            p = p + nlr * m / denom;
        }
        param[i] = select(p, p0, keep);
        exp_avg[i] = select(m, m0, keep);
        exp_avg_sq[i] = select(v, v0, keep);
        last_grad[i] = select(g, l0, keep);
    }
}
