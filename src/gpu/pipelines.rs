//! Shader compilation and the pipeline cache: the fixed pipelines (default
//! product variant per precision, row reductions, element-wise maps) built
//! when a context opens, and product variants compiled on first use.

use std::borrow::Cow;

use super::plan::PipelineKind;
use super::variants::{self, CATALOGUE, PAIR_KEY};
use super::GpuContext;
use crate::error::{Error, Result};
use crate::precision::Precision;

/// The pipelines compiled when a context opens.
pub(crate) struct Pipelines {
    /// The default f32 product variant.
    pub(crate) kernel_matrix: wgpu::ComputePipeline,
    /// The generic shader in f64 (`None` without `SHADER_F64`).
    pub(crate) product_f64: Option<wgpu::ComputePipeline>,
    pub(crate) row_reduce_f32: wgpu::ComputePipeline,
    pub(crate) row_reduce_f64: Option<wgpu::ComputePipeline>,
    pub(crate) elementwise_f32: wgpu::ComputePipeline,
    pub(crate) elementwise_f64: Option<wgpu::ComputePipeline>,
    pub(crate) icd_column_f32: wgpu::ComputePipeline,
    pub(crate) icd_column_f64: Option<wgpu::ComputePipeline>,
    /// mklaren's device steps (`f64` only; `None` without `SHADER_F64`).
    pub(crate) mklaren_f64: Option<wgpu::ComputePipeline>,
    /// Products of a CSR matrix with a dense one.
    pub(crate) sparse_f32: wgpu::ComputePipeline,
    pub(crate) sparse_f64: Option<wgpu::ComputePipeline>,
}

/// The WGSL of the sparse-dense products in `precision`: the prelude,
/// `problem.wgsl` with scalar operands, and `shaders/sparse_product.wgsl`.
pub(crate) fn sparse_source(precision: Precision) -> String {
    format!("{}\n{}\n{}", prelude(precision), variants::ProductVariant::scalar_problem_source(), include_str!("../../shaders/sparse_product.wgsl"))
}

/// The WGSL of mklaren's device steps: the `f64` prelude, the kernel
/// function (`shaders/kernel_function.wgsl`) and `shaders/mklaren_step.wgsl`.
pub(crate) fn mklaren_source() -> String {
    format!("{}\n{}\n{}", prelude(Precision::F64), include_str!("../../shaders/kernel_function.wgsl"), include_str!("../../shaders/mklaren_step.wgsl"))
}

/// `shaders/prelude_f32.wgsl` / `prelude_f64.wgsl`: the scalar type T and
/// its exp, tanh, sqrt, cos.
pub(crate) fn prelude(precision: Precision) -> &'static str {
    match precision {
        Precision::F32 => include_str!("../../shaders/prelude_f32.wgsl"),
        Precision::F64 => include_str!("../../shaders/prelude_f64.wgsl"),
    }
}

/// The WGSL of product variant `v`: precision prelude, the shared
/// descriptor `problem.wgsl` (the variant's operand bindings), and the
/// variant's expansion of `product.wgsl`.
pub(crate) fn product_source(v: &variants::ProductVariant) -> String {
    format!("{}{}\n{}\n{}", v.enables(), prelude(v.precision), v.problem_source(), v.source())
}

/// The WGSL of the fused kernel matvec of variant `v` for up to `mv`
/// columns of V (with `pair` its pair form): as [`product_source`], with the
/// variant's expansion of `kernel_matvec.wgsl`.
pub(crate) fn matvec_source(v: &variants::ProductVariant, mv: u32, pair: bool) -> String {
    format!("{}{}\n{}\n{}", v.enables(), prelude(v.precision), v.problem_source(), v.matvec_source(mv, pair))
}

/// Whether a module is built with wgpu's runtime bounds checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Checks {
    /// Every storage and workgroup index clamped (naga's `Restrict`),
    /// workgroup memory zeroed.
    Bounds,
    /// No runtime checks: for the product variants, whose every index is in
    /// range by construction (see [`compile`]).
    Trusted,
}

