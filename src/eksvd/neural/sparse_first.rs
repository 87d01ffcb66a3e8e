//! The first layer of every feature map of a CPU fit, computed from the
//! non-zeros of the minibatch and updated on the host.
//!
//! For source `q` with first layer `(A_q, b_q)` (`A_q` is `d_q x h_1`) and
//! a minibatch `X_B` (rows `x_i`, `i in B`), the layer's output before its
//! activation and the gradients of the loss `L` are
//!
//! `z_i = sum_{c in nz(x_i)} x_ic A_q[c, :] + b_q`,
//! `dL/dA_q = X_B^T G = sum_i sum_{c in nz(x_i)} x_ic e_c g_i^T`,
//! `dL/db_q = sum_i g_i`,
//!
//! with `G = dL/dZ` (rows `g_i`) from burn's backward pass through the rest
//! of the network, where `Z` enters as a tracked leaf. Both products cost
//! `O(nnz(X_B) h_1)` instead of the dense `O(|B| d_q h_1)`, and only the
//! rows of `A_q` at the minibatch's non-zero columns receive gradient. The
//! update is AdamW on every entry ([`adamw_on_host`], burn's operations:
//! the moments of the other rows decay as in the dense fit), one pass over
//! `A_q`. The training rows are held in CSR ([`CsrMatrix`]) in f32.
//!
//! This is the same function and the same gradients as the dense layer up
//! to the order of the f32 sums. The network's own first-layer parameters
//! are written from here ([`SparseFirstLayers::write_into`]) before it is
//! evaluated or kept.

use burn::tensor::{Device, Tensor, TensorData};
use rayon::prelude::*;

use super::model::NeuralEksvdNet;
use super::optimizer::adamw_on_host;
use super::resident::HostData;
use crate::sparse::CsrMatrix;

/// Rows of `A_q` per parallel piece of [`SparseFirstLayers::step`].
const PIECE_ROWS: usize = 128;

/// One source's training rows, first layer, AdamW moments and the bias's
/// gradient accumulator (row-major f32).
struct SourceLayer {
    x: CsrMatrix<f32>,
    weight: Vec<f32>,
    bias: Vec<f32>,
    moments_weight: (Vec<f32>, Vec<f32>),
    moments_bias: (Vec<f32>, Vec<f32>),
    grad_bias: Vec<f32>,
}

/// The first layers of all sources of a CPU fit (see the module header).
pub(crate) struct SparseFirstLayers {
    sources: Vec<SourceLayer>,
    /// Width `h_1` of the first layer's output.
    width: usize,
    weight_decay: f64,
    /// Steps taken.
    steps: usize,
}

/// The non-zeros of row-major `n x d` rows, in CSR.
fn csr_of_rows(rows: &[f32], n: usize, d: usize) -> CsrMatrix<f32> {
    let mut offsets = Vec::with_capacity(n + 1);
    let (mut cols, mut values) = (Vec::new(), Vec::new());
    offsets.push(0);
    for row in rows.chunks_exact(d).take(n) {
        for (c, &v) in row.iter().enumerate() {
            if v != 0.0 {
                cols.push(c);
                values.push(v);
            }
        }
        offsets.push(cols.len());
    }
    CsrMatrix::try_from_csr_data(n, d, offsets, cols, values).expect("sorted, in-range column indices")
}

/// Whether the CPU has AVX (checked at run time): the `#[inline(always)]`
/// loops of [`forward_source`] and [`accumulate_piece`] then run in copies
/// compiled for it, vectorised 8 entries wide with the same products and
/// sums (none fused) in the same order, so the same values.
fn has_avx() -> bool {
    #[cfg(target_arch = "x86_64")]
    return std::arch::is_x86_feature_detected!("avx");
    #[cfg(not(target_arch = "x86_64"))]
    false
}

/// [`forward_source`], compiled for AVX where `avx` (from [`has_avx`]).
fn forward_source_on(avx: bool, s: &SourceLayer, rows: &[usize], z: &mut [f32], h: usize) {
    #[cfg(target_arch = "x86_64")]
    if avx {
        // Safety: the CPU has AVX (`has_avx`).
        return unsafe { forward_source_avx(s, rows, z, h) };
    }
    let _ = avx;
    forward_source(s, rows, z, h)
}

