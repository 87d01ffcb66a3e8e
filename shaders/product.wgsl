// The product entry point of a variant, compiled after `product_tile.wgsl`
// (the tile machinery; see its header): one TR x TC tile of C per workgroup.

@compute @workgroup_size(@@WX@@, @@WY@@, 1)
fn main(
    @builtin(workgroup_id) wg: vec3<u32>,
    @builtin(local_invocation_id) lid: vec3<u32>,
    @builtin(local_invocation_index) li: u32,
) {
    let p = problems[wg.z];
    let row0 = wg.y * TR;
    let col0 = wg.x * TC;
    // Whole workgroup leaves together (uniform), before any barrier.
    if (row0 >= p.rows || col0 >= p.cols) {
        return;
    }
    let distance = p.kind == KIND_RBF || p.kind == KIND_LAPLACIAN;
    let direct = distance && !EXPANDED;
    let lx = lid.x;
    let ly = lid.y;
@@TILE_LOOP@@
    // Rows and columns of an invocation grow with r and q, so the first
    // index beyond the problem ends the loop.
    for (var r = 0u; r < RM; r++) {
        let pu = r / UNIT;
        let gr = row0 + (@@UROW@@) * UNIT + r % UNIT;
        if (gr >= p.rows) {
            break;
        }
        for (var q = 0u; q < RN; q++) {
            let qu = q / UNIT;
            let gc = col0 + (@@UCOL@@) * UNIT + q % UNIT;
            if (gc >= p.cols) {
                break;
            }
            store_c(p, gr, gc, statistic_of(p, distance, gr, gc, @@ACC_AT@@, @@NA_AT@@, @@NB_AT@@));
        }
    }
}
