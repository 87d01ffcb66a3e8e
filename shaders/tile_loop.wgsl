// Fragment of the product templates (`product.wgsl`, `kernel_matvec.wgsl`
// insert it where they say TILE_LOOP): the register accumulators, the depth
// loop over staged KC-deep slices (direct, expanded or inner-product steps,
// one or two stages) and the packing of the accumulators for the output
// loop. `src/gpu/variants.rs` fills its fields per variant.
@@DECLS@@
@@PROLOGUE@@
    for (var k0 = 0u; k0 < p.depth; k0 += KC) {
@@PRE@@
        if (direct) {
            for (var kk = 0u; kk < KC; kk++) {
@@STEP_DIRECT@@
            }
        } else if (distance) {
            for (var kk = 0u; kk < KC; kk++) {
@@STEP_EXPANDED@@
            }
        } else {
            for (var kk = 0u; kk < KC; kk++) {
@@STEP_INNER@@
            }
        }
@@POST@@
    }

@@PACK@@
