// Batched GEMM in float16 (rlx_gpu/linalg.py, ns_dtype="float16"): C = alpha * op(A) @ op(B) + beta * C with A, B and
// C stored as f16, the products summed with packed f16 FMAs (vec4<f16>) over K steps of 16 and each step's partial
// sums added into float32 accumulators; alpha and beta applied in float32, C rounded to f16 once. The same tiling and
// parameters as gemm.wgsl (gp; 128 x 128 outputs per workgroup, 8 x 8 per thread; a long K split alike); inputs must be
// scaled so that partial sums of 16 products stay well inside f16's range (Newton-Schulz's scaling: linalg/record.py;
// with a K split, each slab's result is rounded to f16 before the next adds to it).
enable f16;

@group(0) @binding(0) var<storage, read> A: array<f16>;
@group(0) @binding(1) var<storage, read> B: array<f16>;
@group(0) @binding(2) var<storage, read_write> C: array<f16>;
@group(0) @binding(3) var<storage, read> sp: Span;
@group(0) @binding(5) var<storage, read> gp: Gemm;

// #include "matrix_common.wgsl"
// #include "gemm_tile.wgsl"

alias T = f16;
const TM: u32 = 128u;
const TK: u32 = 16u;
var<workgroup> As: array<vec4<T>, 512>;  // [k][m / 4]
var<workgroup> Bs: array<vec4<T>, 512>;  // [k][n / 4]

@compute @workgroup_size(16, 16)
fn gemm16(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
          @builtin(local_invocation_id) lid: vec3<u32>) {
    let g = wid.x + wid.y * nwg.x;
    let per = gp.tiles_n * gp.tiles_m;
    if (g >= per * gp.batch) { return; }
    let li = lid.y * 16u + lid.x;
    let bt = g / per;
    let m0 = ((g % per) / gp.tiles_n) * TM;
    let n0 = ((g % per) % gp.tiles_n) * TM;
    let K = gp.K;
    let abase = gp.a_off + bt * gp.a_bs;
    let bbase = gp.b_off + bt * gp.b_bs;
    var acc: array<vec4<f32>, 16>;
    for (var k0 = 0u; k0 < K; k0 = k0 + TK) {
        stage_tiles(li, m0, n0, k0, abase, bbase, K);
        workgroupBarrier();
        var c0a = vec4<f16>(0.0); var c0b = vec4<f16>(0.0);
        var c1a = vec4<f16>(0.0); var c1b = vec4<f16>(0.0);
        var c2a = vec4<f16>(0.0); var c2b = vec4<f16>(0.0);
        var c3a = vec4<f16>(0.0); var c3b = vec4<f16>(0.0);
        var c4a = vec4<f16>(0.0); var c4b = vec4<f16>(0.0);
        var c5a = vec4<f16>(0.0); var c5b = vec4<f16>(0.0);
        var c6a = vec4<f16>(0.0); var c6b = vec4<f16>(0.0);
        var c7a = vec4<f16>(0.0); var c7b = vec4<f16>(0.0);
        for (var kk = 0u; kk < TK; kk++) {
            let a0 = As[kk * 32u + lid.y * 2u];
            let a1 = As[kk * 32u + lid.y * 2u + 1u];
            let b0 = Bs[kk * 32u + lid.x];
            let b1 = Bs[kk * 32u + 16u + lid.x];
            c0a = fma(vec4<f16>(a0.x), b0, c0a); c0b = fma(vec4<f16>(a0.x), b1, c0b);
            c1a = fma(vec4<f16>(a0.y), b0, c1a); c1b = fma(vec4<f16>(a0.y), b1, c1b);
            c2a = fma(vec4<f16>(a0.z), b0, c2a); c2b = fma(vec4<f16>(a0.z), b1, c2b);
            c3a = fma(vec4<f16>(a0.w), b0, c3a); c3b = fma(vec4<f16>(a0.w), b1, c3b);
            c4a = fma(vec4<f16>(a1.x), b0, c4a); c4b = fma(vec4<f16>(a1.x), b1, c4b);
            c5a = fma(vec4<f16>(a1.y), b0, c5a); c5b = fma(vec4<f16>(a1.y), b1, c5b);
            c6a = fma(vec4<f16>(a1.z), b0, c6a); c6b = fma(vec4<f16>(a1.z), b1, c6b);
            c7a = fma(vec4<f16>(a1.w), b0, c7a); c7b = fma(vec4<f16>(a1.w), b1, c7b);
        }
        acc[0] += vec4<f32>(c0a); acc[1] += vec4<f32>(c0b);
        acc[2] += vec4<f32>(c1a); acc[3] += vec4<f32>(c1b);
        acc[4] += vec4<f32>(c2a); acc[5] += vec4<f32>(c2b);
        acc[6] += vec4<f32>(c3a); acc[7] += vec4<f32>(c3b);
        acc[8] += vec4<f32>(c4a); acc[9] += vec4<f32>(c4b);
        acc[10] += vec4<f32>(c5a); acc[11] += vec4<f32>(c5b);
        acc[12] += vec4<f32>(c6a); acc[13] += vec4<f32>(c6b);
        acc[14] += vec4<f32>(c7a); acc[15] += vec4<f32>(c7b);
        workgroupBarrier();
    }
    let mr = m0 + lid.y * 8u;
    let nc = n0 + lid.x * 4u;
    let base = gp.c_off + bt * gp.c_bs;
    store_row(base, mr + 0u, nc, acc[0]); store_row(base, mr + 0u, nc + 64u, acc[1]);
    store_row(base, mr + 1u, nc, acc[2]); store_row(base, mr + 1u, nc + 64u, acc[3]);
    store_row(base, mr + 2u, nc, acc[4]); store_row(base, mr + 2u, nc + 64u, acc[5]);
    store_row(base, mr + 3u, nc, acc[6]); store_row(base, mr + 3u, nc + 64u, acc[7]);
    store_row(base, mr + 4u, nc, acc[8]); store_row(base, mr + 4u, nc + 64u, acc[9]);
    store_row(base, mr + 5u, nc, acc[10]); store_row(base, mr + 5u, nc + 64u, acc[11]);
    store_row(base, mr + 6u, nc, acc[12]); store_row(base, mr + 6u, nc + 64u, acc[13]);
    store_row(base, mr + 7u, nc, acc[14]); store_row(base, mr + 7u, nc + 64u, acc[15]);
}

