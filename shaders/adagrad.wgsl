// Adagrad (torch.optim.Adagrad semantics).
//   g = -g if maximize;  g += wd*p;  clr = lr / (1 + (t-1)*lr_decay)
//   sum += g*g;  p -= clr * g / (sqrt(sum) + eps)
// Record: flags (16 L2 decay), 1 wd, 2 -clr, 3 eps
// #include "common.wgsl"

const L2: u32 = 16u;

@group(0) @binding(4) var<storage, read_write> sum: array<vec4<f32>>;

@compute @workgroup_size(WG)
fn step(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let blk = active_block(wid, nwg);
    if (blk.x == NONE) { return; }
    let t = blk.x;
    let f = hu(t, 0u);
    let wd = hf(t, 1u); let nclr = hf(t, 2u); let eps = hf(t, 3u);
    for (var k = 0u; k < EPT; k++) {
        let i = blk.y + k * WG + lid;
        if (4u * i >= blk.z) { break; }
        let keep = tail(i, blk.z);
        let p0 = param[i]; let s0 = sum[i];
        var g = grad_of(i, f);
        if ((f & L2) != 0u) { g = g + wd * p0; }
        let s = s0 + g * g;
        sum[i] = select(s, s0, keep);
        param[i] = select(p0 + nclr * g / (sqrt(s) + eps), p0, keep);
    }
}
