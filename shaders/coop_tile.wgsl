// The cooperative-matrix (tensor-core) tile machinery shared by the
// cooperative product (`product_coop.wgsl`) and fused kernel matvec
// (`kernel_matvec_coop.wgsl`): the inner products of a 64 x 64 tile,
// <a_i, b_j> for rows row0.. of A and col0.. of B, on 16 x 16 x 16 f16
// cooperative matrices accumulated in f32. Compiled after `enable f16;
// enable wgpu_cooperative_matrix;`, the f32 prelude and `problem.wgsl`; it
// needs a subgroup size of 32 (4 subgroups per workgroup of 128): where the
// device gives another, `coop_statistic` is NaN, which the tuner's check
// against the CPU rejects.
//
// f32 accuracy from f16 operands (the error-compensated split of Ootomo and
// Yokota, 2022): row i of A is scaled by 2^-e_i, where e_i is the binary
// exponent of its largest magnitude (frexp: the scaled row lies in
// (-1, 1), so no f16 overflow, and entries keep f16's precision relative to
// the row's largest), each scaled value x is split into hi = f16(x) and
// lo = f16(S (x - hi)) with S = 2^11, and per 16-deep slice the
// accumulator takes hi_a (S hi_b) + hi_a lo_b + lo_a hi_b, that is S times
// the product less the lo lo term, which is below f32's rounding. Scaling
// lo keeps it out of f16's subnormal range (a device that flushes f16
// subnormals loses at most 2^-25 of the row's largest per entry). The
// inner product is 2^(e_i + e_j - 11) times the accumulator. The error
// bound, and the host emulation that checks it, are in
// `tests/gpu/tensor_core_split.rs`; with SPLIT = false only hi_a hi_b is
// kept (about 2^-11 relative: an opt-in fast precision) and the inner
// product is 2^(e_i + e_j) times it.
//
// Layout: each subgroup computes a 32 x 32 block as 2 x 2 cooperative
// tiles. Per 32-deep slice the workgroup stages A's and B's slices (split,
// as f16) in workgroup memory; the tiles are loaded from there. The
// accumulators go through workgroup memory (`c_tile`) to the caller's
// epilogue, with the rows' exponents and squared norms (taken in a first
// pass over the rows, `coop_scan`) for the statistic (`coop_statistic`).

alias TileA = coop_mat16x16<f16, A>;
alias TileB = coop_mat16x16<f16, B>;
alias TileC = coop_mat16x16<f32, C>;

const TR: u32 = 64u;
const TC: u32 = 64u;
const KC: u32 = 32u;
const THREADS: u32 = 128u;
// Row stride of the staged slices (f16 elements; 16-byte aligned rows).
const SK: u32 = 40u;
// Row stride of the inner-product tile (f32 elements).
const SC: u32 = 68u;
const SPLIT: bool = @@SPLIT@@;
// The scale of the lo parts, 2^11, and its exponent.
const S: f32 = 2048.0;
const S_EXP: i32 = 11;

// Staged slices: hi_a, hi_b, and with SPLIT lo_a, S hi_b, lo_b.
var<workgroup> a_hi: array<f16, 2560>;
var<workgroup> b_hi: array<f16, 2560>;
var<workgroup> a_lo: array<f16, @@LO_LEN@@>;
var<workgroup> b_hs: array<f16, @@LO_LEN@@>;
var<workgroup> b_lo: array<f16, @@LO_LEN@@>;
var<workgroup> c_tile: array<f32, 4352>;
// Per tile row: the exponent e (as frexp gives it) and the squared norm.
var<workgroup> a_exp: array<i32, 64>;
var<workgroup> b_exp: array<i32, 64>;
var<workgroup> a_norm: array<f32, 64>;
var<workgroup> b_norm: array<f32, 64>;

// Largest magnitude (as its exponent) and squared norm of tile rows
// first..last (0.. TR: A's rows row0.., TR.. TR + TC: B's rows col0..), one
// subgroup per row, lanes striding the depth; then a barrier.
fn coop_scan(p: Problem, first: u32, last: u32, row0: u32, col0: u32, sg: u32, nsg: u32, lane: u32, sg_size: u32) {
    for (var r = first + sg; r < last; r += nsg) {
        var m = 0.0;
        var n2 = 0.0;
        for (var k = lane; k < p.depth; k += sg_size) {
            var v: f32;
            if (r < TR) {
                v = load_a(p, row0 + r, k);
            } else {
                v = load_b(p, col0 + r - TR, k);
            }
            m = max(m, abs(v));
            n2 = fma(v, v, n2);
        }
        m = subgroupMax(m);
        n2 = subgroupAdd(n2);
        if (lane == 0u) {
            let e = frexp(m).exp;
            if (r < TR) {
                a_exp[r] = e;
                a_norm[r] = n2;
            } else {
                b_exp[r - TR] = e;
                b_norm[r - TR] = n2;
            }
        }
    }
    workgroupBarrier();
}

