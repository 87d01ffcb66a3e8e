//! The catalogue of product-shader variants and the generator that writes
//! each one's WGSL from the template `shaders/product.wgsl`.
//!
//! Every variant computes the same thing (`C = f(s(A', B'))`, see the
//! template's header) to the same tolerance; they differ in how the work is
//! laid out on a GPU, which decides their speed on a given adapter:
//! - the workgroup shape `WX x WY` and the register block `RM x RN` of each
//!   invocation, so a tile of `TR = WY RM` rows by `TC = WX RN` columns;
//! - the depth `KC` staged in workgroup memory per step, in one or two
//!   stages (double buffering: the next slice loads while this one is used);
//! - the vector width of workgroup loads (`vec4` or scalars), and of global
//!   loads (`vec4` where the rows allow it, see `vec4_loads`, or scalars);
//! - the lane layout: *blocked* (an invocation owns `RM` consecutive rows)
//!   or *strided* (its rows are `WY` apart, so neighbouring invocations read
//!   neighbouring workgroup-memory words);
//! - the distance form: *direct* `sum (a - b)^2` or *expanded*
//!   `|a|^2 + |b|^2 - 2 <a, b>` with direct recomputation where it cancels;
//! - the staging order: consecutive invocations load consecutive depth
//!   (coalesced for row-major operands) or consecutive rows (for
//!   transposed operands), and the staged rows padded or not (with
//!   consecutive depth, unpadded rows put every store of a group of
//!   invocations in one workgroup-memory bank);
//! - the arithmetic unit: scalar fused multiply-adds on every adapter, or
//!   (f32) 16 x 16 x 16 f16 cooperative matrices with an f32 accumulator
//!   (tensor cores, `shaders/coop_tile.wgsl` with `product_coop.wgsl` and
//!   `kernel_matvec_coop.wgsl`) where the device has them:
//!   with f32 accuracy by the split of each operand into two f16 parts, or,
//!   opted into by name only, one f16 product (about 2^-11 relative).
//!
//! A shape class (`ShapeClass`: operation, precision, statistic, operand
//! transposition, output and depth buckets) is what decides which variant is
//! fastest. The autotuner (`tuner.rs`) times the applicable variants on the
//! adapter and keeps the fastest per shape class; the tests run every
//! variant against the CPU `f64` path.
//!
//! The file runs past 600 lines because the catalogue and the generator
//! that writes each variant's WGSL read as one: every field of a variant is
//! a constant the generator substitutes into the templates, and the unit
//! tests of both stay beside them.

use super::problem::KernelCode;
use super::LOOP_BUDGET;
use crate::precision::Precision;

/// The lane layout of an invocation's register block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LaneLayout {
    /// Rows `RM ly ..`, columns `RN lx ..` (consecutive).
    Blocked,
    /// Row units `ly, ly + WY, ..`, column units `lx, lx + WX, ..`.
    Strided,
}

/// How a variant forms the squared distance of the RBF and Laplacian kernels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DistanceForm {
    /// `sum_k (a_k - b_k)^2`.
    Direct,
    /// `|a|^2 + |b|^2 - 2 <a, b>`, recomputed directly where it cancels.
    Expanded,
}

/// The arithmetic unit of a variant's inner products.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Core {
    /// Scalar fused multiply-adds (every adapter; `product_tile.wgsl`).
    Simt,
    /// 16 x 16 x 16 cooperative matrices, f16 operands and an f32
    /// accumulator (`coop_tile.wgsl`: the product and the fused kernel
    /// matvec; devices with
    /// `EXPERIMENTAL_COOPERATIVE_MATRIX` and that configuration): `split`
    /// for f32 accuracy (three f16 products per slice), otherwise one f16
    /// product, a precision the tuner never chooses by itself.
    Cooperative {
        /// Each operand as two f16 parts (f32 accuracy).
        split: bool,
    },
}

/// One product-shader variant (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProductVariant {
    /// Stable name, used by the tuner's cache and `GRAMIAN_VARIANT`.
    pub name: &'static str,
    /// Element type.
    pub precision: Precision,
    /// Workgroup columns (invocations along the output's columns).
    pub wx: u32,
    /// Workgroup rows.
    pub wy: u32,
    /// Rows of C per invocation.
    pub rm: u32,
    /// Columns of C per invocation.
    pub rn: u32,
    /// Depth staged per step.
    pub kc: u32,
    /// Vector width of the workgroup-memory words (1 or 4).
    pub unit: u32,
    /// Lane layout.
    pub layout: LaneLayout,
    /// Distance form.
    pub form: DistanceForm,
    /// Consecutive invocations stage consecutive rows (true) or depth (false).
    pub rows_fast: bool,
    /// Workgroup-memory stages (1, or 2 for double buffering).
    pub stages: u32,
    /// The staged slices' rows padded by one unit, so that the staging
    /// stores of consecutive invocations (consecutive depth) fall in
    /// different workgroup-memory banks instead of one.
    pub pad: bool,
    /// Global loads of A and B four depth elements at a time (vec4
    /// bindings), for problems whose rows allow it (`FLAG_VEC4`, set by
    /// the planner: unit column strides, offsets, row strides and depth
    /// multiples of 4); others stage element by element.
    pub vec4_loads: bool,
    /// Arithmetic unit. The fields above describe the scalar tiling; a
    /// cooperative variant's tiling is fixed by its shader (64 x 64 tiles,
    /// 128 invocations, 32-deep slices).
    pub core: Core,
}

