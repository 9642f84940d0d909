// SGD with optional (Nesterov) momentum (torch.optim.SGD semantics).
//   g = -g if maximize;  g += wd*p
//   momentum mu: b = g at the first step, else b = mu*b + (1-dampening)*g;  g = g + mu*b (nesterov) else b
//   p -= lr*g
// Record: flags (4 momentum, 8 nesterov, 16 L2 decay, 32 first step: seed b with g), 1 wd, 2 mu,
//         3 1-dampening, 4 -lr
// #include "common.wgsl"

const MOMENTUM: u32 = 4u;
const NESTEROV: u32 = 8u;
const L2: u32 = 16u;
const SEED: u32 = 32u;

@group(0) @binding(4) var<storage, read_write> momentum_buffer: array<vec4<f32>>;

@compute @workgroup_size(WG)
fn step(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let blk = active_block(wid, nwg);
    if (blk.x == NONE) { return; }
    let t = blk.x;
    let f = hu(t, 0u);
    let wd = hf(t, 1u); let mu = hf(t, 2u); let omd = hf(t, 3u); let nlr = hf(t, 4u);
    for (var k = 0u; k < EPT; k++) {
        let i = blk.y + k * WG + lid;
        if (4u * i >= blk.z) { break; }
        let keep = tail(i, blk.z);
        let p0 = param[i];
        var g = grad_of(i, f);
        if ((f & L2) != 0u) { g = g + wd * p0; }
        if ((f & MOMENTUM) != 0u) {
            var b = g;
            if ((f & SEED) == 0u) { b = momentum_buffer[i] * mu + omd * g; }
            momentum_buffer[i] = select(b, vec4<f32>(0.0), keep);
            if ((f & NESTEROV) != 0u) { g = g + mu * b; } else { g = b; }
        }
        param[i] = select(p0 + nlr * g, p0, keep);
    }
}
