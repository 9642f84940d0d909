// The kernels of rlx_gpu.qat over float32 tensors: fake quantization (affine per tensor or per channel, fp8), its
// straight-through and LSQ gradients, and the min/max observers. The functions are qat.wgsl's.
//   args: a QatArgs (declared in rlx_gpu/addons/qat/kernels.py; the runtime appends its struct): n (elements),
//         channels C, inner (elements per channel run: channel of element e = (e / inner) % C), flags (PER_CHANNEL,
//         E5M2, SATURATE, MOVING, SYMMETRIC), qmin, qmax, grad_factor, averaging (constant), eps, sym_zp (the zero
//         point of a symmetric scheme)
//   qp:   per channel a QParam (scale, inv_scale, zero_point; declared in kernels.py as QPARAM)
// #include "qat.wgsl"

override WG: u32 = 256u;
override EPT: u32 = 4u;

const PER_CHANNEL: u32 = 1u;
const E5M2: u32 = 2u;
const SATURATE: u32 = 4u;
const MOVING: u32 = 8u;
const SYMMETRIC: u32 = 16u;
const NOFUSE: u32 = 0x80000000u;  // (never set: rounded())

@group(0) @binding(0) var<storage, read> args: QatArgs;
@group(0) @binding(1) var<storage, read_write> qp: array<QParam>;
@group(0) @binding(2) var<storage, read> xin: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read_write> yout: array<vec4<f32>>;
@group(0) @binding(4) var<storage, read> dyin: array<vec4<f32>>;
@group(0) @binding(5) var<storage, read_write> part: array<vec2<f32>>;
@group(0) @binding(6) var<storage, read_write> mm: array<atomic<u32>>;   // per channel: ordered min, max bits
@group(0) @binding(7) var<storage, read_write> obs: array<vec2<f32>>;    // per channel: observed (min, max)

fn n_elems() -> u32 { return args.n; }
fn flag(f: u32) -> bool { return (args.flags & f) != 0u; }
fn chan(e: u32) -> u32 { return (e / args.inner) % args.channels; }
fn base(wid: vec3<u32>, nwg: vec3<u32>, lid: u32) -> u32 { return (wid.x + wid.y * nwg.x) * WG * EPT + lid; }

// One element through the affine fake quantizer; `mask` for the straight-through gradient.
fn fq1(v: f32, e: u32) -> f32 {
    let p = qp[chan(e)];
    return fake_quant(v, p.scale, p.inv_scale, p.zero_point, args.qmin, args.qmax, flag(PER_CHANNEL));
}
fn mask1(v: f32, e: u32) -> bool {
    let p = qp[chan(e)];
    return fq_mask(v, p.inv_scale, p.zero_point, args.qmin, args.qmax, flag(PER_CHANNEL));
}

@compute @workgroup_size(WG)
fn fq_affine(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
             @builtin(local_invocation_index) lid: u32) {
    for (var k = 0u; k < EPT; k++) {
        let i = base(wid, nwg, lid) + k * WG;
        if (4u * i >= n_elems()) { return; }
        let v = xin[i];
        let e = 4u * i;
        yout[i] = vec4<f32>(fq1(v.x, e), fq1(v.y, e + 1u), fq1(v.z, e + 2u), fq1(v.w, e + 3u));
    }
}

@compute @workgroup_size(WG)
fn fq_fp8(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
          @builtin(local_invocation_index) lid: u32) {
    let e5 = flag(E5M2);
    let sat = flag(SATURATE);
    for (var k = 0u; k < EPT; k++) {
        let i = base(wid, nwg, lid) + k * WG;
        if (4u * i >= n_elems()) { return; }
        let v = xin[i];
        yout[i] = vec4<f32>(fake_quant_fp8(v.x, e5, sat), fake_quant_fp8(v.y, e5, sat), fake_quant_fp8(v.z, e5, sat),
                         fake_quant_fp8(v.w, e5, sat));
    }
}

