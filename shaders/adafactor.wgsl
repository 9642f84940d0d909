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
//                               columns of C updated from the column partials (which it zeroes; FL of them loaded
//                               at once)
//   mean        (custom)        M = mean_m(R) from RS, per (tensor, batch); CSCALE: CN = C / max(M, eps1)
//   update_norm (elementwise)   V updated (unfactored); per-block sums of p*p (MERGE) and u*u
//   ratio       (per tensor)    scale = -alpha / max(1, RMS(u)/d)  (the tensor's tensor_scalar)
//   apply       (elementwise)   p = p*(1 - lr*wd) + scale*u
// `aux` holds, per factored tensor at word A: R [B*m], C [B*n], RA [B*m], M [B], RS [B*ceil(m/WG)], CN [B*n], RR
// [B*m] (their first words: aux_c .. aux_rr; CN = C / max(M, eps1), written by the mean pass with Adafactor.CSCALE
// only, its rsq with RSQRT; RR = rsq(R), written by the finish pass with Adafactor.RSQRT only); its
// column partials [B*nrt*n] at word CP; per unfactored tensor V [numel] at A. `tables`
// (per chunk, whole vec4s an entry): AfRowsHead, AfFinishHead, then the AfSegment, AfColJob, AfJob and AfPair
// tables they locate (structs and their readers tables_AfX(i) declared in rlx_gpu/optim/adafactor.py).
// Record (rlx_gpu/optim/adafactor.py): decay, w, rho, eps1, eps2, d, sqrt_numel, inv_cols, inv_eps1 (f32); rows (m),
// row_tiles, aux (A), cols (n), col_parts (CP), batch (B), numel (u32); flags FACTORED, DECAY, RECIP.
override RT: u32 = 128u;  // rows per column job
override RPW: u32 = 8u;  // row segments per workgroup in the rows pass (WG / RPW threads each)
override FL: u32 = 1u;  // column partials the finish pass loads at once (Adafactor.FINISH: 1, 8 or 16)
override RC: u32 = 0u;  // 1: direction() finds rows by a float32 reciprocal, not a division (Adafactor.RECIP)
override CS: u32 = 0u;  // 1: the mean pass writes CN = C / max(M, eps1); direction() takes R * CN (Adafactor.CSCALE)
// 1 (with CS): the finish pass also writes RR = rsq(R), the mean pass rsq(CN) into CN, and direction() takes
// min(RR * CN, 1 / eps1) for rsqrt(max(R * CN, eps1^2)): no inverseSqrt an element (Adafactor.RSQRT)
override RQ: u32 = 0u;
// Timing only (benchmarks/adafactor_passes.py's knock-outs; results wrong on purpose, nothing in the package sets it):
// 1 direction() is g; 2 no division by the row mean (nor its load; CS: the mean pass copies C into CN); 3 no aux
// loads (constants from the record)
override XK: u32 = 0u;

@group(0) @binding(N) var<storage, read_write> aux: array<f32>;
@group(0) @binding(N) var<storage, read> tables: array<vec4<u32>>;

