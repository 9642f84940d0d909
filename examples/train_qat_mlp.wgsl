// The digits network of examples/train_qat_mlp.py (its module prepends rlx_gpu.qat.wgsl() and the constants IN,
// HID and OUT): quantization-aware forward and straight-through backward, one kernel per step of each.
override B: u32 = 128u;
override WG: u32 = 64u;
override BITS: u32 = 8u;     // weight codes: 8 or 4 bits, packed into u32 words, low bits first
override WMAX: f32 = 127.0;  // their range [-WMAX - 1, WMAX]
override AMIN: f32 = 0.0;    // the activations' range (the observers' quant_min, quant_max)
override AMAX: f32 = 127.0;

@group(0) @binding(0) var<storage, read> x: array<f32>;             // [B, IN]
@group(0) @binding(1) var<storage, read> y: array<u32>;             // [B]
@group(0) @binding(2) var<storage, read> w1c: array<u32>;           // opt.qat["w1"]: codes of w1 [HID, IN]
@group(0) @binding(3) var<storage, read> w1s: array<f32>;           // its scales [HID]
@group(0) @binding(4) var<storage, read> w2c: array<u32>;           // w2 [OUT, HID]
@group(0) @binding(5) var<storage, read> w2s: array<f32>;
@group(0) @binding(6) var<storage, read> w1: array<f32>;            // the float32 weights (the STE masks)
@group(0) @binding(7) var<storage, read> w2: array<f32>;
@group(0) @binding(8) var<storage, read> b1: array<f32>;
@group(0) @binding(9) var<storage, read> b2: array<f32>;
@group(0) @binding(10) var<storage, read> qpx: array<vec4<f32>>;    // observers' (scale, 1/scale, zero point, 0)
@group(0) @binding(11) var<storage, read> qp1: array<vec4<f32>>;
@group(0) @binding(12) var<storage, read> qp2: array<vec4<f32>>;
@group(0) @binding(13) var<storage, read_write> xq: array<f32>;     // [B, IN] fake-quantized input
@group(0) @binding(14) var<storage, read_write> z1: array<f32>;     // [B, HID] fc1's output
@group(0) @binding(15) var<storage, read_write> h: array<f32>;      // [B, HID] tanh(fq(z1))
@group(0) @binding(16) var<storage, read_write> hq: array<f32>;     // [B, HID] fq(h), fixed qparams
@group(0) @binding(17) var<storage, read_write> z2: array<f32>;     // [B, OUT] fc2's output
@group(0) @binding(18) var<storage, read_write> dz: array<f32>;     // [B, OUT] d loss / d z2
@group(0) @binding(19) var<storage, read_write> dh: array<f32>;     // [B, HID] d loss / d z1
@group(0) @binding(20) var<storage, read_write> loss: array<f32>;
@group(0) @binding(21) var<storage, read_write> hit: array<u32>;
@group(0) @binding(22) var<storage, read_write> g_w1: array<f32>;
@group(0) @binding(23) var<storage, read_write> g_b1: array<f32>;
@group(0) @binding(24) var<storage, read_write> g_w2: array<f32>;
@group(0) @binding(25) var<storage, read_write> g_b2: array<f32>;

fn code(word: u32, i: u32) -> f32 {  // code i of its word, sign-extended
    return f32(bitcast<i32>(word << (32u - BITS - BITS * (i % (32u / BITS)))) >> (32u - BITS));
}
fn w1q(j: u32, k: u32) -> f32 { let i = j * IN + k; return code(w1c[i / (32u / BITS)], i) * w1s[j]; }
fn w2q(c: u32, j: u32) -> f32 { let i = c * HID + j; return code(w2c[i / (32u / BITS)], i) * w2s[c]; }
fn fq(v: f32, p: vec4<f32>) -> f32 { return fake_quant(v, p.x, p.y, p.z, AMIN, AMAX, false); }
fn ste(v: f32, p: vec4<f32>) -> f32 { return f32(fq_mask(v, p.y, p.z, AMIN, AMAX, false)); }
fn wste(w: f32, s: f32) -> f32 { return f32(fq_mask(w, fq_div(1.0, s), 0.0, -WMAX - 1.0, WMAX, true)); }
const HS: vec4<f32> = vec4<f32>(0.0078125, 128.0, 128.0, 0.0);  // tanh's fixed qparams, uint8 [0, 255]

