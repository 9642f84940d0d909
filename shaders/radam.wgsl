// RAdam (torch.optim.RAdam).
//   g = -g if maximize;  L2: g += wd*p  |  decoupled: p *= 1 - lr*wd
//   m = lerp(m, g, 1-b1);  v = b2*v + (1-b2)*g*g;  m^ = m/(1-b1^t)
//   rectified (rho_t > 5, decided on the host): p -= m^*lr * sqrt(1-b2^t)/(sqrt(v)+eps) * r;  else p -= m^*lr
// Record: flags (4 rectified, 8 decoupled decay, 16 L2 decay), 1 decay = 1-lr*wd, 2 wd, 3 1-b1, 4 b2,
//         5 1-b2, 6 1-b1^t, 7 lr, 8 sqrt(1-b2^t), 9 eps, 10 r
// #include "common.wgsl"

const RECTIFIED: u32 = 4u;
const DECOUPLED: u32 = 8u;
const L2: u32 = 16u;

@group(0) @binding(4) var<storage, read_write> exp_avg: array<vec4<f32>>;
@group(0) @binding(5) var<storage, read_write> exp_avg_sq: array<vec4<f32>>;

@compute @workgroup_size(WG)
fn step(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let blk = active_block(wid, nwg);
    if (blk.x == NONE) { return; }
    let t = blk.x;
    let f = hu(t, 0u);
    let decay = hf(t, 1u); let wd = hf(t, 2u); let omb1 = hf(t, 3u); let b2 = hf(t, 4u); let omb2 = hf(t, 5u);
    let bc1 = hf(t, 6u); let lr = hf(t, 7u); let bc2s = hf(t, 8u); let eps = hf(t, 9u); let r = hf(t, 10u);
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
        let mhat = m / bc1;
        if ((f & RECTIFIED) != 0u) {
            p = p + -1.0 * (mhat * lr * (bc2s / (sqrt(v) + eps)) * r);
        } else {
            p = p + -1.0 * (mhat * lr);
        }
        param[i] = select(p, p0, keep);
        exp_avg[i] = select(m, m0, keep);
        exp_avg_sq[i] = select(v, v0, keep);
    }
}
