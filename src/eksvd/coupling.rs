//! The symmetric coupling matrix `G_Q` of the dual problem (Eq. 4): zero
//! diagonal blocks and the cross-source kernels `K_pq` (`N_p x N_q`, generally
//! neither square nor symmetric) off the diagonal, with `K_qp = K_pq^T`.
//!
//! `G_Q` can be assembled densely (on the [`Device`]) or applied to vectors
//! without being stored, which is what the iterative eigensolver needs for
//! large `sum_q N_q`.

use nalgebra::DMatrix;

use super::eigensolver::ProductCost;
use crate::data::{check_shape, check_source_matrix};
use crate::error::Result;
use crate::error::Error;
use crate::data::MultiSource;
use crate::gpu::{ElementwiseMap, MatrixProduct};
use crate::linalg::{faer_ref, matmul_acc, matmul_thin, matmul_thin_aware, matmul_tn, matmul_tn_thin};
use faer::reborrow::ReborrowMut;
use faer::{Accum, MatMut, MatRef, Par};
use crate::resident::DeviceMatrix;
use crate::precision::Precision;
use crate::sparse::CsrMatrix;
use crate::{Device, Kernel};

#[derive(Debug, Clone)]
enum Blocks {
    /// Explicit features `Phi_q`: `K_pq = Phi_p Phi_q^T`.
    Features(Vec<DMatrix<f64>>),
    /// Precomputed upper blocks `K_pq`, `p < q`, in the order of [`pair_index`].
    Precomputed(Vec<DMatrix<f64>>),
    /// One kernel function on a shared input space: `K_pq = k(X_p, X_q)`.
    KernelFunction { kernel: Kernel, sources: Vec<DMatrix<f64>> },
    /// [`Blocks::KernelFunction`] on sparse rows (every source as CSR),
    /// blocks and products from [`crate::sparse`] on the CPU.
    SparseKernelFunction { kernel: Kernel, sources: Vec<CsrMatrix<f64>> },
}

/// The coupling matrix `G_Q` of Eq. 4, defined by how its blocks are obtained.
#[derive(Debug, Clone)]
pub struct CouplingMatrix {
    sizes: Vec<usize>,
    blocks: Blocks,
}

/// Position of the pair `p < q` in the row-major list of upper blocks.
fn pair_index(n_sources: usize, p: usize, q: usize) -> usize {
    debug_assert!(p < q && q < n_sources);
    p * n_sources - p * (p + 1) / 2 + (q - p - 1)
}

impl CouplingMatrix {
    /// From explicit features `Phi_q` (`N_q x d_phi`, the same `d_phi` for all
    /// sources): `K_pq = Phi_p Phi_q^T`.
    ///
    /// Errors: fewer than two sources, empty or non-finite features,
    /// differing `d_phi`.
    pub fn from_features(features: Vec<DMatrix<f64>>) -> Result<Self> {
        if features.len() < 2 {
            return Err(Error::TooFewSources(features.len()));
        }
        for (q, phi) in features.iter().enumerate() {
            check_source_matrix("features", q, phi)?;
            check_shape(format!("feature dimension of source {q} vs source 0"), features[0].ncols(), phi.ncols())?;
        }
        Ok(CouplingMatrix { sizes: features.iter().map(|f| f.nrows()).collect(), blocks: Blocks::Features(features) })
    }

