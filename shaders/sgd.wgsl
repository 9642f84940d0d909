// SGD with optional (Nesterov) momentum (torch.optim.SGD semantics), on the generic elementwise driver.
//   g = -g if maximize;  g += wd*p
//   momentum mu: b = g at the first step, else b = mu*b + (1-dampening)*g;  g = g + mu*b (nesterov) else b
//   p -= lr*g
// Record (rlx_gpu/optim/sgd.py): wd, mu, omd = 1-dampening, neg_lr; flags MOMENTUM, NESTEROV, L2, SEED (the
// buffer's first step: b = g).

fn update(r: Rec, e: u32, p: vec4<f32>, g0: vec4<f32>, s: State) -> Out {
    var o = out(p, s);
    var g = g0;
    if (has(r, L2)) { g = g + r.wd * p; }
    if (has(r, MOMENTUM)) {
        var b = g;
        if (!has(r, SEED)) { b = s.momentum_buffer * r.mu + r.omd * g; }
        o.s.momentum_buffer = b;
        if (has(r, NESTEROV)) { g = g + r.mu * b; } else { g = b; }
    }
    o.p = p + r.neg_lr * g;
    return o;
}
