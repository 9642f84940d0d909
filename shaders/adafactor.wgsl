// Adafactor (torch.optim.Adafactor semantics). Per tensor, with w = t^beta2_decay, rho = min(lr, 1/sqrt(t)):
//   alpha = max(eps2, RMS(p)) * rho  (p before decay);  p *= 1 - lr*wd
//   >= 2 dims [B, m, n]: R = lerp(R, mean_n(g*g), w); C = lerp(C, mean_m(g*g), w); v = R*C / max(mean_m(R), eps1)
//   <  2 dims:           V = lerp(V, g*g, w); v = V
//   u = rsqrt(max(v, eps1^2)) * g;  p += -alpha / max(1, RMS(u)/d) * u
// Seven dispatches per step, no host round trip:
//   stats  (blocks)       per-block sums of p*p
//   rows   (row segments) per-row sums of g*g, added into RA (a row split over chunks adds twice)
//   cols   (column jobs)  per-(row tile, column) sums of g*g, added into the column partials
//   finish (per [t, b])   R, C updated from RA and the column partials (which it zeroes); M = mean_m(R)
//   update_norm (blocks)       V updated (unfactored); per-block sums of u*u
//   ratio  (per tensor)   scale = -alpha / max(1, RMS(u)/d)
//   apply  (blocks)       p = p*(1 - lr*wd) + scale*u
// `aux` holds, per factored tensor at word A: R [B*m], C [B*n], RA [B*m], M [B]; its column partials
// [B*nrt*n] at word CP; per unfactored tensor V [numel] at A. `scratch`: 2 floats per block (sums of p*p
// and u*u), then one scale per tensor. `tables` (per chunk): header (rows start, rows count, cols start,
// cols count), (pairs start, pairs count, 0, 0); row segments (t, row, chunk start, length); column jobs as
// two vec4 (t, b, c0, r_a), (r_b, lo, hi, chunk offset of tensor element lo); pairs (t, b, 0, 0).
// Record: flags (4 factored, 16 decay), 1 decay = 1-lr*wd, 2 w, 3 rho, 4 eps1, 5 eps2, 6 d, 7 m (u32),
//         8 nrt (u32), 9 A (u32), 10 n (u32), 11 sqrt(numel), 12 CP (u32), 13 B (u32), 14 first block, 15 blocks
// #include "common.wgsl"

const FACTORED: u32 = 4u;
const DECAY: u32 = 16u;
override RT: u32 = 128u;  // rows per column job

@group(0) @binding(4) var<storage, read_write> aux: array<f32>;
@group(0) @binding(5) var<storage, read_write> scratch: array<f32>;
@group(0) @binding(6) var<storage, read> tables: array<vec4<u32>>;

fn lerp1(a: f32, b: f32, w: f32) -> f32 {
    if (w < 0.5) { return a + w * (b - a); }
    return b - (b - a) * (1.0 - w);
}

fn gs(idx: u32) -> f32 { return grad[idx / 4u][idx % 4u] * gscale(); }

fn blk_elems() -> u32 { return WG * EPT * 4u; }

// Tensor element index of lane 0 of vec4 `i` in block `blk`.
fn elem0(blk: vec4<u32>, i: u32) -> u32 {
    return (blk.w - hu(blk.x, 14u)) * blk_elems() + 4u * (i - blk.y);
}

