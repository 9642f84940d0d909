// Adafactor (torch.optim.Adafactor semantics). Per tensor, with w = t^beta2_decay, rho = min(lr, 1/sqrt(t)):
//   alpha = max(eps2, RMS(p)) * rho  (p before decay; Python's max);  p *= 1 - lr*wd
//   >= 2 dims [B, m, n]: R = lerp(R, mean_n(g*g), w); C = lerp(C, mean_m(g*g), w); v = R*C / max(mean_m(R), eps1)
//   <  2 dims:           V = lerp(V, g*g, w); v = V
//   u = rsqrt(max(v, eps1^2)) * g;  p += -alpha / max(1, RMS(u)/d) * u
// Seven passes per step, no host round trip:
//   stats       (elementwise)   per-block sums of p*p
//   rows        (custom)        per-row sums of g*g over row segments, added into RA (a row split over chunks adds
//                               twice)
//   cols        (custom)        per-(row tile, column) sums of g*g, added into the column partials
//   finish      (custom, once)  R, C updated from RA and the column partials (which it zeroes); M = mean_m(R)
//   update_norm (elementwise)   V updated (unfactored); per-block sums of u*u
//   ratio       (per tensor)    scale = -alpha / max(1, RMS(u)/d)  (the tensor's tensor_scalar)
//   apply       (elementwise)   p = p*(1 - lr*wd) + scale*u
// `aux` holds, per factored tensor at word A: R [B*m], C [B*n], RA [B*m], M [B]; its column partials [B*nrt*n]
// at word CP; per unfactored tensor V [numel] at A. `tables` (per chunk): header (rows start, rows count, cols
// start, cols count), (pairs start, pairs count, 0, 0); row segments (t, row, chunk start, length); column jobs as
// two vec4 (t, b, c0, r_a), (r_b, lo, hi, chunk offset of tensor element lo); pairs (t, b, 0, 0).
// Record (rlx_gpu/optim/adafactor.py): decay, w, rho, eps1, eps2, d, sqrt_numel (f32); rows (m), row_tiles,
// aux (A), cols (n), col_parts (CP), batch (B), numel (u32); flags FACTORED, DECAY.
override RT: u32 = 128u;  // rows per column job

@group(0) @binding(N) var<storage, read_write> aux: array<f32>;
@group(0) @binding(N) var<storage, read> tables: array<vec4<u32>>;

// The update direction u at tensor elements e..e+3 with grads g (unfactored V already updated).
fn direction(r: Rec, e: u32, g: vec4<f32>) -> vec4<f32> {
    let A = r.aux;
    var v: vec4<f32>;
    if (has(r, FACTORED)) {
        let m = r.rows; let n = r.cols; let B = r.batch;
        // row q (of all B*m), column c and batch b of element e; the next lanes step c, wrapping rarely
        // (one integer division per vec4 instead of three per lane: PERF_NOTES.md 28)
        var q = e / n;
        var c = e - q * n;
        var b = q / m;
        for (var j = 0u; j < 4u; j++) {
            let rm = nan_max(aux[A + 2u * B * m + B * n + b], r.eps1);
            v[j] = aux[A + q] * aux[A + B * m + b * n + c] / rm;
            c = c + 1u;
            if (c == n) { c = 0u; q = q + 1u; b = q / m; }
        }
    } else {
        for (var j = 0u; j < 4u; j++) { v[j] = aux[A + min(e + j, r.numel - 1u)]; }
    }
    return inverseSqrt(nan_max4(v, vec4<f32>(r.eps1 * r.eps1))) * g;
}

fn stats(r: Rec, e: u32, p: vec4<f32>, g: vec4<f32>, s: State) -> Out {
    var o = out(p, s);
    o.sum_a = p * p;
    return o;
}

fn update_norm(r: Rec, e: u32, p: vec4<f32>, g: vec4<f32>, s: State) -> Out {
    var o = out(p, s);
    if (!has(r, FACTORED)) {
        for (var j = 0u; j < 4u; j++) {
            if (e + j < r.numel) { aux[r.aux + e + j] = lerp1(aux[r.aux + e + j], g[j] * g[j], r.w); }
        }
    }
    let u = direction(r, e, g);
    o.sum_b = u * u;
    return o;
}