// -- the same two kernels, vectorised (kernels.py's FAST picks them; the same bits) ------------------------------
// A thread of a block wholly inside the tensor loads its four vec4s before it computes (four loads in flight, as
// the copy kernel has), and each vec4's channel comes from stepping the thread's position, not from two integer
// divisions per element (chan(e)): (c, r) with element e = q * inner + r and c = q % channels.
struct Chan { c: u32, r: u32 }
fn chan_at(e: u32) -> Chan { let q = e / args.inner; return Chan(q % args.channels, e - q * args.inner); }
fn chan_step(p: Chan, d: Chan) -> Chan {  // (d: chan_at of the stride)
    var c = p.c + d.c;
    var r = p.r + d.r;
    if (r >= args.inner) { r -= args.inner; c += 1u; }
    if (c >= args.channels) { c -= args.channels; }
    return Chan(c, r);
}
// The vec4 of elements e .. e + 3 at position p through the affine fake quantizer (one channel's parameters where
// the four lanes share it, else fq1's per lane).
fn fq4(v: vec4<f32>, e: u32, p: Chan) -> vec4<f32> {
    if (p.r + 3u >= args.inner) { return vec4<f32>(fq1(v.x, e), fq1(v.y, e + 1u), fq1(v.z, e + 2u), fq1(v.w, e + 3u)); }
    let s = qp[p.c];
    let lo = args.qmin;
    let hi = args.qmax;
    let pc = flag(PER_CHANNEL);
    let sc = s.scale; let inv = s.inv_scale; let zp = s.zero_point;
    return vec4<f32>(fake_quant(v.x, sc, inv, zp, lo, hi, pc), fake_quant(v.y, sc, inv, zp, lo, hi, pc),
                     fake_quant(v.z, sc, inv, zp, lo, hi, pc), fake_quant(v.w, sc, inv, zp, lo, hi, pc));
}
fn fp8_4(v: vec4<f32>, e5: bool, sat: bool) -> vec4<f32> {
    return vec4<f32>(fake_quant_fp8(v.x, e5, sat), fake_quant_fp8(v.y, e5, sat), fake_quant_fp8(v.z, e5, sat),
                     fake_quant_fp8(v.w, e5, sat));
}
// Whether the workgroup's block lies wholly inside the tensor (its threads then load before they compute).
fn whole_block(wid: vec3<u32>, nwg: vec3<u32>) -> bool {
    return EPT == 4u && 4u * (base(wid, nwg, 0u) + WG * EPT) <= n_elems();
}
@compute @workgroup_size(WG)
fn fq_affine_v(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
               @builtin(local_invocation_index) lid: u32) {
    let i0 = base(wid, nwg, lid);
    let d = chan_at(4u * WG);
    var p = chan_at(4u * i0);
    if (whole_block(wid, nwg)) {
        var v: array<vec4<f32>, 4>;
        for (var k = 0u; k < 4u; k++) { v[k] = xin[i0 + k * WG]; }
        for (var k = 0u; k < 4u; k++) {
            yout[i0 + k * WG] = fq4(v[k], 4u * (i0 + k * WG), p);
            p = chan_step(p, d);
        }
        return;
    }
    for (var k = 0u; k < EPT; k++) {
        let i = i0 + k * WG;
        if (4u * i >= n_elems()) { return; }
        yout[i] = fq4(xin[i], 4u * i, p);
        p = chan_step(p, d);
    }
}
@compute @workgroup_size(WG)
fn fq_fp8_v(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
            @builtin(local_invocation_index) lid: u32) {
    let e5 = flag(E5M2);
    let sat = flag(SATURATE);
    let i0 = base(wid, nwg, lid);
    if (whole_block(wid, nwg)) {
        var v: array<vec4<f32>, 4>;
        for (var k = 0u; k < 4u; k++) { v[k] = xin[i0 + k * WG]; }
        for (var k = 0u; k < 4u; k++) { yout[i0 + k * WG] = fp8_4(v[k], e5, sat); }
        return;
    }
    for (var k = 0u; k < EPT; k++) {
        let i = i0 + k * WG;
        if (4u * i >= n_elems()) { return; }
        yout[i] = fp8_4(xin[i], e5, sat);
    }
}

