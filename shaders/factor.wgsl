// Blocked factorisations and triangular solves of batches of matrices (rlx_gpu/linalg/factor.py), block by block: the
// work on a block of at most 32 columns runs here, the updates of everything after it are GEMMs (gemm.wgsl). Every
// operand is addressed by strides, so a block of a larger matrix, or its transpose, is an operand too. Parameters by
// name (structs declared in rlx_gpu/linalg/factor.py).
//   tri_block   y = the solution of one 32-wide block of triangular equations for many vectors at once (a thread a
//               vector): y_e = (x_e - sum_{f before e} c(e, f) y_f) / c(e, e) (c(e, e) = 1 when unit), f before e meaning
//               f < e (forward) or f > e (backward); x overwritten, and copied into a packed panel for the GEMM
//   chol_panel  the lower Cholesky factor of a diagonal block (in workgroup memory, by every workgroup of the matrix)
//               and the rows below it: L_iJ = A_iJ L_JJ^-T (a thread a row), copied into the panel too
//   lu_panel    LU with partial pivoting of a panel of columns (one workgroup a matrix): the pivot rows (the largest
//               |a|, the lowest row on ties) swapped within the panel, L below the diagonal, U on and above it; L21
//               copied into a packed panel
//   lu_rows     the panel's row swaps and U12 = L11^-1 A12 for the columns right of the panel (a thread a column)
//   copy2d      dst = src (strided; a transposed copy by its strides); eye2d: dst = the identity

@group(0) @binding(0) var<storage, read_write> X: array<f32>;
@group(0) @binding(1) var<storage, read> T: array<f32>;
@group(0) @binding(2) var<storage, read_write> P: array<f32>;
@group(0) @binding(3) var<storage, read> tp: TriParams;
@group(0) @binding(4) var<storage, read> cp: CholParams;
@group(0) @binding(5) var<storage, read> lp: LuParams;
@group(0) @binding(6) var<storage, read_write> piv: array<u32>;
@group(0) @binding(7) var<storage, read> S: array<f32>;
@group(0) @binding(8) var<storage, read> yp: CopyParams;

const BW: u32 = 32u;  // the most columns a block has
var<workgroup> blk: array<f32, 1024>;  // a block's coefficients, [e * 32 + f]

// flags: 1 unit diagonal, 2 backward, 4 write the panel
@compute @workgroup_size(256)
fn tri_block(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
             @builtin(local_invocation_index) lid: u32) {
    let w = wid.x + wid.y * nwg.x;
    if (w >= tp.groups * tp.batch) { return; }  // (uniform for the workgroup)
    let z = w / tp.groups;
    let v = (w % tp.groups) * 256u + lid;
    let b = tp.b;
    let tb = tp.t_off + z * tp.t_bs;
    for (var i = lid; i < b * b; i += 256u) { blk[(i / b) * BW + i % b] = T[tb + (i / b) * tp.t_se + (i % b) * tp.t_sf]; }
    workgroupBarrier();
    if (v >= tp.nvec) { return; }
    let xb = tp.x_off + z * tp.x_bs + v * tp.x_sv;
    var y: array<f32, 32>;
    for (var k = 0u; k < b; k++) { y[k] = X[xb + k * tp.x_sk]; }
    let back = (tp.flags & 2u) != 0u;
    for (var s = 0u; s < b; s++) {
        let e = select(s, b - 1u - s, back);
        var acc = y[e];
        let f0 = select(0u, e + 1u, back);
        let f1 = select(e, b, back);
        for (var f = f0; f < f1; f++) { acc = acc - blk[e * BW + f] * y[f]; }
        if ((tp.flags & 1u) == 0u) { acc = acc / blk[e * BW + e]; }
        y[e] = acc;
    }
    let pb = tp.p_off + z * tp.p_bs + v * tp.p_sv;
    for (var k = 0u; k < b; k++) {
        X[xb + k * tp.x_sk] = y[k];
        if ((tp.flags & 4u) != 0u) { P[pb + k * tp.p_sk] = y[k]; }
    }
}

