// NAdamW (torch.optim.NAdam, decoupled_weight_decay=True), on the generic elementwise driver.
//   g = -g if maximize;  p *= 1 - lr*wd;  m = lerp(m, g, 1-b1);  v = b2*v + (1-b2)*g*g
//   d = sqrt(v/(1-b2^t)) + eps;  p += c1*g/d;  p += c2*m/d
//   with c1 = -lr*(1-mu_t)/(1-mu_product), c2 = -lr*mu_{t+1}/(1-mu_product*mu_{t+1}) from the host
// Record (rlx_gpu/optim/nadam.py): decay = 1-lr*wd, omb1, b2, omb2, bc2 = 1-b2^t, eps, c1, c2; flag DECOUPLED.

// #include "moments.wgsl"

fn update(r: Rec, e: u32, p: vec4<f32>, g: vec4<f32>, s: State) -> Out {
    var o = out(p, s);
    if (has(r, DECOUPLED)) { o.p = o.p * r.decay; }
    o.s = with_moments(r, s, g);
    let d = sqrt(o.s.exp_avg_sq / r.bc2) + r.eps;
    o.p = o.p + r.c1 * g / d;
    o.p = o.p + r.c2 * o.s.exp_avg / d;
    return o;
}
