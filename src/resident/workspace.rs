//! A [`Workspace`]: resident operations recorded into outputs the caller
//! names, submitted together, with a pool of outputs reused once nothing
//! else holds them.
//!
//! Every operation (element-wise maps, products, weighted Grams, row
//! reductions, vector sums) is recorded into one pending plan, its
//! scratch (the partial products of a split product, the partial sums of
//! vector sums) from the pool too; the plan is
//! submitted (one submission on a GPU) when something is read back
//! ([`Workspace::sums`], [`Workspace::read_vector`]) or on
//! [`Workspace::flush`], and when the workspace is dropped. The outputs come
//! from [`Workspace::take`]: a matrix the pool made earlier that no one
//! else holds any more (no clone or row view of it exists), or a new one
//! when all of them are in use. An iterative method whose live matrices per
//! iteration are bounded thus allocates only until the pool holds that
//! many, and nothing after. Recorded dispatches run in the order recorded
//! (wgpu orders the accesses of dispatches to shared buffers within a
//! pass and between submissions), so a matrix released and taken again
//! before the plan is submitted is written only after its earlier readers
//! ran.
//!
//! On the CPU the operations run when called, with the arithmetic of the
//! matching `resident_*` calls of [`Device`] (the same functions).

use std::cell::RefCell;

use nalgebra::DMatrix;

use super::{check_precisions, host_write, DeviceMatrix, Repr};
use crate::device::Device;
use crate::error::{Error, Result};
use crate::gpu::{Dispatch, ElementwiseMap, GpuContext, KernelCode, Operand, ProductFlags};
use crate::kernel::Kernel;
use crate::linalg::{self, MatrixProduct};
use crate::precision::Precision;

/// Resident operations of one device recorded for submission together,
/// into outputs from a pool that reuses each of its matrices once no one
/// else holds it: what an iterative method on resident state (the PSD
/// density's dual) uses so that its iterations allocate nothing and submit
/// once per read-back.
pub struct Workspace<'d> {
    device: &'d Device,
    /// Every matrix the pool made (a clone each: its handle here).
    matrices: RefCell<Vec<DeviceMatrix>>,
    /// The dispatches recorded since the last submission.
    plan: RefCell<Vec<Dispatch>>,
}

impl DeviceMatrix {
    /// Whether this handle is the only one to its storage.
    fn is_sole_handle(&self) -> bool {
        match &self.repr {
            Repr::Host { m, .. } => std::sync::Arc::strong_count(m) == 1,
            Repr::Gpu(g) => g.is_sole_handle(),
        }
    }
}

impl<'d> Workspace<'d> {
    /// An empty workspace on `device`.
    pub(crate) fn new(device: &'d Device) -> Self {
        Workspace { device, matrices: RefCell::new(Vec::new()), plan: RefCell::new(Vec::new()) }
    }

