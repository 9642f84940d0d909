// MARS-AdamW (Yuan et al. 2024, approximate variant). Three passes, no host round trip:
//   norms  (elementwise, 2-D tensors): c = (g - g_prev)*k + g, k = gamma*b1/(1-b1); per-block sums of c*c
//   scale  (per tensor, 2-D): s = |c|_F if |c|_F > 1 else 1 (|c|_F a float32 sum, as the authors' torch.norm)
//   update (elementwise): 2-D: c /= s; m = b1*m + (1-b1)*c; v = b2*v + (1-b2)*c*c;
//                         p += -lr*(wd*p + m/((sqrt(v)*(1/sqrt(1-b2^t)) + eps)*(1-b1^t)))
//                         other tensors: AdamW with the 1-D hyperparameters; every tensor: g_prev = g
// Record (rlx_gpu/optim/mars.py): k, b1, omb1, b2, omb2, c2 (1/sqrt(1-b2^t) for 2-D, sqrt(1-b2^t) else), eps,
// bc1 = 1-b1^t, neg_lr (-lr for 2-D, -lr_1d/(1-b1^t) else), wd (wd for 2-D, 1-lr_1d*wd_1d else); flag MATRIX.

fn norms(r: Rec, e: u32, p: vec4<f32>, g: vec4<f32>, s: State) -> Out {
    var o = out(p, s);
    let c = (g - s.last_grad) * r.k + g;
    o.sum_a = c * c;
    return o;
}

fn scale(r: Rec, sums: vec2<f32>) -> f32 {
    let cn = sqrt(sums.x);
    return select(1.0, cn, cn > 1.0);
}

fn update(r: Rec, e: u32, p: vec4<f32>, g: vec4<f32>, s: State) -> Out {
    var o = out(p, s);
    if (has(r, MATRIX)) {
        let c = ((g - s.last_grad) * r.k + g) / r.tensor_scalar;
        o.s.exp_avg = s.exp_avg * r.b1 + r.omb1 * c;
        o.s.exp_avg_sq = s.exp_avg_sq * r.b2 + r.omb2 * c * c;
        let denom = (sqrt(o.s.exp_avg_sq) * r.c2 + r.eps) * r.bc1;
        o.p = p + r.neg_lr * (p * r.wd + o.s.exp_avg / denom);
    } else {
        o.s.exp_avg = s.exp_avg * r.b1 + r.omb1 * g;
        o.s.exp_avg_sq = s.exp_avg_sq * r.b2 + r.omb2 * g * g;
        let denom = sqrt(o.s.exp_avg_sq) / r.c2 + r.eps;
        o.p = p * r.wd;
        o.p = o.p + r.neg_lr * o.s.exp_avg / denom;
    }
    o.s.last_grad = g;
    return o;
}