    /// From precomputed blocks: `blocks` lists every pair `(p, q, K_pq)` with
    /// `p < q < n_sources` exactly once, `K_pq` of size `N_p x N_q`.
    ///
    /// Errors: fewer than two sources, a missing, repeated or out-of-range
    /// pair, sizes inconsistent across blocks, empty or non-finite blocks.
    pub fn from_blocks(n_sources: usize, blocks: Vec<(usize, usize, DMatrix<f64>)>) -> Result<Self> {
        if n_sources < 2 {
            return Err(Error::TooFewSources(n_sources));
        }
        // Checked: a huge `n_sources` (e.g. `usize::MAX`) cannot match any
        // list of blocks, and must not overflow on the way.
        let n_pairs = n_sources.checked_mul(n_sources - 1).map(|p| p / 2).ok_or_else(|| Error::InvalidParameter {
            name: "n_sources",
            reason: format!("{n_sources} sources have more pairs than fit in usize (given {} blocks)", blocks.len()),
        })?;
        check_shape("number of blocks K_pq with p < q", n_pairs, blocks.len())?;
        let mut slots: Vec<Option<DMatrix<f64>>> = vec![None; n_pairs];
        let mut sizes: Vec<Option<usize>> = vec![None; n_sources];
        for (p, q, k) in blocks {
            if !(p < q && q < n_sources) {
                return Err(Error::InvalidParameter { name: "blocks", reason: format!("pair ({p}, {q}) is not p < q < {n_sources}") });
            }
            check_source_matrix("kernel block", p, &k)?;
            for (s, len) in [(p, k.nrows()), (q, k.ncols())] {
                match sizes[s] {
                    None => sizes[s] = Some(len),
                    Some(n) => check_shape(format!("size of source {s} implied by block ({p}, {q})"), n, len)?,
                }
            }
            let slot = &mut slots[pair_index(n_sources, p, q)];
            if slot.is_some() {
                return Err(Error::InvalidParameter { name: "blocks", reason: format!("pair ({p}, {q}) given twice") });
            }
            *slot = Some(k);
        }
        let sizes = sizes.into_iter().map(|s| s.expect("every source appears in some pair")).collect();
        let blocks = slots.into_iter().map(|s| s.expect("all pairs given")).collect();
        Ok(CouplingMatrix { sizes, blocks: Blocks::Precomputed(blocks) })
    }

    /// From one kernel function on a shared input space (all `d_q` equal):
    /// `K_pq = k(X_p, X_q)`, asymmetric because `X_p != X_q`. Products with
    /// `G_Q` use the core's tiled kernel matvec, so `G_Q` is never stored.
    ///
    /// When any source of `data` is sparse (CSR), every source is held as
    /// CSR (dense ones converted) and the blocks `K_pq` and the products
    /// `K_pq V_q`, `K_pq^T V_p` come from the sparse kernels of
    /// [`crate::sparse`] (sparse inner products and row norms), on the CPU
    /// on every device; nothing of size `N_q x d` is densified.
    pub fn from_kernel(kernel: Kernel, data: &MultiSource) -> Result<Self> {
        kernel.validate()?;
        let n = data.n_sources();
        let d = data.input(0).shape().1;
        for q in 0..n {
            check_shape(format!("input dimension of source {q} vs source 0 (one kernel on a shared space)"), d, data.input(q).shape().1)?;
        }
        if (0..n).any(|q| data.is_sparse(q)) {
            let sources = (0..n)
                .map(|q| match data.input(q).as_csr() {
                    Some(m) => Ok(m.clone()),
                    None => data.input(q).as_matrix().map(|m| CsrMatrix::from(&*m)),
                })
                .collect::<Result<_>>()?;
            return Ok(CouplingMatrix { sizes: data.sample_counts(), blocks: Blocks::SparseKernelFunction { kernel, sources } });
        }
        Ok(CouplingMatrix {
            sizes: data.sample_counts(),
            blocks: Blocks::KernelFunction { kernel, sources: data.try_sources()?.to_vec() },
        })
    }

    /// Number of sources `Q`.
    pub fn n_sources(&self) -> usize {
        self.sizes.len()
    }

    /// Block sizes `N_q`.
    pub fn sizes(&self) -> &[usize] {
        &self.sizes
    }

    /// Order of `G_Q`, `sum_q N_q`.
    pub fn order(&self) -> usize {
        self.sizes.iter().sum()
    }

    /// Row offset of block `q` in `G_Q`.
    pub fn offset(&self, q: usize) -> usize {
        self.sizes[..q].iter().sum()
    }