fn ratio(r: Rec, sums: vec2<f32>) -> f32 {
    // torch takes these maxima with Python's max() on .item() values: max(a, x) is x only if x > a, so a NaN RMS
    // gives a (WGSL's max leaves NaN operands to the implementation)
    let rms_p = sqrt(sums.x) / r.sqrt_numel;
    let alpha = select(r.eps2, rms_p, rms_p > r.eps2) * r.rho;
    let clip = sqrt(sums.y) / (r.sqrt_numel * r.d);
    return -alpha / select(1.0, clip, clip > 1.0);
}

fn apply(r: Rec, e: u32, p: vec4<f32>, g: vec4<f32>, s: State) -> Out {
    var o = out(p, s);
    if (has(r, DECAY)) { o.p = o.p * r.decay; }
    o.p = o.p + r.tensor_scalar * direction(r, e, g);
    return o;
}

@compute @workgroup_size(WG)
fn rows(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let id = wid.x + wid.y * nwg.x;
    let hdr = tables[0];
    if (id >= hdr.y) { return; }
    let seg = tables[hdr.x + id];
    let r = rec(seg.x);
    let live = has(r, ACTIVE);  // (no early return before the barriers: hyper is read-write storage)
    let gm = grad_mul();
    var acc = 0.0;
    if (live && ((seg.z | seg.w) & 3u) == 0u) {  // the usual case (rows of a multiple of 4, aligned): vec4 loads
        for (var j = lid; j < seg.w / 4u; j = j + WG) {
            let g = ld_grad(seg.z / 4u + j) * gm;
            acc = acc + dot(g, g);
        }
    } else if (live) {
        for (var j = lid; j < seg.w; j = j + WG) {
            let g = ld1_grad(seg.z + j) * gm;
            acc = acc + g * g;
        }
    }
    red[lid] = acc;
    reduce(lid);
    if (lid == 0u && live) {
        let ra = r.aux + r.batch * r.rows + r.batch * r.cols + seg.y;
        aux[ra] = aux[ra] + red[0];
    }
}

@compute @workgroup_size(WG)
fn cols(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let id = wid.x + wid.y * nwg.x;
    let hdr = tables[0];
    if (id >= hdr.w) { return; }
    let j0 = tables[hdr.z + 2u * id]; let j1 = tables[hdr.z + 2u * id + 1u];
    let r = rec(j0.x);
    let b = j0.y; let c = j0.z + lid; let ra = j0.w;
    if (!has(r, ACTIVE)) { return; }
    let m = r.rows; let n = r.cols;
    if (c >= n) { return; }
    let gm = grad_mul();
    var acc = 0.0;
    for (var row = ra; row < j1.x; row = row + 1u) {
        let e = (b * m + row) * n + c;
        if (e >= j1.y && e < j1.z) {
            let g = ld1_grad(j1.w + e - j1.y) * gm;
            acc = acc + g * g;
        }
    }
    let slot = r.col_parts + (b * r.row_tiles + ra / RT) * n + c;
    aux[slot] = aux[slot] + acc;
}

@compute @workgroup_size(WG)
fn finish(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
          @builtin(local_invocation_index) lid: u32) {
    let id = wid.x + wid.y * nwg.x;
    let hdr = tables[1];
    if (id >= hdr.y) { return; }
    let pr = tables[hdr.x + id];
    let r = rec(pr.x);
    let b = pr.y;
    let live = has(r, ACTIVE);  // (no early return before the barriers: hyper is read-write storage)
    let m = select(0u, r.rows, live); let nrt = r.row_tiles; let A = r.aux; let n = select(0u, r.cols, live);
    let CP = r.col_parts; let B = r.batch;
    var acc = 0.0;
    for (var row = lid; row < m; row = row + WG) {
        let ra = A + B * m + B * n + b * m + row;
        let x = lerp1(aux[A + b * m + row], aux[ra] / f32(n), r.w);
        aux[A + b * m + row] = x;
        aux[ra] = 0.0;
        acc = acc + x;
    }
    for (var c = lid; c < n; c = c + WG) {
        var s = 0.0;
        for (var k = 0u; k < nrt; k = k + 1u) {
            let slot = CP + (b * nrt + k) * n + c;
            s = s + aux[slot];
            aux[slot] = 0.0;
        }
        let ci = A + B * m + b * n + c;
        aux[ci] = lerp1(aux[ci], s / f32(m), r.w);
    }
    red[lid] = acc;
    reduce(lid);
    if (lid == 0u && live) { aux[A + 2u * B * m + B * n + b] = red[0] / f32(m); }
}