#[allow(clippy::too_many_arguments, reason = "one catalogue row: every field of ProductVariant, positionally")]
const fn v(name: &'static str, precision: Precision, (wx, wy): (u32, u32), (rm, rn): (u32, u32), kc: u32, unit: u32, layout: LaneLayout, form: DistanceForm, rows_fast: bool, stages: u32) -> ProductVariant {
    ProductVariant { name, precision, wx, wy, rm, rn, kc, unit, layout, form, rows_fast, stages, pad: false, vec4_loads: false, core: Core::Simt }
}

impl ProductVariant {
    /// The same variant with padded staging rows, named `name`.
    const fn padded(self, name: &'static str) -> Self {
        ProductVariant { name, pad: true, ..self }
    }

    /// The same variant with vec4 global loads, named `name`.
    const fn vec4(self, name: &'static str) -> Self {
        ProductVariant { name, vec4_loads: true, ..self }
    }
}

/// A cooperative-matrix catalogue row (f32; the tiling is the shader's).
const fn coop(name: &'static str, split: bool) -> ProductVariant {
    ProductVariant { name, precision: F32, wx: 128, wy: 1, rm: 64, rn: 64, kc: 32, unit: 1, layout: Blocked, form: Expanded, rows_fast: false, stages: 1, pad: false, vec4_loads: false, core: Core::Cooperative { split } }
}

use DistanceForm::{Direct, Expanded};
use LaneLayout::{Blocked, Strided};
use Precision::{F32, F64};

/// Every variant; the first of each precision is its default (the one used
/// when tuning is off and by the host-matrix path).
pub const CATALOGUE: &[ProductVariant] = &[
    v("f32-128x128-b8x8-k16-v4-direct", F32, (16, 16), (8, 8), 16, 4, Blocked, Direct, false, 1),
    v("f32-128x128-b8x8-k16-v4-expanded", F32, (16, 16), (8, 8), 16, 4, Blocked, Expanded, false, 1),
    v("f32-128x128-s8x8-k16-v4-expanded", F32, (16, 16), (8, 8), 16, 4, Strided, Expanded, false, 1),
    v("f32-128x128-s8x8-k16-v4-expanded-db", F32, (16, 16), (8, 8), 16, 4, Strided, Expanded, false, 2),
    v("f32-128x128-s8x8-k8-v4-expanded-db", F32, (16, 16), (8, 8), 8, 4, Strided, Expanded, false, 2),
    v("f32-128x128-s8x8-k16-v4-direct-db", F32, (16, 16), (8, 8), 16, 4, Strided, Direct, false, 2),
    v("f32-64x128-s8x8-k16-v4-expanded-db", F32, (16, 8), (8, 8), 16, 4, Strided, Expanded, false, 2),
    v("f32-64x64-s4x4-k16-v4-expanded-db", F32, (16, 16), (4, 4), 16, 4, Strided, Expanded, false, 2),
    v("f32-32x32-b4x4-k16-v4-direct", F32, (8, 8), (4, 4), 16, 4, Blocked, Direct, false, 1),
    v("f32-128x128-b8x8-k16-v4-direct-rows", F32, (16, 16), (8, 8), 16, 4, Blocked, Direct, true, 1),
    v("f32-64x64-s4x4-k16-v4-expanded-rows", F32, (16, 16), (4, 4), 16, 4, Strided, Expanded, true, 2),
    v("f32-64x64-b4x4-k16-v1-direct", F32, (16, 16), (4, 4), 16, 1, Blocked, Direct, false, 1),
    v("f64-64x64-b4x4-k16-v1-direct", F64, (16, 16), (4, 4), 16, 1, Blocked, Direct, false, 1),
    v("f64-64x64-s4x4-k16-v4-direct", F64, (16, 16), (4, 4), 16, 4, Strided, Direct, false, 1),
    v("f64-64x64-s4x4-k8-v4-expanded-db", F64, (16, 16), (4, 4), 8, 4, Strided, Expanded, false, 2),
    v("f64-64x128-s8x8-k8-v4-expanded-db", F64, (16, 8), (8, 8), 8, 4, Strided, Expanded, false, 2),
    v("f64-32x32-b4x4-k16-v1-direct", F64, (8, 8), (4, 4), 16, 1, Blocked, Direct, false, 1),
    v("f64-64x64-s4x4-k16-v4-direct-rows", F64, (16, 16), (4, 4), 16, 4, Strided, Direct, true, 1),
    // The fastest of each job on an H200, with padded staging rows.
    v("f32-64x64-b4x4-k16-v1-direct", F32, (16, 16), (4, 4), 16, 1, Blocked, Direct, false, 1).padded("f32-64x64-b4x4-k16-v1-direct-pad"),
    v("f32-64x64-s4x4-k16-v4-expanded-db", F32, (16, 16), (4, 4), 16, 4, Strided, Expanded, false, 2).padded("f32-64x64-s4x4-k16-v4-expanded-db-pad"),
    v("f32-128x128-b8x8-k16-v4-direct", F32, (16, 16), (8, 8), 16, 4, Blocked, Direct, false, 1).padded("f32-128x128-b8x8-k16-v4-direct-pad"),
    v("f64-64x64-s4x4-k16-v4-direct", F64, (16, 16), (4, 4), 16, 4, Strided, Direct, false, 1).padded("f64-64x64-s4x4-k16-v4-direct-pad"),
    // The fastest of each job on an H200, with vec4 global loads.
    v("f32-128x128-b8x8-k16-v4-direct", F32, (16, 16), (8, 8), 16, 4, Blocked, Direct, false, 1).vec4("f32-128x128-b8x8-k16-v4-direct-g4"),
    v("f32-64x64-s4x4-k16-v4-expanded-db", F32, (16, 16), (4, 4), 16, 4, Strided, Expanded, false, 2).vec4("f32-64x64-s4x4-k16-v4-expanded-db-g4"),
    v("f64-64x64-s4x4-k16-v4-direct", F64, (16, 16), (4, 4), 16, 4, Strided, Direct, false, 1).vec4("f64-64x64-s4x4-k16-v4-direct-g4"),
    coop("f32-64x64-coop16-split", true),
    coop("f32-64x64-coop16-f16", false),
];