    /// The device.
    pub(crate) fn device(&self) -> &'d Device {
        self.device
    }

    /// A `rows x cols` matrix of `precision` for an output: one of the
    /// pool's that no one else holds, else a new one (its content is
    /// whatever it held: outputs are written whole).
    ///
    /// Errors: those of [`Device::zeros`].
    pub(crate) fn take(&self, rows: usize, cols: usize, precision: Precision) -> Result<DeviceMatrix> {
        let mut matrices = self.matrices.borrow_mut();
        if let Some(m) = matrices.iter().find(|m| m.shape() == (rows, cols) && m.precision() == precision && m.is_sole_handle()) {
            return Ok(m.clone());
        }
        let m = self.device.zeros(rows, cols, precision)?;
        matrices.push(m.clone());
        Ok(m)
    }

    /// Matrices the pool holds.
    #[cfg(test)]
    fn pooled(&self) -> usize {
        self.matrices.borrow().len()
    }

    /// Records into the pending plan on a GPU; `cpu` runs on the CPU.
    fn record(&self, gpu: impl FnOnce(&GpuContext, &mut Vec<Dispatch>) -> Result<()>, cpu: impl FnOnce() -> Result<()>) -> Result<()> {
        match self.device.context() {
            None => cpu(),
            Some(ctx) => gpu(ctx, &mut *self.plan.borrow_mut()),
        }
    }

    /// Submits the pending plan (nothing when it is empty).
    ///
    /// Errors: those of the submission (the plan is dropped).
    pub(crate) fn flush(&self) -> Result<()> {
        let plan = std::mem::take(&mut *self.plan.borrow_mut());
        match self.device.context() {
            Some(ctx) if !plan.is_empty() => ctx.run_plan(plan),
            _ => Ok(()),
        }
    }

    /// `out = map(x, y)`, as [`Device::resident_hadamard`] and the other
    /// element-wise calls compute it; `out` of `x`'s shape, sharing storage
    /// with neither.
    pub(crate) fn elementwise_into(&self, map: ElementwiseMap, x: &DeviceMatrix, y: &DeviceMatrix, out: &DeviceMatrix) -> Result<()> {
        check_precisions(&[x, y, out])?;
        match map.operand_rows() {
            None => linalg::check_dim("rows of an element-wise map's operands", x.nrows(), y.nrows())?,
            Some(rows) => linalg::check_dim("rows of an element-wise map's per-column values", rows, y.nrows())?,
        }
        linalg::check_dim("columns of an element-wise map's operands", x.ncols(), y.ncols())?;
        linalg::check_dim("rows of an element-wise map's output", x.nrows(), out.nrows())?;
        linalg::check_dim("columns of an element-wise map's output", x.ncols(), out.ncols())?;
        if out.same_storage(x) || out.same_storage(y) {
            return Err(Error::InvalidParameter { name: "out", reason: "the output of an element-wise map may not share storage with an operand".into() });
        }
        self.record(
            |ctx, plan| ctx.plan_elementwise(map, x.gpu()?, y.gpu()?, out.gpu()?, plan),
            || {
                let value = self.device.elementwise(map, x, y)?;
                let value = value.host_view()?.clone();
                host_write(out, value, false)
            },
        )
    }

    /// `out = a o b` ([`Device::resident_hadamard`]).
    pub(crate) fn hadamard_into(&self, a: &DeviceMatrix, b: &DeviceMatrix, out: &DeviceMatrix) -> Result<()> {
        self.elementwise_into(ElementwiseMap::Hadamard, a, b, out)
    }

    /// `out = alpha X + beta Y + gamma I` with the passes of
    /// [`Device::resident_combine`] (the intermediate of two passes in a
    /// matrix of the pool).
    ///
    /// Errors: those of [`Device::resident_combine`], an output that shares
    /// storage with an operand.
    pub(crate) fn combine_into(&self, alpha: f64, x: &DeviceMatrix, beta: f64, y: &DeviceMatrix, gamma: f64, out: &DeviceMatrix) -> Result<()> {
        for (name, v) in [("alpha", alpha), ("beta", beta), ("gamma", gamma)] {
            if !v.is_finite() {
                return Err(Error::InvalidParameter { name, reason: format!("must be finite, got {v}") });
            }
        }
        if beta == 0.0 {
            return self.elementwise_into(ElementwiseMap::Shift { alpha, gamma }, x, x, out);
        }
        if gamma == 0.0 {
            return self.elementwise_into(ElementwiseMap::Combination { alpha, beta }, x, y, out);
        }
        let combined = self.take(x.nrows(), x.ncols(), x.precision())?;
        self.elementwise_into(ElementwiseMap::Combination { alpha, beta }, x, y, &combined)?;
        self.elementwise_into(ElementwiseMap::Shift { alpha: 1.0, gamma }, &combined, &combined, out)
    }

    /// `out = (v - sqrt(v^2 + c y)) / 2` entry by entry
    /// (the map of `Device::resident_negative_root`).
    ///
    /// Errors: a non-finite `c`; those of the element-wise maps.
    pub(crate) fn negative_root_into(&self, v: &DeviceMatrix, y: &DeviceMatrix, c: f64, out: &DeviceMatrix) -> Result<()> {
        if !c.is_finite() {
            return Err(Error::InvalidParameter { name: "c", reason: format!("must be finite, got {c}") });
        }
        self.elementwise_into(ElementwiseMap::NegativeRoot { scale: c }, v, y, out)
    }

    /// `ln(scale x)` where `scale x > 0` (else 0) into `logs`, and the
    /// indicator of the other entries into `outside` (the maps of `Device::resident_log`).
    ///
    /// Errors: a non-finite `scale`; those of the element-wise maps.
    pub(crate) fn log_into(&self, x: &DeviceMatrix, scale: f64, logs: &DeviceMatrix, outside: &DeviceMatrix) -> Result<()> {
        if !scale.is_finite() {
            return Err(Error::InvalidParameter { name: "scale", reason: format!("must be finite, got {scale}") });
        }
        self.elementwise_into(ElementwiseMap::Log { scale }, x, x, logs)?;
        self.elementwise_into(ElementwiseMap::Outside { scale }, x, x, outside)
    }

    /// `out_ij = x_ij` clipped to `[lo_j, hi_j]` (NaN kept), `bounds` the
    /// 2 x cols rows `lo` and `hi` (the prox of the pinball loss's conjugate).
    ///
    /// Errors: those of the element-wise maps.
    pub(crate) fn clip_into(&self, x: &DeviceMatrix, bounds: &DeviceMatrix, out: &DeviceMatrix) -> Result<()> {
        self.elementwise_into(ElementwiseMap::Box, x, bounds, out)
    }

    /// `out_ij = 0` where `lo_j - slack <= x_ij <= hi_j + slack`, else 1
    /// (NaN too), `bounds` as for [`Self::clip_into`].
    ///
    /// Errors: a non-finite `slack`; those of the element-wise maps.
    pub(crate) fn outside_box_into(&self, x: &DeviceMatrix, bounds: &DeviceMatrix, slack: f64, out: &DeviceMatrix) -> Result<()> {
        if !slack.is_finite() {
            return Err(Error::InvalidParameter { name: "slack", reason: format!("must be finite, got {slack}") });
        }
        self.elementwise_into(ElementwiseMap::OutsideBox { slack }, x, bounds, out)
    }

    /// `out_ij = max(tau_j r_ij, (tau_j - 1) r_ij)`, `levels` the 1 x cols
    /// row of `tau` (the pinball loss of the residuals `r`).
    ///
    /// Errors: those of the element-wise maps.
    pub(crate) fn pinball_into(&self, r: &DeviceMatrix, levels: &DeviceMatrix, out: &DeviceMatrix) -> Result<()> {
        self.elementwise_into(ElementwiseMap::Pinball, r, levels, out)
    }

    /// `out = op(A, B)` ([`Device::resident_matmul_into`], not accumulating).
    pub(crate) fn matmul_into(&self, a: &DeviceMatrix, b: &DeviceMatrix, form: MatrixProduct, out: &DeviceMatrix) -> Result<()> {
        let shape = super::check_form(a.shape(), b.shape(), form)?;
        check_precisions(&[a, b, out])?;
        linalg::check_dim("rows of a product's output", shape.0, out.nrows())?;
        linalg::check_dim("columns of a product's output", shape.1, out.ncols())?;
        if out.same_storage(a) || out.same_storage(b) {
            return Err(Error::InvalidParameter { name: "out", reason: "the output of a device product may not share storage with an operand".into() });
        }
        self.record(
            |ctx, plan| {
                let (oa, ob) = Operand::of_product(a.gpu()?, b.gpu()?, form);
                let scratch = |rows, cols, precision| self.take(rows, cols, precision).and_then(|m| m.gpu().cloned());
                ctx.plan_product(KernelCode::of(&Kernel::Linear), oa, ob, out.gpu()?, ProductFlags { scratch: Some(&scratch), ..ProductFlags::default() }, plan)
            },
            || self.device.resident_matmul_into(a, b, form, out, false),
        )
    }

    /// `out = Phi^T diag(w) Phi` ([`Device::resident_weighted_gram_into`],
    /// not accumulating).
    pub(crate) fn weighted_gram_into(&self, phi: &DeviceMatrix, w: &DeviceMatrix, out: &DeviceMatrix) -> Result<()> {
        super::check_weighted_gram(phi, w, out)?;
        self.record(
            |ctx, plan| {
                let pg = phi.gpu()?;
                let scratch = |rows, cols, precision| self.take(rows, cols, precision).and_then(|m| m.gpu().cloned());
                ctx.plan_product(KernelCode::of(&Kernel::Linear), Operand::transposed(pg), Operand::transposed(pg), out.gpu()?, ProductFlags { weights: Some(w.gpu()?), lower: true, scratch: Some(&scratch), ..ProductFlags::default() }, plan)
            },
            || self.device.resident_weighted_gram_into(phi, w, out, false),
        )
    }

    /// `out_i = sum_k x_ik^2` (`squares`) or `sum_k x_ik`
    /// ([`Device::resident_row_squared_norms`], [`Device::resident_row_sums`]).
    pub(crate) fn row_reduction_into(&self, x: &DeviceMatrix, squares: bool, out: &DeviceMatrix) -> Result<()> {
        check_precisions(&[x, out])?;
        linalg::check_dim("rows of a row reduction's output", x.nrows(), out.nrows())?;
        linalg::check_dim("columns of a row reduction's output", 1, out.ncols())?;
        if out.same_storage(x) {
            return Err(Error::InvalidParameter { name: "out", reason: "the output of a row reduction may not share storage with its operand".into() });
        }
        self.record(
            |ctx, plan| ctx.plan_row_reduce(x.gpu()?, out.gpu()?, squares, false, plan),
            || {
                let value = self.device.row_reduction(x, squares)?;
                let value = value.host_view()?.clone();
                host_write(out, value, false)
            },
        )
    }

    /// The sums of the entries of n x 1 vectors:
    /// recorded with the pending plan, which is submitted, and read back in
    /// one blocking read of `8 vectors.len()` bytes (`f64`).
    ///
    /// Errors: a vector of more than one column, mixed precisions or
    /// devices; [`Error::Overflow`] for a sum that is not finite.
    pub(crate) fn sums(&self, vectors: &[&DeviceMatrix]) -> Result<Vec<f64>> {
        if vectors.is_empty() {
            return Ok(Vec::new());
        }
        check_precisions(vectors)?;
        for v in vectors {
            linalg::check_dim("columns of a summed vector", 1, v.ncols())?;
        }
        let precision = vectors[0].precision();
        let out = self.take(vectors.len(), 1, precision)?;
        match self.device.context() {
            None => {
                let sums: Vec<f64> = vectors.iter().map(|v| v.host_view().map(|h| h.sum())).collect::<Result<_>>()?;
                host_write(&out, DMatrix::from_column_slice(sums.len(), 1, &sums), false)?;
            }
            Some(ctx) => {
                let gpus = vectors.iter().map(|v| v.gpu()).collect::<Result<Vec<_>>>()?;
                let partial = self.take(GpuContext::vector_sum_partials(&gpus).max(1), 1, precision)?;
                ctx.plan_vector_sums_into(&gpus, out.gpu()?, partial.gpu()?, &mut *self.plan.borrow_mut())?;
            }
        }
        Ok(self.read_vector(&out)?.as_slice().to_vec())
    }

    /// Submits the pending plan and reads `m` (n x 1) back
    /// ([`Device::to_host_vector`]).
    pub(crate) fn read_vector(&self, m: &DeviceMatrix) -> Result<nalgebra::DVector<f64>> {
        self.flush()?;
        self.device.to_host_vector(m)
    }
}