// The update direction u for tensor t at tensor elements e..e+3 with grads g (unfactored V already updated).
fn direction(t: u32, e: u32, g: vec4<f32>) -> vec4<f32> {
    let f = hu(t, 0u);
    let eps1 = hf(t, 4u); let A = hu(t, 9u);
    var v: vec4<f32>;
    if ((f & FACTORED) != 0u) {
        let m = hu(t, 7u); let n = hu(t, 10u); let B = hu(t, 13u);
        // row q (of all B*m), column c and batch b of element e; the next lanes step c, wrapping rarely
        // (one integer division per vec4 instead of three per lane: PERF_NOTES.md 28)
        var q = e / n;
        var c = e - q * n;
        var b = q / m;
        for (var j = 0u; j < 4u; j++) {
            let rm = nan_max(aux[A + 2u * B * m + B * n + b], eps1);
            v[j] = aux[A + q] * aux[A + B * m + b * n + c] / rm;
            c = c + 1u;
            if (c == n) { c = 0u; q = q + 1u; b = q / m; }
        }
    } else {
        for (var j = 0u; j < 4u; j++) { v[j] = aux[A + e + j]; }
    }
    return inverseSqrt(nan_max4(v, vec4<f32>(eps1 * eps1))) * g;
}

@compute @workgroup_size(WG)
fn stats(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
         @builtin(local_invocation_index) lid: u32) {
    let blk = active_block(wid, nwg);
    if (blk.x == NONE) { return; }
    var acc = 0.0;
    for (var k = 0u; k < EPT; k++) {
        let i = blk.y + k * WG + lid;
        if (4u * i < blk.z) {
            let p = select(param[i], vec4<f32>(0.0), tail(i, blk.z));
            acc = acc + dot(p, p);
        }
    }
    red[lid] = acc;
    reduce(lid);
    if (lid == 0u) { scratch[2u * blk.w] = red[0]; }
}