    /// The explicit features, when built from them.
    pub fn features(&self) -> Option<&[DMatrix<f64>]> {
        match &self.blocks {
            Blocks::Features(f) => Some(f),
            _ => None,
        }
    }

    /// The block `K_pq` (`N_p x N_q`, `p != q`), built on `device`.
    pub fn block(&self, device: &Device, p: usize, q: usize) -> Result<DMatrix<f64>> {
        let n = self.n_sources();
        if p == q || p >= n || q >= n {
            return Err(Error::InvalidParameter { name: "block", reason: format!("({p}, {q}) is not an off-diagonal block of {n} sources") });
        }
        Ok(match &self.blocks {
            Blocks::Features(f) => device.matmul(&f[p], &f[q], MatrixProduct::ABt)?,
            Blocks::Precomputed(b) => {
                if p < q { b[pair_index(n, p, q)].clone() } else { b[pair_index(n, q, p)].transpose() }
            }
            Blocks::KernelFunction { kernel, sources } => device.kernel_matrix(kernel, &sources[p], &sources[q])?,
            Blocks::SparseKernelFunction { kernel, sources } => device.kernel_matrix_sparse(kernel, &sources[p], &sources[q])?,
        })
    }

    /// The blocks `K_pq`, `p < q` (row-major order of the pairs), built on
    /// `device` (one batched product for features): all of `G_Q` that is
    /// not zero or a transpose.
    pub fn upper_blocks(&self, device: &Device) -> Result<Vec<(usize, usize, DMatrix<f64>)>> {
        let n = self.n_sources();
        let pairs: Vec<(usize, usize)> = (0..n).flat_map(|p| ((p + 1)..n).map(move |q| (p, q))).collect();
        let upper: Vec<DMatrix<f64>> = match &self.blocks {
            Blocks::Features(f) => {
                let operands: Vec<(&DMatrix<f64>, &DMatrix<f64>)> = pairs.iter().map(|&(p, q)| (&f[p], &f[q])).collect();
                device.batched_matmul(&operands, MatrixProduct::ABt)?
            }
            _ => pairs.iter().map(|&(p, q)| self.block(device, p, q)).collect::<Result<_>>()?,
        };
        Ok(pairs.into_iter().zip(upper).map(|((p, q), k)| (p, q, k)).collect())
    }

    /// How a product `G_Q V` costs with the columns of `V`: once per
    /// product for a kernel function (each kernel entry evaluated once,
    /// whatever the width), per column for features and stored blocks.
    pub fn product_cost(&self) -> ProductCost {
        match &self.blocks {
            Blocks::KernelFunction { .. } | Blocks::SparseKernelFunction { .. } => ProductCost::PerBlock,
            Blocks::Features(_) | Blocks::Precomputed(_) => ProductCost::PerColumn,
        }
    }

    /// Whether a product `G_Q V` through the features costs fewer
    /// multiply-adds than one through the stored upper blocks: per column
    /// `2 d_phi sum_q N_q` against `2 sum_{p<q} N_p N_q` (eKSVD's Table 2,
    /// three sources of 1200 and 512 features: 3.7 M against 8.6 M).
    /// `false` without features.
    pub fn factored_product_is_cheaper(&self) -> bool {
        let Blocks::Features(f) = &self.blocks else { return false };
        let d_phi = f.first().map_or(0, |phi| phi.ncols()) as f64;
        let total: f64 = self.sizes.iter().map(|&n| n as f64).sum();
        let squares: f64 = self.sizes.iter().map(|&n| (n as f64) * (n as f64)).sum();
        // sum_{p<q} N_p N_q = ((sum N)^2 - sum N^2) / 2
        d_phi * total < (total * total - squares) / 2.0
    }