/// Output tile side of the cooperative variants (`coop_tile.wgsl`).
const COOP_TILE: usize = 64;

/// `shaders/coop_tile.wgsl`: the cooperative variants' tile machinery.
const COOP_TILE_WGSL: &str = include_str!("../../shaders/coop_tile.wgsl");

/// The template fields of `coop_tile.wgsl`.
fn coop_fields(split: bool) -> Vec<(&'static str, String)> {
    vec![("SPLIT", split.to_string()), ("LO_LEN", coop_lo_len(split).to_string())]
}

/// Length of each of the three extra staged slices of a split cooperative
/// variant (`coop_tile.wgsl`; a token array where the variant has none).
const fn coop_lo_len(split: bool) -> u32 {
    if split {
        2560
    } else {
        8
    }
}

/// Index in [`CATALOGUE`] of the default variant of `precision`.
pub(crate) fn default_index(precision: Precision) -> usize {
    CATALOGUE.iter().position(|v| v.precision == precision).expect("the catalogue has a variant of each precision")
}

/// Index of the variant called `name`.
pub(crate) fn index_of(name: &str) -> Option<usize> {
    CATALOGUE.iter().position(|v| v.name == name)
}

/// What an adapter allows a workgroup to use.
#[derive(Debug, Clone, Copy)]
pub(crate) struct WorkgroupLimits {
    pub(crate) storage_bytes: u32,
    pub(crate) invocations: u32,
    pub(crate) size_x: u32,
    pub(crate) size_y: u32,
    /// The device was opened with cooperative matrices (16 x 16 x 16, f16
    /// operands, f32 accumulator), f16 and subgroups.
    pub(crate) cooperative: bool,
}

impl ProductVariant {
    /// Output rows per workgroup.
    pub fn tile_rows(&self) -> usize {
        match self.core {
            Core::Simt => (self.wy * self.rm) as usize,
            Core::Cooperative { .. } => COOP_TILE,
        }
    }
    /// Output columns per workgroup.
    pub fn tile_cols(&self) -> usize {
        match self.core {
            Core::Simt => (self.wx * self.rn) as usize,
            Core::Cooperative { .. } => COOP_TILE,
        }
    }
    /// Invocations per workgroup.
    pub fn threads(&self) -> u32 {
        self.wx * self.wy
    }
    /// Bytes of workgroup memory.
    pub fn workgroup_bytes(&self) -> u32 {
        match self.core {
            Core::Simt => self.stages * self.kc * (self.tile_rows() + self.tile_cols() + 2 * self.pad_units() as usize * self.unit as usize) as u32 * self.precision.bytes() as u32,
            // coop_tile.wgsl: the staged hi slices (and lo_a, S hi_b,
            // lo_b) in f16, the output tile in f32, per-row exponents and norms.
            Core::Cooperative { split } => 2 * 2560 * 2 + 3 * coop_lo_len(split) * 2 + 4352 * 4 + 4 * 64 * 4,
        }
    }

    /// Bytes of workgroup memory of the fused kernel matvec for `mv`
    /// columns of V: the product's and the V tile, and for a cooperative
    /// variant W's rows of the row tile (pair form; else a token row).
    pub fn matvec_workgroup_bytes(&self, mv: u32, pair: bool) -> u32 {
        let eb = self.precision.bytes() as u32;
        let w_rows = match self.core {
            Core::Simt => 0,
            Core::Cooperative { .. } if pair => self.tile_rows() as u32,
            Core::Cooperative { .. } => 1,
        };
        self.workgroup_bytes() + (self.tile_cols() as u32 + w_rows) * mv * eb
    }

    /// Partial-sum slots of the fused kernel matvec per split of the
    /// column tiles (grid x): each lane column of a scalar variant, the two
    /// column halves of a cooperative one.
    pub(crate) fn matvec_slots(&self) -> u32 {
        match self.core {
            Core::Simt => self.wx,
            Core::Cooperative { .. } => 2,
        }
    }