// The update direction u at tensor elements e..e+3 (e a multiple of 4) with grads g (unfactored V updated).
fn direction(r: Rec, e: u32, g: vec4<f32>) -> vec4<f32> {
    if (XK == 1u) { return g; }
    let A = r.aux;
    var v: vec4<f32>;
    if (has(r, FACTORED)) {
        let n = r.cols;
        // row q (of all B*m), column c and batch b of element e (one integer division per vec4: PERF_NOTES.md 28;
        // Adafactor.RECIP: none, row_of and batch_of)
        var q = row_of(r, e);
        var c = e - q * n;
        var b = batch_of(r, q);
        if (XK == 3u) {  // (timing only: the index arithmetic kept, no aux load)
            v = vec4<f32>(r.w * f32(b + c + q)) / r.eps1;
        } else if (RQ == 1u && CS == 1u && (n & 3u) == 0u) {  // RSQRT: rsqrt(max(R CN, eps1^2)) as min(RR CN', 1/eps1)
            let rq = aux[aux_rr(r) + q];
            let cc = aux_cn(r) + b * n + c;
            let x = vec4<f32>(rq * aux[cc], rq * aux[cc + 1u], rq * aux[cc + 2u], rq * aux[cc + 3u]);
            return nan_min4(x, vec4<f32>(r.inv_eps1)) * g;
        } else if (RQ == 1u && CS == 1u) {
            var x: vec4<f32>;
            for (var j = 0u; j < 4u; j++) {
                x[j] = aux[aux_rr(r) + q] * aux[aux_cn(r) + b * n + c];
                c = c + 1u;
                if (c == n) { c = 0u; q = q + 1u; b = batch_of(r, q); }
            }
            return nan_min4(x, vec4<f32>(r.inv_eps1)) * g;
        } else if (CS == 1u && (n & 3u) == 0u) {  // CSCALE: CN holds C / max(M, eps1): v = R * CN
            let rq = aux[A + q];
            let cc = aux_cn(r) + b * n + c;
            v = vec4<f32>(rq * aux[cc], rq * aux[cc + 1u], rq * aux[cc + 2u], rq * aux[cc + 3u]);
        } else if (CS == 1u) {
            for (var j = 0u; j < 4u; j++) {
                v[j] = aux[A + q] * aux[aux_cn(r) + b * n + c];
                c = c + 1u;
                if (c == n) { c = 0u; q = q + 1u; b = batch_of(r, q); }
            }
        } else if ((n & 3u) == 0u) {  // rows of a multiple of 4: the vec4 lies in one row, its columns c..c+3
            let rq = aux[A + q];
            let cc = aux_c(r) + b * n + c;
            let rc = vec4<f32>(rq * aux[cc], rq * aux[cc + 1u], rq * aux[cc + 2u], rq * aux[cc + 3u]);
            if (XK == 2u) { v = rc; } else { v = rc / nan_max(aux[aux_m(r) + b], r.eps1); }
        } else {  // the next lanes step c, wrapping into the next row
            for (var j = 0u; j < 4u; j++) {
                let rm = nan_max(aux[aux_m(r) + b], r.eps1);
                v[j] = aux[A + q] * aux[aux_c(r) + b * n + c] / rm;
                c = c + 1u;
                if (c == n) { c = 0u; q = q + 1u; b = batch_of(r, q); }
            }
        }
    } else {
        for (var j = 0u; j < 4u; j++) { v[j] = aux[A + min(e + j, r.numel - 1u)]; }
    }
    return inverseSqrt(nan_max4(v, vec4<f32>(r.eps1 * r.eps1))) * g;
}

// Element e's row (of all B*m). Adafactor.RECIP (RC = 1) where the tensor has the flag (B*m < 2^20, numel <
// 2^30): q = trunc(f32(e) * inv_cols) is within 1 of e / n (f32(e) within 2^-23, inv_cols and the product within
// 2^-24 each: < 2^-22 relatively, and e / n < 2^20, so < 0.25 absolutely), then corrected by the remainder's sign and size: the quotient exactly, so the
// same bits, without the integer division (~20 instructions on the H200).
fn row_of(r: Rec, e: u32) -> u32 {
    if (RC == 0u || !has(r, RECIP)) { return e / r.cols; }
    let q = u32(f32(e) * r.inv_cols);
    let d = i32(e) - i32(q * r.cols);  // in (-n, 2n)
    return select(select(q, q + 1u, d >= i32(r.cols)), q - 1u, d < 0);
}

// Row q's batch: q / m; with Adafactor.RECIP no division where the tensor is one matrix (B = 1).
fn batch_of(r: Rec, q: u32) -> u32 {
    if (RC == 1u && r.batch == 1u) { return 0u; }
    return q / r.rows;
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
    let nr = (tables_AfRowsHead(0u).segs + RPW - 1u) / RPW;
    if (w < nr) { rows_at(w, lid); } else { cols_at(w - nr, lid); }
}