    /// The order `Q d_phi` of the covariance form (Theorem 3.2) when `G_Q`
    /// comes from features with `Q d_phi < N = sum_q N_q`: then the rank of
    /// `G_Q` is at most `Q d_phi` and that smaller dense problem holds all
    /// of its nonzero eigenpairs (eKSVD's Table 2: 1536 against 3600).
    /// `None` otherwise, and without features.
    pub fn covariance_form_order(&self) -> Option<usize> {
        let Blocks::Features(f) = &self.blocks else { return None };
        let d_phi = f.first().map_or(0, |phi| phi.ncols());
        f.len().checked_mul(d_phi).filter(|&reduced| reduced < self.order())
    }

    /// `||G_Q||_F` from the features alone:
    /// `||G_Q||_F^2 = sum_{p != q} ||Phi_p Phi_q^T||_F^2 = sum_{p != q} <C_p, C_q>`
    /// with the `d_phi x d_phi` Gram matrices `C_q = Phi_q^T Phi_q`
    /// (`||A B^T||_F^2 = tr(A^T A B^T B)`), so `G_Q` is never formed.
    /// `None` without features.
    pub fn frobenius_norm_from_features(&self) -> Option<f64> {
        let Blocks::Features(f) = &self.blocks else { return None };
        let grams: Vec<DMatrix<f64>> = f.iter().map(crate::linalg::gram_tall).collect();
        Some(frobenius_from_grams(&grams))
    }

    /// `G_Q` as a dense symmetric matrix from its [`upper_blocks`](Self::upper_blocks).
    ///
    /// Errors: a block of the wrong shape, `OutOfMemory` when the dense
    /// `sum N_q` square does not fit the host.
    pub fn assemble_from_upper(&self, upper: &[(usize, usize, DMatrix<f64>)]) -> Result<DMatrix<f64>> {
        let order = self.order();
        for (p, q, k) in upper {
            let n = self.n_sources();
            if p >= q || *q >= n {
                return Err(Error::InvalidParameter { name: "upper blocks", reason: format!("({p}, {q}) is not a block above the diagonal of {n} sources") });
            }
            check_shape(format!("rows of block ({p}, {q})"), self.sizes[*p], k.nrows())?;
            check_shape(format!("columns of block ({p}, {q})"), self.sizes[*q], k.ncols())?;
        }
        let mut g = crate::memory::zeroed_matrix::<f64>(order, order, "dense coupling matrix")?;
        for (p, q, k) in upper {
            let (op, oq) = (self.offset(*p), self.offset(*q));
            g.view_mut((op, oq), (self.sizes[*p], self.sizes[*q])).copy_from(k);
            g.view_mut((oq, op), (self.sizes[*q], self.sizes[*p])).copy_from(&k.transpose());
        }
        Ok(g)
    }

    /// `out = G_Q V` from the [`upper_blocks`](Self::upper_blocks):
    /// `(G V)_p += K_pq V_q` and `(G V)_q += K_pq^T V_p` for each stored
    /// pair, by the thin products when `V` has at most 8 columns. Each
    /// block is read twice; the diagonal blocks (zero) and the lower ones
    /// (transposes) are never formed.
    pub(crate) fn apply_upper_blocks(&self, upper: &[(usize, usize, DMatrix<f64>)], v: MatRef<'_, f64>, mut out: MatMut<'_, f64>) {
        out.fill(0.0);
        for (p, q, k) in upper {
            let (op, np, oq, nq) = (self.offset(*p), self.sizes[*p], self.offset(*q), self.sizes[*q]);
            matmul_thin_aware(out.rb_mut().subrows_mut(op, np), Accum::Add, faer_ref(k), v.subrows(oq, nq), 1.0, Par::rayon(0));
            matmul_thin_aware(out.rb_mut().subrows_mut(oq, nq), Accum::Add, faer_ref(k).transpose(), v.subrows(op, np), 1.0, Par::rayon(0));
        }
    }

    /// `G_Q` as a dense symmetric matrix; the blocks `K_pq`, `p < q`, are
    /// built on `device` (one batched product for features).
    pub fn assemble(&self, device: &Device) -> Result<DMatrix<f64>> {
        self.assemble_from_upper(&self.upper_blocks(device)?)
    }