    /// Output entries each invocation finishes (its register block, or a
    /// cooperative variant's share of the tile).
    pub(crate) fn entries_per_invocation(&self) -> usize {
        self.tile_rows() * self.tile_cols() / self.threads() as usize
    }

    /// Units of padding after each staged row (0 or 1).
    fn pad_units(&self) -> u32 {
        u32::from(self.pad)
    }

    /// True for the cooperative-matrix variants.
    pub fn is_cooperative(&self) -> bool {
        matches!(self.core, Core::Cooperative { .. })
    }

    /// True for a variant of reduced precision that is used only when named
    /// (`GRAMIAN_VARIANT`, [`super::GpuContext::force_variant`]), never by
    /// the tuner's own choice.
    pub fn is_opt_in(&self) -> bool {
        matches!(self.core, Core::Cooperative { split: false })
    }

    /// True when the adapter can run it.
    pub(crate) fn fits(&self, limits: &WorkgroupLimits) -> bool {
        (!self.is_cooperative() || limits.cooperative) && self.workgroup_bytes() <= limits.storage_bytes && self.threads() <= limits.invocations && self.wx <= limits.size_x && self.wy <= limits.size_y
    }

    /// Loop passes of one invocation's depth loop over `depth`
    /// (`tile_loop.wgsl`: per KC-deep slice the slice loop's own pass, both
    /// staging loops, the step loop taken and the two not taken; the first
    /// slice's staging with two stages), counted as [`LOOP_BUDGET`] says:
    /// a loop entered for `t` passes costs `t + 1` (the pass that leaves),
    /// a loop in a branch not taken costs 1, and nothing is unrolled.
    fn depth_loop_passes(&self, depth: usize) -> usize {
        let (threads, kc) = (self.threads() as usize, self.kc as usize);
        let staging = (self.tile_rows() * kc).div_ceil(threads) + 1 + (self.tile_cols() * kc).div_ceil(threads) + 1;
        let prologue = if self.stages == 2 { staging } else { 0 };
        depth.div_ceil(kc) * (1 + staging + kc + 1 + 2) + 1 + prologue
    }

    /// Loop passes spent on one entry of an invocation's register block: its
    /// own pass of the column loop, the expanded form's direct
    /// recomputation over the depth (distance kernels) and the polynomial's
    /// power (at most 32 passes).
    fn entry_passes(&self, depth: usize, code: &KernelCode) -> usize {
        let fallback = match self.form {
            DistanceForm::Expanded if code.is_distance() => depth + 1,
            DistanceForm::Expanded => 1,
            DistanceForm::Direct => 0,
        };
        let power = if code.is_polynomial() { 33 } else { 1 };
        1 + fallback + power
    }

    /// Loop passes of one invocation of the product shader over `depth`.
    pub(crate) fn product_passes(&self, depth: usize, code: &KernelCode) -> usize {
        if self.is_cooperative() {
            // product_coop.wgsl, with 4 subgroups of 32 lanes: the first
            // pass (32 rows, depth / 32 lanes' steps each), the slices (16
            // staging passes, 2 tile steps), the epilogue (32 entries, each
            // with the direct recomputation for distances and the power).
            let kc = self.kc as usize;
            let first = 32 * (depth.div_ceil(32) + 1) + 1;
            let slices = depth.div_ceil(kc) * (1 + 17 + 3) + 1;
            let entries = self.entries_per_invocation();
            return first + slices + entries + 1 + entries * self.entry_passes(depth, code);
        }
        let (rm, rn) = (self.rm as usize, self.rn as usize);
        self.depth_loop_passes(depth) + (rm + 1) + rm + rm * rn * self.entry_passes(depth, code)
    }

    /// The longest depth (a multiple of KC) one product dispatch may take
    /// within [`LOOP_BUDGET`]; longer products are cut into depth chunks.
    pub(crate) fn max_product_depth(&self, code: &KernelCode) -> usize {
        // The passes are affine in the number of KC-deep slices.
        let kc = self.kc as usize;
        let fixed = self.product_passes(0, code);
        let per_slice = self.product_passes(kc, code) - fixed;
        (LOOP_BUDGET.saturating_sub(fixed) / per_slice).max(1) * kc
    }

    /// Loop passes of one invocation of the fused kernel matvec
    /// (`kernel_matvec.wgsl`, `mv` columns of V) over `depth`: per column
    /// tile it visits, and once.
    pub(crate) fn matvec_passes(&self, depth: usize, code: &KernelCode, mv: usize, pair: bool) -> (usize, usize) {
        if self.is_cooperative() {
            // kernel_matvec_coop.wgsl, with 4 subgroups of 32 lanes: per
            // column tile its own pass, the V tile, the first pass over Z's
            // rows (16 per subgroup), the slices (as the product's), the 32
            // entries (the entry, the direct recomputation for distances,
            // the power, the columns of V); X's rows and the write-out once.
            let threads = self.threads() as usize;
            let tile_staging = (COOP_TILE * mv).div_ceil(threads) + 1;
            let scan = 16 * (depth.div_ceil(32) + 1) + 1;
            let slices = depth.div_ceil(self.kc as usize) * (1 + 17 + 3) + 1;
            let entries = COOP_TILE / 2;
            let mut per_tile = 1 + tile_staging + scan + slices + entries * (self.entry_passes(depth, code) + mv + 1) + 1;
            let mut once = 1 + scan + (mv + 1);
            if pair {
                // The column sums over 32 rows, the halves, W's rows once.
                per_tile += 33 * (mv + 1) + 2 * (mv + 1);
                once += tile_staging;
            }
            return (per_tile, once);
        }
        let (rm, rn, wy) = (self.rm as usize, self.rn as usize, self.wy as usize);
        let v_tile = (self.tile_cols() * mv).div_ceil(self.threads() as usize) + 1;
        let mut per_tile = 1 + v_tile + self.depth_loop_passes(depth) + (rm + 1) + rm + rm * rn * (self.entry_passes(depth, code) + mv + 1);
        let mut once = 1 + (rm + 1) + rm * (mv + 1);
        if pair {
            // The lane rows' rounds (one taken), the write-out; W's registers once.
            per_tile += (wy + 1) + (rn + 1) + rn * (mv + 1) + v_tile;
            once += 1 + (rm + 1) + rm * (mv + 1);
        }
        (per_tile, once)
    }

