// Adafactor (torch.optim.Adafactor semantics). Per tensor, with w = t^beta2_decay, rho = min(lr, 1/sqrt(t)):
//   alpha = max(eps2, RMS(p)) * rho  (p before decay; Python's max);  p *= 1 - lr*wd
//   >= 2 dims [B, m, n]: R = lerp(R, mean_n(g*g), w); C = lerp(C, mean_m(g*g), w); v = R*C / max(mean_m(R), eps1)
//   <  2 dims:           V = lerp(V, g*g, w); v = V
//   u = rsqrt(max(v, eps1^2)) * g;  p += -alpha / max(1, RMS(u)/d) * u
// Six passes per step (Adafactor.ROWCOLS off: rows and cols apart; MERGE off: stats first), no host round trip:
//   stats       (elementwise)   per-block sums of p*p (MERGE off; on: update_norm takes them)
//   rows        (custom)        per-row sums of g*g over row segments (RPW segments a workgroup), added into RA (a
//                               row split over chunks adds twice)
//   cols        (custom)        (with rows in one dispatch where ROWCOLS) per-(row tile, column) sums of g*g, added into the column partials (rows of a
//                               multiple of 4: a thread sums a vec4 of columns over a quarter of the tile's rows)
//   finish      (custom)        per job: WG rows of R updated from RA (which it zeroes), their sum into RS; or WG
//                               columns of C updated from the column partials (which it zeroes)
//   mean        (custom)        M = mean_m(R) from RS, per (tensor, batch)
//   update_norm (elementwise)   V updated (unfactored); per-block sums of p*p (MERGE) and u*u
//   ratio       (per tensor)    scale = -alpha / max(1, RMS(u)/d)  (the tensor's tensor_scalar)
//   apply       (elementwise)   p = p*(1 - lr*wd) + scale*u
// `aux` holds, per factored tensor at word A: R [B*m], C [B*n], RA [B*m], M [B], RS [B*ceil(m/WG)]; its column
// partials [B*nrt*n] at word CP; per unfactored tensor V [numel] at A. `tables` (per chunk): header (rows start,
// rows count, cols start, cols count), (finish jobs start, count, means start, count); row segments (t, row,
// chunk start, length); column jobs as two vec4 (t, b, c0, r_a), (r_b, lo, hi, chunk offset of tensor element lo);
// finish jobs (t, b, 0 rows | 1 columns, first row or column); means (t, b, 0, 0).
// Record (rlx_gpu/optim/adafactor.py): decay, w, rho, eps1, eps2, d, sqrt_numel (f32); rows (m), row_tiles,
// aux (A), cols (n), col_parts (CP), batch (B), numel (u32); flags FACTORED, DECAY.
override RT: u32 = 128u;  // rows per column job
override RPW: u32 = 8u;  // row segments per workgroup in the rows pass (WG / RPW threads each)

@group(0) @binding(N) var<storage, read_write> aux: array<f32>;
@group(0) @binding(N) var<storage, read> tables: array<vec4<u32>>;

