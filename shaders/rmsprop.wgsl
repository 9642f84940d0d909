// RMSprop (torch.optim.RMSprop semantics; eps outside the square root), on the generic elementwise driver.
//   g = -g if maximize;  g += wd*p;  s = alpha*s + (1-alpha)*g*g
//   centered: a = lerp(a, g, 1-alpha), d = sqrt(s - a*a) + eps  else d = sqrt(s) + eps
//             (s - a*a is +inf where s is +inf and a finite, as torch's fused addcmul gives it)
//   momentum mu > 0: b = mu*b + g/d, p -= lr*b  else p -= lr*g/d
// Record (rlx_gpu/optim/rmsprop.py): wd, alpha, oma = 1-alpha, eps, mu, neg_lr; flags CENTERED, MOMENTUM, L2.

fn update(r: Rec, e: u32, p: vec4<f32>, g0: vec4<f32>, s: State) -> Out {
    var o = out(p, s);
    var g = g0;
    if (has(r, L2)) { g = g + r.wd * p; }
    o.s.square_avg = s.square_avg * r.alpha + r.oma * g * g;
    let sq = o.s.square_avg;
    var d: vec4<f32>;
    if (has(r, CENTERED)) {
        o.s.grad_avg = lerp4(s.grad_avg, g, r.oma);
        let a = o.s.grad_avg;
        d = sqrt(select(sq - a * a, sq, is_posinf4(sq) & is_finite4(a))) + r.eps;
    } else {
        d = sqrt(sq) + r.eps;
    }
    if (has(r, MOMENTUM)) {
        o.s.momentum_buffer = s.momentum_buffer * r.mu + g / d;
        o.p = p + r.neg_lr * o.s.momentum_buffer;
    } else {
        o.p = p + r.neg_lr * g / d;
    }
    return o;
}
