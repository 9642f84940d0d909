// LAMB (You et al. 2019; apex FusedLAMB, adam_w_mode). Three passes, no host round trip:
//   moments (elementwise): g = -g if maximize; m = lerp(m, g, 1-b1); v = b2*v + (1-b2)*g*g;
//            u = (m/bc1) / (sqrt(v/bc2) + eps) + wd*p; per-block sums of p*p and u*u
//   trust_ratio (per tensor): r = |p|/|u| unless either is 0 (then 1; apex tests != 0, so a NaN norm gives NaN)
//   apply   (elementwise): u from the new m, v; p -= (lr*r)*u
// Record (rlx_gpu/optim/lamb.py): omb1, b2, omb2, bc1, bc2 (1 without bias correction), eps, wd, lr.

// #include "moments.wgsl"

fn direction(r: Rec, p: vec4<f32>, m: vec4<f32>, v: vec4<f32>) -> vec4<f32> {
    return (m / r.bc1) / (sqrt(v / r.bc2) + r.eps) + r.wd * p;
}

fn moments(r: Rec, e: u32, p: vec4<f32>, g: vec4<f32>, s: State) -> Out {
    var o = out(p, s);
    o.s = with_moments(r, s, g);
    // the apply pass re-reads the moments as stored (state_dtype): the norm of u is taken from those values too
    let u = direction(r, p, round_state(o.s.exp_avg), round_state(o.s.exp_avg_sq));
    o.sum_a = p * p;
    o.sum_b = u * u;
    return o;
}

fn trust_ratio(r: Rec, sums: vec2<f32>) -> f32 {
    let pn = sqrt(sums.x);
    let un = sqrt(sums.y);
    return select(pn / un, 1.0, pn == 0.0 || un == 0.0);
}

fn apply(r: Rec, e: u32, p: vec4<f32>, g: vec4<f32>, s: State) -> Out {
    var o = out(p, s);
    o.p = p - (r.lr * r.tensor_scalar) * direction(r, p, s.exp_avg, s.exp_avg_sq);
    return o;
}
