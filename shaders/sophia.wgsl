// Sophia-H (Liu et al. 2023). Two entry points:
//   hessian (update_hessian): h = b2*h + (1-b2)*estimate, for tensors given an estimate (in `grad`'s place
//            the caller's Hutchinson estimate u*(Hu) is bound as `estimate`)
//   step:    g = -g if maximize;  m = b1*m + (1-b1)*g;  p *= 1 - lr*wd;
//            p -= lr*sign(m)*min(|m| / max(rho*h, eps), 1)
// Record: flags (16 decay), 1 decay = 1-lr*wd, 2 b1, 3 1-b1, 4 b2, 5 1-b2, 6 rho, 7 eps, 8 -lr
// #include "common.wgsl"

const DECAY: u32 = 16u;

@group(0) @binding(4) var<storage, read_write> exp_avg: array<vec4<f32>>;
@group(0) @binding(5) var<storage, read_write> hessian: array<vec4<f32>>;
@group(0) @binding(6) var<storage, read> estimate: array<vec4<f32>>;

@compute @workgroup_size(WG)
fn step(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let blk = active_block(wid, nwg);
    if (blk.x == NONE) { return; }
    let t = blk.x;
    let f = hu(t, 0u);
    let decay = hf(t, 1u); let b1 = hf(t, 2u); let omb1 = hf(t, 3u); let rho = hf(t, 6u); let eps = hf(t, 7u);
    let nlr = hf(t, 8u);
    for (var k = 0u; k < EPT; k++) {
        let i = blk.y + k * WG + lid;
        if (4u * i >= blk.z) { break; }
        let keep = tail(i, blk.z);
        let p0 = param[i]; let m0 = exp_avg[i];
        var g = grad_of(i, f);
        let m = m0 * b1 + omb1 * g;
        var p = p0;
        if ((f & DECAY) != 0u) { p = p * decay; }
        let ratio = nan_min4(abs(m) / nan_max4(rho * hessian[i], vec4<f32>(eps)), vec4<f32>(1.0));
        p = p + nlr * nan_sign4(m) * ratio;
        param[i] = select(p, p0, keep);
        exp_avg[i] = select(m, m0, keep);
    }
}

@compute @workgroup_size(WG)
fn update_hessian(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                  @builtin(local_invocation_index) lid: u32) {
    let blk = active_block(wid, nwg);
    if (blk.x == NONE) { return; }
    let t = blk.x;
    let b2 = hf(t, 4u); let omb2 = hf(t, 5u);
    for (var k = 0u; k < EPT; k++) {
        let i = blk.y + k * WG + lid;
        if (4u * i >= blk.z) { break; }
        let h0 = hessian[i];
        hessian[i] = select(h0 * b2 + omb2 * estimate[i], h0, tail(i, blk.z));
    }
}
