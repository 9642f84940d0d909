// LAMB (You et al. 2019; apex FusedLAMB, adam_w_mode). Three passes, no host round trip:
//   moments (per chunk): g = -g if maximize; m = lerp(m, g, 1-b1); v = b2*v + (1-b2)*g*g;
//            u = (m/bc1) / (sqrt(v/bc2) + eps) + wd*p; per-block partial sums of p*p and u*u
//   ratio   (one workgroup per tensor): r = |p|/|u| unless either is 0 (then 1)
//   apply   (per chunk): recompute u from the new m, v; p -= (lr*r)*u
// Record: flags, 1 1-b1, 2 b2, 3 1-b2, 4 bc1, 5 bc2 (1 without bias correction), 6 eps, 7 wd, 8 lr,
//         14 first block, 15 block count
// #include "common.wgsl"

@group(0) @binding(4) var<storage, read_write> exp_avg: array<vec4<f32>>;
@group(0) @binding(5) var<storage, read_write> exp_avg_sq: array<vec4<f32>>;
@group(0) @binding(6) var<storage, read_write> partials: array<vec2<f32>>;
@group(0) @binding(7) var<storage, read_write> ratio: array<f32>;

var<workgroup> red2: array<vec2<f32>, WG>;

fn direction(t: u32, p: vec4<f32>, m: vec4<f32>, v: vec4<f32>) -> vec4<f32> {
    return (m / hf(t, 4u)) / (sqrt(v / hf(t, 5u)) + hf(t, 6u)) + hf(t, 7u) * p;
}

// Tree sum of red2[0..WG) into red2[0]: both of LAMB's norms at once.
fn reduce2(lid: u32) {
    for (var s = WG / 2u; s > 0u; s = s / 2u) {
        workgroupBarrier();
        if (lid < s) { red2[lid] = red2[lid] + red2[lid + s]; }
    }
    workgroupBarrier();
}

@compute @workgroup_size(WG)
fn moments(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
           @builtin(local_invocation_index) lid: u32) {
    let blk = active_block(wid, nwg);
    if (blk.x == NONE) { return; }
    let t = blk.x;
    let f = hu(t, 0u);
    let omb1 = hf(t, 1u); let b2 = hf(t, 2u); let omb2 = hf(t, 3u);
    var acc = vec2<f32>(0.0);
    for (var k = 0u; k < EPT; k++) {
        let i = blk.y + k * WG + lid;
        if (4u * i < blk.z) {
            let keep = tail(i, blk.z);
            let p = param[i]; let m0 = exp_avg[i]; let v0 = exp_avg_sq[i];
            var g = grad_of(i, f);
            let m = lerp4(m0, g, omb1);
            let v = v0 * b2 + omb2 * g * g;
            exp_avg[i] = select(m, m0, keep);
            exp_avg_sq[i] = select(v, v0, keep);
            let u = select(direction(t, p, m, v), vec4<f32>(0.0), keep);
            let pm = select(p, vec4<f32>(0.0), keep);
            acc = acc + vec2<f32>(dot(pm, pm), dot(u, u));
        }
    }
    red2[lid] = acc;
    reduce2(lid);
    if (lid == 0u) { partials[blk.w] = red2[0]; }
}

@compute @workgroup_size(WG)
fn trust_ratio(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
               @builtin(local_invocation_index) lid: u32) {
    let t = wid.x + wid.y * nwg.x;
    if (t >= ntensors()) { return; }
    if ((hu(t, 0u) & ACTIVE) == 0u) { return; }
    let first = hu(t, 14u); let n = hu(t, 15u);
    var acc = vec2<f32>(0.0);
    for (var j = lid; j < n; j = j + WG) { acc = acc + partials[first + j]; }
    red2[lid] = acc;
    reduce2(lid);
    if (lid == 0u) {
        let pn = sqrt(red2[0].x); let un = sqrt(red2[0].y);
        ratio[t] = select(pn / un, 1.0, pn == 0.0 || un == 0.0);  // apex: a NaN norm gives a NaN ratio
    }
}

@compute @workgroup_size(WG)
fn apply(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
         @builtin(local_invocation_index) lid: u32) {
    let blk = active_block(wid, nwg);
    if (blk.x == NONE) { return; }
    let t = blk.x;
    let scale = hf(t, 8u) * ratio[t];
    for (var k = 0u; k < EPT; k++) {
        let i = blk.y + k * WG + lid;
        if (4u * i >= blk.z) { break; }
        let p0 = param[i];
        let p = p0 - scale * direction(t, p0, exp_avg[i], exp_avg_sq[i]);
        param[i] = select(p, p0, tail(i, blk.z));
    }
}