// dx = dy * mask (affine) or dy where fp8_mask (flags E5M2/SATURATE with qmin > qmax marking fp8)
@compute @workgroup_size(WG)
fn ste(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
       @builtin(local_invocation_index) lid: u32) {
    let fp8 = args.qmin > args.qmax;
    for (var k = 0u; k < EPT; k++) {
        let i = base(wid, nwg, lid) + k * WG;
        if (4u * i >= n_elems()) { return; }
        let v = xin[i];
        let e = 4u * i;
        if (fp8) {  // (torch.clamp's backward selects: a masked gradient is +0)
            let m = vec4<bool>(fp8_mask(v.x, flag(E5M2), flag(SATURATE)), fp8_mask(v.y, flag(E5M2), flag(SATURATE)),
                               fp8_mask(v.z, flag(E5M2), flag(SATURATE)), fp8_mask(v.w, flag(E5M2), flag(SATURATE)));
            yout[i] = select(vec4<f32>(0.0), dyin[i], m);
        } else {  // (torch multiplies by the mask: a masked -g is -0, a masked NaN stays NaN)
            let m = vec4<bool>(mask1(v.x, e), mask1(v.y, e + 1u), mask1(v.z, e + 2u), mask1(v.w, e + 3u));
            yout[i] = dyin[i] * select(vec4<f32>(0.0), vec4<f32>(1.0), m);
        }
    }
}

// LSQ (torch's _fake_quantize_learnable_per_tensor_affine backward): dx into yout, per-workgroup sums of the
// per-element scale and zero-point gradients into part (summed by lsq_sum). qp[0] = (scale, 1/scale, zp) with
// zp torch's backward zero point, int(clamp(zero_point + 0.5)).
var<workgroup> red: array<vec2<f32>, WG>;
fn lsq1(xv: f32, g: f32) -> vec3<f32> {  // (dx, dscale, dzero_point) of one element
    let p = qp[0];
    let qmin = args.qmin;
    let qmax = args.qmax;
    let gf = args.grad_factor;
    let qf = round(p.zero_point + xv * p.inv_scale);
    let bad = fq_bad(qf, true);
    let lo = bad || qf < qmin;
    let hi = !bad && qf > qmax;
    let inside = !lo && !hi;
    let dx = g * select(0.0, 1.0, inside);  // (torch multiplies by the mask: a masked -g gives -0)
    if (inside) {
        let xfq = (fq_clamp(qf, qmin, qmax) - p.zero_point) * p.scale;
        return vec3<f32>(dx, g * (xfq - xv) * p.inv_scale * gf, 0.0);
    }
    let ds = select(g * (qmax - p.zero_point), g * (qmin - p.zero_point), lo) * gf;
    return vec3<f32>(dx, ds, g * -1.0 * p.scale * gf);
}
@compute @workgroup_size(WG)
fn lsq(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
       @builtin(local_invocation_index) lid: u32) {
    var acc = vec2<f32>(0.0);
    for (var k = 0u; k < EPT; k++) {
        let i = base(wid, nwg, lid) + k * WG;
        if (4u * i < n_elems()) {
            let v = xin[i];
            let g = dyin[i];
            var d = vec4<f32>(0.0);
            for (var l = 0u; l < 4u; l++) {
                if (4u * i + l < n_elems()) {
                    let r = lsq1(v[l], g[l]);
                    d[l] = r.x;
                    acc = acc + r.yz;
                }
            }
            yout[i] = d;
        }
    }
    red[lid] = acc;
    for (var s = WG / 2u; s > 0u; s = s / 2u) {
        workgroupBarrier();
        if (lid < s) { red[lid] = red[lid] + red[lid + s]; }
    }
    if (lid == 0u) { part[wid.x + wid.y * nwg.x] = red[0]; }
}
@compute @workgroup_size(WG)
fn lsq_sum(@builtin(local_invocation_index) lid: u32) {  // one workgroup: part[0] = the sum of args.n partials
    var acc = vec2<f32>(0.0);
    for (var j = lid; j < args.n; j = j + WG) { acc = acc + part[j]; }
    red[lid] = acc;
    for (var s = WG / 2u; s > 0u; s = s / 2u) {
        workgroupBarrier();
        if (lid < s) { red[lid] = red[lid] + red[lid + s]; }
    }
    if (lid == 0u) { part[0] = red[0]; }
}

