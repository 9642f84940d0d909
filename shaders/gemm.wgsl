// Batched GEMM (rlx_gpu/linalg/record.py gemm): C = alpha * op(A) @ op(B) + beta * C for `batch` matrices in one
// dispatch (workgroup z = matrix; split K: (matrix, chunk), each chunk's product into a slab of its own, then
// thin_sum), op = transpose where asked (by indexing: row-major storage throughout, each operand
// with its own row stride, so sub-blocks of larger matrices are operands too). Tiles of 128 x 128 outputs per
// workgroup, 8 x 8 per thread, K in steps of 8 through workgroup memory (PF: the next step's loads in registers
// while one is summed); any M, N, K (edges masked).
// gp (struct Gemm, declared in rlx_gpu/linalg/record.py): M, N, K, ta, tb; a_off, b_off, c_off (elements);
//   a_bs, b_bs, c_bs (batch strides); alpha, beta; tiles_n, tiles_m (column and row tiles); batch; lda, ldb, ldc (the
//   row strides of A, B, C as stored: A[m lda + k], or A[k lda + m] with ta); chunks (gemm_thin's; gemm's split K:
//   the chunks a matrix, batch then counting the slabs, matrices x chunks); kc (split K: k a chunk, a multiple of 8).
//   Workgroups are numbered (slab, row tile, column tile), flattened (a 2-D grid past the per-dimension limit). Few
//   workgroups with a long K (record.py's SPLIT_BELOW, SPLIT_K) are split K in one dispatch; a long K is
//   otherwise split over dispatches (KSPLIT: a slab's K, its offsets moved along k, C accumulated with beta = 1), so that no
//   thread's k loop runs long (some drivers stop loops past 65535 iterations).

@group(0) @binding(0) var<storage, read> A: array<f32>;
@group(0) @binding(1) var<storage, read> B: array<f32>;
@group(0) @binding(2) var<storage, read_write> C: array<f32>;
@group(0) @binding(3) var<storage, read> sp: Span;
@group(0) @binding(5) var<storage, read> gp: Gemm;

// #include "matrix_common.wgsl"
// #include "gemm_tile.wgsl"

alias T = f32;
const TM: u32 = 128u;  // outputs per workgroup along m and n
const TK: u32 = 8u;    // k per tile
var<workgroup> As: array<vec4<T>, 256>;  // [k][m / 4]
var<workgroup> Bs: array<vec4<T>, 256>;  // [k][n / 4]
// 0: each slab staged, then summed (the first version); 1: the next slab's loads into registers while this one is
// summed (load_slab, store_slab: the same values in the same places, so the same sums); 2: 1, with the edge checks
// left out of slabs that lie inside both operands (rlx_gpu/linalg/record.py PREFETCH)
override PF: u32 = 0u;

// The slab k0 .. k0 + TK of op(A) and op(B) that stage_tiles stages, into registers (TK TM / 256 = 4 of each a
// thread: r-th at idx = li + 256 r); store_slab writes them where stage_tiles does.
struct Slab { a: vec4<f32>, b: vec4<f32> }

fn load_slab(li: u32, m0: u32, n0: u32, k0: u32, abase: u32, bbase: u32, K: u32) -> Slab {
    let ta = gp.ta != 0u; let tb = gp.tb != 0u;
    let inside = PF == 2u && m0 + TM <= gp.M && n0 + TM <= gp.N && k0 + TK <= K;  // (uniform: no edge in this slab)
    var s = Slab(vec4<f32>(0.0), vec4<f32>(0.0));
    for (var r = 0u; r < 4u; r++) {
        let pa = slab_place(li + r * 256u, !ta);
        let m = m0 + pa.y; let k = k0 + pa.x;
        if (inside || (m < gp.M && k < K)) { s.a[r] = A[abase + stored_at(m, k, gp.lda, ta)]; }
        let pb = slab_place(li + r * 256u, tb);
        let n = n0 + pb.y; let k2 = k0 + pb.x;
        if (inside || (n < gp.N && k2 < K)) { s.b[r] = B[bbase + stored_at(n, k2, gp.ldb, !tb)]; }
    }
    return s;
}

fn store_slab(li: u32, s: Slab) {
    for (var r = 0u; r < 4u; r++) {
        let pa = slab_place(li + r * 256u, gp.ta == 0u);
        As[pa.x * 32u + pa.y / 4u][pa.y % 4u] = s.a[r];
        let pb = slab_place(li + r * 256u, gp.tb != 0u);
        Bs[pb.x * 32u + pb.y / 4u][pb.y % 4u] = s.b[r];
    }
}

