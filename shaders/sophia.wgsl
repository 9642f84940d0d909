// Sophia-H (Liu et al. 2023), on the generic elementwise driver. Two passes:
//   update_hessian (update_hessian(), grads read from the `estimate` arena): h = b2*h + (1-b2)*estimate
//   update (the step): g = -g if maximize;  m = b1*m + (1-b1)*g;  p *= 1 - lr*wd;
//                      p -= lr*sign(m)*min(|m| / max(rho*h, eps), 1)
// Record (rlx_gpu/optim/sophia.py): decay = 1-lr*wd, b1, omb1, b2, omb2, rho, eps, neg_lr; flag DECAY.

fn update(r: Rec, e: u32, p: vec4<f32>, g: vec4<f32>, s: State) -> Out {
    var o = out(p, s);
    o.s.exp_avg = s.exp_avg * r.b1 + r.omb1 * g;
    if (has(r, DECAY)) { o.p = o.p * r.decay; }
    let ratio = nan_min4(abs(o.s.exp_avg) / nan_max4(r.rho * s.hessian, vec4<f32>(r.eps)), vec4<f32>(1.0));
    o.p = o.p + r.neg_lr * nan_sign4(o.s.exp_avg) * ratio;
    return o;
}

fn update_hessian(r: Rec, e: u32, p: vec4<f32>, estimate: vec4<f32>, s: State) -> Out {
    var o = out(p, s);
    o.s.hessian = s.hessian * r.b2 + r.omb2 * estimate;
    return o;
}
