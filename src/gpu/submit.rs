//! Submission: running recorded dispatches ([`GpuContext::run_plan`]) in one
//! compute pass per descriptor buffer, error scopes that turn wgpu's
//! validation and out-of-memory errors into typed errors, and the checks
//! that no dispatch is skipped or rejected.

use std::collections::HashMap;
use std::num::NonZeroU64;

use super::plan::{Dispatch, PipelineKind};
use super::problem::{Problem, ProblemF64, Reduce};
use super::GpuContext;
use crate::error::{Error, Result};
use crate::precision::Precision;

impl GpuContext {
    /// Runs `body` inside a wgpu error scope and turns captured validation or
    /// out-of-memory errors into [`Error::Gpu`].
    pub(crate) fn checked<R>(&self, body: impl FnOnce() -> Result<R>) -> Result<R> {
        let oom = self.device.push_error_scope(wgpu::ErrorFilter::OutOfMemory);
        let validation = self.device.push_error_scope(wgpu::ErrorFilter::Validation);
        let out = body();
        let v = pollster::block_on(validation.pop());
        let o = pollster::block_on(oom.pop());
        if let Some(e) = o {
            return Err(Error::device_memory(e.to_string()));
        }
        if let Some(e) = v {
            return Err(Error::Gpu(e.to_string()));
        }
        out
    }

    pub(crate) fn submit_counted(&self, encoder: wgpu::CommandEncoder) {
        self.counters.count_submission();
        let buffer = encoder.finish();
        // A software adapter runs the work inside the submission: time the
        // host is held there counts as blocked.
        let held = self.counters.hold();
        self.queue.submit([buffer]);
        drop(held);
    }

    /// Submits `encoder` and returns the errors its recording or submission
    /// raised (validation, out of memory) before anything reads what it was
    /// to write: wgpu runs none of the commands of a command buffer it
    /// rejects, so the outputs would keep what they held before.
    pub(crate) fn submit_checked(&self, encoder: wgpu::CommandEncoder) -> Result<()> {
        let oom = self.device.push_error_scope(wgpu::ErrorFilter::OutOfMemory);
        let validation = self.device.push_error_scope(wgpu::ErrorFilter::Validation);
        self.submit_counted(encoder);
        let v = pollster::block_on(validation.pop());
        let o = pollster::block_on(oom.pop());
        if let Some(e) = o {
            return Err(Error::device_memory(e.to_string()));
        }
        if let Some(e) = v {
            return Err(Error::Gpu(format!("submission rejected: {e}")));
        }
        Ok(())
    }

    /// Checks a dispatch's workgroup grid before it is recorded: a grid with
    /// no workgroups would skip the dispatch and leave its output as it was,
    /// one beyond the adapter's limit per dimension would be rejected; the
    /// planners never make either, and neither is ever submitted.
    pub(crate) fn check_grid(&self, grid: [u32; 3]) -> Result<()> {
        if grid.iter().any(|&g| g == 0 || g > self.max_workgroups) {
            return Err(Error::Gpu(format!("a dispatch of {grid:?} workgroups (at most {} per dimension, none empty) was not run", self.max_workgroups)));
        }
        Ok(())
    }


