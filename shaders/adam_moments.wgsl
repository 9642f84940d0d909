// Weight decay and Adam's moments, shared by Adam/AdamW and RAdam (records with fields decay, wd, omb1, b2, omb2
// and flags DECOUPLED, L2):  decoupled: p *= 1 - lr*wd  |  L2: g += wd*p;  then moments.wgsl's update.
// Returns the Out with p decayed and the moments updated; the caller finishes p.
// #include "moments.wgsl"

fn adam_moments(r: Rec, p: vec4<f32>, g0: vec4<f32>, s: State) -> Out {
    var o = out(p, s);
    var g = g0;
    if (has(r, DECOUPLED)) { o.p = o.p * r.decay; }
    if (has(r, L2)) { g = g + r.wd * o.p; }
    o.s = with_moments(r, s, g);
    return o;
}