    /// The variant's product shader (without the prelude and `problem.wgsl`):
    /// `product_tile.wgsl` + `product.wgsl`, filled in.
    pub(crate) fn source(&self) -> String {
        const TILE: &str = include_str!("../../shaders/product_tile.wgsl");
        const PRODUCT: &str = include_str!("../../shaders/product.wgsl");
        const COOP: &str = include_str!("../../shaders/product_coop.wgsl");
        match self.core {
            Core::Simt => Self::fill(format!("{TILE}\n{PRODUCT}"), &self.fields()),
            Core::Cooperative { split } => Self::fill(format!("{COOP_TILE_WGSL}\n{COOP}"), &coop_fields(split)),
        }
    }

    /// `kernel_function.wgsl` and `problem.wgsl` for this variant: A and B bound as arrays of scalars,
    /// or with [`Self::vec4_loads`] of vec4, followed by `vec4_loads.wgsl`.
    pub(crate) fn problem_source(&self) -> String {
        const PROBLEM: &str = concat!(include_str!("../../shaders/kernel_function.wgsl"), "\n", include_str!("../../shaders/problem.wgsl"));
        const VEC4_LOADS: &str = include_str!("../../shaders/vec4_loads.wgsl");
        if self.vec4_loads {
            Self::fill(format!("{PROBLEM}\n{VEC4_LOADS}"), &[("OPERAND", "vec4<T>".into()), ("AT", "[idx / 4u][idx % 4u]".into())])
        } else {
            Self::fill(PROBLEM.to_string(), &[("OPERAND", "T".into()), ("AT", "[idx]".into())])
        }
    }

    /// `kernel_function.wgsl` and `problem.wgsl` with A and B bound as arrays of scalars: the
    /// descriptor, the bindings and the kernel function, for the shaders
    /// built outside the product template (`sparse_product.wgsl`).
    pub(crate) fn scalar_problem_source() -> String {
        Self::fill(concat!(include_str!("../../shaders/kernel_function.wgsl"), "\n", include_str!("../../shaders/problem.wgsl")).to_string(), &[("OPERAND", "T".into()), ("AT", "[idx]".into())])
    }