@compute @workgroup_size(16, 16)
fn gemm(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_id) lid: vec3<u32>) {
    let g = wid.x + wid.y * nwg.x;
    let per = gp.tiles_n * gp.tiles_m;
    if (g >= per * gp.batch) { return; }  // (uniform: the same for the whole workgroup)
    let li = lid.y * 16u + lid.x;
    // split K (gp.chunks > 1): slab = (matrix, chunk), chunk ch sums k in [ch kc, ch kc + kc) into its own slab of
    // C (the partials; thin_sum adds them in order); otherwise slab = matrix, one chunk of all K
    let slab = g / per;
    let nch = max(gp.chunks, 1u);
    let bt = slab / nch;
    let k_lo = (slab % nch) * gp.kc;
    let m0 = ((g % per) / gp.tiles_n) * TM;
    let n0 = ((g % per) % gp.tiles_n) * TM;
    let K = select(gp.K, min(gp.K - k_lo, gp.kc), nch > 1u);
    let abase = gp.a_off + bt * gp.a_bs + select(k_lo, k_lo * gp.lda, gp.ta != 0u);
    let bbase = gp.b_off + bt * gp.b_bs + select(k_lo * gp.ldb, k_lo, gp.tb != 0u);
    var c0a = vec4<f32>(0.0); var c0b = vec4<f32>(0.0);
    var c1a = vec4<f32>(0.0); var c1b = vec4<f32>(0.0);
    var c2a = vec4<f32>(0.0); var c2b = vec4<f32>(0.0);
    var c3a = vec4<f32>(0.0); var c3b = vec4<f32>(0.0);
    var c4a = vec4<f32>(0.0); var c4b = vec4<f32>(0.0);
    var c5a = vec4<f32>(0.0); var c5b = vec4<f32>(0.0);
    var c6a = vec4<f32>(0.0); var c6b = vec4<f32>(0.0);
    var c7a = vec4<f32>(0.0); var c7b = vec4<f32>(0.0);
    var next = Slab(vec4<f32>(0.0), vec4<f32>(0.0));
    if (PF != 0u) { next = load_slab(li, m0, n0, 0u, abase, bbase, K); }
    for (var k0 = 0u; k0 < K; k0 = k0 + TK) {
        if (PF == 0u) { stage_tiles(li, m0, n0, k0, abase, bbase, K); } else { store_slab(li, next); }
        workgroupBarrier();
        if (PF != 0u && k0 + TK < K) { next = load_slab(li, m0, n0, k0 + TK, abase, bbase, K); }  // (in flight
        for (var kk = 0u; kk < TK; kk++) {                                                          //  while summed)
            let a0 = As[kk * 32u + lid.y * 2u];
            let a1 = As[kk * 32u + lid.y * 2u + 1u];
            let b0 = Bs[kk * 32u + lid.x];
            let b1 = Bs[kk * 32u + 16u + lid.x];
            c0a = c0a + a0.x * b0; c0b = c0b + a0.x * b1;
            c1a = c1a + a0.y * b0; c1b = c1b + a0.y * b1;
            c2a = c2a + a0.z * b0; c2b = c2b + a0.z * b1;
            c3a = c3a + a0.w * b0; c3b = c3b + a0.w * b1;
            c4a = c4a + a1.x * b0; c4b = c4b + a1.x * b1;
            c5a = c5a + a1.y * b0; c5b = c5b + a1.y * b1;
            c6a = c6a + a1.z * b0; c6b = c6b + a1.z * b1;
            c7a = c7a + a1.w * b0; c7b = c7b + a1.w * b1;
        }
        workgroupBarrier();
    }
    // rows lid.y*8 .. +8; columns lid.x*4 .. +4 and 64 + lid.x*4 .. +4 (the two halves of the tile: each warp's
    // workgroup-memory reads of B stay contiguous); the accumulators stay in registers (no dynamic index)
    let mr = m0 + lid.y * 8u;
    let nc = n0 + lid.x * 4u;
    let base = gp.c_off + slab * gp.c_bs;
    store_row(base, mr + 0u, nc, c0a); store_row(base, mr + 0u, nc + 64u, c0b);
    store_row(base, mr + 1u, nc, c1a); store_row(base, mr + 1u, nc + 64u, c1b);
    store_row(base, mr + 2u, nc, c2a); store_row(base, mr + 2u, nc + 64u, c2b);
    store_row(base, mr + 3u, nc, c3a); store_row(base, mr + 3u, nc + 64u, c3b);
    store_row(base, mr + 4u, nc, c4a); store_row(base, mr + 4u, nc + 64u, c4b);
    store_row(base, mr + 5u, nc, c5a); store_row(base, mr + 5u, nc + 64u, c5b);
    store_row(base, mr + 6u, nc, c6a); store_row(base, mr + 6u, nc + 64u, c6b);
    store_row(base, mr + 7u, nc, c7a); store_row(base, mr + 7u, nc + 64u, c7b);
}

