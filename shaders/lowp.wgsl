// 16-bit storage: bfloat16 and float16 packed two to a u32 (four elements per vec2<u32>), converted with integer
// operations on the bit pattern so that every adapter gives the bits the NumPy twin gives (rlx_gpu/core/lowp.py):
//   unpack4_*    exact widening to f32
//   pack4_*      round to nearest even (bfloat16 as ml_dtypes and torch, float16 as NumPy: overflow to inf)
//   sr4_*        stochastic rounding with 32 random bits per element (elem_bits: a hash of a per-tensor,
//                per-step key and the element's index in the tensor); a value past the largest finite one (and
//                inf, NaN) is rounded to nearest, so a finite value never rounds stochastically to inf
// Part of every generated module (rlx_gpu/engine/codegen.py), ahead of the optimizer's own file.

fn lowbias32(x0: u32) -> u32 {
    var x = x0;
    x = x ^ (x >> 16u);
    x = x * 0x7feb352du;
    x = x ^ (x >> 15u);
    x = x * 0x846ca68bu;
    return x ^ (x >> 16u);
}

// The random bits of elements e0 .. e0+3 of a tensor under `key` (the record's rounding key).
fn elem_bits(key: u32, e0: u32) -> vec4<u32> {
    return vec4<u32>(lowbias32(key ^ lowbias32(e0)), lowbias32(key ^ lowbias32(e0 + 1u)),
                     lowbias32(key ^ lowbias32(e0 + 2u)), lowbias32(key ^ lowbias32(e0 + 3u)));
}

// -- bfloat16 ---------------------------------------------------------------------------------------------
fn unpack4_bf16(w: vec2<u32>) -> vec4<f32> {
    return bitcast<vec4<f32>>(vec4<u32>(w.x << 16u, w.x & 0xffff0000u, w.y << 16u, w.y & 0xffff0000u));
}
fn unpack1_bf16(w: vec2<u32>, lane: u32) -> f32 {
    let word = select(w.x, w.y, lane >= 2u);
    return bitcast<f32>(select(word << 16u, word & 0xffff0000u, (lane & 1u) == 1u));
}
fn rne_bf16(x: u32) -> u32 {
    if ((x & 0x7fffffffu) > 0x7f800000u) { return (x >> 16u) | 0x40u; }  // NaN: quiet, sign kept
    return (x + 0x7fffu + ((x >> 16u) & 1u)) >> 16u;  // (the carry rounds into the exponent, and to inf)
}
fn sr_bf16(x: u32, r: u32) -> u32 {
    let mag = x & 0x7fffffffu;
    if (mag > 0x7f7f0000u) { return rne_bf16(x); }  // past the largest finite bfloat16, inf, NaN: to nearest
    return ((mag + (r & 0xffffu)) >> 16u) | ((x >> 16u) & 0x8000u);  // (at most 0x7f7f: finite)
}
fn pack4_bf16(v: vec4<f32>) -> vec2<u32> {
    let u = bitcast<vec4<u32>>(v);
    return vec2<u32>(rne_bf16(u.x) | (rne_bf16(u.y) << 16u), rne_bf16(u.z) | (rne_bf16(u.w) << 16u));
}
// pack4_bf16's bits from vector operations (one carry-add and one NaN test per lane, the halves merged by masks):
// the drivers' `vpack` variant (engine/drivers.py)
fn pack4v_bf16(v: vec4<f32>) -> vec2<u32> {
    let u = bitcast<vec4<u32>>(v);
    let nan = (u & vec4<u32>(0x7fffffffu)) > vec4<u32>(0x7f800000u);
    let q = select(u + vec4<u32>(0x7fffu) + ((u >> vec4<u32>(16u)) & vec4<u32>(1u)), u | vec4<u32>(0x400000u), nan);
    return vec2<u32>((q.x >> 16u) | (q.y & 0xffff0000u), (q.z >> 16u) | (q.w & 0xffff0000u));
}
fn sr4_bf16(v: vec4<f32>, r: vec4<u32>) -> vec2<u32> {
    let u = bitcast<vec4<u32>>(v);
    return vec2<u32>(sr_bf16(u.x, r.x) | (sr_bf16(u.y, r.y) << 16u), sr_bf16(u.z, r.z) | (sr_bf16(u.w, r.w) << 16u));
}