/// Compiles one compute pipeline (entry point `main`).
///
/// With [`Checks::Trusted`] the module has no runtime bounds checks. That is
/// sound for the product and matvec variants: their workgroup-memory and
/// register indices are bounded by the variant's constants (the staging
/// loops test `e < TR KC`, the tile reads stay below `TR / UNIT`, the
/// cooperative variants index fixed tiles), and their storage indices are
/// `off + i rs + k cs` for `i`, `k` the shaders test against the problem's
/// extents, which `run_plan` checks against the bound buffers before any
/// dispatch (`Dispatch::check_reach`). The tests run every variant both
/// ways and require the same bits.
pub(crate) fn compile(device: &wgpu::Device, label: &str, source: &str, checks: Checks) -> wgpu::ComputePipeline {
    let desc = wgpu::ShaderModuleDescriptor { label: Some(label), source: wgpu::ShaderSource::Wgsl(Cow::Owned(source.to_owned())) };
    // naga's forced loop bounding (a hidden counter in every loop) is
    // miscompiled by Mesa's lavapipe (22.3, LLVM 15): a Phi^T Phi over
    // 8000 samples stopped after 6349 of them, the same for any feature
    // dimension. It is switched off in every build.
    // SAFETY: wgpu requires that shaders built without loop bounding have
    // no infinite loops. Every loop in our shaders counts a u32 up by a
    // constant step to a bound below 2^30 (the bounds are element counts
    // of buffers under the binding limit), so none can wrap or run forever.
    // Without bounds checks (`Checks::Trusted`) it further requires every
    // index to be in range: see above.
    let checks = match checks {
        Checks::Bounds => {
            let mut c = wgpu::ShaderRuntimeChecks::checked();
            c.force_loop_bounding = false;
            c
        }
        Checks::Trusted => wgpu::ShaderRuntimeChecks::unchecked(),
    };
    let module = unsafe { device.create_shader_module_trusted(desc, checks) };
    device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
        label: Some(label),
        layout: None,
        module: &module,
        entry_point: Some("main"),
        compilation_options: Default::default(),
        cache: None,
    })
}

/// Compiles the fixed pipelines: the default product variant of each
/// precision (the f64 ones only with `SHADER_F64`), the row reductions,
/// the element-wise maps and the fused Cholesky column.
pub(crate) fn build_pipelines(device: &wgpu::Device, f64_shaders: bool, variant_checks: Checks) -> Pipelines {
    use variants::default_index;
    const ROW_REDUCE: &str = include_str!("../../shaders/row_reduce.wgsl");
    const ELEMENTWISE: &str = include_str!("../../shaders/elementwise.wgsl");
    const ICD_COLUMN: &str = include_str!("../../shaders/icd_column.wgsl");
    let f32v = &CATALOGUE[default_index(Precision::F32)];
    let f64v = &CATALOGUE[default_index(Precision::F64)];
    let f32p = prelude(Precision::F32);
    let f64p = prelude(Precision::F64);
    Pipelines {
        kernel_matrix: compile(device, f32v.name, &product_source(f32v), variant_checks),
        product_f64: f64_shaders.then(|| compile(device, f64v.name, &product_source(f64v), variant_checks)),
        row_reduce_f32: compile(device, "row_reduce f32", &format!("{f32p}\n{ROW_REDUCE}"), Checks::Bounds),
        row_reduce_f64: f64_shaders.then(|| compile(device, "row_reduce f64", &format!("{f64p}\n{ROW_REDUCE}"), Checks::Bounds)),
        elementwise_f32: compile(device, "elementwise f32", &format!("{f32p}\n{ELEMENTWISE}"), Checks::Bounds),
        elementwise_f64: f64_shaders.then(|| compile(device, "elementwise f64", &format!("{f64p}\n{ELEMENTWISE}"), Checks::Bounds)),
        icd_column_f32: compile(device, "icd_column f32", &format!("{f32p}\n{ICD_COLUMN}"), Checks::Bounds),
        icd_column_f64: f64_shaders.then(|| compile(device, "icd_column f64", &format!("{f64p}\n{ICD_COLUMN}"), Checks::Bounds)),
        mklaren_f64: f64_shaders.then(|| compile(device, "mklaren_step f64", &mklaren_source(), Checks::Bounds)),
        sparse_f32: compile(device, "sparse_product f32", &sparse_source(Precision::F32), Checks::Bounds),
        sparse_f64: f64_shaders.then(|| compile(device, "sparse_product f64", &sparse_source(Precision::F64), Checks::Bounds)),
    }
}

impl GpuContext {