    /// `G_Q V` for `V` of size `sum_q N_q x c`, without storing `G_Q`.
    ///
    /// With features this is `(G_Q V)_q = Phi_q (s - Phi_q^T V_q)` with
    /// `s = sum_p Phi_p^T V_p`, O(sum_q N_q d_phi c) in `f64` on the CPU
    /// (the iterative solver calls it once per Krylov block of 8 columns, too small a
    /// product to pay for a GPU round trip). With a kernel function it runs
    /// the core's pair matvec, one per pair of sources, on the CPU, or on a
    /// GPU `device` through [`CouplingMatrix::on_device`].
    pub fn apply(&self, device: &Device, v: &DMatrix<f64>) -> Result<DMatrix<f64>> {
        check_shape("rows of V vs the order of G_Q", self.order(), v.nrows())?;
        crate::linalg::check_matrix("v", v)?;
        let n = self.n_sources();
        let c = v.ncols();
        let parts: Vec<DMatrix<f64>> = (0..n).map(|q| v.rows(self.offset(q), self.sizes[q]).into_owned()).collect();
        let mut out: Vec<DMatrix<f64>> = self.sizes.iter().map(|&s| DMatrix::zeros(s, c)).collect();
        match &self.blocks {
            Blocks::Features(f) => {
                let rows = FeatureRows::new(&Device::Cpu, f, Precision::F64)?;
                out = rows.expand(&rows.project(&parts)?)?;
            }
            Blocks::Precomputed(b) => {
                for p in 0..n {
                    for q in (p + 1)..n {
                        let k = &b[pair_index(n, p, q)];
                        matmul_acc(&mut out[p], k, &parts[q]);
                        let kt_v = matmul_tn(k, &parts[p]);
                        out[q] += kt_v;
                    }
                }
            }
            Blocks::KernelFunction { kernel, sources } => {
                if device.is_gpu() {
                    return self.on_device(device)?.apply(v);
                }
                // Each pair's kernel entries once, for K_pq V_q and K_pq^T V_p.
                for p in 0..n {
                    for q in (p + 1)..n {
                        let (kv, ktv) = crate::kernel::kernel_matvec_pair_cpu(kernel, &sources[p], &sources[q], &parts[q], &parts[p])?;
                        out[p] += kv;
                        out[q] += ktv;
                    }
                }
            }
            Blocks::SparseKernelFunction { kernel, sources } => {
                // K_pq V_q and K_qp V_p = K_pq^T V_p (k symmetric), each a
                // sparse kernel matvec on the CPU.
                for p in 0..n {
                    for q in (p + 1)..n {
                        out[p] += crate::sparse::kernel_matvec_sparse_cpu(kernel, &sources[p], &sources[q], &parts[q])?;
                        out[q] += crate::sparse::kernel_matvec_sparse_cpu(kernel, &sources[q], &sources[p], &parts[p])?;
                    }
                }
            }
        }
        let mut result = DMatrix::zeros(self.order(), c);
        for (q, block) in out.iter().enumerate() {
            result.rows_mut(self.offset(q), self.sizes[q]).copy_from(block);
        }
        Ok(result)
    }
}

/// `||G_Q||_F` from the Gram matrices `C_q = Phi_q^T Phi_q`
/// ([`CouplingMatrix::frobenius_norm_from_features`]).
pub(crate) fn frobenius_from_grams(grams: &[DMatrix<f64>]) -> f64 {
    let mut squared = 0.0;
    for p in 0..grams.len() {
        for q in (p + 1)..grams.len() {
            squared += 2.0 * grams[p].dot(&grams[q]);
        }
    }
    squared.max(0.0).sqrt()
}

