// RMSprop (torch.optim.RMSprop semantics; eps outside the square root).
//   g = -g if maximize;  g += wd*p;  s = alpha*s + (1-alpha)*g*g
//   centered: a = lerp(a, g, 1-alpha), d = sqrt(s - a*a) + eps  else d = sqrt(s) + eps
//             (s - a*a is +inf where s is +inf and a finite, as torch's fused addcmul gives it)
//   momentum mu > 0: b = mu*b + g/d, p -= lr*b  else p -= lr*g/d
// Record: flags (4 centered, 8 momentum, 16 L2 decay), 1 wd, 2 alpha, 3 1-alpha, 4 eps, 5 mu, 6 -lr
// #include "common.wgsl"

const CENTERED: u32 = 4u;
const MOMENTUM: u32 = 8u;
const L2: u32 = 16u;

@group(0) @binding(4) var<storage, read_write> square_avg: array<vec4<f32>>;
@group(0) @binding(5) var<storage, read_write> momentum_buffer: array<vec4<f32>>;
@group(0) @binding(6) var<storage, read_write> grad_avg: array<vec4<f32>>;

@compute @workgroup_size(WG)
fn step(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let blk = active_block(wid, nwg);
    if (blk.x == NONE) { return; }
    let t = blk.x;
    let f = hu(t, 0u);
    let wd = hf(t, 1u); let alpha = hf(t, 2u); let oma = hf(t, 3u); let eps = hf(t, 4u);
    let mu = hf(t, 5u); let nlr = hf(t, 6u);
    for (var k = 0u; k < EPT; k++) {
        let i = blk.y + k * WG + lid;
        if (4u * i >= blk.z) { break; }
        let keep = tail(i, blk.z);
        let p0 = param[i]; let s0 = square_avg[i];
        var g = grad_of(i, f);
        if ((f & L2) != 0u) { g = g + wd * p0; }
        let s = s0 * alpha + oma * g * g;
        square_avg[i] = select(s, s0, keep);
        var d: vec4<f32>;
        if ((f & CENTERED) != 0u) {
            let a0 = grad_avg[i];
            let a = lerp4(a0, g, oma);
            grad_avg[i] = select(a, a0, keep);
            // torch's addcmul fuses s - a*a into one FMA: +inf where s is +inf and a finite, even if a*a overflows
            d = sqrt(select(s - a * a, s, is_posinf4(s) & is_finite4(a))) + eps;
        } else {
            d = sqrt(s) + eps;
        }
        var p: vec4<f32>;
        if ((f & MOMENTUM) != 0u) {
            let b0 = momentum_buffer[i];
            let b = b0 * mu + g / d;
            momentum_buffer[i] = select(b, b0, keep);
            p = p0 + nlr * b;
        } else {
            p = p0 + nlr * g / d;
        }
        param[i] = select(p, p0, keep);
    }
}