// The block (rows and columns j0 .. j0 + b) of matrix z (X, row stride ld) is factored into blk by every workgroup of
// the matrix; the first writes L_JJ back (lower triangle). Workgroup g then solves rows j0 + b + 256 g + lid.
@compute @workgroup_size(256)
fn chol_panel(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
              @builtin(local_invocation_index) lid: u32) {
    let w = wid.x + wid.y * nwg.x;
    if (w >= cp.groups * cp.batch) { return; }  // (uniform for the workgroup)
    let z = w / cp.groups;
    let b = cp.b; let ld = cp.ld;
    let base = cp.a_off + z * cp.a_bs + cp.j0 * ld + cp.j0;  // A[j0][j0]
    for (var i = lid; i < b * b; i += 256u) { blk[(i / b) * BW + i % b] = X[base + (i / b) * ld + i % b]; }
    workgroupBarrier();
    for (var k = 0u; k < b; k++) {
        if (lid == 0u) { blk[k * BW + k] = sqrt(blk[k * BW + k]); }
        workgroupBarrier();
        for (var i = k + 1u + lid; i < b; i += 256u) { blk[i * BW + k] = blk[i * BW + k] / blk[k * BW + k]; }
        workgroupBarrier();
        for (var t = lid; t < b * b; t += 256u) {
            let i = t / b; let j = t % b;
            if (j > k && j <= i) { blk[i * BW + j] = blk[i * BW + j] - blk[i * BW + k] * blk[j * BW + k]; }
        }
        workgroupBarrier();
    }
    if (w % cp.groups == 0u) {
        for (var i = lid; i < b * b; i += 256u) {
            if (i % b <= i / b) { X[base + (i / b) * ld + i % b] = blk[(i / b) * BW + i % b]; }
        }
    }
    let r = cp.j0 + b + (w % cp.groups) * 256u + lid;
    if (r >= cp.n) { return; }
    let rb = cp.a_off + z * cp.a_bs + r * ld + cp.j0;
    var y: array<f32, 32>;
    for (var k = 0u; k < b; k++) {
        var acc = X[rb + k];
        for (var f = 0u; f < k; f++) { acc = acc - y[f] * blk[k * BW + f]; }
        y[k] = acc / blk[k * BW + k];
    }
    let pb = cp.p_off + z * cp.p_bs + (r - cp.j0 - b) * b;
    for (var k = 0u; k < b; k++) { X[rb + k] = y[k]; P[pb + k] = y[k]; }
}

var<workgroup> pv: array<f32, 256>;
var<workgroup> pix: array<u32, 256>;
var<workgroup> part: array<f32, 256>;

// One workgroup per matrix: columns j0 .. j0 + b of rows j0 .. rows (row stride ld) factored in place with partial
// pivoting; piv[z * b + k] = the row swapped with row j0 + k; L21 (rows j0 + b ..) into P (packed, b wide).
@compute @workgroup_size(256)
fn lu_panel(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
            @builtin(local_invocation_index) lid: u32) {
    let z = wid.x + wid.y * nwg.x;
    let live = z < lp.batch;
    let zz = select(0u, z, live);
    let b = lp.b; let ld = lp.ld; let n = lp.rows;
    let base = lp.a_off + zz * lp.a_bs;
    let cc = lid % BW; let g = lid / BW;  // (update layout: a column of the panel and one of 8 row groups)
    for (var kk = 0u; kk < b; kk++) {
        let k = lp.j0 + kk;
        var best = -1.0; var at = k;
        for (var i = k + lid; i < n; i += 256u) {
            let a = abs(X[base + i * ld + k]);
            if (a > best) { best = a; at = i; }
        }
        pv[lid] = best; pix[lid] = at;
        workgroupBarrier();
        for (var d = 128u; d > 0u; d = d / 2u) {
            if (lid < d && (pv[lid + d] > pv[lid] || (pv[lid + d] == pv[lid] && pix[lid + d] < pix[lid]))) {
                pv[lid] = pv[lid + d]; pix[lid] = pix[lid + d];
            }
            workgroupBarrier();
        }
        let r = pix[0];
        if (live && lid < b && r != k) {  // (the swap within the panel's columns)
            let t = X[base + k * ld + lp.j0 + lid];
            X[base + k * ld + lp.j0 + lid] = X[base + r * ld + lp.j0 + lid];
            X[base + r * ld + lp.j0 + lid] = t;
        }
        if (live && lid == 0u) { piv[lp.piv_off + zz * b + kk] = r; }
        storageBarrier();
        let d = X[base + k * ld + k];
        for (var i = k + 1u + lid; i < n; i += 256u) {
            if (live) { X[base + i * ld + k] = X[base + i * ld + k] / d; }
        }
        storageBarrier();
        let c = lp.j0 + cc;
        if (cc > kk && cc < b) {
            let u = X[base + k * ld + c];
            for (var i = k + 1u + g; i < n; i += 8u) {
                if (live) { X[base + i * ld + c] = X[base + i * ld + c] - X[base + i * ld + k] * u; }
            }
        }
        storageBarrier();
        workgroupBarrier();  // (pv and pix are rewritten by the next column's search)
    }
    let j1 = lp.j0 + b;
    for (var t = lid; t < (n - j1) * b; t += 256u) {
        if (live) { P[lp.p_off + zz * lp.p_bs + t] = X[base + (j1 + t / b) * ld + lp.j0 + t % b]; }
    }
}

