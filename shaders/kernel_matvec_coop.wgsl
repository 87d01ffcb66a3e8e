// The cooperative-matrix (tensor-core) fused kernel matvec entry point: the
// jobs of `kernel_matvec.wgsl` (Y = K(X, Z) V without writing K, and with
// PAIR also U = K(X, Z)^T W; the same bindings, descriptor fields and
// partial-sum layout, see its header), compiled after `coop_tile.wgsl` (the
// tile's inner products on cooperative matrices and their accuracy; see its
// header).
//
// A workgroup of 128 invocations (wg.x = s of S = num_workgroups.x, wg.y =
// row tile) takes the 64 rows row0.. of X against the column tiles s,
// s + S, ... of Z. Per column tile: the inner products into c_tile, then
// invocation li = 64 h + r (r < 64, h < 2) forms the kernel entries of row
// r at columns h, h + 2, ..., 62 + h (statistic and kernel as the product
// variants: `coop_statistic`, `kernel_of_statistic`) and accumulates them
// times V's rows (staged in workgroup memory) into its MV registers. At the
// end it writes them to partial slot 2 s + h:
//     partial[((2 s + h) rows + row0 + r) VC + t],
// which one row-reduction dispatch sums over the 2 S slots.
//
// PAIR: the kernel entries also go back into c_tile; invocation 64 h + j
// sums column j of the tile over rows 32 h .. 32 h + 31 against W's rows of
// the row tile (staged once), the two halves are added through c_tile, and
// the workgroup writes the tile's columns to slot wg.y after the Y slots:
//     partial[2 S rows VC + (wg.y cols + col0 + j) VC + t],
// which a second row reduction sums over the row tiles.

const MV: u32 = @@MV@@u;
const PAIR: bool = @@PAIR@@;

var<workgroup> v_tile: array<array<f32, MV>, TC>;
// W's rows of the row tile (PAIR; a token array otherwise).
var<workgroup> w_tile: array<array<f32, MV>, @@W_ROWS@@>;

@compute @workgroup_size(128, 1, 1)
fn main(
    @builtin(workgroup_id) wg: vec3<u32>,
    @builtin(local_invocation_index) li: u32,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(subgroup_id) sg: u32,
    @builtin(num_subgroups) nsg: u32,
    @builtin(subgroup_invocation_id) lane: u32,
    @builtin(subgroup_size) sg_size: u32,
) {
    let p = problems[wg.z];
    let row0 = wg.y * TR;
    // No early exit (the cooperative operations need uniform control
    // flow): rows beyond the problem read zeros and store nothing.
    let distance = p.kind == KIND_RBF || p.kind == KIND_LAPLACIAN;
    let vc = p.c_cs;
    let r = li % TR;
    let h = li / TR;
    let gr = row0 + r;
    var y: array<f32, MV>;
    // X's rows: once for every column tile.
    coop_scan(p, 0u, TR, row0, 0u, sg, nsg, lane, sg_size);
    if (PAIR) {
        for (var e = li; e < TR * MV; e += THREADS) {
            let i = e / MV;
            let t = e % MV;
            var val = 0.0;
            if (row0 + i < p.rows && t < vc) {
                val = w[p.u_off + (row0 + i) * p.c_rs + t];
            }
            w_tile[i][t] = val;
        }
    }
    for (var col0 = wg.x * TC; col0 < p.cols; col0 += nwg.x * TC) {
        // The V tile (zero beyond the problem and beyond VC).
        for (var e = li; e < TC * MV; e += THREADS) {
            let jj = e / MV;
            let t = e % MV;
            var val = 0.0;
            if (col0 + jj < p.cols && t < vc) {
                val = w[p.w_off + (col0 + jj) * p.c_rs + t];
            }
            v_tile[jj][t] = val;
        }
        // Z's rows (its barrier also publishes the V tile), the products.
        coop_scan(p, TR, TR + TC, row0, col0, sg, nsg, lane, sg_size);
        coop_inner_products(p, row0, col0, li, sg);
        for (var q = 0u; q < TC / 2u; q++) {
            let c = 2u * q + h;
            let gc = col0 + c;
            var kv = 0.0;
            if (gr < p.rows && gc < p.cols) {
                kv = kernel_of_statistic(p, coop_statistic(p, distance, r, c, gr, gc, nsg));
                for (var t = 0u; t < MV; t++) {
                    y[t] = fma(kv, v_tile[c][t], y[t]);
                }
            }
            if (PAIR) {
                c_tile[r * SC + c] = kv;
            }
        }
        if (PAIR) {
            workgroupBarrier();
            // Column r of the tile over rows 32 h ..: r is the column here.
            var u: array<f32, MV>;
            for (var i = 32u * h; i < 32u * h + 32u; i++) {
                let kv = c_tile[i * SC + r];
                for (var t = 0u; t < MV; t++) {
                    u[t] = fma(kv, w_tile[i][t], u[t]);
                }
            }
            workgroupBarrier();
            if (h == 1u) {
                for (var t = 0u; t < MV; t++) {
                    c_tile[r * SC + t] = u[t];
                }
            }
            workgroupBarrier();
            let gc = col0 + r;
            if (h == 0u && gc < p.cols) {
                let base = p.c_off + nwg.x * 2u * p.rows * vc;
                for (var t = 0u; t < vc; t++) {
                    c[base + (wg.y * p.cols + gc) * vc + t] = u[t] + c_tile[r * SC + t];
                }
            }
        }
        // The next tile overwrites v_tile, c_tile and the staged slices.
        workgroupBarrier();
    }
    if (gr < p.rows) {
        let slot = wg.x * 2u + h;
        for (var t = 0u; t < vc; t++) {
            c[p.c_off + (slot * p.rows + gr) * vc + t] = y[t];
        }
    }
}
