// Adam and AdamW (torch.optim semantics).
//   g = -g if maximize;  Adam: g += wd*p  |  AdamW: p *= 1 - lr*wd
//   m = lerp(m, g, 1-b1);  v = b2*v + (1-b2)*g*g;  amsgrad: vmax = max(vmax, v), v := vmax
//   p -= lr/(1-b1^t) * m / (sqrt(v)/sqrt(1-b2^t) + eps)
// Record: flags (4 amsgrad, 8 decoupled decay, 16 L2 decay), 1 decay = 1-lr*wd, 2 wd, 3 1-b1, 4 b2,
//         5 1-b2, 6 -lr/(1-b1^t), 7 sqrt(1-b2^t), 8 eps
// #include "common.wgsl"

const AMSGRAD: u32 = 4u;
const DECOUPLED: u32 = 8u;
const L2: u32 = 16u;

@group(0) @binding(4) var<storage, read_write> exp_avg: array<vec4<f32>>;
@group(0) @binding(5) var<storage, read_write> exp_avg_sq: array<vec4<f32>>;
@group(0) @binding(6) var<storage, read_write> max_exp_avg_sq: array<vec4<f32>>;

@compute @workgroup_size(WG)
fn step(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let blk = active_block(wid, nwg);
    if (blk.x == NONE) { return; }
    let t = blk.x;
    let f = hu(t, 0u);
    let decay = hf(t, 1u); let wd = hf(t, 2u); let omb1 = hf(t, 3u); let b2 = hf(t, 4u);
    let omb2 = hf(t, 5u); let nss = hf(t, 6u); let bc2s = hf(t, 7u); let eps = hf(t, 8u);
    for (var k = 0u; k < EPT; k++) {
        let i = blk.y + k * WG + lid;
        if (4u * i >= blk.z) { break; }
        let keep = tail(i, blk.z);
        let p0 = param[i]; let m0 = exp_avg[i]; let v0 = exp_avg_sq[i];
        var g = grad_of(i, f);
        var p = p0;
        if ((f & DECOUPLED) != 0u) { p = p * decay; }
        if ((f & L2) != 0u) { g = g + wd * p; }
        let m = lerp4(m0, g, omb1);
        let v = v0 * b2 + omb2 * g * g;
        var vd = v;
        if ((f & AMSGRAD) != 0u) {
            let x0 = max_exp_avg_sq[i];
            vd = nan_max4(x0, v);
            max_exp_avg_sq[i] = select(vd, x0, keep);
        }
        p = p + nss * m / (sqrt(vd) / bc2s + eps);
        param[i] = select(p, p0, keep);
        exp_avg[i] = select(m, m0, keep);
        exp_avg_sq[i] = select(v, v0, keep);
    }
}
