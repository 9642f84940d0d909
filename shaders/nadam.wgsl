// NAdamW (torch.optim.NAdam, decoupled_weight_decay=True).
//   g = -g if maximize;  p *= 1 - lr*wd;  m = lerp(m, g, 1-b1);  v = b2*v + (1-b2)*g*g
//   d = sqrt(v/(1-b2^t)) + eps;  p += c1*g/d;  p += c2*m/d
//   with c1 = -lr*(1-mu_t)/(1-mu_product), c2 = -lr*mu_{t+1}/(1-mu_product*mu_{t+1}) from the host
// Record: flags (8 decoupled decay), 1 decay = 1-lr*wd, 2 1-b1, 3 b2, 4 1-b2, 5 1-b2^t, 6 eps, 7 c1, 8 c2
// #include "common.wgsl"

const DECOUPLED: u32 = 8u;

@group(0) @binding(4) var<storage, read_write> exp_avg: array<vec4<f32>>;
@group(0) @binding(5) var<storage, read_write> exp_avg_sq: array<vec4<f32>>;

@compute @workgroup_size(WG)
fn step(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let blk = active_block(wid, nwg);
    if (blk.x == NONE) { return; }
    let t = blk.x;
    let f = hu(t, 0u);
    let decay = hf(t, 1u); let omb1 = hf(t, 2u); let b2 = hf(t, 3u); let omb2 = hf(t, 4u);
    let bc2 = hf(t, 5u); let eps = hf(t, 6u); let c1 = hf(t, 7u); let c2 = hf(t, 8u);
    for (var k = 0u; k < EPT; k++) {
        let i = blk.y + k * WG + lid;
        if (4u * i >= blk.z) { break; }
        let keep = tail(i, blk.z);
        let p0 = param[i]; let m0 = exp_avg[i]; let v0 = exp_avg_sq[i];
        var g = grad_of(i, f);
        var p = p0;
        if ((f & DECOUPLED) != 0u) { p = p * decay; }
        let m = lerp4(m0, g, omb1);
        let v = v0 * b2 + omb2 * g * g;
        let d = sqrt(v / bc2) + eps;
        p = p + c1 * g / d;
        p = p + c2 * m / d;
        param[i] = select(p, p0, keep);
        exp_avg[i] = select(m, m0, keep);
        exp_avg_sq[i] = select(v, v0, keep);
    }
}