    pub(super) fn pipeline_for(&self, kind: PipelineKind, precision: Precision, variant: usize) -> Result<wgpu::ComputePipeline> {
        let missing = || Error::Unsupported(format!("{precision:?} shaders on {}", self.adapter().name));
        match (kind, precision) {
            (PipelineKind::Product | PipelineKind::Matvec, _) => self.variant_pipeline(variant),
            (PipelineKind::RowReduce, Precision::F32) => Ok(self.pipelines.row_reduce_f32.clone()),
            (PipelineKind::RowReduce, Precision::F64) => self.pipelines.row_reduce_f64.clone().ok_or_else(missing),
            (PipelineKind::Elementwise, Precision::F32) => Ok(self.pipelines.elementwise_f32.clone()),
            (PipelineKind::Elementwise, Precision::F64) => self.pipelines.elementwise_f64.clone().ok_or_else(missing),
            (PipelineKind::IcdColumn, Precision::F32) => Ok(self.pipelines.icd_column_f32.clone()),
            (PipelineKind::IcdColumn, Precision::F64) => self.pipelines.icd_column_f64.clone().ok_or_else(missing),
            (PipelineKind::Mklaren, Precision::F64) => self.pipelines.mklaren_f64.clone().ok_or_else(missing),
            (PipelineKind::Mklaren, Precision::F32) => Err(missing()),
            (PipelineKind::Sparse, Precision::F32) => Ok(self.pipelines.sparse_f32.clone()),
            (PipelineKind::Sparse, Precision::F64) => self.pipelines.sparse_f64.clone().ok_or_else(missing),
        }
    }

