// QHAdamW (Ma & Yarats 2019; qhoptim's QHAdamW): bias correction folded into the betas (host, per tensor).
//   p *= 1 - lr*wd;  m = b1'*m + (1-b1')*g;  v = b2'*v + (1-b2')*g*g
//   p -= lr * (nu1*m + (1-nu1)*g) / (sqrt(nu2*v + (1-nu2)*g*g) + eps)
// Record: flags (4 nu1 != 1, 8 nu2 != 1, 16 decay, 32 eps != 0), 1 decay = 1-lr*wd, 2 b1', 3 1-b1', 4 b2',
//         5 1-b2', 6 nu1, 7 1-nu1, 8 nu2, 9 1-nu2, 10 eps, 11 -lr
// #include "common.wgsl"

const MIX1: u32 = 4u;
const MIX2: u32 = 8u;
const DECAY: u32 = 16u;
const EPS: u32 = 32u;

@group(0) @binding(4) var<storage, read_write> exp_avg: array<vec4<f32>>;
@group(0) @binding(5) var<storage, read_write> exp_avg_sq: array<vec4<f32>>;

@compute @workgroup_size(WG)
fn step(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let blk = active_block(wid, nwg);
    if (blk.x == NONE) { return; }
    let t = blk.x;
    let f = hu(t, 0u);
    let decay = hf(t, 1u); let b1 = hf(t, 2u); let omb1 = hf(t, 3u); let b2 = hf(t, 4u); let omb2 = hf(t, 5u);
    let nu1 = hf(t, 6u); let omnu1 = hf(t, 7u); let nu2 = hf(t, 8u); let omnu2 = hf(t, 9u);
    let eps = hf(t, 10u); let nlr = hf(t, 11u);
    for (var k = 0u; k < EPT; k++) {
        let i = blk.y + k * WG + lid;
        if (4u * i >= blk.z) { break; }
        let keep = tail(i, blk.z);
        let p0 = param[i]; let m0 = exp_avg[i]; let v0 = exp_avg_sq[i];
        let g = grad[i] * gscale();
        var p = p0;
        if ((f & DECAY) != 0u) { p = p * decay; }
        let g2 = g * g;
        let m = m0 * b1 + omb1 * g;
        let v = v0 * b2 + omb2 * g2;
        var avg = m * nu1;
        if ((f & MIX1) != 0u) { avg = avg + omnu1 * g; }
        var rms = v * nu2;
        if ((f & MIX2) != 0u) { rms = rms + omnu2 * g2; }
        rms = sqrt(rms);
        if ((f & EPS) != 0u) { rms = rms + eps; }
        p = p + nlr * avg / rms;
        param[i] = select(p, p0, keep);
        exp_avg[i] = select(m, m0, keep);
        exp_avg_sq[i] = select(v, v0, keep);
    }
}
