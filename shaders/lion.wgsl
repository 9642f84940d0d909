// Lion (Chen et al. 2023).
//   p *= 1 - lr*wd;  p -= lr*sign(b1*m + (1-b1)*g)  (sign(0) = 0);  m = b2*m + (1-b2)*g
// Record: flags (16 decay), 1 decay = 1-lr*wd, 2 b1, 3 1-b1, 4 b2, 5 1-b2, 6 -lr
// #include "common.wgsl"

const DECAY: u32 = 16u;

@group(0) @binding(4) var<storage, read_write> exp_avg: array<vec4<f32>>;

@compute @workgroup_size(WG)
fn step(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let blk = active_block(wid, nwg);
    if (blk.x == NONE) { return; }
    let t = blk.x;
    let f = hu(t, 0u);
    let decay = hf(t, 1u); let b1 = hf(t, 2u); let omb1 = hf(t, 3u); let b2 = hf(t, 4u); let omb2 = hf(t, 5u);
    let nlr = hf(t, 6u);
    for (var k = 0u; k < EPT; k++) {
        let i = blk.y + k * WG + lid;
        if (4u * i >= blk.z) { break; }
        let keep = tail(i, blk.z);
        let p0 = param[i]; let m0 = exp_avg[i];
        let g = grad[i] * gscale();
        var p = p0;
        if ((f & DECAY) != 0u) { p = p * decay; }
        p = p + nlr * nan_sign4(m0 * b1 + omb1 * g);
        let m = m0 * b2 + omb2 * g;
        param[i] = select(p, p0, keep);
        exp_avg[i] = select(m, m0, keep);
    }
}
