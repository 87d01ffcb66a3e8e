// The fused kernel matvec entry point of a variant, compiled after
// `product_tile.wgsl` (the tile machinery; see its header):
//     Y = K(X, Z) V      (X rows x depth, Z cols x depth, V cols x VC)
// without ever writing K. Bindings as the product's: a = X, b = Z, w = V,
// c = the partial sums. Descriptor fields as the product's, plus: w_off is
// V's element offset, c_rs V's row stride, c_cs = VC <= MV (the columns of V
// in use), c_off the partial sums' offset.
//
// A workgroup (wg.x = s of S = num_workgroups.x, wg.y = row tile) computes
// the K tiles of its TR rows against column tiles s, s + S, ... in
// registers, exactly as a product tile (statistic, expanded-form fallback,
// kernel function), and multiplies each into its rows of Y with the V tile
// staged in workgroup memory; each invocation accumulates its RM rows x MV
// columns and writes them to partial slot s WX + lx:
//     partial[(slot rows + i) VC + t],
// which one row-reduction dispatch sums over the S WX slots.

const MV: u32 = @@MV@@u;

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
                    }
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
