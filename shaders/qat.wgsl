// Fake quantization for quantization-aware training, as functions your own kernels include
// (`// #include "qat.wgsl"`; self-contained: no bindings). The NumPy twin rlx_gpu/reference/qat.py is the spec
// (torch's CPU kernels; bit for bit on every adapter that rounds f32 products as IEEE does):
//   per tensor:  q_f = zp + round(x * inv_scale);  y = (clamp(q_f, qmin, qmax) - zp) * scale, NaN -> qmin
//   per channel: as per tensor, but NaN, +-inf and |q_f| >= 2^63 -> qmin (x86's float -> int64 in torch)
//   mask (the straight-through gradient dy * mask): qmin <= q_f <= qmax, false for NaN (per channel: for inf too)
//   fp8: round to nearest even to e4m3fn / e5m2 (c10's integer rule) and back; saturate: +-inf and out of range
//   to +-max (448 / 57344), else e4m3fn NaN and e5m2 +-inf; NaN -> code 0x7f | sign.
// `inv_scale` is 1/scale rounded once (torch computes 1.0f / scale): fq_div(1.0, scale) gives it on any adapter.
// Codes, zero points and qmin/qmax are passed as f32 (integers of magnitude <= 2^24 are exact).

fn fq_isnan(x: f32) -> bool { return (bitcast<u32>(x) & 0x7fffffffu) > 0x7f800000u; }
fn fq_clamp(v: f32, lo: f32, hi: f32) -> f32 { return select(select(v, lo, v < lo), hi, v > hi); }

// The clamped code (f32, integer-valued) and the in-range mask of affine quantization; `per_channel` picks the
// per-channel kernel's treatment of NaN, +-inf and |q_f| >= 2^63 (all give qmin there).
fn fq_qf(x: f32, inv_scale: f32, zp: f32) -> f32 { return zp + round(x * inv_scale); }
fn fq_bad(qf: f32, per_channel: bool) -> bool {
    return fq_isnan(qf) || (per_channel && abs(qf) >= 9.223372036854775808e18);
}
fn fq_code(x: f32, inv_scale: f32, zp: f32, qmin: f32, qmax: f32, per_channel: bool) -> f32 {
    let qf = fq_qf(x, inv_scale, zp);
    return fq_pz(select(fq_clamp(qf, qmin, qmax), qmin, fq_bad(qf, per_channel)));
}
// -0 as +0, on the bits (torch's codes are integers; a compiler may fold 0.0 + round(-0.3) to -0.0, and a float
// test for zero may be folded away under its no-signed-zeros assumption)
fn fq_pz(v: f32) -> f32 { return bitcast<f32>(select(bitcast<u32>(v), 0u, bitcast<u32>(v) == 0x80000000u)); }
fn fq_mask(x: f32, inv_scale: f32, zp: f32, qmin: f32, qmax: f32, per_channel: bool) -> bool {
    let qf = fq_qf(x, inv_scale, zp);
    return !fq_bad(qf, per_channel) && qf >= qmin && qf <= qmax;
}
fn fake_quant(x: f32, scale: f32, inv_scale: f32, zp: f32, qmin: f32, qmax: f32, per_channel: bool) -> f32 {
    return (fq_code(x, inv_scale, zp, qmin, qmax, per_channel) - zp) * scale;
}

