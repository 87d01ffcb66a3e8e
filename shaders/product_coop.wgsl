// The cooperative-matrix (tensor-core) product entry point: the same
// problems as `product.wgsl` (C = f(s(A', B')), see `product_tile.wgsl`'s
// header), in f32, compiled after `coop_tile.wgsl` (the tile's inner
// products on cooperative matrices and their accuracy; see its header).
// A workgroup of 128 invocations computes a 64 x 64 tile of C; the
// epilogue applies the statistic and the kernel exactly as the other
// variants do (`store_c`).

@compute @workgroup_size(128, 1, 1)
fn main(
    @builtin(workgroup_id) wg: vec3<u32>,
    @builtin(local_invocation_index) li: u32,
    @builtin(subgroup_id) sg: u32,
    @builtin(num_subgroups) nsg: u32,
    @builtin(subgroup_invocation_id) lane: u32,
    @builtin(subgroup_size) sg_size: u32,
) {
    let p = problems[wg.z];
    let row0 = wg.y * TR;
    let col0 = wg.x * TC;
    // No early exit for a tile beyond a smaller problem of the batch (the
    // cooperative operations need uniform control flow): its loads read
    // zeros and it stores nothing.
    let distance = p.kind == KIND_RBF || p.kind == KIND_LAPLACIAN;
    coop_scan(p, 0u, TR + TC, row0, col0, sg, nsg, lane, sg_size);
    coop_inner_products(p, row0, col0, li, sg);

    // Epilogue: consecutive invocations take consecutive columns.
    for (var t = 0u; t < 32u; t++) {
        let e = li + t * THREADS;
        let r = e / TC;
        let c = e % TC;
        let gr = row0 + r;
        let gc = col0 + c;
        if (gr < p.rows && gc < p.cols) {
            store_c(p, gr, gc, coop_statistic(p, distance, r, c, gr, gc, nsg));
        }
    }
}
