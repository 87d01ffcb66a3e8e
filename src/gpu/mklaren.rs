//! Planning of mklaren's device steps (`shaders/mklaren_step.wgsl`, whose
//! header states what every mode computes): copies, block arg-max and
//! arg-min reductions with their device-side combine, the row gather and
//! the Cholesky column whose pivot is read from a small device state vector,
//! the look-ahead candidate norms and scores (Eq. 14-16), the LAR step of
//! Eq. 11 and the element-wise parts of the LAR update (Eq. 4-5, 8). The
//! fit that strings them together is `crate::mklaren::device`.
//!
//! Every operand is an `f64` device matrix held in one buffer (the fit
//! checks that before it takes this path); offsets are element offsets from
//! the operand's first row. Nothing here reads back or allocates: the
//! dispatches are recorded into a plan that the caller runs.

use bytemuck::Zeroable;

use super::buffers::GpuMatrix;
use super::plan::{Dispatch, PipelineKind};
use super::problem::Problem;
use super::GpuContext;
use crate::error::{Error, Result};
use crate::precision::Precision;

/// Rows one workgroup of the shader handles (its workgroup size).
pub(crate) const MKLAREN_WORKGROUP: usize = 256;

/// "No state slot" in a job.
pub(crate) const NO_SLOT: u32 = u32::MAX;

/// The modes of `mklaren_step.wgsl`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub(crate) enum MklarenMode {
    Copy = 0,
    ArgBlock = 1,
    Score = 2,
    Combine = 3,
    Gather = 4,
    Icd = 5,
    CandidateNorm = 6,
    Kernels = 7,
    Elementwise = 8,
    Small = 9,
    Dots = 10,
    DotSum = 11,
}