/// The features `Phi_q` of the rows at hand (all rows of each source, or
/// one rank's block of each), on the host or resident on a GPU, for the
/// product through the features
/// `(G_Q V)_q = Phi_q (s - Phi_q^T V_q)`, `s = sum_p Phi_p^T V_p`, in its
/// two halves: [`FeatureRows::project`], the `d_phi x c` products
/// `Phi_q^T V_q` (sums over rows: a sharded product adds them over the
/// ranks), and [`FeatureRows::expand`], the rows of `G_Q V`.
pub(crate) struct FeatureRows<'a> {
    device: &'a Device,
    /// The precision of the resident features and of the products.
    precision: Precision,
    host: &'a [DMatrix<f64>],
    /// On a GPU: each non-empty `Phi_q` uploaded once.
    resident: Option<Vec<Option<DeviceMatrix>>>,
}

impl<'a> FeatureRows<'a> {
    /// The features (the same `d_phi` for all), uploaded in `precision` when
    /// `device` is a GPU.
    pub(crate) fn new(device: &'a Device, features: &'a [DMatrix<f64>], precision: Precision) -> Result<Self> {
        let resident = if device.is_gpu() {
            Some(features.iter().map(|phi| if phi.nrows() == 0 { Ok(None) } else { device.upload(phi, precision).map(Some) }).collect::<std::result::Result<_, _>>()?)
        } else {
            None
        };
        Ok(FeatureRows { device, precision, host: features, resident })
    }

    /// `Phi_q^T V_q` (`d_phi x c`) for the row blocks `parts[q]` of `V`.
    pub(crate) fn project(&self, parts: &[DMatrix<f64>]) -> Result<Vec<DMatrix<f64>>> {
        check_shape("blocks of V vs the sources", self.host.len(), parts.len())?;
        let d = self.host.first().map_or(0, |phi| phi.ncols());
        match &self.resident {
            None => {
                use rayon::prelude::*;
                // The sources' products run side by side (each one also
                // splits its rows between the threads): fewer waits at the
                // end of each small product.
                Ok(self.host.par_iter().zip(parts).map(|(phi, vq)| if phi.nrows() == 0 { DMatrix::zeros(d, vq.ncols()) } else { matmul_tn_thin(phi, vq) }).collect())
            }
            Some(resident) => {
                let (device, precision) = (self.device, self.precision);
                resident
                    .iter()
                    .zip(parts)
                    .map(|(phi, vq)| match phi {
                        None => Ok(DMatrix::zeros(d, vq.ncols())),
                        Some(phi) => device.to_host(&device.resident_matmul(phi, &device.upload(vq, precision)?, MatrixProduct::AtB)?),
                    })
                    .collect()
            }
        }
    }

    /// The rows of `G_Q V` per source, `Phi_q (s - P_q)`, from all the
    /// sources' projections `P_q = Phi_q^T V_q` (summed over all rows).
    pub(crate) fn expand(&self, projected: &[DMatrix<f64>]) -> Result<Vec<DMatrix<f64>>> {
        check_shape("projections vs the sources", self.host.len(), projected.len())?;
        let mut total = projected[0].clone();
        for y in &projected[1..] {
            total += y;
        }
        let c = total.ncols();
        match &self.resident {
            None => {
                use rayon::prelude::*;
                Ok(self.host.par_iter().zip(projected).map(|(phi, pq)| if phi.nrows() == 0 { DMatrix::zeros(0, c) } else { matmul_thin(phi, &(&total - pq)) }).collect())
            }
            Some(resident) => {
                let (device, precision) = (self.device, self.precision);
                resident
                    .iter()
                    .zip(projected)
                    .map(|(phi, pq)| match phi {
                        None => Ok(DMatrix::zeros(0, c)),
                        Some(phi) => device.to_host(&device.resident_matmul(phi, &device.upload(&(&total - pq), precision)?, MatrixProduct::AB)?),
                    })
                    .collect()
            }
        }
    }
}

/// `G_Q` prepared on a device for many products (the Lanczos iterations of
/// one fit): on a GPU each source's features or inputs are uploaded once,
/// and a product moves only `V` up and `G_Q V` down (O(sum_q N_q c)
/// numbers). On the CPU it is the host [`CouplingMatrix::apply`].
pub struct ResidentCoupling<'a> {
    coupling: &'a CouplingMatrix,
    device: &'a Device,
    precision: Precision,
    resident: Option<ResidentBlocks<'a>>,
    /// Scratch tiles of the kernel blocks for products wider than the fused
    /// shader takes: allocated by the first such product, reused by the
    /// others, freed with the coupling.
    tiles: std::cell::RefCell<crate::gpu::KernelTiles>,
}