// Frobenius scaling for Newton-Schulz: matrix z (workgroup z, flattened) of `count` elements at c_off + z stride of C
// is divided by max(norm, eps). sp (struct Span, rlx_gpu/linalg/record.py): count, c_off, stride, eps, batch.
@compute @workgroup_size(256)
fn frob_scale(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
              @builtin(local_invocation_index) lid: u32) {
    let z = wid.x + wid.y * nwg.x;
    if (z >= sp.batch) { return; }  // (past the batch in a padded 2-D grid; uniform for the workgroup)
    let n = sp.count;
    let base = sp.c_off + z * sp.stride;
    var s = 0.0;
    for (var i = lid; i < n; i = i + 256u) { let v = C[base + i]; s = s + v * v; }
    let d = max(sqrt(wg_sum(lid, s)), sp.eps);
    for (var i = lid; i < n; i = i + 256u) { C[base + i] = C[base + i] / d; }
}

// GEMMs with few outputs and a long K (M N <= 64 and K > KSPLIT: Newton-Schulz's X X^T of a very wide matrix), in
// two passes with short loops: gemm_thin's workgroup (matrix, chunk) sums, output by output, the products over its
// chunk of TCH k's into P[(matrix chunks + chunk) M N + output]; thin_sum adds a matrix's chunks in order and stores
// C = alpha sum + beta C (one thread per output). gp as gemm's (chunks: the chunks per matrix).
const TCH: u32 = 4096u;  // (16 k's a thread)

@compute @workgroup_size(256)
fn gemm_thin(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
             @builtin(local_invocation_index) lid: u32) {
    let w = wid.x + wid.y * nwg.x;
    let chunks = gp.chunks;
    if (w >= chunks * gp.batch) { return; }  // (uniform for the workgroup)
    let M = gp.M; let N = gp.N; let K = gp.K;
    let ta = gp.ta != 0u; let tb = gp.tb != 0u;
    let LA = gp.lda; let LB = gp.ldb;
    let abase = gp.a_off + (w / chunks) * gp.a_bs;
    let bbase = gp.b_off + (w / chunks) * gp.b_bs;
    let k0 = (w % chunks) * TCH;
    let k1 = min(K, k0 + TCH);
    for (var o = 0u; o < M * N; o++) {
        let m = o / N; let n = o % N;
        var s = 0.0;
        for (var k = k0 + lid; k < k1; k = k + 256u) {
            s = s + A[abase + select(m * LA + k, k * LA + m, ta)] * B[bbase + select(k * LB + n, n * LB + k, tb)];
        }
        let t = wg_sum(lid, s);
        if (lid == 0u) { P[w * M * N + o] = t; }
    }
}

@compute @workgroup_size(256)
fn thin_sum(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
            @builtin(local_invocation_index) lid: u32) {
    let i = flat_index(wid, nwg, lid);
    let mn = gp.M * gp.N;
    if (i >= mn * gp.batch) { return; }
    let bt = i / mn;
    var s = 0.0;
    for (var c = 0u; c < gp.chunks; c++) { s = s + P[(bt * gp.chunks + c) * mn + i % mn]; }
    let o = gp.c_off + bt * gp.c_bs + (i % mn) / gp.N * gp.ldc + (i % mn) % gp.N;
    var x = gp.alpha * s;
    if (gp.beta != 0.0) { x = x + gp.beta * C[o]; }
    C[o] = x;
}

// Frobenius scaling of a large matrix (past rlx_gpu/linalg/record.py's FROB_ONE elements) in two passes over many
// workgroups, so that no thread's loop runs long: frob_part sums the squares of chunk j (FCH elements) of matrix z
// into P[z parts + j]; frob_apply divides chunk j of matrix z by max(sqrt(the sum of its parts), eps). Workgroup
// w = z parts + j. sp: as frob_scale's, and parts (C: the matrices, P: batch * parts floats).
const FCH: u32 = 16384u;  // (64 elements a thread)
@group(0) @binding(4) var<storage, read_write> P: array<f32>;

@compute @workgroup_size(256)
fn frob_part(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
             @builtin(local_invocation_index) lid: u32) {
    let w = wid.x + wid.y * nwg.x;
    if (w >= sp.batch * sp.parts) { return; }  // (uniform for the workgroup)
    let base = sp.c_off + (w / sp.parts) * sp.stride;
    let j = w % sp.parts;
    var s = 0.0;
    let end = min(sp.count, (j + 1u) * FCH);
    for (var i = j * FCH + lid; i < end; i = i + 256u) { let v = C[base + i]; s = s + v * v; }
    let t = wg_sum(lid, s);
    if (lid == 0u) { P[w] = t; }
}

@compute @workgroup_size(256)
fn frob_apply(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
              @builtin(local_invocation_index) lid: u32) {
    let w = wid.x + wid.y * nwg.x;
    if (w >= sp.batch * sp.parts) { return; }
    let parts = sp.parts;
    let z = w / parts;
    let base = sp.c_off + z * sp.stride;
    let j = w % parts;
    var s = 0.0;
    for (var q = lid; q < parts; q = q + 256u) { s = s + P[z * parts + q]; }
    let d = max(sqrt(wg_sum(lid, s)), sp.eps);
    for (var i = j * FCH + lid; i < min(sp.count, (j + 1u) * FCH); i = i + 256u) { C[base + i] = C[base + i] / d; }
}