// -- fp8 ----------------------------------------------------------------------------------------------------
// The float8 bit pattern of x (e5m2: false = e4m3fn).
fn fp8_code(x0: f32, e5m2: bool, saturate: bool) -> u32 {
    let top = select(448.0, 57344.0, e5m2);
    var x = x0;
    if (saturate && !fq_isnan(x)) { x = fq_clamp(x, -top, top); }
    let bits = bitcast<u32>(x);
    let sign = (bits >> 24u) & 0x80u;
    let mag = bits & 0x7fffffffu;
    let mb = select(3u, 2u, e5m2);
    let shift = 23u - mb;
    var code: u32;
    if (mag >= select(0x43f00000u, 0x47800000u, e5m2)) {  // past the largest finite value (480, 65536)
        code = select(0x7fu, select(0x7cu, 0x7fu, mag > 0x7f800000u), e5m2);
    } else if (mag < select(0x3c800000u, 0x38800000u, e5m2)) {  // below the smallest normal (2^-6, 2^-14)
        code = u32(round(bitcast<f32>(mag) * select(512.0, 65536.0, e5m2)));
    } else {
        let bias = select(0xc4000000u, 0xc8000000u, e5m2);  // ((7 or 15) - 127) << 23, as u32
        code = (mag + bias + ((1u << (shift - 1u)) - 1u) + ((mag >> shift) & 1u)) >> shift;
    }
    return code | sign;
}
// The f32 value of a float8 bit pattern (NaN with torch's bits: 0x7ff00000 e4m3fn, 0x7fe00000 e5m2).
fn fp8_value(c: u32, e5m2: bool) -> f32 {
    let mb = select(3u, 2u, e5m2);
    let sign = (c & 0x80u) << 24u;
    let e = (c >> mb) & select(15u, 31u, e5m2);
    let m = c & ((1u << mb) - 1u);
    var out = (((e + select(120u, 112u, e5m2)) << 23u) | (m << (23u - mb)));
    if (e == 0u) { out = bitcast<u32>(f32(m) * select(0.001953125, 0.0000152587890625, e5m2)); }
    if (!e5m2 && e == 15u && m == 7u) { out = 0x7ff00000u; }
    if (e5m2 && e == 31u) { out = 0x7f800000u | (m << 21u); }
    return bitcast<f32>(out | sign);
}
fn fake_quant_fp8(x: f32, e5m2: bool, saturate: bool) -> f32 { return fp8_value(fp8_code(x, e5m2, saturate), e5m2); }
// The straight-through mask of fake_quant_fp8: torch.clamp's when saturating (NaN: false), else always true.
fn fp8_mask(x: f32, e5m2: bool, saturate: bool) -> bool {
    let top = select(448.0, 57344.0, e5m2);
    return !saturate || (!fq_isnan(x) && x >= -top && x <= top);
}

// -- a / b rounded to nearest even on every adapter ------------------------------------------------------------
// WGSL's division may be off by 2.5 ULP; scales and their reciprocals must be torch's bits. Normal finite
// operands with a normal quotient take a long division of the mantissas; anything else falls back to a / b.
fn fq_div(a: f32, b: f32) -> f32 {
    let ua = bitcast<u32>(a);
    let ub = bitcast<u32>(b);
    let ea = i32((ua >> 23u) & 0xffu);
    let eb = i32((ub >> 23u) & 0xffu);
    if (ea == 0 || ea == 255 || eb == 0 || eb == 255) { return a / b; }
    var ma = (ua & 0x7fffffu) | 0x800000u;
    let mbm = (ub & 0x7fffffu) | 0x800000u;
    var e = ea - eb + 127;
    if (ma < mbm) { ma = ma << 1u; e = e - 1; }
    var q = 0u;
    var rem = ma;
    for (var i = 0u; i < 25u; i++) {  // 24 bits of quotient and a guard bit
        q = q << 1u;
        if (rem >= mbm) { rem = rem - mbm; q = q | 1u; }
        rem = rem << 1u;
    }
    let guard = q & 1u;
    q = q >> 1u;
    if (guard == 1u && (rem != 0u || (q & 1u) == 1u)) { q = q + 1u; }
    if (q == 0x1000000u) { q = q >> 1u; e = e + 1; }
    if (e <= 0 || e >= 255) { return a / b; }
    return bitcast<f32>(((ua ^ ub) & 0x80000000u) | (u32(e) << 23u) | (q & 0x7fffffu));
}