// -- observers --------------------------------------------------------------------------------------------------
// Float order as u32 order: negative floats bit-flipped, positive ones with the sign bit set. A NaN maps to
// 0xffffffff in both slots (min slot inverted), so it wins the max and the min and reads back as NaN.
fn ord(v: f32) -> u32 {
    let b = bitcast<u32>(v);
    if (fq_isnan(v)) { return 0xffffffffu; }
    return select(b | 0x80000000u, ~b, (b >> 31u) == 1u);
}
fn unord(u: u32) -> f32 {
    if (u == 0xffffffffu) { return bitcast<f32>(u & 0x7fffffffu); }  // (a NaN; Tint refuses NaN constants)
    return bitcast<f32>(select(~u, u & 0x7fffffffu, (u >> 31u) == 1u));
}
// torch rounds the moving average's product before the add (two tensor ops); a GPU compiler may fuse `a + k * d`
// into one FMA (SPIR-V without NoContraction lets NVIDIA's driver do it: a last bit apart on the H200). The
// product passes through its bits and a flag word the host never sets (NOFUSE), which no compiler can see through.
fn rounded(v: f32) -> f32 { return bitcast<f32>(bitcast<u32>(v) | (args.flags & NOFUSE)); }
fn nan_of(a: f32, b: f32) -> f32 { return select(b, a, fq_isnan(a)); }  // whichever is NaN (torch.min/max's)
// mm[2c] holds ~ord(min) (so atomicMax takes the min), mm[2c + 1] ord(max); both 0 = nothing seen.
@compute @workgroup_size(WG)
fn obs_minmax(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
              @builtin(local_invocation_index) lid: u32) {
    for (var k = 0u; k < EPT; k++) {
        let i = base(wid, nwg, lid) + k * WG;
        if (4u * i >= n_elems()) { return; }
        let v = xin[i];
        for (var l = 0u; l < 4u; l++) {
            let e = 4u * i + l;
            if (e < n_elems()) {
                let o = ord(v[l]);
                let c = chan(e);
                atomicMax(&mm[2u * c], select(~o, o, o == 0xffffffffu));
                atomicMax(&mm[2u * c + 1u], o);
            }
        }
    }
}
// One thread per channel: fold this batch's min/max into the observed ones (plain or moving average), clear the
// slots, and write the channel's qparams (torch.ao's calculate_qparams).
@compute @workgroup_size(WG)
fn obs_update(@builtin(global_invocation_id) gid: vec3<u32>) {
    let c = gid.x;
    if (c >= args.channels) { return; }
    let a = atomicLoad(&mm[2u * c]);
    let b = atomicLoad(&mm[2u * c + 1u]);
    atomicStore(&mm[2u * c], 0u);
    atomicStore(&mm[2u * c + 1u], 0u);
    var cur = obs[c];
    if (b != 0u) {
        let mn = unord(select(~a, a, a == 0xffffffffu));
        let mx = unord(b);
        let first = bitcast<u32>(cur.x) == 0x7f800000u && bitcast<u32>(cur.y) == 0xff800000u;
        if (first) {
            cur = vec2<f32>(mn, mx);
        } else if (flag(MOVING)) {
            let k = args.averaging;
            cur = vec2<f32>(cur.x + rounded(k * (mn - cur.x)), cur.y + rounded(k * (mx - cur.y)));
        } else {
            cur = vec2<f32>(select(min(mn, cur.x), nan_of(mn, cur.x), fq_isnan(mn) || fq_isnan(cur.x)),
                            select(max(mx, cur.y), nan_of(mx, cur.y), fq_isnan(mx) || fq_isnan(cur.y)));
        }
        obs[c] = cur;
    }
    let qmin = args.qmin;
    let qmax = args.qmax;
    let eps = args.eps;
    if (bitcast<u32>(cur.x) == 0x7f800000u && bitcast<u32>(cur.y) == 0xff800000u) {
        qp[c] = QParam(1.0, 1.0, 0.0, 0.0);  // nothing observed yet (torch: scale 1, zero point 0)
        return;
    }
    let mn = select(min(cur.x, 0.0), cur.x, fq_isnan(cur.x));
    let mx = select(max(cur.y, 0.0), cur.y, fq_isnan(cur.y));
    var scale: f32;
    var zp: f32;
    if (flag(SYMMETRIC)) {
        let amax = select(max(-mn, mx), nan_of(mn, mx), fq_isnan(mn) || fq_isnan(mx));
        scale = fq_div(amax, (qmax - qmin) / 2.0);
        zp = args.sym_zp;
    } else {
        scale = fq_div(mx - mn, qmax - qmin);
        zp = 0.0;
    }
    scale = select(max(scale, eps), scale, fq_isnan(scale));
    if (!flag(SYMMETRIC)) {
        let r = round(fq_div(mn, scale));
        zp = fq_clamp(qmin - select(r, 0.0, fq_isnan(r)), qmin, qmax);
    }
    qp[c] = QParam(scale, fq_div(1.0, scale), zp, 0.0);
}
