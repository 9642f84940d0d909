// Adam and AdamW (torch.optim semantics), on the generic elementwise driver (rlx_gpu/engine/codegen.py).
//   g = -g if maximize;  Adam: g += wd*p  |  AdamW: p *= 1 - lr*wd
//   m = lerp(m, g, 1-b1);  v = b2*v + (1-b2)*g*g;  amsgrad: vmax = max(vmax, v), v := vmax
//   p -= lr/(1-b1^t) * m / (sqrt(v)/sqrt(1-b2^t) + eps)
// Record (rlx_gpu/optim/adam.py): decay = 1-lr*wd, wd, omb1 = 1-b1, b2, omb2 = 1-b2, neg_step = -lr/(1-b1^t),
// bc2_sqrt = sqrt(1-b2^t), eps; flags AMSGRAD, DECOUPLED, L2.

// #include "adam_moments.wgsl"

fn update(r: Rec, e: u32, p: vec4<f32>, g: vec4<f32>, s: State) -> Out {
    var o = adam_moments(r, p, g, s);
    var v = o.s.exp_avg_sq;
    if (has(r, AMSGRAD)) {
        o.s.max_exp_avg_sq = nan_max4(s.max_exp_avg_sq, v);
        v = o.s.max_exp_avg_sq;
    }
    o.p = o.p + r.neg_step * o.s.exp_avg / (sqrt(v) / r.bc2_sqrt + r.eps);
    return o;
}
