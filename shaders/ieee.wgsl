// IEEE special values tested on the bit pattern. Shader compilers may assume floats are finite, and WGSL leaves
// min/max/sign/clamp of a NaN to the implementation, so `x != x` and `max(x, y)` are not portable where a NaN or
// an infinity must come out as the reference implementations give it (NumPy, torch).
// Part of every generated module (rlx_gpu/engine/codegen.py), ahead of the optimizer's own file.

const EXP_BITS: u32 = 0x7f800000u;
const ABS_BITS: u32 = 0x7fffffffu;

fn is_nan(x: f32) -> bool { return (bitcast<u32>(x) & ABS_BITS) > EXP_BITS; }
fn is_nan4(x: vec4<f32>) -> vec4<bool> { return (bitcast<vec4<u32>>(x) & vec4<u32>(ABS_BITS)) > vec4<u32>(EXP_BITS); }
fn is_finite4(x: vec4<f32>) -> vec4<bool> {
    return (bitcast<vec4<u32>>(x) & vec4<u32>(EXP_BITS)) != vec4<u32>(EXP_BITS);
}
fn is_posinf4(x: vec4<f32>) -> vec4<bool> { return bitcast<vec4<u32>>(x) == vec4<u32>(EXP_BITS); }

// NumPy's maximum / minimum, torch's clamp: a NaN operand gives NaN.
fn nan_max(a: f32, b: f32) -> f32 { return select(select(max(a, b), b, is_nan(b)), a, is_nan(a)); }
fn nan_max4(a: vec4<f32>, b: vec4<f32>) -> vec4<f32> {
    return select(select(max(a, b), b, is_nan4(b)), a, is_nan4(a));
}
fn nan_min4(a: vec4<f32>, b: vec4<f32>) -> vec4<f32> {
    return select(select(min(a, b), b, is_nan4(b)), a, is_nan4(a));
}
// sign with sign(0) = 0 and sign(NaN) = NaN (NumPy, torch).
fn nan_sign4(x: vec4<f32>) -> vec4<f32> { return select(sign(x), x, is_nan4(x)); }