/// One job of `mklaren_step.wgsl`: the words its header names, the two
/// scalars, and the operands (`a`, `b`, `c`, `e`, `o`; `None` binds the
/// state in their place) with the element offsets of `a`, `b` and `o`
/// from the operands' first rows.
#[derive(Clone)]
pub(crate) struct MklarenJob<'a> {
    pub(crate) mode: MklarenMode,
    /// Invocations (one per row), or partials / kernels for the one-group modes.
    pub(crate) rows: usize,
    pub(crate) a: Option<(&'a GpuMatrix, usize, usize)>,
    pub(crate) b: Option<(&'a GpuMatrix, usize, usize)>,
    pub(crate) c: Option<&'a GpuMatrix>,
    pub(crate) e: Option<&'a GpuMatrix>,
    pub(crate) o: Option<(&'a GpuMatrix, usize, usize)>,
    pub(crate) slots: (u32, u32),
    pub(crate) predicate: Option<(u32, u32)>,
    pub(crate) words: (u32, u32),
    /// Words 14 and 15.
    pub(crate) more_words: (u32, u32),
    pub(crate) scalars: (f64, f64),
    /// Flops and numbers moved, for the counters.
    pub(crate) work: (f64, u64),
}

impl<'a> MklarenJob<'a> {
    /// A job of `mode` over `rows` with no operands, no predicate and zero words.
    pub(crate) fn new(mode: MklarenMode, rows: usize) -> Self {
        MklarenJob { mode, rows, a: None, b: None, c: None, e: None, o: None, slots: (NO_SLOT, NO_SLOT), predicate: None, words: (0, 0), more_words: (0, 0), scalars: (0.0, 0.0), work: (rows as f64, 2 * rows as u64) }
    }
}

/// The element offset of the first row of `m` in its buffer, with `m` in
/// one buffer.
fn base(m: &GpuMatrix) -> Result<(usize, &wgpu::Buffer)> {
    if !m.block_breaks().is_empty() {
        return Err(Error::InvalidParameter { name: "operand", reason: "a mklaren step's operand must lie in one device buffer".into() });
    }
    let s = m.locate(0);
    Ok((s.local_row * m.ncols(), m.buffer(s.block)))
}

fn word(v: usize, what: &'static str) -> Result<u32> {
    u32::try_from(v).map_err(|_| Error::InvalidParameter { name: what, reason: format!("{v} does not fit a shader word") })
}

impl GpuContext {
    /// Records one job of `mklaren_step.wgsl` with the state vector `st`.
    ///
    /// Errors: an operand in more than one buffer, or not `f64`; an offset
    /// or count beyond a shader word; more workgroups than the grid allows.
    pub(crate) fn plan_mklaren(&self, job: &MklarenJob<'_>, st: &GpuMatrix, plan: &mut Vec<Dispatch>) -> Result<()> {
        let mut operands: Vec<&GpuMatrix> = vec![st];
        operands.extend(job.a.map(|t| t.0));
        operands.extend(job.b.map(|t| t.0));
        operands.extend(job.c);
        operands.extend(job.e);
        operands.extend(job.o.map(|t| t.0));
        if self.check_same(&operands)? != Precision::F64 {
            return Err(Error::Unsupported("mklaren's device steps in f32".into()));
        }
        let (_, st_buffer) = base(st)?;
        let st_base = base(st)?.0;
        if st_base != 0 {
            return Err(Error::InvalidParameter { name: "state", reason: "the state of mklaren's device steps must start its buffer".into() });
        }
        let strided = |t: Option<(&GpuMatrix, usize, usize)>| -> Result<(u32, u32, wgpu::Buffer)> {
            match t {
                None => Ok((0, 0, st_buffer.clone())),
                Some((m, off, rs)) => {
                    let (b0, buf) = base(m)?;
                    Ok((word(b0 + off, "offset")?, word(rs, "stride")?, buf.clone()))
                }
            }
        };
        let plain = |m: Option<&GpuMatrix>| -> Result<wgpu::Buffer> {
            match m {
                None => Ok(st_buffer.clone()),
                Some(m) => {
                    let (b0, buf) = base(m)?;
                    if b0 != 0 {
                        return Err(Error::InvalidParameter { name: "operand", reason: "operands c and e of a mklaren step must start their buffer".into() });
                    }
                    Ok(buf.clone())
                }
            }
        };
        let (a_off, a_rs, ab) = strided(job.a)?;
        let (b_off, b_rs, bb) = strided(job.b)?;
        let (o_off, o_rs, ob) = strided(job.o)?;
        let (cb, eb) = (plain(job.c)?, plain(job.e)?);
        let (pred_slot, pred_value) = job.predicate.unwrap_or((NO_SLOT, 0));
        let words: [u32; 16] = [job.mode as u32, word(job.rows, "rows")?, a_off, a_rs, b_off, b_rs, o_off, o_rs, job.slots.0, job.slots.1, pred_slot, pred_value, job.words.0, job.words.1, job.more_words.0, job.more_words.1];
        let mut problem = Problem::zeroed();
        bytemuck::cast_slice_mut::<Problem, u32>(std::slice::from_mut(&mut problem))[..16].copy_from_slice(&words);
        // Not read by the shader: the work, for the counters.
        problem.u_off = job.work.1.min(u32::MAX as u64) as u32;
        problem.gamma = job.work.0 as f32;
        let entries = job.words.0 as usize * job.words.1 as usize;
        let invocations = match job.mode {
            MklarenMode::Combine | MklarenMode::Kernels | MklarenMode::Small => 1,
            MklarenMode::Dots => entries * job.rows.div_ceil((job.more_words.0 as usize).max(1)),
            MklarenMode::DotSum => entries,
            _ => job.rows,
        };
        let groups = invocations.div_ceil(MKLAREN_WORKGROUP).max(1);
        let max = self.max_workgroups as usize;
        let grid = match job.mode {
            MklarenMode::Dots | MklarenMode::DotSum if groups > max => [max, groups.div_ceil(max)],
            _ => [groups, 1],
        };
        if grid[0] > max || grid[1] > max {
            return Err(Error::InvalidParameter { name: "rows", reason: format!("{invocations} invocations need more workgroups than the adapter's {max}") });
        }
        plan.push(Dispatch {
            problem,
            precision: Precision::F64,
            buffers: vec![ab, bb, cb, eb, ob, st_buffer.clone()],
            weights: None,
            grid: [grid[0] as u32, grid[1] as u32, 1],
            pipeline: PipelineKind::Mklaren,
            variant: 0,
            params: job.scalars,
        });
        Ok(())
    }

    /// Whether `m` is an `f64` matrix in one buffer of this context (an
    /// operand mklaren's device steps accept).
    pub(crate) fn mklaren_operand(&self, m: &GpuMatrix) -> bool {
        self.check_owned(m).is_ok() && m.precision() == Precision::F64 && m.block_breaks().is_empty()
    }

    /// Writes `values` (finite) into the first rows of the `f64` column `m`
    /// (one counted upload of `8 values.len()` bytes; nothing allocated).
    ///
    /// Errors: more values than rows, a matrix of more than one column or
    /// not in one buffer, a non-finite value.
    pub(crate) fn mklaren_write(&self, m: &GpuMatrix, values: &[f64]) -> Result<()> {
        if !self.mklaren_operand(m) || m.ncols() != 1 || values.len() > m.nrows() {
            return Err(Error::InvalidParameter { name: "values", reason: format!("{} values for a {} x {} device column", values.len(), m.nrows(), m.ncols()) });
        }
        if let Some(row) = values.iter().position(|v| !v.is_finite()) {
            return Err(Error::NonFinite { what: "values written to the device", row, col: 0 });
        }
        let (b0, buffer) = base(m)?;
        self.write_counted(buffer, (b0 * 8) as u64, bytemuck::cast_slice(values));
        Ok(())
    }

    /// Partials (4 numbers per workgroup) a block reduction of `rows` rows writes.
    pub(crate) fn mklaren_partials(rows: usize) -> usize {
        4 * rows.div_ceil(MKLAREN_WORKGROUP).max(1)
    }
}

#[cfg(test)]
mod tests {
    /// The shader through naga as wgpu's Vulkan backend takes it (WGSL front
    /// end, validation with `f64`, SPIR-V 1.6 with and without bounds
    /// checks): its modes' workgroup barriers in uniform control flow and
    /// its types are checked without a GPU.
    #[test]
    fn the_mklaren_shader_validates_and_compiles_to_spirv() {
        use naga::back::spv::{self, Capability};
        use naga::proc::{BoundsCheckPolicies, BoundsCheckPolicy};
        use naga::valid::{Capabilities, ValidationFlags, Validator};
        let src = super::super::pipelines::mklaren_source();
        let module = naga::front::wgsl::parse_str(&src).unwrap_or_else(|e| panic!("{}", e.emit_to_string(&src)));
        let info = Validator::new(ValidationFlags::all(), Capabilities::FLOAT64).validate(&module).unwrap_or_else(|e| panic!("{}", e.emit_to_string(&src)));
        let caps: naga::FastHashSet<Capability> = [Capability::Shader, Capability::Float64].into_iter().collect();
        for policy in [BoundsCheckPolicy::Restrict, BoundsCheckPolicy::Unchecked] {
            let options = spv::Options { lang_version: (1, 6), capabilities: Some(caps.clone()), bounds_check_policies: BoundsCheckPolicies { index: policy, buffer: policy, ..Default::default() }, ..Default::default() };
            spv::write_vec(&module, &info, &options, None).unwrap_or_else(|e| panic!("{policy:?}: {e}"));
        }
        // Without f64 the module is refused: the validation is not vacuous.
        assert!(Validator::new(ValidationFlags::all(), Capabilities::empty()).validate(&module).is_err());
    }
}