    /// Runs recorded dispatches in order, in one compute pass and one
    /// submission (wgpu orders the dispatches' accesses to shared buffers).
    pub(crate) fn run_plan(&self, plan: Vec<Dispatch>) -> Result<()> {
        if plan.is_empty() {
            return Ok(());
        }
        for d in &plan {
            self.check_grid(d.grid)?;
            d.check_reach()?;
        }
        self.checked(|| {
            let align = (self.storage_offset_alignment as usize).max(std::mem::size_of::<ProblemF64>()).next_multiple_of(self.storage_offset_alignment as usize);
            // One descriptor buffer per run, within a binding.
            let per_run = ((self.max_binding_bytes as usize) / align).max(1);
            for part in plan.chunks(per_run) {
                let mut bytes = vec![0u8; part.len() * align];
                for (i, d) in part.iter().enumerate() {
                    let dst = &mut bytes[i * align..];
                    match (d.pipeline, d.precision) {
                        (PipelineKind::Product | PipelineKind::Matvec | PipelineKind::Sparse, Precision::F64) => {
                            let words: [u32; 17] = bytemuck::cast_slice::<Problem, u32>(std::slice::from_ref(&d.problem))[..17].try_into().expect("17 words");
                            let p = ProblemF64 { words, pad: 0, gamma: d.params.0, coef0: d.params.1 };
                            dst[..std::mem::size_of::<ProblemF64>()].copy_from_slice(bytemuck::bytes_of(&p));
                        }
                        (PipelineKind::Elementwise | PipelineKind::IcdColumn, precision) => {
                            // Seven words, then the two scalars (f64 aligned to 8).
                            dst[..28].copy_from_slice(&bytemuck::bytes_of(&d.problem)[..28]);
                            match precision {
                                Precision::F64 => {
                                    dst[32..40].copy_from_slice(&d.params.0.to_le_bytes());
                                    dst[40..48].copy_from_slice(&d.params.1.to_le_bytes());
                                }
                                Precision::F32 => {
                                    dst[28..32].copy_from_slice(&(d.params.0 as f32).to_le_bytes());
                                    dst[32..36].copy_from_slice(&(d.params.1 as f32).to_le_bytes());
                                }
                            }
                        }
                        (PipelineKind::Mklaren, _) => {
                            // Sixteen words, then the two scalars in f64.
                            dst[..64].copy_from_slice(&bytemuck::bytes_of(&d.problem)[..64]);
                            dst[64..72].copy_from_slice(&d.params.0.to_le_bytes());
                            dst[72..80].copy_from_slice(&d.params.1.to_le_bytes());
                        }
                        _ => dst[..std::mem::size_of::<Problem>()].copy_from_slice(bytemuck::bytes_of(&d.problem)),
                    }
                }
                // One reused descriptor buffer, held from the write to the submission.
                self.with_descriptor_buffer(bytes.len() as u64, |descriptors| {
                    self.counters.count_descriptors(bytes.len() as u64);
                    self.queue.write_buffer(descriptors, 0, &bytes);
                    let mut layouts: HashMap<(u8, Precision, usize), (wgpu::ComputePipeline, wgpu::BindGroupLayout)> = HashMap::new();
                    let mut groups = Vec::with_capacity(part.len());
                    for (i, d) in part.iter().enumerate() {
                        let key = (d.pipeline as u8, d.precision, d.variant);
                        if let std::collections::hash_map::Entry::Vacant(e) = layouts.entry(key) {
                            let pipeline = self.pipeline_for(d.pipeline, d.precision, d.variant)?;
                            let layout = pipeline.get_bind_group_layout(0);
                            e.insert((pipeline, layout));
                        }
                        let layout = &layouts[&key].1;
                        let desc_size = match (d.pipeline, d.precision) {
                            (PipelineKind::Product | PipelineKind::Matvec | PipelineKind::Sparse, Precision::F64) => std::mem::size_of::<ProblemF64>(),
                            (PipelineKind::Product | PipelineKind::Matvec | PipelineKind::Sparse, Precision::F32) => std::mem::size_of::<Problem>(),
                            (PipelineKind::RowReduce, _) => std::mem::size_of::<Reduce>(),
                            (PipelineKind::Elementwise | PipelineKind::IcdColumn, Precision::F64) => 48,
                            (PipelineKind::Elementwise | PipelineKind::IcdColumn, Precision::F32) => 36,
                            (PipelineKind::Mklaren, _) => 80,
                        } as u64;
                        let desc = wgpu::BindingResource::Buffer(wgpu::BufferBinding { buffer: descriptors, offset: (i * align) as u64, size: NonZeroU64::new(desc_size) });
                        fn whole(b: &wgpu::Buffer) -> wgpu::BindingResource<'_> {
                            wgpu::BindingResource::Buffer(b.as_entire_buffer_binding())
                        }
                        let mut entries = vec![wgpu::BindGroupEntry { binding: 0, resource: desc }];
                        entries.extend(d.buffers.iter().enumerate().map(|(i, buf)| wgpu::BindGroupEntry { binding: i as u32 + 1, resource: whole(buf) }));
                        if matches!(d.pipeline, PipelineKind::Product | PipelineKind::Matvec) {
                            // No weights: any read-only buffer of the dispatch stands in.
                            entries.push(wgpu::BindGroupEntry { binding: 4, resource: whole(d.weights.as_ref().unwrap_or(&d.buffers[0])) });
                        }
                        groups.push(self.device.create_bind_group(&wgpu::BindGroupDescriptor { label: Some("gramian dispatch"), layout, entries: &entries }));
                    }
                    let mut encoder = self.device.create_command_encoder(&Default::default());
                    {
                        let mut pass = encoder.begin_compute_pass(&Default::default());
                        for (d, g) in part.iter().zip(&groups) {
                            pass.set_pipeline(&layouts[&(d.pipeline as u8, d.precision, d.variant)].0);
                            pass.set_bind_group(0, g, &[]);
                            pass.dispatch_workgroups(d.grid[0], d.grid[1], d.grid[2]);
                            self.counters.count_dispatch(d);
                        }
                    }
                    self.submit_checked(encoder)
                })?;
            }
            Ok(())
        })
    }

    /// Waits until the queue is idle (for timing); a counted wait.
    pub fn synchronize(&self) -> Result<()> {
        let held = self.counters.hold();
        let polled = self.device.poll(wgpu::PollType::wait_indefinitely());
        drop(held);
        self.counters.count_wait();
        polled.map_err(|e| Error::Gpu(format!("poll: {e}")))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A dispatch that would run no workgroup (its output left as it was)
    /// or more than the adapter allows is an error, and nothing runs.
    #[test]
    fn a_dispatch_that_would_be_skipped_or_rejected_is_an_error() {
        let Some(ctx) = super::super::test_context() else { return };
        let x = ctx.upload(&[1.0, 2.0, 3.0], 1, 3, Precision::F32).unwrap();
        let out = ctx.upload(&[7.0], 1, 1, Precision::F32).unwrap();
        let mut plan = Vec::new();
        ctx.plan_row_reduce(&x, &out, false, false, &mut plan).unwrap();
        for grid in [[0, 1, 1], [1, 0, 1], [1, 1, 0], [ctx.max_workgroups + 1, 1, 1]] {
            let mut bad = plan.clone();
            bad[0].grid = grid;
            assert!(matches!(ctx.run_plan(bad), Err(Error::Gpu(_))), "grid {grid:?}");
            assert_eq!(ctx.download(&out).unwrap(), vec![7.0], "grid {grid:?}");
        }
        ctx.run_plan(plan).unwrap();
        assert_eq!(ctx.download(&out).unwrap(), vec![6.0]);
    }
}
