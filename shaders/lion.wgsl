// Lion (Chen et al. 2023), on the generic elementwise driver.
//   p *= 1 - lr*wd;  p -= lr*sign(b1*m + (1-b1)*g)  (sign(0) = 0);  m = b2*m + (1-b2)*g
// Record (rlx_gpu/optim/lion.py): decay = 1-lr*wd, b1, omb1, b2, omb2, neg_lr; flag DECAY.

fn update(r: Rec, e: u32, p: vec4<f32>, g: vec4<f32>, s: State) -> Out {
    var o = out(p, s);
    if (has(r, DECAY)) { o.p = o.p * r.decay; }
    o.p = o.p + r.neg_lr * nan_sign4(s.exp_avg * r.b1 + r.omb1 * g);
    o.s.exp_avg = s.exp_avg * r.b2 + r.omb2 * g;
    return o;
}