@compute @workgroup_size(WG)
fn rows(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let id = wid.x + wid.y * nwg.x;
    let hdr = tables[0];
    if (id >= hdr.y) { return; }
    let seg = tables[hdr.x + id];
    if ((hu(seg.x, 0u) & ACTIVE) == 0u) { return; }
    var acc = 0.0;
    if (((seg.z | seg.w) & 3u) == 0u) {  // the usual case (rows of a multiple of 4, 16-byte aligned): vec4 loads
        let s = gscale();
        for (var j = lid; j < seg.w / 4u; j = j + WG) {
            let g = grad[seg.z / 4u + j] * s;
            acc = acc + dot(g, g);
        }
    } else {
        for (var j = lid; j < seg.w; j = j + WG) {
            let g = gs(seg.z + j);
            acc = acc + g * g;
        }
    }
    red[lid] = acc;
    reduce(lid);
    if (lid == 0u) {
        let t = seg.x; let B = hu(t, 13u); let m = hu(t, 7u); let n = hu(t, 10u);
        let ra = hu(t, 9u) + B * m + B * n + seg.y;
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
    let t = j0.x; let b = j0.y; let c = j0.z + lid; let ra = j0.w;
    if ((hu(t, 0u) & ACTIVE) == 0u) { return; }
    let m = hu(t, 7u); let n = hu(t, 10u); let nrt = hu(t, 8u);
    if (c >= n) { return; }
    var acc = 0.0;
    for (var r = ra; r < j1.x; r = r + 1u) {
        let e = (b * m + r) * n + c;
        if (e >= j1.y && e < j1.z) {
            let g = gs(j1.w + e - j1.y);
            acc = acc + g * g;
        }
    }
    let slot = hu(t, 12u) + (b * nrt + ra / RT) * n + c;
    aux[slot] = aux[slot] + acc;
}

@compute @workgroup_size(WG)
fn finish(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
          @builtin(local_invocation_index) lid: u32) {
    let id = wid.x + wid.y * nwg.x;
    let hdr = tables[1];
    if (id >= hdr.y) { return; }
    let pr = tables[hdr.x + id];
    let t = pr.x; let b = pr.y;
    if ((hu(t, 0u) & ACTIVE) == 0u) { return; }
    let w = hf(t, 2u); let m = hu(t, 7u); let nrt = hu(t, 8u); let A = hu(t, 9u); let n = hu(t, 10u);
    let CP = hu(t, 12u); let B = hu(t, 13u);
    var acc = 0.0;
    for (var r = lid; r < m; r = r + WG) {
        let ra = A + B * m + B * n + b * m + r;
        let x = lerp1(aux[A + b * m + r], aux[ra] / f32(n), w);
        aux[A + b * m + r] = x;
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
        aux[ci] = lerp1(aux[ci], s / f32(m), w);
    }
    red[lid] = acc;
    reduce(lid);
    if (lid == 0u) { aux[A + 2u * B * m + B * n + b] = red[0] / f32(m); }
}

@compute @workgroup_size(WG)
fn update_norm(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
         @builtin(local_invocation_index) lid: u32) {
    let blk = active_block(wid, nwg);
    if (blk.x == NONE) { return; }
    let t = blk.x;
    let f = hu(t, 0u);
    let w = hf(t, 2u); let A = hu(t, 9u);
    var acc = 0.0;
    for (var k = 0u; k < EPT; k++) {
        let i = blk.y + k * WG + lid;
        if (4u * i < blk.z) {
            let keep = tail(i, blk.z);
            var g = grad_of(i, f);
            g = select(g, vec4<f32>(0.0), keep);
            let e = elem0(blk, i);
            if ((f & FACTORED) == 0u) {
                for (var j = 0u; j < 4u; j++) {
                    if (!keep[j]) { aux[A + e + j] = lerp1(aux[A + e + j], g[j] * g[j], w); }
                }
            }
            let u = select(direction(t, e, g), vec4<f32>(0.0), keep);
            acc = acc + dot(u, u);
        }
    }
    red[lid] = acc;
    reduce(lid);
    if (lid == 0u) { scratch[2u * blk.w + 1u] = red[0]; }
}

@compute @workgroup_size(WG)
fn ratio(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
         @builtin(local_invocation_index) lid: u32) {
    let t = wid.x + wid.y * nwg.x;
    let nt = ntensors();
    if (t >= nt) { return; }
    if ((hu(t, 0u) & ACTIVE) == 0u) { return; }
    let first = hu(t, 14u); let nb = hu(t, 15u);
    var pp = 0.0; var uu = 0.0;
    for (var j = lid; j < nb; j = j + WG) { pp = pp + scratch[2u * (first + j)]; }
    red[lid] = pp;
    reduce(lid);
    let psum = red[0];
    workgroupBarrier();
    for (var j = lid; j < nb; j = j + WG) { uu = uu + scratch[2u * (first + j) + 1u]; }
    red[lid] = uu;
    reduce(lid);
    if (lid == 0u) {
        let sn = hf(t, 11u);
        // torch takes these maxima with Python's max() on .item() values: max(a, x) is x only if x > a, so a
        // NaN RMS gives a (WGSL's max leaves NaN operands to the implementation)
        let rms_p = sqrt(psum) / sn;
        let alpha = select(hf(t, 5u), rms_p, rms_p > hf(t, 5u)) * hf(t, 3u);
        let clip = sqrt(red[0]) / (sn * hf(t, 6u));
        let denom = select(1.0, clip, clip > 1.0);
        scratch[(arrayLength(&scratch) - nt) + t] = -alpha / denom;
    }
}

@compute @workgroup_size(WG)
fn apply(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
         @builtin(local_invocation_index) lid: u32) {
    let blk = active_block(wid, nwg);
    if (blk.x == NONE) { return; }
    let t = blk.x;
    let f = hu(t, 0u);
    let nt = ntensors();
    let scale = scratch[(arrayLength(&scratch) - nt) + t];
    let decay = hf(t, 1u);
    for (var k = 0u; k < EPT; k++) {
        let i = blk.y + k * WG + lid;
        if (4u * i >= blk.z) { break; }
        let keep = tail(i, blk.z);
        let p0 = param[i];
        var g = grad_of(i, f);
        g = select(g, vec4<f32>(0.0), keep);
        var p = p0;
        if ((f & DECAY) != 0u) { p = p * decay; }
        p = p + scale * direction(t, elem0(blk, i), g);
        param[i] = select(p, p0, keep);
    }
}