/// [`accumulate_piece`], compiled for AVX where `avx` (from [`has_avx`]).
fn accumulate_piece_on(avx: bool, x: &CsrMatrix<f32>, rows: &[usize], g: &[f32], columns: std::ops::Range<usize>, acc: &mut [f32], h: usize) {
    #[cfg(target_arch = "x86_64")]
    if avx {
        // Safety: the CPU has AVX (`has_avx`).
        return unsafe { accumulate_piece_avx(x, rows, g, columns, acc, h) };
    }
    let _ = avx;
    accumulate_piece(x, rows, g, columns, acc, h)
}

/// [`forward_source`] compiled for AVX.
///
/// Safety: the CPU must have AVX.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx")]
unsafe fn forward_source_avx(s: &SourceLayer, rows: &[usize], z: &mut [f32], h: usize) {
    forward_source(s, rows, z, h)
}

/// [`accumulate_piece`] compiled for AVX.
///
/// Safety: the CPU must have AVX.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx")]
unsafe fn accumulate_piece_avx(x: &CsrMatrix<f32>, rows: &[usize], g: &[f32], columns: std::ops::Range<usize>, acc: &mut [f32], h: usize) {
    accumulate_piece(x, rows, g, columns, acc, h)
}

/// `Z_q` of the rows `rows` of source `s` (the module header's `z_i`,
/// written to the zeroed row-major `[|B|, h]` `z`), by pieces of
/// [`PIECE_ROWS`] rows of `A_q`.
#[inline(always)]
fn forward_source(s: &SourceLayer, rows: &[usize], z: &mut [f32], h: usize) {
    // Per minibatch row, the next of its non-zeros to add.
    let mut next = vec![0usize; rows.len()];
    for (k, piece) in s.weight.chunks(PIECE_ROWS * h).enumerate() {
        let end = k * PIECE_ROWS + piece.len() / h;
        for ((zi, &r), at) in z.chunks_exact_mut(h).zip(rows).zip(next.iter_mut()) {
            let row = s.x.row(r);
            let (cols, values) = (row.col_indices(), row.values());
            while *at < cols.len() && cols[*at] < end {
                let (c, x) = (cols[*at] - k * PIECE_ROWS, values[*at]);
                for (z, &a) in zi.iter_mut().zip(&piece[c * h..(c + 1) * h]) {
                    *z += x * a;
                }
                *at += 1;
            }
        }
    }
    for zi in z.chunks_exact_mut(h) {
        for (z, &b) in zi.iter_mut().zip(&s.bias) {
            *z += b;
        }
    }
}

/// `X_q,B^T G_q` at the columns `columns` of `x` (a piece of `A_q`'s
/// rows), added to the row-major `acc` (`|columns| x h`) from the rows
/// `rows` of `x` and `dL/dZ_q` (`g`, row-major `[|B|, h]`), each entry's
/// sum over the minibatch in its order.
#[inline(always)]
fn accumulate_piece(x: &CsrMatrix<f32>, rows: &[usize], g: &[f32], columns: std::ops::Range<usize>, acc: &mut [f32], h: usize) {
    for (gi, &r) in g.chunks_exact(h).zip(rows) {
        let row = x.row(r);
        let cols = row.col_indices();
        let (from, to) = (cols.partition_point(|&c| c < columns.start), cols.partition_point(|&c| c < columns.end));
        for (&c, &xv) in cols[from..to].iter().zip(&row.values()[from..to]) {
            let c = c - columns.start;
            for (a, &gv) in acc[c * h..(c + 1) * h].iter_mut().zip(gi) {
                *a += xv * gv;
            }
        }
    }
}

