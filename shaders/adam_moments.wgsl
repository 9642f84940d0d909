// Weight decay and Adam's moments, shared by Adam/AdamW and RAdam (records with fields decay, wd, omb1, b2, omb2
// and flags DECOUPLED, L2):  decoupled: p *= 1 - lr*wd  |  L2: g += wd*p;  m = lerp(m, g, 1-b1);
// v = b2*v + (1-b2)*g*g. Returns the Out with p decayed and the moments updated; the caller finishes p.
fn adam_moments(r: Rec, p: vec4<f32>, g0: vec4<f32>, s: State) -> Out {
    var o = out(p, s);
    var g = g0;
    if (has(r, DECOUPLED)) { o.p = o.p * r.decay; }
    if (has(r, L2)) { g = g + r.wd * o.p; }
    o.s.exp_avg = lerp4(s.exp_avg, g, r.omb1);
    o.s.exp_avg_sq = s.exp_avg_sq * r.b2 + r.omb2 * g * g;
    return o;
}
