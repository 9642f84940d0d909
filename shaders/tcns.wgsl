// Newton-Schulz on the tensor-core GEMM (rlx_gpu/linalg/tcns.py): the float32 matrices in and out of float16, each
// batch of `batch` (rows x cols) matrices z at X[x_off + z count], in W[w_off + z count] as X~ = scale X / max(|X|_F,
// eps) (transposed when `trans`: W holds X~^T, cols x rows, so every matrix is iterated wide).
//   ns_part: P[p_off + z chunks + c] = the sum of squares of chunk c (`ch` elements) of matrix z
//   ns_norm: P[p_off + batch chunks + z] = scale / max(sqrt(sum over c of P[p_off + z chunks + c]), eps)
//   ns_in:   W = f16(X * that factor), a 32 x 32 tile a workgroup (through workgroup memory: transposed if trans)
//   ns_out:  X = f32(W) / scale, the same tiles the other way
//   ns_in4, ns_out4: ns_in and ns_out for a batch that is not transposed, 4 elements a thread by vec4 loads and stores
//            (X4, W4: X and W as vec4s; count, x_off and w_off multiples of 4): the same values
//   to_f16:  W[w_off + i] = f16(X[x_off + i] * scale) for i < count (any float32 data: tcns.to_f16)
// The parameter struct NsIo (rlx_gpu/linalg/tcns.py: NS_IO) is declared after this text when it is compiled.
enable f16;

@group(0) @binding(0) var<storage, read_write> X: array<f32>;
@group(0) @binding(1) var<storage, read_write> W: array<f16>;
@group(0) @binding(2) var<storage, read_write> P: array<f32>;
@group(0) @binding(3) var<storage, read> p: NsIo;
@group(0) @binding(4) var<storage, read_write> X4: array<vec4<f32>>;
@group(0) @binding(5) var<storage, read_write> W4: array<vec4<f16>>;

// #include "matrix_common.wgsl"

var<workgroup> T: array<f32, 1056>;  // a 32 x 32 tile, rows padded to 33

@compute @workgroup_size(256)
fn ns_part(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
           @builtin(local_invocation_index) lid: u32) {
    let g = wid.x + wid.y * nwg.x;
    if (g >= p.batch * p.chunks) { return; }
    let z = g / p.chunks;
    let lo = (g % p.chunks) * p.ch;
    let hi = min(lo + p.ch, p.count);
    let base = p.x_off + z * p.count;
    var s = 0.0;
    for (var i = lo + lid; i < hi; i += 256u) { let v = X[base + i]; s = fma(v, v, s); }
    let t = wg_sum(lid, s);
    if (lid == 0u) { P[p.p_off + g] = t; }
}

@compute @workgroup_size(256)
fn ns_norm(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
           @builtin(local_invocation_index) lid: u32) {
    let z = wid.x + wid.y * nwg.x;
    if (z >= p.batch) { return; }
    var v = 0.0;
    if (lid < p.chunks) { v = P[p.p_off + z * p.chunks + lid]; }
    let t = wg_sum(lid, v);
    if (lid == 0u) { P[p.p_off + p.batch * p.chunks + z] = p.scale / max(sqrt(t), p.eps); }
}

// The tile of workgroup g: (matrix z, first row r0, first column c0) of the rows x cols matrices.
fn tile(g: u32) -> vec3<u32> {
    let t = g % p.tiles;
    return vec3<u32>(g / p.tiles, (t / p.tiles_c) * 32u, (t % p.tiles_c) * 32u);
}

@compute @workgroup_size(256)
fn ns_in(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
         @builtin(local_invocation_index) lid: u32) {
    let g = wid.x + wid.y * nwg.x;
    if (g >= p.batch * p.tiles) { return; }
    let at = tile(g);
    let f = P[p.p_off + p.batch * p.chunks + at.x];
    let xb = p.x_off + at.x * p.count;
    let wb = p.w_off + at.x * p.count;
    for (var k = lid; k < 1024u; k += 256u) {
        let r = at.y + k / 32u; let c = at.z + k % 32u;
        if (r < p.rows && c < p.cols) { T[(k / 32u) * 33u + k % 32u] = X[xb + r * p.cols + c] * f; }
    }
    workgroupBarrier();
    for (var k = lid; k < 1024u; k += 256u) {
        let i = k / 32u; let j = k % 32u;
        if (p.trans == 0u) {
            if (at.y + i < p.rows && at.z + j < p.cols) { W[wb + (at.y + i) * p.cols + at.z + j] = f16(T[i * 33u + j]); }
        } else if (at.z + i < p.cols && at.y + j < p.rows) {  // W's row at.z + i, column at.y + j: X[at.y + j, at.z + i]
            W[wb + (at.z + i) * p.rows + at.y + j] = f16(T[j * 33u + i]);
        }
    }
}

@compute @workgroup_size(256)
fn ns_out(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
          @builtin(local_invocation_index) lid: u32) {
    let g = wid.x + wid.y * nwg.x;
    if (g >= p.batch * p.tiles) { return; }
    let at = tile(g);
    let xb = p.x_off + at.x * p.count;
    let wb = p.w_off + at.x * p.count;
    for (var k = lid; k < 1024u; k += 256u) {
        let i = k / 32u; let j = k % 32u;
        if (p.trans == 0u) {
            if (at.y + i < p.rows && at.z + j < p.cols) { T[i * 33u + j] = f32(W[wb + (at.y + i) * p.cols + at.z + j]); }
        } else if (at.z + i < p.cols && at.y + j < p.rows) {
            T[j * 33u + i] = f32(W[wb + (at.z + i) * p.rows + at.y + j]);
        }
    }
    workgroupBarrier();
    for (var k = lid; k < 1024u; k += 256u) {
        let r = at.y + k / 32u; let c = at.z + k % 32u;
        if (r < p.rows && c < p.cols) { X[xb + r * p.cols + c] = T[(k / 32u) * 33u + k % 32u] / p.scale; }
    }
}

@compute @workgroup_size(256)
fn ns_in4(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
          @builtin(local_invocation_index) lid: u32) {
    let q = flat_index(wid, nwg, lid);
    if (q >= p.batch * (p.count / 4u)) { return; }
    let f = P[p.p_off + p.batch * p.chunks + q / (p.count / 4u)];
    W4[p.w_off / 4u + q] = vec4<f16>(X4[p.x_off / 4u + q] * f);
}

@compute @workgroup_size(256)
fn ns_out4(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
           @builtin(local_invocation_index) lid: u32) {
    let q = flat_index(wid, nwg, lid);
    if (q >= p.batch * (p.count / 4u)) { return; }
    X4[p.x_off / 4u + q] = vec4<f32>(W4[p.w_off / 4u + q]) / p.scale;
}

@compute @workgroup_size(256)
fn to_f16(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
          @builtin(local_invocation_index) lid: u32) {
    let i = flat_index(wid, nwg, lid);
    if (i < p.count) { W[p.w_off + i] = f16(X[p.x_off + i] * p.scale); }
}