    /// The compiled pipeline of product variant `index` (compiled on first
    /// use, inside an error scope: a variant the driver rejects is an error,
    /// not a panic).
    pub(super) fn variant_pipeline(&self, key: usize) -> Result<wgpu::ComputePipeline> {
        // key = catalogue index, plus MV << 16 for the fused matvec of MV
        // columns, plus PAIR_KEY for its pair form.
        let (index, mv, pair) = (key & 0xffff, ((key >> 16) & 0xff) as u32, key & PAIR_KEY != 0);
        let v = CATALOGUE.get(index).ok_or_else(|| Error::Gpu(format!("no product variant {index}")))?;
        if !self.supports(v.precision) {
            return Err(Error::Unsupported(format!("{:?} shaders on {}", v.precision, self.adapter().name)));
        }
        let lock_err = |_| Error::Gpu("variant pipeline lock poisoned".into());
        if let Some(p) = self.variant_pipelines.lock().map_err(lock_err)?.get(&key) {
            return Ok(p.clone());
        }
        // A cooperative matvec's V and W tiles take it close to a 48 KiB
        // limit; the scalar variants' products are what they are checked by.
        if !v.fits(&self.workgroup_limits) || (mv != 0 && v.is_cooperative() && v.matvec_workgroup_bytes(mv, pair) > self.workgroup_limits.storage_bytes) {
            return Err(Error::Unsupported(format!("variant {} on {} (workgroup limits)", v.name, self.adapter().name)));
        }
        let scope = self.device.push_error_scope(wgpu::ErrorFilter::Validation);
        let source = if mv == 0 { product_source(v) } else { matvec_source(v, mv, pair) };
        let start = std::time::Instant::now();
        let pipeline = compile(&self.device, v.name, &source, self.variant_checks);
        self.counters.count_compilation(start.elapsed().as_nanos().min(u64::MAX as u128) as u64);
        if let Some(e) = pollster::block_on(scope.pop()) {
            return Err(Error::Gpu(format!("variant {} does not compile on {}: {e}", v.name, self.adapter().name)));
        }
        self.variant_pipelines.lock().map_err(lock_err)?.insert(key, pipeline.clone());
        Ok(pipeline)
    }

}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every variant's module through naga as wgpu's Vulkan backend takes it
    /// (WGSL front end, validation with the capabilities its device would
    /// have, SPIR-V 1.6 with and without bounds checks): the only check of
    /// the cooperative variants that runs without a GPU that has them.
    #[test]
    fn every_variant_validates_and_compiles_to_spirv() {
        use naga::back::spv::{self, Capability};
        use naga::proc::{BoundsCheckPolicies, BoundsCheckPolicy};
        use naga::valid::{Capabilities, ValidationFlags, Validator};
        const OP_TYPE_COOPERATIVE_MATRIX: u32 = 4456;
        const CAPABILITY_COOPERATIVE_MATRIX: u32 = 6022;
        const OP_CAPABILITY: u32 = 17;
        for v in CATALOGUE {
            let mut sources = vec![("product", product_source(v))];
            for (mv, pair) in [(1, false), (8, false), (1, true), (8, true)] {
                sources.push((if pair { "pair matvec" } else { "matvec" }, matvec_source(v, mv, pair)));
            }
            for (what, src) in sources {
                let module = naga::front::wgsl::parse_str(&src).unwrap_or_else(|e| panic!("{} {what}: {}", v.name, e.emit_to_string(&src)));
                let mut caps = Capabilities::empty();
                let mut spv_caps: naga::FastHashSet<Capability> = [Capability::Shader].into_iter().collect();
                if v.precision == Precision::F64 {
                    caps |= Capabilities::FLOAT64;
                    spv_caps.insert(Capability::Float64);
                }
                if v.is_cooperative() {
                    caps |= Capabilities::COOPERATIVE_MATRIX | Capabilities::SHADER_FLOAT16 | Capabilities::SUBGROUP;
                    spv_caps.extend([Capability::CooperativeMatrixKHR, Capability::VulkanMemoryModel, Capability::Float16, Capability::GroupNonUniform, Capability::GroupNonUniformArithmetic]);
                }
                let info = Validator::new(ValidationFlags::all(), caps).validate(&module).unwrap_or_else(|e| panic!("{} {what}: {}", v.name, e.emit_to_string(&src)));
                for policy in [BoundsCheckPolicy::Restrict, BoundsCheckPolicy::Unchecked] {
                    let options = spv::Options { lang_version: (1, 6), capabilities: Some(spv_caps.clone()), bounds_check_policies: BoundsCheckPolicies { index: policy, buffer: policy, ..Default::default() }, ..Default::default() };
                    let words = spv::write_vec(&module, &info, &options, None).unwrap_or_else(|e| panic!("{} {what} {policy:?}: {e}", v.name));
                    let has_type = words.iter().any(|w| w & 0xffff == OP_TYPE_COOPERATIVE_MATRIX);
                    let has_capability = words.windows(2).any(|w| w[0] == (2 << 16 | OP_CAPABILITY) && w[1] == CAPABILITY_COOPERATIVE_MATRIX);
                    assert_eq!(has_type && has_capability, v.is_cooperative(), "{} {what} {policy:?}: cooperative matrices in the SPIR-V", v.name);
                    spirv_val(&words, &format!("{} {what} {policy:?}", v.name));
                }
            }
        }
    }

    /// Runs the SPIR-V validator named by `GRAMIAN_SPIRV_VAL` (SPIRV-Tools
    /// 2025 or later: `.ci/run` installs it; older ones do not know the
    /// cooperative-matrix extension) on `words`, against SPIR-V 1.6 (the
    /// version wgpu writes for Vulkan 1.3; the Vulkan environment's newest
    /// rules also refuse the array strides naga writes on workgroup memory,
    /// which drivers accept). Without the variable this check is skipped; it
    /// is what catches mismatched cooperative tile sizes, which naga accepts.
    fn spirv_val(words: &[u32], what: &str) {
        let Some(tool) = std::env::var_os("GRAMIAN_SPIRV_VAL").filter(|t| !t.is_empty()) else { return };
        let path = std::env::temp_dir().join(format!("gramian-spirv-{}-{}.spv", std::process::id(), what.replace(' ', "-")));
        std::fs::write(&path, bytemuck::cast_slice::<u32, u8>(words)).expect("temporary SPIR-V file");
        let out = std::process::Command::new(&tool).args(["--target-env", "spv1.6"]).arg(&path).output().expect("GRAMIAN_SPIRV_VAL runs");
        let _ = std::fs::remove_file(&path);
        assert!(out.status.success(), "{what}: spirv-val: {}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    }

    /// Without the cooperative-matrix capability naga refuses the
    /// cooperative variants: the validation above is not vacuous.
    #[test]
    fn a_cooperative_variant_needs_its_capability() {
        use naga::valid::{Capabilities, ValidationFlags, Validator};
        let v = CATALOGUE.iter().find(|v| v.is_cooperative()).expect("a cooperative variant");
        let src = product_source(v);
        let module = naga::front::wgsl::parse_str(&src).expect("parses");
        assert!(Validator::new(ValidationFlags::all(), Capabilities::SHADER_FLOAT16 | Capabilities::SUBGROUP).validate(&module).is_err());
        let without_enable = src.replace("enable wgpu_cooperative_matrix;", "");
        assert!(naga::front::wgsl::parse_str(&without_enable).is_err());
    }
}
