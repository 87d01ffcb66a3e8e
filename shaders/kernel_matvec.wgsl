// The fused kernel matvec entry point of a variant, compiled after
// `product_tile.wgsl` (the tile machinery; see its header):
//     Y = K(X, Z) V      (X rows x depth, Z cols x depth, V cols x VC)
// without ever writing K, and with PAIR also
//     U = K(X, Z)^T W    (W rows x VC)
// from the same kernel entries. Bindings as the product's: a = X, b = Z,
// w = V (and W), c = the partial sums. Descriptor fields as the product's,
// plus: w_off is V's element offset, u_off W's, c_rs the row stride of V
// and W, c_cs = VC <= MV (the columns in use), c_off the partial sums' offset.
//
// A workgroup (wg.x = s of S = num_workgroups.x, wg.y = row tile) computes
// the K tiles of its TR rows against column tiles s, s + S, ... in
// registers, exactly as a product tile (statistic, expanded-form fallback,
// kernel function), and multiplies each into its rows of Y with the V tile
// staged in workgroup memory; each invocation accumulates its RM rows x MV
// columns and writes them to partial slot s WX + lx:
//     partial[(slot rows + i) VC + t],
// which one row-reduction dispatch sums over the S WX slots.
//
// PAIR: each invocation also sums its RN columns of K^T W over its RM rows
// (W's rows of the row tile held in registers); the WY invocations of a
// lane column add theirs into workgroup memory one lane row at a time, and
// the workgroup writes the tile's columns to slot wg.y after the Y slots:
//     partial[S WX rows VC + (wg.y cols + j) VC + t],
// which a second row reduction sums over the row tiles.

const MV: u32 = @@MV@@u;
const PAIR: bool = @@PAIR@@;

var<workgroup> v_tile: array<array<T, MV>, TC>;

@compute @workgroup_size(@@WX@@, @@WY@@, 1)
fn main(
    @builtin(workgroup_id) wg: vec3<u32>,
    @builtin(local_invocation_id) lid: vec3<u32>,
    @builtin(local_invocation_index) li: u32,
    @builtin(num_workgroups) nwg: vec3<u32>,
) {
    let p = problems[wg.z];
    let row0 = wg.y * TR;
    if (row0 >= p.rows) {
        return;
    }
    let distance = p.kind == KIND_RBF || p.kind == KIND_LAPLACIAN;
    let direct = distance && !EXPANDED;
    let lx = lid.x;
    let ly = lid.y;
    let vc = p.c_cs;
    var y: array<T, @@RM_MV@@>;
    // W's rows of this invocation (PAIR): the same for every column tile.
    var wr: array<T, @@PAIR_RM_MV@@>;
    if (PAIR) {
        for (var r = 0u; r < RM; r++) {
            let pu = r / UNIT;
            let gr = row0 + (@@UROW@@) * UNIT + r % UNIT;
            if (gr < p.rows) {
                for (var t = 0u; t < vc; t++) {
                    wr[r * MV + t] = w[p.u_off + gr * p.c_rs + t];
                }
            }
        }
    }
    for (var col0 = wg.x * TC; col0 < p.cols; col0 += nwg.x * TC) {
        // The V tile (zero beyond the problem and beyond VC).
        for (var e = li; e < TC * MV; e += THREADS) {
            let jj = e / MV;
            let t = e % MV;
            var val = T(0.0);
            if (col0 + jj < p.cols && t < vc) {
                val = w[p.w_off + (col0 + jj) * p.c_rs + t];
            }
            v_tile[jj][t] = val;
        }
@@TILE_LOOP@@
        var yt: array<T, @@PAIR_RN_MV@@>;
        for (var r = 0u; r < RM; r++) {
            let pu = r / UNIT;
            let gr = row0 + (@@UROW@@) * UNIT + r % UNIT;
            for (var q = 0u; q < RN; q++) {
                let qu = q / UNIT;
                let jj = (@@UCOL@@) * UNIT + q % UNIT;
                let gc = col0 + jj;
                if (gr < p.rows && gc < p.cols) {
                    let kv = kernel_of_statistic(p, statistic_of(p, distance, gr, gc, @@ACC_AT@@, @@NA_AT@@, @@NB_AT@@));
                    for (var t = 0u; t < MV; t++) {
                        y[r * MV + t] = fma(kv, v_tile[jj][t], y[r * MV + t]);
                        if (PAIR) {
                            yt[q * MV + t] = fma(kv, wr[r * MV + t], yt[q * MV + t]);
                        }
                    }
                }
            }
        }
        if (PAIR) {
            // The lane rows' column sums into v_tile (read no more this
            // tile), then out to the row tile's slot.
            workgroupBarrier();
            for (var round = 0u; round < WY; round++) {
                if (ly == round) {
                    for (var q = 0u; q < RN; q++) {
                        let qu = q / UNIT;
                        let jj = (@@UCOL@@) * UNIT + q % UNIT;
                        for (var t = 0u; t < MV; t++) {
                            v_tile[jj][t] = select(v_tile[jj][t], T(0.0), round == 0u) + yt[q * MV + t];
                        }
                    }
                }
                workgroupBarrier();
            }
            let base = p.c_off + nwg.x * WX * p.rows * vc;
            for (var e = li; e < TC * MV; e += THREADS) {
                let jj = e / MV;
                let t = e % MV;
                if (col0 + jj < p.cols && t < vc) {
                    c[base + (wg.y * p.cols + col0 + jj) * vc + t] = v_tile[jj][t];
                }
            }
        }
        // The next tile overwrites v_tile and the staged slices.
        workgroupBarrier();
    }
    let slot = wg.x * WX + lx;
    for (var r = 0u; r < RM; r++) {
        let pu = r / UNIT;
        let gr = row0 + (@@UROW@@) * UNIT + r % UNIT;
        if (gr < p.rows) {
            for (var t = 0u; t < vc; t++) {
                c[p.c_off + (slot * p.rows + gr) * vc + t] = y[r * MV + t];
            }
        }
    }
}