impl SparseFirstLayers {
    /// The training rows of `host` in CSR and the first layers of `net`
    /// (its starting weights), with zero moments.
    pub(crate) fn new(host: &HostData, net: &NeuralEksvdNet, weight_decay: f64) -> Self {
        let mut width = 0;
        let sources = host
            .sources
            .iter()
            .zip(&host.dims)
            .enumerate()
            .map(|(q, (rows, &d))| {
                let (weight, bias) = net.first_layer_f32(q);
                width = bias.len();
                let zeros = |len: usize| vec![0f32; len];
                SourceLayer {
                    x: csr_of_rows(rows, host.n, d),
                    moments_weight: (zeros(weight.len()), zeros(weight.len())),
                    moments_bias: (zeros(bias.len()), zeros(bias.len())),
                    grad_bias: zeros(bias.len()),
                    weight,
                    bias,
                }
            })
            .collect();
        SparseFirstLayers { sources, width, weight_decay, steps: 0 }
    }

    /// `Z_q = X_q,B A_q + b_q` of the training rows `rows` for every source,
    /// stacked (`[Q, |B|, h_1]` on `device`, tracked for gradients). `A_q`
    /// is read in pieces of [`PIECE_ROWS`] rows, each piece for every row
    /// of the minibatch before the next (the rows a minibatch touches are
    /// then read in order, not at random); each `z_i` still sums its
    /// non-zeros in column order.
    pub(crate) fn forward(&self, rows: &[usize], device: &Device) -> Tensor<3> {
        let h = self.width;
        let mut stacked = vec![0f32; self.sources.len() * rows.len() * h];
        let avx = has_avx();
        stacked.par_chunks_mut(rows.len() * h).zip(&self.sources).for_each(|(z, s)| forward_source_on(avx, s, rows, z, h));
        Tensor::<3>::from_data(TensorData::new(stacked, [self.sources.len(), rows.len(), h]), device).require_grad()
    }

    /// The gradients `X_q,B^T G_q` and `sum_i g_i` of the rows `rows` from
    /// `dL/dZ_q` (`grads`, row-major `[Q, |B|, h_1]`), then one AdamW step
    /// of every first layer at learning rate `lr`. The rows of each `A_q`
    /// are taken in pieces of [`PIECE_ROWS`] on rayon's threads, each
    /// piece's gradient summed and its update made while the piece is in
    /// cache; every entry's sum runs over the minibatch in its order, so
    /// the result does not depend on the split.
    pub(crate) fn step(&mut self, rows: &[usize], grads: &[f32], lr: f64) {
        self.steps += 1;
        let h = self.width;
        let (t, weight_decay) = (self.steps, self.weight_decay);
        let piece = PIECE_ROWS * h;
        let avx = has_avx();
        self.sources.par_iter_mut().zip(grads.par_chunks(rows.len() * h)).for_each(|(s, g)| {
            let x = &s.x;
            let (m, v) = (&mut s.moments_weight.0, &mut s.moments_weight.1);
            // Each piece's gradient is summed in a scratch of one piece
            // (zero between pieces: AdamW zeroes what it reads), which
            // stays in cache, instead of a gradient of all of `A_q`.
            s.weight.par_chunks_mut(piece).zip(m.par_chunks_mut(piece)).zip(v.par_chunks_mut(piece)).enumerate().for_each_init(|| vec![0f32; piece], |scratch, (k, ((p, m), v))| {
                let acc = &mut scratch[..p.len()];
                let columns = k * PIECE_ROWS..k * PIECE_ROWS + p.len() / h;
                accumulate_piece_on(avx, x, rows, g, columns, acc, h);
                adamw_on_host(p, m, v, acc, t, lr, weight_decay);
            });
            for gi in g.chunks_exact(h).take(rows.len()) {
                for (a, &gv) in s.grad_bias.iter_mut().zip(gi) {
                    *a += gv;
                }
            }
            adamw_on_host(&mut s.bias, &mut s.moments_bias.0, &mut s.moments_bias.1, &mut s.grad_bias, t, lr, weight_decay);
        });
    }

    /// Writes the current first layers into `net`'s first-layer parameters.
    pub(crate) fn write_into(&self, net: &mut NeuralEksvdNet) {
        for (q, s) in self.sources.iter().enumerate() {
            net.set_first_layer_f32(q, &s.weight, &s.bias);
        }
    }
}