    /// The directives a module of this variant starts with.
    pub(crate) fn enables(&self) -> &'static str {
        match self.core {
            Core::Simt => "",
            Core::Cooperative { .. } => "enable f16;\nenable wgpu_cooperative_matrix;\n",
        }
    }

    /// The variant's fused kernel matvec for up to `mv` columns of V:
    /// `product_tile.wgsl` + `kernel_matvec.wgsl` (cooperative variants:
    /// `coop_tile.wgsl` + `kernel_matvec_coop.wgsl`), filled in.
    pub(crate) fn matvec_source(&self, mv: u32, pair: bool) -> String {
        const TILE: &str = include_str!("../../shaders/product_tile.wgsl");
        const MATVEC: &str = include_str!("../../shaders/kernel_matvec.wgsl");
        const MATVEC_COOP: &str = include_str!("../../shaders/kernel_matvec_coop.wgsl");
        if let Core::Cooperative { split } = self.core {
            let mut fields = coop_fields(split);
            fields.push(("MV", mv.to_string()));
            fields.push(("PAIR", pair.to_string()));
            fields.push(("W_ROWS", if pair { COOP_TILE } else { 1 }.to_string()));
            return Self::fill(format!("{COOP_TILE_WGSL}\n{MATVEC_COOP}"), &fields);
        }
        let mut fields = self.fields();
        fields.push(("MV", mv.to_string()));
        fields.push(("PAIR", pair.to_string()));
        fields.push(("RM_MV", (self.rm * mv).to_string()));
        // Unused register arrays of one element without PAIR.
        fields.push(("PAIR_RM_MV", if pair { self.rm * mv } else { 1 }.to_string()));
        fields.push(("PAIR_RN_MV", if pair { self.rn * mv } else { 1 }.to_string()));
        Self::fill(format!("{TILE}\n{MATVEC}"), &fields)
    }

    fn fill(out: String, fields: &[(&'static str, String)]) -> String {
        const TILE_LOOP: &str = include_str!("../../shaders/tile_loop.wgsl");
        let mut out = out.replace("@@TILE_LOOP@@", TILE_LOOP);
        for (key, value) in fields {
            out = out.replace(&format!("@@{key}@@"), value);
        }
        debug_assert!(!out.contains("@@"), "every template field is filled");
        out
    }

    /// The template fields of this variant.
    fn fields(&self) -> Vec<(&'static str, String)> {
        let u = self.unit;
        assert!(u == 1 || u == 4, "unit width 1 or 4");
        assert!(self.rm.is_multiple_of(u) && self.rn.is_multiple_of(u), "register block a multiple of the unit");
        let (rmu, rnu) = (self.rm / u, self.rn / u);
        let scalar = match self.precision {
            Precision::F32 => "f32",
            Precision::F64 => "f64",
        };
        let vt = if u == 4 { format!("vec4<{scalar}>") } else { scalar.to_string() };
        let (tr, tc) = (self.tile_rows() as u32, self.tile_cols() as u32);
        let threads = self.threads();
        // Unit index of register row unit `p` / column unit `q`.
        let (urow, ucol) = match self.layout {
            LaneLayout::Blocked => ("ly * RMU + pu".to_string(), "lx * RNU + qu".to_string()),
            LaneLayout::Strided => ("pu * WY + ly".to_string(), "qu * WX + lx".to_string()),
        };
        let urow_of = |p: u32| urow.replace("pu", &format!("{p}u"));
        let ucol_of = |q: u32| ucol.replace("qu", &format!("{q}u"));
        let index = |rows: u32| {
            if self.rows_fast {
                format!("let r = e % {rows}u;\n            let kk = e / {rows}u;")
            } else {
                "let r = e / KC;\n            let kk = e % KC;".to_string()
            }
        };
        let set = |tile: &str| {
            if u == 4 {
                format!("{tile}[buf][kk][r / 4u][r % 4u] = v;")
            } else {
                format!("{tile}[buf][kk][r] = v;")
            }
        };
        // The vec4 staging (consecutive invocations take consecutive vec4s
        // of a row; each vec4 goes to four staged depth rows).
        let stage4 = if self.vec4_loads {
            assert!(!self.rows_fast && self.kc.is_multiple_of(4), "vec4 loads stage consecutive depth");
            let set4 = |tile: &str| {
                (0..4)
                    .map(|c| {
                        let at = if u == 4 { "[r / 4u][r % 4u]" } else { "[r]" };
                        format!("{tile}[buf][kk + {c}u]{at} = v.{};", ["x", "y", "z", "w"][c])
                    })
                    .collect::<Vec<_>>()
                    .join("\n                ")
            };
            let part = |rows: &str, load: &str, first: &str, tile: &str| {
                format!(
                    "        for (var t = 0u; t < {loads}u; t++) {{\n            let e = li + t * THREADS;\n            if (e < {rows} * KC / 4u) {{\n                let r = e / (KC / 4u);\n                let kk = 4u * (e % (KC / 4u));\n                let v = {load}(p, {first} + r, k0 + kk);\n                {set}\n            }}\n        }}\n",
                    loads = ((if rows == "TR" { tr } else { tc }) * self.kc / 4).div_ceil(threads),
                    set = set4(tile)
                )
            };
            format!("    if ((p.flags & FLAG_VEC4) != 0u) {{\n{}{}        return;\n    }}", part("TR", "load_a4", "row0", "a_tile"), part("TC", "load_b4", "col0", "b_tile"))
        } else {
            String::new()
        };
        let comp = |name: String, c: u32| if u == 4 { format!("{name}.{}", ["x", "y", "z", "w"][c as usize]) } else { name };
        let splat = |x: String| if u == 4 { format!("{vt}({x})") } else { x };

        let mut decls = String::new();
        for r in 0..self.rm {
            for q in 0..rnu {
                decls += &format!("    var c_{r}_{q} = {vt}(0.0);\n");
            }
        }
        if self.form == DistanceForm::Expanded {
            for p in 0..rmu {
                decls += &format!("    var na_{p} = {vt}(0.0);\n");
            }
            for q in 0..rnu {
                decls += &format!("    var nb_{q} = {vt}(0.0);\n");
            }
        }
        let cur = if self.stages == 2 { "cur" } else { "0u" };
        let loads = {
            let mut s = String::new();
            for p in 0..rmu {
                s += &format!("                let a_{p} = a_tile[{cur}][kk][{}];\n", urow_of(p));
            }
            for q in 0..rnu {
                s += &format!("                let b_{q} = b_tile[{cur}][kk][{}];\n", ucol_of(q));
            }
            s
        };
        let mut step_inner = loads.clone();
        let mut step_direct = loads.clone();
        step_direct += &format!("                var d: {vt};\n");
        let mut step_expanded = loads.clone();
        for r in 0..self.rm {
            let a = splat(comp(format!("a_{}", r / u), r % u));
            for q in 0..rnu {
                step_inner += &format!("                c_{r}_{q} = fma({a}, b_{q}, c_{r}_{q});\n");
                step_direct += &format!("                d = {a} - b_{q};\n                c_{r}_{q} = fma(d, d, c_{r}_{q});\n");
                step_expanded += &format!("                c_{r}_{q} = fma({a}, b_{q}, c_{r}_{q});\n");
            }
        }
        if self.form == DistanceForm::Expanded {
            for p in 0..rmu {
                step_expanded += &format!("                na_{p} = fma(a_{p}, a_{p}, na_{p});\n");
            }
            for q in 0..rnu {
                step_expanded += &format!("                nb_{q} = fma(b_{q}, b_{q}, nb_{q});\n");
            }
        } else {
            // Not reached (direct variants take the direct loop for distances).
            step_expanded = step_direct.clone();
        }
        let (prologue, pre, post) = if self.stages == 2 {
            (
                "    var cur = 0u;\n    stage(p, 0u, 0u, row0, col0, li);\n    workgroupBarrier();".to_string(),
                "        if (k0 + KC < p.depth) {\n            stage(p, 1u - cur, k0 + KC, row0, col0, li);\n        }".to_string(),
                "        workgroupBarrier();\n        cur = 1u - cur;".to_string(),
            )
        } else {
            (String::new(), "        stage(p, 0u, k0, row0, col0, li);\n        workgroupBarrier();".to_string(), "        workgroupBarrier();".to_string())
        };
        let list = |names: Vec<String>| names.join(", ");
        let mut pack = format!(
            "    let acc = array<{vt}, {}>({});\n",
            self.rm * rnu,
            list((0..self.rm).flat_map(|r| (0..rnu).map(move |q| format!("c_{r}_{q}"))).collect())
        );
        let (na_at, nb_at) = if self.form == DistanceForm::Expanded {
            pack += &format!("    let na = array<{vt}, {rmu}>({});\n", list((0..rmu).map(|p| format!("na_{p}")).collect()));
            pack += &format!("    let nb = array<{vt}, {rnu}>({});\n", list((0..rnu).map(|q| format!("nb_{q}")).collect()));
            if u == 4 {
                ("na[pu][r % 4u]".to_string(), "nb[qu][q % 4u]".to_string())
            } else {
                ("na[pu]".to_string(), "nb[qu]".to_string())
            }
        } else {
            ("T(0.0)".to_string(), "T(0.0)".to_string())
        };
        let acc_at = if u == 4 { "acc[r * RNU + qu][q % 4u]" } else { "acc[r * RNU + qu]" };
        vec![
            ("TR", tr.to_string()),
            ("TC", tc.to_string()),
            ("KC", self.kc.to_string()),
            ("RM", self.rm.to_string()),
            ("RN", self.rn.to_string()),
            ("UNIT", u.to_string()),
            ("RMU", rmu.to_string()),
            ("RNU", rnu.to_string()),
            ("WX", self.wx.to_string()),
            ("WY", self.wy.to_string()),
            ("THREADS", threads.to_string()),
            ("EXPANDED", (self.form == DistanceForm::Expanded).to_string()),
            ("VT", vt.clone()),
            ("AU", (tr / u + self.pad_units()).to_string()),
            ("BU", (tc / u + self.pad_units()).to_string()),
            ("STAGES", self.stages.to_string()),
            ("A_LOADS", (tr * self.kc).div_ceil(threads).to_string()),
            ("B_LOADS", (tc * self.kc).div_ceil(threads).to_string()),
            ("INDEX_A", index(tr)),
            ("INDEX_B", index(tc)),
            ("SET_A", set("a_tile")),
            ("SET_B", set("b_tile")),
            ("STAGE4", stage4),
            ("DECLS", decls),
            ("PROLOGUE", prologue),
            ("PRE", pre),
            ("POST", post),
            ("STEP_DIRECT", step_direct),
            ("STEP_EXPANDED", step_expanded),
            ("STEP_INNER", step_inner),
            ("PACK", pack),
            ("UROW", urow),
            ("UCOL", ucol),
            ("ACC_AT", acc_at.to_string()),
            ("NA_AT", na_at),
            ("NB_AT", nb_at),
        ]
    }
}

/// The pipeline key's flag of the fused matvec's pair form (beside the
/// catalogue index and `MV << 16`).
pub(crate) const PAIR_KEY: usize = 1 << 24;

/// The operation a variant runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Op {
    /// `C = f(s(A', B'))` (`product.wgsl`).
    Product,
    /// `Y = K(X, Z) V` without writing K (`kernel_matvec.wgsl`), V with one
    /// column or (`wide`) up to eight.
    Matvec { wide: bool },
}