@compute @workgroup_size(WG) fn quant_x(@builtin(global_invocation_id) id: vec3<u32>) {
    if (id.x < B * IN) { xq[id.x] = fq(x[id.x], qpx[0]); }
}
@compute @workgroup_size(WG) fn fc1(@builtin(global_invocation_id) id: vec3<u32>) {
    let t = id.x;
    if (t >= B * HID) { return; }
    let b = t / HID; let j = t % HID;
    var s = b1[j];
    for (var k = 0u; k < IN; k++) { s += xq[b * IN + k] * w1q(j, k); }
    z1[t] = s;
}
@compute @workgroup_size(WG) fn act(@builtin(global_invocation_id) id: vec3<u32>) {
    if (id.x >= B * HID) { return; }
    let v = tanh(fq(z1[id.x], qp1[0]));
    h[id.x] = v;
    hq[id.x] = fake_quant(v, HS.x, HS.y, HS.z, 0.0, 255.0, false);
}
@compute @workgroup_size(WG) fn fc2(@builtin(global_invocation_id) id: vec3<u32>) {
    let t = id.x;
    if (t >= B * OUT) { return; }
    let b = t / OUT; let c = t % OUT;
    var s = b2[c];
    for (var j = 0u; j < HID; j++) { s += hq[b * HID + j] * w2q(c, j); }
    z2[t] = s;
}
@compute @workgroup_size(WG) fn output(@builtin(global_invocation_id) id: vec3<u32>) {  // softmax cross-entropy
    let b = id.x;
    if (b >= B) { return; }
    var z: array<f32, OUT>;
    var top = 0u;
    for (var c = 0u; c < OUT; c++) {
        z[c] = fq(z2[b * OUT + c], qp2[0]);
        if (z[c] > z[top]) { top = c; }
    }
    var sum = 0.0;
    for (var c = 0u; c < OUT; c++) { sum += exp(z[c] - z[top]); }
    let label = y[b];
    loss[b] = log(sum) - (z[label] - z[top]);
    hit[b] = select(0u, 1u, top == label);
    for (var c = 0u; c < OUT; c++) {
        let p = exp(z[c] - z[top]) / sum;
        dz[b * OUT + c] = (p - select(0.0, 1.0, c == label)) / f32(B) * ste(z2[b * OUT + c], qp2[0]);
    }
}
@compute @workgroup_size(WG) fn back_hidden(@builtin(global_invocation_id) id: vec3<u32>) {
    let t = id.x;
    if (t >= B * HID) { return; }
    let b = t / HID; let j = t % HID;
    var s = 0.0;
    for (var c = 0u; c < OUT; c++) { s += dz[b * OUT + c] * w2q(c, j); }
    let v = h[t];
    dh[t] = s * f32(fq_mask(v, HS.y, HS.z, 0.0, 255.0, false)) * (1.0 - v * v) * ste(z1[t], qp1[0]);
}
@compute @workgroup_size(WG) fn grad_w2(@builtin(global_invocation_id) id: vec3<u32>) {
    let t = id.x;
    if (t >= OUT * HID) { return; }
    let c = t / HID; let j = t % HID;
    var s = 0.0;
    for (var b = 0u; b < B; b++) { s += dz[b * OUT + c] * hq[b * HID + j]; }
    g_w2[t] = s * wste(w2[t], w2s[c]);
}
@compute @workgroup_size(WG) fn grad_b2(@builtin(global_invocation_id) id: vec3<u32>) {
    if (id.x >= OUT) { return; }
    var s = 0.0;
    for (var b = 0u; b < B; b++) { s += dz[b * OUT + id.x]; }
    g_b2[id.x] = s;
}
@compute @workgroup_size(WG) fn grad_w1(@builtin(global_invocation_id) id: vec3<u32>) {
    let t = id.x;
    if (t >= HID * IN) { return; }
    let j = t / IN; let k = t % IN;
    var s = 0.0;
    for (var b = 0u; b < B; b++) { s += dh[b * HID + j] * xq[b * IN + k]; }
    g_w1[t] = s * wste(w1[t], w1s[j]);
}
@compute @workgroup_size(WG) fn grad_b1(@builtin(global_invocation_id) id: vec3<u32>) {
    if (id.x >= HID) { return; }
    var s = 0.0;
    for (var b = 0u; b < B; b++) { s += dh[b * HID + id.x]; }
    g_b1[id.x] = s;
}
