// QHAdamW (Ma & Yarats 2019; qhoptim's QHAdamW): bias correction folded into the betas (host, per tensor).
//   p *= 1 - lr*wd;  m = b1'*m + (1-b1')*g;  v = b2'*v + (1-b2')*g*g
//   p -= lr * (nu1*m + (1-nu1)*g) / (sqrt(nu2*v + (1-nu2)*g*g) + eps)
// Record (rlx_gpu/optim/qhadam.py): decay, b1 (b1'), omb1, b2 (b2'), omb2, nu1, omnu1, nu2, omnu2, eps, neg_lr;
// flags MIX1 (nu1 != 1), MIX2 (nu2 != 1), DECAY, EPS (eps != 0).

fn update(r: Rec, e: u32, p: vec4<f32>, g: vec4<f32>, s: State) -> Out {
    var o = out(p, s);
    if (has(r, DECAY)) { o.p = o.p * r.decay; }
    let g2 = g * g;
    o.s.exp_avg = s.exp_avg * r.b1 + r.omb1 * g;
    o.s.exp_avg_sq = s.exp_avg_sq * r.b2 + r.omb2 * g2;
    var avg = o.s.exp_avg * r.nu1;
    if (has(r, MIX1)) { avg = avg + r.omnu1 * g; }
    var rms = o.s.exp_avg_sq * r.nu2;
    if (has(r, MIX2)) { rms = rms + r.omnu2 * g2; }
    rms = sqrt(rms);
    if (has(r, EPS)) { rms = rms + r.eps; }
    o.p = o.p + r.neg_lr * avg / rms;
    return o;
}