/// The shape class of a product: what decides which variant is fastest.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct ShapeClass {
    pub(crate) op: Op,
    pub(crate) precision: Precision,
    /// RBF/Laplacian (squared distances) rather than inner products.
    pub(crate) distance: bool,
    pub(crate) a_transposed: bool,
    pub(crate) b_transposed: bool,
    /// Output size bucket: < 2^14, < 2^20, < 2^24, more elements.
    pub(crate) out_bucket: u8,
    /// Depth bucket: <= 16, <= 128, <= 1024, more.
    pub(crate) depth_bucket: u8,
}

impl ShapeClass {
    pub(crate) fn of(precision: Precision, distance: bool, a_transposed: bool, b_transposed: bool, rows: usize, cols: usize, depth: usize) -> Self {
        let elements = rows.saturating_mul(cols);
        let out_bucket = match elements {
            e if e < 1 << 14 => 0,
            e if e < 1 << 20 => 1,
            e if e < 1 << 24 => 2,
            _ => 3,
        };
        let depth_bucket = match depth {
            d if d <= 16 => 0,
            d if d <= 128 => 1,
            d if d <= 1024 => 2,
            _ => 3,
        };
        ShapeClass { op: Op::Product, precision, distance, a_transposed, b_transposed, out_bucket, depth_bucket }
    }