impl Drop for Workspace<'_> {
    /// Submits what is still recorded, so that outputs handed out are written.
    fn drop(&mut self) {
        let _ = self.flush();
    }
}

#[cfg(test)]
mod tests {
    use nalgebra::{DMatrix, DVector};
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};

    use super::*;

    use crate::test_support::seed;

    fn devices() -> Vec<Device> {
        let mut out = vec![Device::Cpu];
        out.extend(super::super::tests::gpu());
        out
    }

    /// Recorded operations give exactly what the device's own calls give
    /// (the same maps, products and reductions, `f64`), their sums within
    /// 1e-14 of the sum of magnitudes (a reduction in another order on the
    /// CPU), and a loop that releases its outputs each round allocates only
    /// in its first round: the pool holds as many matrices after ten rounds
    /// as after one, and the device counted no allocation after the first.
    /// The pinball loss's maps (clip to per-column boxes, the indicator of
    /// entries outside them, the pinball terms) on every device against the
    /// host functions they are written after, exactly (one comparison or a
    /// product and a maximum per entry: no rounding to differ), on entries
    /// inside, outside and on the ends of the boxes.
    #[test]
    fn pinball_maps_match_the_host_functions() {
        let mut rng = StdRng::seed_from_u64(seed());
        let (n, k) = (300usize, 3usize);
        let bounds_host = DMatrix::from_fn(2, k, |e, j| if e == 0 { -(0.2 + 0.3 * j as f64) / n as f64 } else { (0.8 - 0.3 * j as f64) / n as f64 });
        let levels_host = DMatrix::from_fn(1, k, |_, j| 0.2 + 0.3 * j as f64);
        let mut x_host = DMatrix::from_fn(n, k, |_, _| rng.random_range(-2.0..2.0) / n as f64);
        x_host[(0, 0)] = bounds_host[(0, 0)];
        x_host[(1, 1)] = bounds_host[(1, 1)];
        for device in devices() {
            let p = Precision::F64;
            let (x, bounds, levels) = (device.upload(&x_host, p).unwrap(), device.upload(&bounds_host, p).unwrap(), device.upload(&levels_host, p).unwrap());
            let ws = Workspace::new(&device);
            let (clipped, outside, losses) = (ws.take(n, k, p).unwrap(), ws.take(n, k, p).unwrap(), ws.take(n, k, p).unwrap());
            ws.clip_into(&x, &bounds, &clipped).unwrap();
            ws.outside_box_into(&x, &bounds, 1e-15, &outside).unwrap();
            ws.pinball_into(&x, &levels, &losses).unwrap();
            ws.flush().unwrap();
            let (c, o, l) = (device.to_host(&clipped).unwrap(), device.to_host(&outside).unwrap(), device.to_host(&losses).unwrap());
            for i in 0..n {
                for j in 0..k {
                    let v = x_host[(i, j)];
                    let (lo, hi) = (bounds_host[(0, j)], bounds_host[(1, j)]);
                    let want = super::super::clip(v, lo, hi);
                    assert_eq!(c[(i, j)], want, "clip at ({i}, {j})");
                    assert_eq!(o[(i, j)], if v >= lo - 1e-15 && v <= hi + 1e-15 { 0.0 } else { 1.0 }, "outside at ({i}, {j})");
                    let want = super::super::pinball(levels_host[(0, j)], v);
                    assert_eq!(l[(i, j)], want, "pinball at ({i}, {j})");
                }
            }
            assert!(o.iter().any(|&v| v == 1.0) && o.iter().any(|&v| v == 0.0), "entries inside and outside the boxes");
        }
    }

    #[test]
    fn recorded_operations_match_the_device_calls_and_reuse_their_outputs() {
        let mut rng = StdRng::seed_from_u64(seed());
        // n past twice the split product's minimum depth: the weighted Gram is
        // split, its partial products from the pool.
        let (n, r) = (5000usize, 7usize);
        let phi_host = DMatrix::from_fn(n, r, |_, _| rng.random_range(-1.0..1.0));
        let w_host = DVector::from_fn(n, |_, _| rng.random_range(0.1..1.0));
        let a_host = DMatrix::from_fn(r, r, |_, _| rng.random_range(-1.0..1.0));
        for device in devices() {
            let (p, f64p) = (Precision::F64, Precision::F64);
            let phi = device.upload(&phi_host, p).unwrap();
            let w = device.upload_vector(&w_host, p).unwrap();
            let a = device.upload(&a_host, p).unwrap();
            let ws = Workspace::new(&device);
            let mut pooled = 0;
            for round in 0..10 {
                let before = device.device_counters();
                let gram = ws.take(r, r, f64p).unwrap();
                ws.weighted_gram_into(&phi, &w, &gram).unwrap();
                let m = ws.take(r, r, f64p).unwrap();
                ws.combine_into(-1.0, &gram, -0.5, &a, -0.25, &m).unwrap();
                let pa = ws.take(n, r, f64p).unwrap();
                ws.matmul_into(&phi, &m, MatrixProduct::AB, &pa).unwrap();
                let h = ws.take(n, r, f64p).unwrap();
                ws.hadamard_into(&pa, &phi, &h).unwrap();
                let forms = ws.take(n, 1, f64p).unwrap();
                ws.row_reduction_into(&h, false, &forms).unwrap();
                let root = ws.take(n, 1, f64p).unwrap();
                ws.negative_root_into(&forms, &w, 0.3, &root).unwrap();
                let (logs, outside) = (ws.take(n, 1, f64p).unwrap(), ws.take(n, 1, f64p).unwrap());
                ws.log_into(&root, -2.0, &logs, &outside).unwrap();
                let norms = ws.take(r, 1, f64p).unwrap();
                ws.row_reduction_into(&m, true, &norms).unwrap();
                let sums = ws.sums(&[&logs, &outside, &norms]).unwrap();
                let allocations = device.device_counters().allocations - before.allocations;
                // The same through the device's calls.
                let m_ref = device.resident_combine(-1.0, &device.resident_weighted_gram(&phi, &w).unwrap(), -0.5, &a, -0.25).unwrap();
                let forms_ref = device.resident_row_sums(&device.resident_hadamard(&device.resident_matmul(&phi, &m_ref, MatrixProduct::AB).unwrap(), &phi).unwrap()).unwrap();
                let root_ref = device.resident_negative_root(&forms_ref, &w, 0.3).unwrap();
                let (logs_ref, outside_ref) = device.resident_log(&root_ref, -2.0).unwrap();
                let norms_ref = device.resident_row_squared_norms(&m_ref).unwrap();
                for (got, want) in [(&m, &m_ref), (&forms, &forms_ref), (&root, &root_ref), (&logs, &logs_ref), (&outside, &outside_ref), (&norms, &norms_ref)] {
                    assert_eq!(device.to_host(got).unwrap(), device.to_host(want).unwrap(), "{} round {round}", device.describe());
                }
                for (k, v) in [&logs_ref, &outside_ref, &norms_ref].iter().enumerate() {
                    let h = device.to_host_vector(v).unwrap();
                    let bound = 1e-14 * h.iter().map(|x| x.abs()).sum::<f64>();
                    assert!((sums[k] - h.sum()).abs() <= bound, "{} sum {k}: {} vs {}", device.describe(), sums[k], h.sum());
                }
                if round == 0 {
                    pooled = ws.pooled();
                } else {
                    assert_eq!((ws.pooled(), allocations), (pooled, 0), "{} round {round}", device.describe());
                }
            }
        }
    }
}
