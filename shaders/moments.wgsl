// Adam's first and second moments, shared by Adam/AdamW, RAdam, NAdamW and LAMB (records with fields omb1 = 1-b1,
// b2, omb2 = 1-b2):  m = lerp(m, g, 1-b1);  v = b2*v + (1-b2)*g*g. The other state members pass through.
fn with_moments(r: Rec, s: State, g: vec4<f32>) -> State {
    var n = s;
    n.exp_avg = lerp4(s.exp_avg, g, r.omb1);
    n.exp_avg_sq = s.exp_avg_sq * r.b2 + r.omb2 * g * g;
    return n;
}
