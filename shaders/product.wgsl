// The product entry point of a variant, compiled after `product_tile.wgsl`
// (the tile machinery; see its header): one TR x TC tile of C per workgroup.
//
// LOWER problems (a symmetric C = A' A'^T, rows = cols: the weighted Gram)
// run only the tiles that hold an element on or below the diagonal, row
// band by row band: workgroup x number t of the grid is tile column t of the
// first band with fewer than t tiles before it (`lower_tile`). An invocation
// stores its elements (i, j) with j <= i at (i, j) and at (j, i), so C comes
// out whole and exactly symmetric, at about half the product's work.

// Row band and tile column of workgroup `t` of a LOWER problem: band `b`
// holds the tiles whose first column is at most its last row, at most all
// tile columns. Past the last band: a band beyond the rows (the workgroup
// leaves).
fn lower_tile(p: Problem, t: u32) -> vec2<u32> {
    let bands = (p.rows + TR - 1u) / TR;
    let columns = (p.cols + TC - 1u) / TC;
    var left = t;
    for (var b = 0u; b < bands; b++) {
        let here = min(((b + 1u) * TR + TC - 1u) / TC, columns);
        if (left < here) {
            return vec2<u32>(b, left);
        }
        left -= here;
    }
    return vec2<u32>(bands, 0u);
}

@compute @workgroup_size(@@WX@@, @@WY@@, 1)
fn main(
    @builtin(workgroup_id) wg: vec3<u32>,
    @builtin(local_invocation_id) lid: vec3<u32>,
    @builtin(local_invocation_index) li: u32,
) {
    let p = problems[wg.z];
    let lower = (p.flags & FLAG_LOWER) != 0u;
    var tile = vec2<u32>(wg.y, wg.x);
    if (lower) {
        tile = lower_tile(p, wg.x);
    }
    let row0 = tile.x * TR;
    let col0 = tile.y * TC;
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
            if (gc >= p.cols || (lower && gc > gr)) {
                break;
            }
            let value = statistic_of(p, distance, gr, gc, @@ACC_AT@@, @@NA_AT@@, @@NB_AT@@);
            store_c(p, gr, gc, value);
            if (lower && gc < gr) {
                store_c(p, gc, gr, value);
            }
        }
    }
}