// Newton-Schulz's way in and out of f16 (rlx_gpu/linalg/record.py), one workgroup per matrix z of `count` elements:
//   ns16_in:  C[c_off + z count + i] = f16(X[x_off + z count + i] / max(|X_z|_F, eps) * scale)
//   ns16_out: X[x_off + z count + i] = f32(C[c_off + z count + i]) / scale
// sp (struct Span): count, x_off, c_off, eps, batch, scale; X: the float32 matrices.
@group(0) @binding(4) var<storage, read_write> X: array<f32>;

@compute @workgroup_size(256)
fn ns16_in(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
           @builtin(local_invocation_index) lid: u32) {
    let z = wid.x + wid.y * nwg.x;
    if (z >= sp.batch) { return; }
    let n = sp.count;
    let xb = sp.x_off + z * n; let cb = sp.c_off + z * n;
    var s = 0.0;
    for (var i = lid; i < n; i = i + 256u) { let v = X[xb + i]; s = s + v * v; }
    let f = sp.scale / max(sqrt(wg_sum(lid, s)), sp.eps);
    for (var i = lid; i < n; i = i + 256u) { C[cb + i] = f16(X[xb + i] * f); }
}

@compute @workgroup_size(256)
fn ns16_out(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
            @builtin(local_invocation_index) lid: u32) {
    let z = wid.x + wid.y * nwg.x;
    if (z >= sp.batch) { return; }
    let n = sp.count;
    let xb = sp.x_off + z * n; let cb = sp.c_off + z * n;
    for (var i = lid; i < n; i = i + 256u) { X[xb + i] = f32(C[cb + i]) / sp.scale; }
}

// The same for matrices past FROB_ONE elements, one thread per element of the whole batch (their norm taken first,
// in place in X, by gemm.wgsl's frob_part and frob_apply): sp's count is the batch's elements; x_off, c_off, scale.
@compute @workgroup_size(256)
fn ns16_in_flat(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                @builtin(local_invocation_index) lid: u32) {
    let i = flat_index(wid, nwg, lid);
    if (i < sp.count) { C[sp.c_off + i] = f16(X[sp.x_off + i] * sp.scale); }
}

@compute @workgroup_size(256)
fn ns16_out_flat(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                 @builtin(local_invocation_index) lid: u32) {
    let i = flat_index(wid, nwg, lid);
    if (i < sp.count) { X[sp.x_off + i] = f32(C[sp.c_off + i]) / sp.scale; }
}