// A thread per column c >= j0 + b (up to lp.cols): the panel's swaps in order, then U12 = L11^-1 A12 (L11 unit lower,
// in workgroup memory), in place and into the panel P (b rows of cols - j0 - b, packed).
@compute @workgroup_size(256)
fn lu_rows(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
           @builtin(local_invocation_index) lid: u32) {
    let w = wid.x + wid.y * nwg.x;
    if (w >= lp.groups * lp.batch) { return; }  // (uniform for the workgroup)
    let z = w / lp.groups;
    let b = lp.b; let ld = lp.ld; let j1 = lp.j0 + b;
    let base = lp.a_off + z * lp.a_bs;
    for (var i = lid; i < b * b; i += 256u) {
        blk[(i / b) * BW + i % b] = X[base + (lp.j0 + i / b) * ld + lp.j0 + i % b];
    }
    workgroupBarrier();
    let c = j1 + (w % lp.groups) * 256u + lid;
    if (c >= lp.cols) { return; }
    for (var k = 0u; k < b; k++) {
        let r = piv[lp.piv_off + z * b + k];
        let i = lp.j0 + k;
        if (r != i) {
            let t = X[base + i * ld + c];
            X[base + i * ld + c] = X[base + r * ld + c];
            X[base + r * ld + c] = t;
        }
    }
    var y: array<f32, 32>;
    let width = lp.cols - j1;
    for (var e = 0u; e < b; e++) {
        var acc = X[base + (lp.j0 + e) * ld + c];
        for (var f = 0u; f < e; f++) { acc = acc - blk[e * BW + f] * y[f]; }
        y[e] = acc;
        X[base + (lp.j0 + e) * ld + c] = acc;
        P[lp.p_off + z * lp.p_bs + e * width + c - j1] = acc;
    }
}

// dst[z][r][c] = src[z][r][c] (strides of each; a transposed copy by its strides), for r < rows, c < cols; mode 2:
// the lower triangle only (0 above the diagonal)
@compute @workgroup_size(256)
fn copy2d(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
          @builtin(local_invocation_index) lid: u32) {
    let i = (wid.x + wid.y * nwg.x) * 256u + lid;
    let per = yp.rows * yp.cols;
    if (i >= per * yp.batch) { return; }
    let z = i / per; let r = (i % per) / yp.cols; let c = i % yp.cols;
    var v = S[yp.s_off + z * yp.s_bs + r * yp.s_sr + c * yp.s_sc];
    if (yp.mode == 2u && c > r) { v = 0.0; }
    X[yp.d_off + z * yp.d_bs + r * yp.d_sr + c * yp.d_sc] = v;
}

// dst = the identity (rows x cols of each matrix; the source strides unused)
@compute @workgroup_size(256)
fn eye2d(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
         @builtin(local_invocation_index) lid: u32) {
    let i = (wid.x + wid.y * nwg.x) * 256u + lid;
    let per = yp.rows * yp.cols;
    if (i >= per * yp.batch) { return; }
    let z = i / per; let r = (i % per) / yp.cols; let c = i % yp.cols;
    X[yp.d_off + z * yp.d_bs + r * yp.d_sr + c * yp.d_sc] = select(0.0, 1.0, r == c);
}