fn rows_at(w: u32, lid: u32) {
    let RL = WG / RPW;
    let hdr = tables_AfRowsHead(0u);
    let id = w * RPW + lid / RL;
    let ln = lid % RL;
    let seg = tables_AfSegment(hdr.segs_at + min(id, hdr.segs - 1u));
    let r = rec(seg.t);
    let live = id < hdr.segs && has(r, ACTIVE);  // (no early return before the barriers: hyper is read-write storage)
    let gm = grad_mul();
    var acc = 0.0;
    if (live && ((seg.start | seg.length) & 3u) == 0u) {  // the usual case (rows of a multiple of 4, aligned)
        for (var j = ln; j < seg.length / 4u; j = j + RL) {
            let g = ld_grad(seg.start / 4u + j) * gm;
            acc = acc + dot(g, g);
        }
    } else if (live) {
        for (var j = ln; j < seg.length; j = j + RL) {
            let g = ld1_grad(seg.start + j) * gm;
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
        let ra = aux_ra(r) + seg.row;
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
    let hdr = tables_AfRowsHead(0u);
    if (id >= hdr.cols) { return; }
    let j = tables_AfColJob(hdr.cols_at + 2u * id);
    let r = rec(j.t);
    let b = j.b; let ra = j.row_a;
    let live = has(r, ACTIVE);  // (no early return before the barrier: hyper is read-write storage)
    let m = r.rows; let n = r.cols;
    let quad = (n & 3u) == 0u;
    let CQ = WG / 4u;
    let slot = r.col_parts + (b * r.row_tiles + ra / RT) * n;
    let gm = grad_mul();
    var acc = vec4<f32>(0.0);
    if (live && quad) {
        let c = j.c0 + 4u * (lid % CQ);
        for (var row = ra + lid / CQ; c < n && row < j.row_b; row = row + 4u) {
            let e = (b * m + row) * n + c;
            if (e >= j.lo && e < j.hi) {
                let g = ld_grad((j.at + e - j.lo) / 4u) * gm;
                acc = acc + g * g;
            }
        }
    } else if (live && j.c0 + lid < n) {
        let c = j.c0 + lid;
        var s = 0.0;
        for (var row = ra; row < j.row_b; row = row + 1u) {
            let e = (b * m + row) * n + c;
            if (e >= j.lo && e < j.hi) {
                let g = ld1_grad(j.at + e - j.lo) * gm;
                s = s + g * g;
            }
        }
        aux[slot + c] = aux[slot + c] + s;
    }
    colacc[lid] = acc;
    workgroupBarrier();
    let c = j.c0 + 4u * lid;
    if (live && quad && lid < CQ && c < n) {
        let t = colacc[lid] + colacc[lid + CQ] + colacc[lid + 2u * CQ] + colacc[lid + 3u * CQ];
        for (var k = 0u; k < 4u; k++) { aux[slot + c + k] = aux[slot + c + k] + t[k]; }
    }
}

// A factored tensor's sections of aux after R (at r.aux): C, RA, M, RS.
fn aux_c(r: Rec) -> u32 { return r.aux + r.batch * r.rows; }
fn aux_ra(r: Rec) -> u32 { return aux_c(r) + r.batch * r.cols; }
fn aux_m(r: Rec) -> u32 { return aux_ra(r) + r.batch * r.rows; }
fn aux_rs(r: Rec) -> u32 { return aux_m(r) + r.batch; }
fn aux_cn(r: Rec) -> u32 { return aux_rs(r) + r.batch * ((r.rows + WG - 1u) / WG); }
fn aux_rr(r: Rec) -> u32 { return aux_cn(r) + r.batch * r.cols; }

// 1 / sqrt(x) for RSQRT's factors (x >= 0 or NaN): +inf at +-0 (inverseSqrt(0) is undefined in SPIR-V), NaN kept.
// The infinity is built from x's bits at run time: a constant inf is an error to Tint's constant evaluation.
fn rsq(x: f32) -> f32 {
    let inf = bitcast<f32>((bitcast<u32>(x) & ABS_BITS) | EXP_BITS);
    return select(select(inverseSqrt(x), inf, x == 0.0), x, is_nan(x));
}

// Column partials k..k+3 (of nrt, n words apart from word at; those past nrt read as the last one), and s plus
// those below nrt one by one, in order (the column sums' order).
fn parts4(at: u32, k: u32, nrt: u32, n: u32) -> vec4<f32> {
    let l = nrt - 1u;
    return vec4<f32>(aux[at + min(k, l) * n], aux[at + min(k + 1u, l) * n], aux[at + min(k + 2u, l) * n],
                     aux[at + min(k + 3u, l) * n]);
}
fn add4(s: f32, x: vec4<f32>, k: u32, nrt: u32) -> f32 {
    var t = s;
    for (var j = 0u; j < 4u; j = j + 1u) { if (k + j < nrt) { t = t + x[j]; } }
    return t;
}

@compute @workgroup_size(WG)
fn finish(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
          @builtin(local_invocation_index) lid: u32) {
    let id = wid.x + wid.y * nwg.x;
    let hdr = tables_AfFinishHead(1u);
    if (id >= hdr.jobs) { return; }
    let job = tables_AfJob(hdr.jobs_at + id);
    let r = rec(job.t);
    let b = job.b;
    let live = has(r, ACTIVE);  // (no early return before the barriers: hyper is read-write storage)
    let m = r.rows; let n = r.cols; let A = r.aux; let nrt = r.row_tiles;
    var acc = 0.0;
    if (live && job.axis == 0u && job.first + lid < m) {  // rows: R from RA (zeroed), and their sum
        let row = job.first + lid;
        let ra = aux_ra(r) + b * m + row;
        let x = lerp1(aux[A + b * m + row], aux[ra] / f32(n), r.w);
        aux[A + b * m + row] = x;
        aux[ra] = 0.0;
        if (RQ == 1u) { aux[aux_rr(r) + b * m + row] = rsq(x); }
        acc = x;
    } else if (live && job.axis == 1u && job.first + lid < n) {  // columns: C from the column partials (zeroed)
        let c = job.first + lid;
        var s = 0.0;
        var k = 0u;
        // Adafactor.FINISH (FL) partials loaded before any is added or zeroed, so that FL loads are in flight at
        // once instead of one (the column's chain was nrt dependent round trips: 393 for GPT-2's wte); those past
        // nrt loaded from the last (clamped) and neither added nor zeroed. Added in the same order, so the same
        // bits. FL = 1: none here, the loop below takes every partial.
        for (; FL >= 8u && k < nrt; k = k + FL) {
            let at = r.col_parts + b * nrt * n + c;
            let x0 = parts4(at, k, nrt, n);
            let x1 = parts4(at, k + 4u, nrt, n);
            var x2 = vec4<f32>(0.0);
            var x3 = vec4<f32>(0.0);
            if (FL == 16u) { x2 = parts4(at, k + 8u, nrt, n); x3 = parts4(at, k + 12u, nrt, n); }
            for (var u = k; u < min(k + FL, nrt); u = u + 1u) { aux[at + u * n] = 0.0; }
            s = add4(add4(s, x0, k, nrt), x1, k + 4u, nrt);
            if (FL == 16u) { s = add4(add4(s, x2, k + 8u, nrt), x3, k + 12u, nrt); }
        }
        for (; k < nrt; k = k + 1u) {
            let slot = r.col_parts + (b * nrt + k) * n + c;
            s = s + aux[slot];
            aux[slot] = 0.0;
        }
        let ci = aux_c(r) + b * n + c;
        aux[ci] = lerp1(aux[ci], s / f32(m), r.w);
    }
    red[lid] = acc;
    reduce(lid);
    if (lid == 0u && live && job.axis == 0u) { aux[aux_rs(r) + b * ((m + WG - 1u) / WG) + job.first / WG] = red[0]; }
}

@compute @workgroup_size(WG)
fn mean(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let id = wid.x + wid.y * nwg.x;
    let hdr = tables_AfFinishHead(1u);
    if (id >= hdr.means) { return; }
    let pr = tables_AfPair(hdr.means_at + id);
    let r = rec(pr.t);
    let b = pr.b;
    let live = has(r, ACTIVE);
    let nrc = (r.rows + WG - 1u) / WG;
    var acc = 0.0;
    for (var k = lid; live && k < nrc; k = k + WG) { acc = acc + aux[aux_rs(r) + b * nrc + k]; }
    red[lid] = acc;
    reduce(lid);
    let M = red[0] / f32(r.rows);
    if (lid == 0u && live) { aux[aux_m(r) + b] = M; }
    if (CS == 1u && live) {  // CSCALE: batch b's columns divided by the row mean once, here, not per element
        let rm = nan_max(M, r.eps1);
        let n = r.cols;
        for (var c = lid; c < n; c = c + WG) {
            let cv = aux[aux_c(r) + b * n + c];
            var cn = cv / rm;
            if (XK == 2u) { cn = cv; }
            if (RQ == 1u) { cn = rsq(cn); }
            aux[aux_cn(r) + b * n + c] = cn;
        }
    }
}
