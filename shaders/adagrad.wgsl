// Adagrad (torch.optim.Adagrad semantics), on the generic elementwise driver.
//   g = -g if maximize;  g += wd*p;  clr = lr / (1 + (t-1)*lr_decay)
//   sum += g*g;  p -= clr * g / (sqrt(sum) + eps)
// Record (rlx_gpu/optim/adagrad.py): wd, neg_clr, eps; flag L2.

fn update(r: Rec, e: u32, p: vec4<f32>, g0: vec4<f32>, s: State) -> Out {
    var o = out(p, s);
    var g = g0;
    if (has(r, L2)) { g = g + r.wd * p; }
    o.s.sum = s.sum + g * g;
    o.p = p + r.neg_clr * g / (sqrt(o.s.sum) + r.eps);
    return o;
}