    /// The cache key, e.g. `product/f32/distance/NN/o3/d2`.
    pub(crate) fn key(&self) -> String {
        let t = |b: bool| if b { 'T' } else { 'N' };
        format!(
            "{}/{}/{}/{}{}/o{}/d{}",
            match self.op {
                Op::Product => "product",
                Op::Matvec { wide: false } => "matvec1",
                Op::Matvec { wide: true } => "matvec8",
            },
            match self.precision {
                Precision::F32 => "f32",
                Precision::F64 => "f64",
            },
            if self.distance { "distance" } else { "inner" },
            t(self.a_transposed),
            t(self.b_transposed),
            self.out_bucket,
            self.depth_bucket
        )
    }

    /// The synthetic problem timed for this class: the caller's shape,
    /// capped so one run is short (`work_cap` multiply-adds).
    pub(crate) fn synthetic_shape(rows: usize, cols: usize, depth: usize, work_cap: usize) -> (usize, usize, usize) {
        let (mut r, mut c, mut d) = (rows.clamp(1, 8192), cols.clamp(1, 8192), depth.clamp(1, 2048));
        for _ in 0..64 {
            if r.saturating_mul(c).saturating_mul(d) <= work_cap {
                break;
            }
            if r >= c && r > 64 {
                r /= 2;
            } else if c > 64 {
                c /= 2;
            } else if d > 16 {
                d /= 2;
            } else {
                break;
            }
        }
        (r, c, d)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_defaults_come_first() {
        for (i, a) in CATALOGUE.iter().enumerate() {
            assert!(CATALOGUE[i + 1..].iter().all(|b| b.name != a.name), "{} twice", a.name);
            assert!(a.name.starts_with(match a.precision { Precision::F32 => "f32", Precision::F64 => "f64" }));
        }
        assert_eq!(CATALOGUE[default_index(Precision::F32)].name, "f32-128x128-b8x8-k16-v4-direct");
        assert_eq!(CATALOGUE[default_index(Precision::F64)].name, "f64-64x64-b4x4-k16-v1-direct");
        // The default f32 variant's output tile.
        let d = &CATALOGUE[default_index(Precision::F32)];
        assert_eq!((d.tile_rows(), d.tile_cols()), (128, 128));
    }

    #[test]
    fn the_longest_product_depth_of_every_variant_stays_within_the_loop_budget() {
        use crate::kernel::Kernel;
        let kernels = [Kernel::linear(), Kernel::rbf(1.0).unwrap(), Kernel::laplacian(1.0).unwrap(), Kernel::polynomial(1.0, 1.0, Kernel::MAX_POLYNOMIAL_DEGREE).unwrap(), Kernel::sigmoid(1.0, 0.0).unwrap()];
        for v in CATALOGUE {
            let kc = v.kc as usize;
            for code in kernels.iter().map(KernelCode::of) {
                let d = v.max_product_depth(&code);
                assert!(d >= kc && d % kc == 0, "{} kind {}: {d}", v.name, code.kind);
                assert!(v.product_passes(d, &code) <= LOOP_BUDGET, "{} kind {}: {d}", v.name, code.kind);
                assert!(v.product_passes(d + kc, &code) > LOOP_BUDGET, "{} kind {}: {d} is not the longest", v.name, code.kind);
                // The expanded form recomputes near-duplicate pairs over the
                // whole depth: far shorter chunks for the distance kernels.
                if v.form == DistanceForm::Expanded && code.is_distance() {
                    assert!(d * v.entries_per_invocation() <= LOOP_BUDGET, "{}: {d}", v.name);
                }
            }
        }
    }

    /// The cooperative variants' product and fused matvec (8 columns, pair
    /// form included) fit the 48 KiB of workgroup memory that NVIDIA's
    /// Vulkan driver gives a workgroup.
    #[test]
    fn the_cooperative_variants_fit_48_kib_of_workgroup_memory() {
        for v in CATALOGUE.iter().filter(|v| v.is_cooperative()) {
            assert!(v.workgroup_bytes() <= 48 * 1024, "{}", v.name);
            for (mv, pair) in [(1, false), (8, false), (1, true), (8, true)] {
                assert!(v.matvec_workgroup_bytes(mv, pair) <= 48 * 1024, "{} mv {mv} pair {pair}: {}", v.name, v.matvec_workgroup_bytes(mv, pair));
            }
        }
    }

    #[test]
    fn every_template_field_is_filled() {
        for v in CATALOGUE {
            let sources = [v.source(), v.matvec_source(1, false), v.matvec_source(8, false), v.matvec_source(1, true), v.matvec_source(8, true)];
            for s in sources {
                assert!(!s.contains("@@"), "{}", v.name);
                assert!(s.contains(&format!("@workgroup_size({}, {}, 1)", v.wx, v.wy)), "{}", v.name);
            }
        }
    }
}