enum ResidentBlocks<'a> {
    Features(FeatureRows<'a>),
    KernelFunction { kernel: Kernel, sources: Vec<DeviceMatrix> },
}

impl CouplingMatrix {
    /// Prepares `G_Q V` products on `device` (see [`ResidentCoupling`]), in
    /// [`Device::best_precision`]. Precomputed blocks stay on the host (they
    /// are host matrices already), and sparse sources too (their products
    /// run on the CPU).
    pub fn on_device<'a>(&'a self, device: &'a Device) -> Result<ResidentCoupling<'a>> {
        self.on_device_in(device, device.best_precision())
    }

    /// [`CouplingMatrix::on_device`] with the resident data and the products
    /// in `precision` (a fit's [`Device::working_precision`]).
    pub(crate) fn on_device_in<'a>(&'a self, device: &'a Device, precision: Precision) -> Result<ResidentCoupling<'a>> {
        let resident = match (&self.blocks, device.is_gpu()) {
            (_, false) | (Blocks::Precomputed(_), _) | (Blocks::SparseKernelFunction { .. }, _) => None,
            (Blocks::Features(f), true) => Some(ResidentBlocks::Features(FeatureRows::new(device, f, precision)?)),
            (Blocks::KernelFunction { kernel, sources }, true) => Some(ResidentBlocks::KernelFunction {
                kernel: *kernel,
                sources: sources.iter().map(|x| device.upload(x, precision)).collect::<std::result::Result<_, _>>()?,
            }),
        };
        Ok(ResidentCoupling { coupling: self, device, precision, resident, tiles: Default::default() })
    }
}