// The update direction u at tensor elements e..e+3 (e a multiple of 4) with grads g (unfactored V updated).
fn direction(r: Rec, e: u32, g: vec4<f32>) -> vec4<f32> {
    let A = r.aux;
    var v: vec4<f32>;
    if (has(r, FACTORED)) {
        let m = r.rows; let n = r.cols; let B = r.batch;
        // row q (of all B*m), column c and batch b of element e (one integer division per vec4: PERF_NOTES.md 28)
        var q = e / n;
        var c = e - q * n;
        var b = q / m;
        if ((n & 3u) == 0u) {  // rows of a multiple of 4: the vec4 lies in one row, its columns c..c+3
            let rq = aux[A + q];
            let cc = A + B * m + b * n + c;
            let rm = nan_max(aux[A + 2u * B * m + B * n + b], r.eps1);
            v = vec4<f32>(rq * aux[cc], rq * aux[cc + 1u], rq * aux[cc + 2u], rq * aux[cc + 3u]) / rm;
        } else {  // the next lanes step c, wrapping into the next row
            for (var j = 0u; j < 4u; j++) {
                let rm = nan_max(aux[A + 2u * B * m + B * n + b], r.eps1);
                v[j] = aux[A + q] * aux[A + B * m + b * n + c] / rm;
                c = c + 1u;
                if (c == n) { c = 0u; q = q + 1u; b = q / m; }
            }
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
    o.sum_a = p * p;  // (RMS(p) where the pass loads p: Adafactor.MERGE; p is zero otherwise, and .x not kept)
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

// RPW row segments a workgroup, WG / RPW threads each, summed in workgroup memory.
@compute @workgroup_size(WG)
fn rows(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    rows_at(wid.x + wid.y * nwg.x, lid);
}

// rows and cols in one dispatch (Adafactor.ROWCOLS; they do not depend on each other): the first workgroups take
// the row segments, the rest the column jobs (the branch is on the workgroup and the read-only table: uniform)
@compute @workgroup_size(WG)
fn rowcols(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
           @builtin(local_invocation_index) lid: u32) {
    let w = wid.x + wid.y * nwg.x;
    let nr = (tables[0].y + RPW - 1u) / RPW;
    if (w < nr) { rows_at(w, lid); } else { cols_at(w - nr, lid); }
}

fn rows_at(w: u32, lid: u32) {
    let RL = WG / RPW;
    let hdr = tables[0];
    let id = w * RPW + lid / RL;
    let ln = lid % RL;
    let seg = tables[hdr.x + min(id, hdr.y - 1u)];
    let r = rec(seg.x);
    let live = id < hdr.y && has(r, ACTIVE);  // (no early return before the barriers: hyper is read-write storage)
    let gm = grad_mul();
    var acc = 0.0;
    if (live && ((seg.z | seg.w) & 3u) == 0u) {  // the usual case (rows of a multiple of 4, aligned): vec4 loads
        for (var j = ln; j < seg.w / 4u; j = j + RL) {
            let g = ld_grad(seg.z / 4u + j) * gm;
            acc = acc + dot(g, g);
        }
    } else if (live) {
        for (var j = ln; j < seg.w; j = j + RL) {
            let g = ld1_grad(seg.z + j) * gm;
            acc = acc + g * g;
        }
    }
    red[lid] = acc;
    for (var s = RL / 2u; s > 0u; s = s / 2u) {
        workgroupBarrier();
        if (ln < s) { red[lid] = red[lid] + red[lid + s]; }
    }
    workgroupBarrier();
    if (ln == 0u && live) {
        let ra = r.aux + r.batch * r.rows + r.batch * r.cols + seg.y;
        aux[ra] = aux[ra] + red[lid];
    }
}

var<workgroup> colacc: array<vec4<f32>, WG>;

// A job: WG columns of RT rows. Rows of a multiple of 4: thread lid sums the vec4 of columns 4 (lid % (WG/4)) over
// every fourth row of the tile (from lid / (WG/4)), the four sums then added in workgroup memory; otherwise a
// thread per column.
@compute @workgroup_size(WG)
fn cols(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    cols_at(wid.x + wid.y * nwg.x, lid);
}

fn cols_at(id: u32, lid: u32) {
    let hdr = tables[0];
    if (id >= hdr.w) { return; }
    let j0 = tables[hdr.z + 2u * id]; let j1 = tables[hdr.z + 2u * id + 1u];
    let r = rec(j0.x);
    let b = j0.y; let ra = j0.w;
    let live = has(r, ACTIVE);  // (no early return before the barrier: hyper is read-write storage)
    let m = r.rows; let n = r.cols;
    let quad = (n & 3u) == 0u;
    let CQ = WG / 4u;
    let slot = r.col_parts + (b * r.row_tiles + ra / RT) * n;
    let gm = grad_mul();
    var acc = vec4<f32>(0.0);
    if (live && quad) {
        let c = j0.z + 4u * (lid % CQ);
        for (var row = ra + lid / CQ; c < n && row < j1.x; row = row + 4u) {
            let e = (b * m + row) * n + c;
            if (e >= j1.y && e < j1.z) {
                let g = ld_grad((j1.w + e - j1.y) / 4u) * gm;
                acc = acc + g * g;
            }
        }
    } else if (live && j0.z + lid < n) {
        let c = j0.z + lid;
        var s = 0.0;
        for (var row = ra; row < j1.x; row = row + 1u) {
            let e = (b * m + row) * n + c;
            if (e >= j1.y && e < j1.z) {
                let g = ld1_grad(j1.w + e - j1.y) * gm;
                s = s + g * g;
            }
        }
        aux[slot + c] = aux[slot + c] + s;
    }
    colacc[lid] = acc;
    workgroupBarrier();
    let c = j0.z + 4u * lid;
    if (live && quad && lid < CQ && c < n) {
        let t = colacc[lid] + colacc[lid + CQ] + colacc[lid + 2u * CQ] + colacc[lid + 3u * CQ];
        for (var k = 0u; k < 4u; k++) { aux[slot + c + k] = aux[slot + c + k] + t[k]; }
    }
}

fn rs_base(r: Rec) -> u32 { return r.aux + 2u * r.batch * r.rows + r.batch * r.cols + r.batch; }

@compute @workgroup_size(WG)
fn finish(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
          @builtin(local_invocation_index) lid: u32) {
    let id = wid.x + wid.y * nwg.x;
    let hdr = tables[1];
    if (id >= hdr.y) { return; }
    let job = tables[hdr.x + id];
    let r = rec(job.x);
    let b = job.y;
    let live = has(r, ACTIVE);  // (no early return before the barriers: hyper is read-write storage)
    let m = r.rows; let n = r.cols; let A = r.aux; let B = r.batch; let nrt = r.row_tiles;
    var acc = 0.0;
    if (live && job.z == 0u && job.w + lid < m) {  // rows: R from RA (zeroed), and their sum
        let row = job.w + lid;
        let ra = A + B * m + B * n + b * m + row;
        let x = lerp1(aux[A + b * m + row], aux[ra] / f32(n), r.w);
        aux[A + b * m + row] = x;
        aux[ra] = 0.0;
        acc = x;
    } else if (live && job.z == 1u && job.w + lid < n) {  // columns: C from the column partials (zeroed)
        let c = job.w + lid;
        var s = 0.0;
        for (var k = 0u; k < nrt; k = k + 1u) {
            let slot = r.col_parts + (b * nrt + k) * n + c;
            s = s + aux[slot];
            aux[slot] = 0.0;
        }
        let ci = A + B * m + b * n + c;
        aux[ci] = lerp1(aux[ci], s / f32(m), r.w);
    }
    red[lid] = acc;
    reduce(lid);
    if (lid == 0u && live && job.z == 0u) { aux[rs_base(r) + b * ((m + WG - 1u) / WG) + job.w / WG] = red[0]; }
}

@compute @workgroup_size(WG)
fn mean(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let id = wid.x + wid.y * nwg.x;
    let hdr = tables[1];
    if (id >= hdr.w) { return; }
    let pr = tables[hdr.z + id];
    let r = rec(pr.x);
    let b = pr.y;
    let live = has(r, ACTIVE);
    let nrc = (r.rows + WG - 1u) / WG;
    var acc = 0.0;
    for (var k = lid; live && k < nrc; k = k + WG) { acc = acc + aux[rs_base(r) + b * nrc + k]; }
    red[lid] = acc;
    reduce(lid);
    if (lid == 0u && live) { aux[r.aux + 2u * r.batch * r.rows + r.batch * r.cols + b] = red[0] / f32(r.rows); }
}