// The accumulators of the tile's inner products (scaled as the header
// says) into c_tile, then a barrier. Called in uniform control flow (the
// cooperative operations need it) after `coop_scan` of the tile's rows;
// rows beyond the problem read zeros.
fn coop_inner_products(p: Problem, row0: u32, col0: u32, li: u32, sg: u32) {
    // Subgroup w < 4 takes block (w / 2, w % 2); should the device run
    // more subgroups, the extra ones repeat block 3.
    let w = min(sg, 3u);
    let wm = (w / 2u) * 32u;
    let wn = (w % 2u) * 32u;
    var c00: TileC = TileC();
    var c01: TileC = TileC();
    var c10: TileC = TileC();
    var c11: TileC = TileC();
    for (var k0 = 0u; k0 < p.depth; k0 += KC) {
        // Stage: consecutive invocations take consecutive depth.
        for (var t = 0u; t < 16u; t++) {
            let e = li + t * THREADS;
            let r = e / KC;
            let kk = e % KC;
            let at = r * SK + kk;
            let xa = ldexp(load_a(p, row0 + r, k0 + kk), -a_exp[r]);
            let xb = ldexp(load_b(p, col0 + r, k0 + kk), -b_exp[r]);
            let ha = f16(xa);
            let hb = f16(xb);
            a_hi[at] = ha;
            b_hi[at] = hb;
            if (SPLIT) {
                a_lo[at] = f16(S * (xa - f32(ha)));
                b_hs[at] = f16(S * f32(hb));
                b_lo[at] = f16(S * (xb - f32(hb)));
            }
        }
        workgroupBarrier();
        {
            for (var kk = 0u; kk < KC; kk += 16u) {
                let ia0 = wm * SK + kk;
                let ia1 = ia0 + 16u * SK;
                let ib0 = wn * SK + kk;
                let ib1 = ib0 + 16u * SK;
                let ah0 = coopLoadT<TileA>(&a_hi[ia0], SK);
                let ah1 = coopLoadT<TileA>(&a_hi[ia1], SK);
                let bh0 = coopLoad<TileB>(&b_hi[ib0], SK);
                let bh1 = coopLoad<TileB>(&b_hi[ib1], SK);
                if (SPLIT) {
                    // The small terms first, then hi_a (S hi_b).
                    let al0 = coopLoadT<TileA>(&a_lo[ia0], SK);
                    let al1 = coopLoadT<TileA>(&a_lo[ia1], SK);
                    let bl0 = coopLoad<TileB>(&b_lo[ib0], SK);
                    let bl1 = coopLoad<TileB>(&b_lo[ib1], SK);
                    let bs0 = coopLoad<TileB>(&b_hs[ib0], SK);
                    let bs1 = coopLoad<TileB>(&b_hs[ib1], SK);
                    c00 = coopMultiplyAdd(ah0, bl0, c00);
                    c00 = coopMultiplyAdd(al0, bh0, c00);
                    c00 = coopMultiplyAdd(ah0, bs0, c00);
                    c01 = coopMultiplyAdd(ah0, bl1, c01);
                    c01 = coopMultiplyAdd(al0, bh1, c01);
                    c01 = coopMultiplyAdd(ah0, bs1, c01);
                    c10 = coopMultiplyAdd(ah1, bl0, c10);
                    c10 = coopMultiplyAdd(al1, bh0, c10);
                    c10 = coopMultiplyAdd(ah1, bs0, c10);
                    c11 = coopMultiplyAdd(ah1, bl1, c11);
                    c11 = coopMultiplyAdd(al1, bh1, c11);
                    c11 = coopMultiplyAdd(ah1, bs1, c11);
                } else {
                    c00 = coopMultiplyAdd(ah0, bh0, c00);
                    c01 = coopMultiplyAdd(ah0, bh1, c01);
                    c10 = coopMultiplyAdd(ah1, bh0, c10);
                    c11 = coopMultiplyAdd(ah1, bh1, c11);
                }
            }
        }
        workgroupBarrier();
    }

    // The accumulators, each as a named value with named indices (naga's
    // SPIR-V writer needs them emitted before the store).
    {
        let s00 = c00;
        let s01 = c01;
        let s10 = c10;
        let s11 = c11;
        let i00 = wm * SC + wn;
        let i01 = i00 + 16u;
        let i10 = i00 + 16u * SC;
        let i11 = i10 + 16u;
        coopStoreT(s00, &c_tile[i00], SC);
        coopStoreT(s01, &c_tile[i01], SC);
        coopStoreT(s10, &c_tile[i10], SC);
        coopStoreT(s11, &c_tile[i11], SC);
    }
    workgroupBarrier();
}

// The statistic of tile entry (r, c), problem entry (gr, gc) in range, from
// c_tile: the inner product, or for distances the squared distance by the
// expanded form (`expanded_distance`, with its direct fallback). NaN where
// the device runs other than 4 subgroups (`nsg`).
fn coop_statistic(p: Problem, distance: bool, r: u32, c: u32, gr: u32, gc: u32, nsg: u32) -> f32 {
    var e = a_exp[r] + b_exp[c];
    if (SPLIT) {
        e -= S_EXP;
    }
    var s = ldexp(c_tile[r * SC + c], e);
    if (distance) {
        s = expanded_distance(p, gr, gc, s, a_norm[r], b_norm[c]);
    }
    if (nsg != 4u) {
        s = bitcast<f32>(0x7fc00000u);
    }
    return s;
}