impl ResidentCoupling<'_> {
    /// `G_Q V` (see [`CouplingMatrix::apply`]); the same numbers up to the
    /// device's precision.
    pub fn apply(&self, v: &DMatrix<f64>) -> Result<DMatrix<f64>> {
        let Some(resident) = &self.resident else {
            return self.coupling.apply(self.device, v);
        };
        let g = self.coupling;
        check_shape("rows of V vs the order of G_Q", g.order(), v.nrows())?;
        crate::linalg::check_matrix("v", v)?;
        let (n, c, device) = (g.n_sources(), v.ncols(), self.device);
        let (kernel, sources) = match resident {
            ResidentBlocks::Features(rows) => {
                // s = sum_p Phi_p^T V_p (d_phi x c each: small, summed on the
                // host), then (G V)_q = Phi_q (s - Phi_q^T V_q) on the device.
                let parts: Vec<DMatrix<f64>> = (0..n).map(|q| v.rows(g.offset(q), g.sizes[q]).into_owned()).collect();
                let blocks = rows.expand(&rows.project(&parts)?)?;
                let mut result = DMatrix::zeros(g.order(), c);
                for (q, block) in blocks.iter().enumerate() {
                    result.rows_mut(g.offset(q), g.sizes[q]).copy_from(block);
                }
                return Ok(result);
            }
            ResidentBlocks::KernelFunction { kernel, sources } => (kernel, sources),
        };
        let precision = self.precision;
        let vd = device.upload(v, precision)?;
        let out = device.zeros(g.order(), c, precision)?;
        self.add_pair_products(kernel, sources, &vd, &out, true)?;
        device.to_host(&out)
    }

    /// Whether products of resident blocks ([`Self::apply_resident`]) run
    /// here: a kernel function's sources resident on a GPU.
    pub(crate) fn products_resident(&self) -> bool {
        matches!(self.resident, Some(ResidentBlocks::KernelFunction { .. }))
    }

    /// The precision of the resident sources and of the products.
    pub(crate) fn precision(&self) -> Precision {
        self.precision
    }

    /// `out (+)= G_Q V` for resident `V` and `out` (`sum N_q x c`, the
    /// sources' rows in order): each pair's kernel entries once, for
    /// `K_pq V_q` and `K_pq^T V_p` (the fused pair matvec), added into
    /// `out` (which is zeroed first unless `accumulate`).
    fn add_pair_products(&self, kernel: &Kernel, sources: &[DeviceMatrix], v: &DeviceMatrix, out: &DeviceMatrix, accumulate: bool) -> Result<()> {
        let (g, device) = (self.coupling, self.device);
        let n = g.n_sources();
        check_shape("rows of V vs the order of G_Q", g.order(), v.nrows())?;
        check_shape("rows of the output vs the order of G_Q", g.order(), out.nrows())?;
        check_shape("columns of the output vs the columns of V", v.ncols(), out.ncols())?;
        if !accumulate {
            // out = 0 V, without an allocation.
            let ctx = device.context().ok_or(Error::DeviceMismatch)?;
            let mut plan = Vec::new();
            ctx.plan_elementwise(ElementwiseMap::Shift { alpha: 0.0, gamma: 0.0 }, v.gpu()?, v.gpu()?, out.gpu()?, &mut plan)?;
            ctx.run_plan(plan)?;
        }
        let parts: Vec<DeviceMatrix> = (0..n).map(|q| v.rows(g.offset(q), g.sizes[q])).collect::<std::result::Result<_, _>>()?;
        let outs: Vec<DeviceMatrix> = (0..n).map(|q| out.rows(g.offset(q), g.sizes[q])).collect::<std::result::Result<_, _>>()?;
        let mut tiles = self.tiles.borrow_mut();
        for p in 0..n {
            for q in (p + 1)..n {
                device.resident_kernel_matvec_pair_reusing(kernel, &sources[p], &sources[q], &parts[q], &parts[p], &outs[p], &outs[q], true, &mut tiles)?;
            }
        }
        Ok(())
    }
}

impl super::krylov::ResidentSymmetricOperator for &ResidentCoupling<'_> {
    /// `out = G_Q V` on the GPU (a kernel function's resident sources).
    fn apply_resident(&mut self, v: &DeviceMatrix, out: &DeviceMatrix) -> Result<()> {
        match &self.resident {
            Some(ResidentBlocks::KernelFunction { kernel, sources }) => self.add_pair_products(kernel, sources, v, out, false),
            _ => Err(Error::NotAvailable("resident products of the coupling matrix")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn products_from_the_upper_blocks_match_the_assembled_matrix() {
        use rand::{rngs::StdRng, Rng, SeedableRng};
        let mut rng = StdRng::seed_from_u64(4);
        let features: Vec<DMatrix<f64>> = [70usize, 45, 58].iter().map(|&n| DMatrix::from_fn(n, 9, |_, _| rng.random_range(-1.0..1.0))).collect();
        let coupling = CouplingMatrix::from_features(features).unwrap();
        let upper = coupling.upper_blocks(&Device::Cpu).unwrap();
        let g = coupling.assemble_from_upper(&upper).unwrap();
        for c in [1usize, 3, 8, 11] {
            let v = DMatrix::from_fn(coupling.order(), c, |_, _| rng.random_range(-1.0..1.0));
            let mut out = DMatrix::from_element(coupling.order(), c, f64::NAN);
            coupling.apply_upper_blocks(&upper, crate::linalg::faer_ref(&v), crate::linalg::faer_mut(&mut out));
            let want = &g * &v;
            assert!((&out - &want).amax() <= 1e-12 * want.amax(), "{c} columns");
        }
    }

    #[test]
    fn pair_index_enumerates_upper_pairs_in_order() {
        let n = 5;
        let mut expected = 0;
        for p in 0..n {
            for q in (p + 1)..n {
                assert_eq!(pair_index(n, p, q), expected);
                expected += 1;
            }
        }
    }
}
