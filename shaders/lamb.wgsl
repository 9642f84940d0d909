// LAMB (You et al. 2019) as apex's FusedLAMB (multi_tensor_lamb). Three passes, no host round trip:
//   moments (elementwise): g = -g if maximize; g += wd*p if L2 (not adam_w_mode);
//            m = b1*m + b3*g; v = b2*v + (1-b2)*g*g;
//            u = (m/bc1) / (sqrt(v/bc2) + eps) (+ wd*p in adam_w_mode); per-block sums of p*p and u*u
//   trust_ratio (per tensor): r = |p|/|u| where TRUST (wd != 0 or use_nvlamb) unless either is 0 (then 1; apex
//            tests != 0, so a NaN norm gives NaN); r = 1 without TRUST
//   apply   (elementwise): u from the new m, v; p -= (lr*r)*u
// Record (rlx_gpu/optim/lamb.py): b1, b3 (1-b1, or 1 without grad_averaging), b2, omb2, bc1, bc2 (1 without bias
// correction), eps, wd, lr; flags TRUST, L2.

fn direction(r: Rec, p: vec4<f32>, m: vec4<f32>, v: vec4<f32>) -> vec4<f32> {
    let u = (m / r.bc1) / (sqrt(v / r.bc2) + r.eps);
    return select(u + r.wd * p, u, has(r, L2));
}

fn moments(r: Rec, e: u32, p: vec4<f32>, g: vec4<f32>, s: State) -> Out {
    var o = out(p, s);
    let gl = select(g, g + r.wd * p, has(r, L2));
    o.s.exp_avg = s.exp_avg * r.b1 + r.b3 * gl;
    o.s.exp_avg_sq = s.exp_avg_sq * r.b2 + r.omb2 * gl * gl;
    // the apply pass re-reads the moments as stored (state_dtype): the norm of u is taken from those values too
    let u = direction(r, p, round_state(o.s.exp_avg), round_state(o.s.exp_avg_sq));
    o.sum_a = p * p;
    o.sum_b = u * u;
    return o;
}

fn trust_ratio(r: Rec, sums: vec2<f32>) -> f32 {
    let pn = sqrt(sums.x);
    let un = sqrt(sums.y);
    return select(pn / un, 1.0, !has(r, TRUST) || pn == 0.0 || un == 0.0);
}

fn apply(r: Rec, e: u32, p: vec4<f32>, g: vec4<f32>, s: State) -> Out {
    var o = out(p, s);
    o.p = p - (r.lr * r.tensor_scalar) * direction(r, p, s.exp_avg, s.exp_avg_sq);
    return o;
}
