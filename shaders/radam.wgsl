// RAdam (torch.optim.RAdam), on the generic elementwise driver.
//   g = -g if maximize;  L2: g += wd*p  |  decoupled: p *= 1 - lr*wd
//   m = lerp(m, g, 1-b1);  v = b2*v + (1-b2)*g*g;  m^ = m/(1-b1^t)
//   rectified (rho_t > 5, decided on the host): p -= m^*lr * sqrt(1-b2^t)/(sqrt(v)+eps) * r;  else p -= m^*lr
// Record (rlx_gpu/optim/radam.py): decay = 1-lr*wd, wd, omb1, b2, omb2, bc1 = 1-b1^t, lr, bc2_sqrt, eps, rect;
// flags RECTIFIED, DECOUPLED, L2.

// #include "adam_moments.wgsl"

fn update(r: Rec, e: u32, p: vec4<f32>, g: vec4<f32>, s: State) -> Out {
    var o = adam_moments(r, p, g, s);
    let mhat = o.s.exp_avg / r.bc1;
    if (has(r, RECTIFIED)) {
        o.p = o.p + -1.0 * (mhat * r.lr * (r.bc2_sqrt / (sqrt(o.s.exp_avg_sq) + r.eps)) * r.rect);
    } else {
        o.p = o.p + -1.0 * (mhat * r.lr);
    }
    return o;
}