// -- float16 ----------------------------------------------------------------------------------------------
fn h2f(h: u32) -> f32 {
    let s = (h & 0x8000u) << 16u;
    let e = (h >> 10u) & 0x1fu;
    let m = h & 0x3ffu;
    if (e == 0u) { return bitcast<f32>(s | bitcast<u32>(f32(m) * 5.9604644775390625e-8)); }  // m * 2^-24, exact
    if (e == 31u) { return bitcast<f32>(s | 0x7f800000u | (m << 13u)); }
    return bitcast<f32>(s | ((e + 112u) << 23u) | (m << 13u));
}
// h2f's bits for four lanes in vector operations, without branches: a normal or inf/NaN half is its bits moved up
// 13 with the exponent's bias changed (112 to it, 224 past the top), a subnormal one m * 2^-24 (exact; a normal float)
fn unpack4_f16(w: vec2<u32>) -> vec4<f32> {
    let h = vec4<u32>(w.x & 0xffffu, w.x >> 16u, w.y & 0xffffu, w.y >> 16u);
    let a = h & vec4<u32>(0x7fffu);
    let n = (a << vec4<u32>(13u)) + select(vec4<u32>(0x38000000u), vec4<u32>(0x70000000u), a >= vec4<u32>(0x7c00u));
    let sub = bitcast<vec4<u32>>(vec4<f32>(a) * 5.9604644775390625e-8);
    return bitcast<vec4<f32>>(select(n, sub, a < vec4<u32>(0x400u)) | ((h & vec4<u32>(0x8000u)) << vec4<u32>(16u)));
}
fn unpack1_f16(w: vec2<u32>, lane: u32) -> f32 {
    let word = select(w.x, w.y, lane >= 2u);
    return h2f(select(word & 0xffffu, word >> 16u, (lane & 1u) == 1u));
}
// NumPy's npy_floatbits_to_halfbits: round to nearest even, overflow to inf, NaN kept (quiet)
fn rne_f16(f: u32) -> u32 {
    let sgn = (f & 0x80000000u) >> 16u;
    let fexp = f & 0x7f800000u;
    if (fexp >= 0x47800000u) {
        if (fexp == 0x7f800000u && (f & 0x007fffffu) != 0u) {
            let sig = (f & 0x007fffffu) >> 13u;
            return sgn | 0x7c00u | select(sig, 1u, sig == 0u);
        }
        return sgn | 0x7c00u;
    }
    if (fexp <= 0x38000000u) {
        if (fexp < 0x33000000u) { return sgn; }
        let e = fexp >> 23u;
        var sig = (0x00800000u + (f & 0x007fffffu)) >> (113u - e);
        if ((sig & 0x3fffu) != 0x1000u || (f & 0x7ffu) != 0u) { sig = sig + 0x1000u; }
        return sgn | (sig >> 13u);
    }
    var sig = f & 0x007fffffu;
    if ((sig & 0x3fffu) != 0x1000u) { sig = sig + 0x1000u; }
    return sgn | (((fexp - 0x38000000u) >> 13u) + (sig >> 13u));
}
// float16 stochastic rounding (core/lowp.py round_stochastic): normal range by a carry into 13 dropped bits,
// below 2^-14 by the fraction of |x| * 2^24 against the top 24 random bits; past 65504 (the largest finite float16),
// inf and NaN to nearest
fn sr_f16(x: u32, r: u32) -> u32 {
    let mag = x & 0x7fffffffu;
    let sgn = (x >> 16u) & 0x8000u;
    if (mag > 0x477fe000u) { return rne_f16(x); }
    if (mag >= 0x38800000u) {
        return sgn | (((mag + (r & 0x1fffu)) >> 13u) - ((127u - 15u) << 10u));  // (at most 0x7bff: finite)
    }
    let s = bitcast<f32>(mag) * 16777216.0;
    let m = floor(s);
    let thresh = f32((r >> 8u) ^ 0xffffffu) * 5.9604644775390625e-8;
    return sgn | (u32(m) + select(0u, 1u, s - m > thresh));
}
fn pack4_f16(v: vec4<f32>) -> vec2<u32> {
    let u = bitcast<vec4<u32>>(v);
    return vec2<u32>(rne_f16(u.x) | (rne_f16(u.y) << 16u), rne_f16(u.z) | (rne_f16(u.w) << 16u));
}
fn sr4_f16(v: vec4<f32>, r: vec4<u32>) -> vec2<u32> {
    let u = bitcast<vec4<u32>>(v);
    return vec2<u32>(sr_f16(u.x, r.x) | (sr_f16(u.y, r.y) << 16u), sr_f16(u.z, r.z) | (sr_f16(u.w, r.w) << 16u));
}
