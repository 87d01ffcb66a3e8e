//! Neural eKSVD (Section 3.4, Lemma 3.3) on burn: J and the loss against the
//! f64 CPU formula of Eq. 3, training on a synthetic multi-source problem,
//! Wgpu (lavapipe) vs the CPU (burn Flex), gamma > 0, NaN/divergence errors, save/load.
#![cfg(feature = "neural")]

use crate::common;

use burn::module::Module;
use burn::tensor::{Tensor, TensorData};
use gramian::eksvd::neural::{burn_device, cross_entropy, objective_per_component, shared_gpu, Activation, EarlyStopping, LossTensors, NeuralBackend, NeuralEksvd, NeuralEksvdNet, NeuralEksvdParams, NeuralWeights};
use gramian::Error;
use gramian::eksvd::objective_terms;
use gramian::estimator::{Fit, OnDevice, Predict, Transform};
use gramian::{Labelled, MultiSource};
use nalgebra::{DMatrix, DVector};
use rand::rngs::StdRng;
use rand::Rng;
use rand_distr::StandardNormal;

/// `n` paired samples of `classes` classes in three sources of dimensions
/// 4, 5, 6: class means drawn at distance ~3 sigma, unit Gaussian noise.
fn synthetic(rng: &mut StdRng, n: usize, classes: usize) -> (MultiSource, Vec<usize>) {
    let dims = [4, 5, 6];
    let labels: Vec<usize> = (0..n).map(|i| i % classes).collect();
    let sources = dims
        .iter()
        .map(|&d| {
            let means = DMatrix::from_fn(classes, d, |_, _| 1.5 * rng.sample::<f64, _>(StandardNormal));
            DMatrix::from_fn(n, d, |i, j| means[(labels[i], j)] + rng.sample::<f64, _>(StandardNormal) * 0.7)
        })
        .collect();
    (MultiSource::paired(sources).unwrap(), labels)
}

fn rows_to_tensor(m: &DMatrix<f64>, device: &burn::tensor::Device) -> Tensor<2> {
    let v: Vec<f32> = (0..m.nrows()).flat_map(|i| (0..m.ncols()).map(move |j| m[(i, j)] as f32)).collect();
    Tensor::from_data(TensorData::new(v, [m.nrows(), m.ncols()]), device)
}

/// One `[n, d_q]` tensor per source, each at its own width (the layout
/// the network trains on).
fn per_source(sources: &[DMatrix<f64>], device: &burn::tensor::Device) -> Vec<Tensor<2>> {
    sources.iter().map(|x| rows_to_tensor(x, device)).collect()
}

fn to_vec(t: Tensor<1>) -> Vec<f64> {
    t.into_data().convert::<f32>().try_to_vec::<f32>().unwrap().into_iter().map(f64::from).collect()
}

fn cpu() -> gramian::Device {
    gramian::Device::cpu()
}

/// `data` with `labels`, checked.
fn labelled(data: &MultiSource, labels: &[usize]) -> Labelled {
    Labelled::new(data.clone(), labels.to_vec()).unwrap()
}

fn small_params(seed: u64) -> NeuralEksvdParams {
    NeuralEksvdParams::new(4).hidden(vec![16]).d_phi(16).batch_size(32).learning_rate(1e-2).seed(seed)
}

/// The largest absolute difference between two networks' feature maps
/// (weights and biases) and projections.
fn max_network_difference(a: &NeuralWeights, b: &NeuralWeights) -> f64 {
    let mut max_diff = 0.0f64;
    for (pa, pb) in a.projections.iter().zip(&b.projections) {
        max_diff = max_diff.max((pa - pb).amax());
    }
    for (fa, fb) in a.feature_maps.iter().zip(&b.feature_maps) {
        for ((a1, b1), (a2, b2)) in fa.iter().zip(fb) {
            max_diff = max_diff.max((a1 - a2).amax()).max((b1 - b2).amax());
        }
    }
    max_diff
}

/// f64 reference of the cross-entropy (mean over samples) of logits.
fn cross_entropy_f64(logits: &DMatrix<f64>, labels: &[usize]) -> f64 {
    let mut total = 0.0;
    for (i, &l) in labels.iter().enumerate() {
        let row = logits.row(i);
        let m = row.max();
        let lse = m + row.iter().map(|v| (v - m).exp()).sum::<f64>().ln();
        total += lse - logits[(i, l)];
    }
    total / labels.len() as f64
}

/// J_k / N and the loss of the burn model (on all N = 40 samples, and on a
/// batch of 20 whose mean stands for the full-data mean) agree with
/// `objective_terms` (Eq. 3, f64, gamma scaled by N/|B| for the batch)
/// divided by N, evaluated on the same weights with an f64 forward pass.
/// Tolerance: f32 rounding, 1e-4 relative to the sum of the magnitudes of
/// the terms of J.
#[test]
fn objective_and_loss_match_the_f64_formula() {
    let mut rng = common::rng();
    for activation in [Activation::Relu, Activation::Tanh, Activation::Gelu] {
        let (data, labels) = synthetic(&mut rng, 40, 3);
        let gamma0 = rng.random_range(0.05..2.0);
        let model = small_params(rng.random()).activation(activation).gamma_init(gamma0).init(&cpu(), vec![4, 5, 6], 3).unwrap();
        let w = model.weights();
        assert!((w.gamma - gamma0).abs() < 1e-5 * gamma0);
        let device = model.burn_device().clone();
        let net = model.net();
        for (rows, scale) in [((0..40).collect::<Vec<_>>(), 1.0), ((0..20).collect(), 2.0)] {
            let sub: Vec<DMatrix<f64>> = data.sources().iter().map(|x| x.select_rows(rows.iter())).collect();
            let scores = net.stacked_scores(per_source(&sub, &device), 0.0);
            let j_burn = to_vec(objective_per_component(net.projections(), scores.clone(), net.gamma(), 40));
            let cpu_scores: Vec<DMatrix<f64>> = sub.iter().enumerate().map(|(q, x)| w.scores(q, x)).collect();
            // The stacked scores (sources of 4, 5 and 6 columns, none padded)
            // and the per-source path agree with the f64 forward pass.
            let flat: Vec<f32> = scores.clone().into_data().try_to_vec::<f32>().unwrap();
            for (q, cpu) in cpu_scores.iter().enumerate() {
                let one: Vec<f32> = net.scores(q, rows_to_tensor(&sub[q], &device)).into_data().try_to_vec::<f32>().unwrap();
                for i in 0..rows.len() {
                    for c in 0..4 {
                        let (s, p, r) = (flat[(q * rows.len() + i) * 4 + c] as f64, one[i * 4 + c] as f64, cpu[(i, c)]);
                        assert!((s - r).abs() <= 1e-4 * r.abs().max(1.0) && (p - r).abs() <= 1e-4 * r.abs().max(1.0), "{activation:?} source {q} row {i}: stacked {s}, per source {p}, f64 {r}");
                    }
                }
            }
            for (k, &j_burn_k) in j_burn.iter().enumerate().take(4) {
                let wk: Vec<DVector<f64>> = w.projections.iter().map(|p| p.column(k).into_owned()).collect();
                let ek: Vec<DVector<f64>> = cpu_scores.iter().map(|e| e.column(k).into_owned()).collect();
                let terms = objective_terms(&wk, &ek, w.gamma * scale).unwrap();
                let scale_j = (terms.weight_norms.abs() + terms.coupling.abs() + terms.variance.abs()) / 40.0;
                let j_cpu = terms.value() / 40.0;
                assert!((j_burn_k - j_cpu).abs() <= 1e-4 * scale_j, "{activation:?} k={k} scale={scale}: burn {j_burn_k} vs f64 {j_cpu} (scale {scale_j})");
            }
            // The loss: sum_k J_k^2 + eta CE with the CE of the classifier.
            let sub_labels: Vec<usize> = rows.iter().map(|&i| labels[i]).collect();
            let mut one_hot = vec![0f32; rows.len() * 3];
            for (r, &l) in sub_labels.iter().enumerate() {
                one_hot[r * 3 + l] = 1.0;
            }
            let one_hot = Tensor::from_data(TensorData::new(one_hot, [rows.len(), 3]), &device);
            let loss = LossTensors::new(objective_per_component(net.projections(), scores.clone(), net.gamma(), 40), cross_entropy(net.logits(scores), one_hot), 0.7);
            let mut concat = DMatrix::zeros(rows.len(), 12);
            for (q, e) in cpu_scores.iter().enumerate() {
                concat.columns_mut(q * 4, 4).copy_from(e);
            }
            let logits = concat * &w.classifier.0 + DMatrix::from_fn(rows.len(), 3, |_, c| w.classifier.1[c]);
            let ce_cpu = cross_entropy_f64(&logits, &sub_labels);
            let ce = to_vec(loss.cross_entropy)[0];
            assert!((ce - ce_cpu).abs() < 1e-4 * ce_cpu.max(1.0), "{activation:?}: CE burn {ce} vs f64 {ce_cpu}");
            let j2: f64 = j_burn.iter().map(|j| j * j).sum();
            let total = to_vec(loss.total)[0];
            assert!((total - (j2 + 0.7 * ce_cpu)).abs() < 1e-4 * (j2 + 0.7 * ce_cpu), "total {total} vs {}", j2 + 0.7 * ce_cpu);
            if scale == 1.0 {
                // The chunked host evaluation used for the curves agrees too.
                let values = model.loss(&labelled(&data, &labels), 0.7).unwrap();
                assert!((values.objective_squared - j2).abs() < 1e-4 * j2.max(1e-6));
                assert!((values.cross_entropy - ce_cpu).abs() < 1e-4 * ce_cpu.max(1.0));
            }
        }
    }
}

fn accuracy(truth: &[usize], predicted: &[usize]) -> f64 {
    truth.iter().zip(predicted).filter(|(a, b)| a == b).count() as f64 / truth.len() as f64
}

/// A short CPU training run lowers sum_k J_k^2 and the cross-entropy on
/// the training set and classifies held-out samples of a well-separated
/// 3-class problem with accuracy >= 0.85; gamma stays > 0.
#[test]
fn training_lowers_both_losses_and_classifies() {
    let mut rng = common::rng();
    let (data, labels) = synthetic(&mut rng, 240, 3);
    let train_idx: Vec<usize> = (0..180).collect();
    let test_idx: Vec<usize> = (180..240).collect();
    let train = data.select_rows(&train_idx).unwrap();
    let test = data.select_rows(&test_idx).unwrap();
    let (train_labels, test_labels): (Vec<usize>, Vec<usize>) = (labels[..180].to_vec(), labels[180..].to_vec());
    let params = small_params(rng.random()).max_epochs(25);
    let before = params.init(&cpu(), vec![4, 5, 6], 3).unwrap().loss(&labelled(&train, &train_labels), 1.0).unwrap();
    let start = std::time::Instant::now();
    let model = params.fit(&cpu(), &labelled(&train, &train_labels)).unwrap();
    let fit_seconds = start.elapsed().as_secs_f64();
    let after = model.loss(&labelled(&train, &train_labels), 1.0).unwrap();
    eprintln!("J^2 {:.3e} -> {:.3e}, CE {:.4} -> {:.4}, gamma {:.4}", before.objective_squared, after.objective_squared, before.cross_entropy, after.cross_entropy, model.gamma());
    // A tenfold drop at least: over seeds 1..40 the ratio was 0.002-0.043,
    // and GRAMIAN_TEST_SEED=1796194935021325573 gave 0.051 (the bound was 0.05).
    assert!(after.objective_squared < 0.1 * before.objective_squared, "J^2 {} -> {}", before.objective_squared, after.objective_squared);
    assert!(after.cross_entropy < 0.5 * before.cross_entropy, "CE {} -> {}", before.cross_entropy, after.cross_entropy);
    let acc = accuracy(&test_labels, &model.predict(&test).unwrap());
    assert!(acc >= 0.85, "held-out accuracy {acc}");
    assert!(model.gamma() > 0.0 && model.gamma().is_finite());
    let h = model.history();
    assert_eq!(h.epochs.len(), 25);
    assert!(h.epochs.iter().all(|e| e.gamma > 0.0 && e.objective_squared.is_finite() && e.cross_entropy.is_finite()));
    // Where the time went: the setup, each epoch's steps and evaluations
    // are timed, and they fit inside the whole fit's time.
    let timed = h.setup_seconds + h.epochs.iter().map(|e| e.seconds + e.evaluation_seconds).sum::<f64>();
    assert!(h.setup_seconds > 0.0 && h.epochs.iter().all(|e| e.seconds > 0.0 && e.evaluation_seconds > 0.0));
    assert!(timed <= fit_seconds, "timed parts {timed} s, whole fit {fit_seconds} s");
}

/// Early stopping keeps the epoch with the best validation macro-F1 (ties:
/// the lower validation cross-entropy), and stops `patience` epochs after it.
#[test]
fn early_stopping_keeps_the_best_validation_epoch() {
    let mut rng = common::rng();
    let (data, labels) = synthetic(&mut rng, 150, 3);
    let train = data.select_rows(&(0..100).collect::<Vec<_>>()).unwrap();
    let val = data.select_rows(&(100..150).collect::<Vec<_>>()).unwrap();
    let model = small_params(rng.random()).max_epochs(30).patience(5).fit_with_validation(&cpu(), &labelled(&train, &labels[..100]), &labelled(&val, &labels[100..])).unwrap();
    let h = model.history();
    let score = |e: &gramian::eksvd::neural::EpochRecord| (e.validation_f1.unwrap(), -e.validation_cross_entropy.unwrap());
    let best = h.epochs.iter().max_by(|a, b| score(a).partial_cmp(&score(b)).unwrap()).unwrap();
    assert_eq!(model.best_epoch(), best.epoch);
    assert!(h.epochs.len() == 30 || h.epochs.len() == best.epoch + 5, "stopped after {} epochs, best {}", h.epochs.len(), best.epoch);
    let f1 = gramian::data::macro_f1(&labels[100..], &model.predict(&val).unwrap()).unwrap();
    assert!((f1 - best.validation_f1.unwrap()).abs() < 1e-12, "kept model F1 {f1} vs best {:?}", best.validation_f1);
    let ce = model.loss(&labelled(&val, &labels[100..]), 1.0).unwrap().cross_entropy;
    assert!((ce - best.validation_cross_entropy.unwrap()).abs() < 1e-9, "kept model validation CE {ce} vs recorded {:?}", best.validation_cross_entropy);
}

/// Early stopping on the validation cross-entropy keeps the epoch where it
/// is lowest, and the kept model has that cross-entropy.
#[test]
fn early_stopping_on_the_validation_cross_entropy() {
    let mut rng = common::rng();
    let (data, labels) = synthetic(&mut rng, 150, 3);
    let train = data.select_rows(&(0..100).collect::<Vec<_>>()).unwrap();
    let val = data.select_rows(&(100..150).collect::<Vec<_>>()).unwrap();
    let params = small_params(rng.random()).max_epochs(25).patience(4).early_stopping(EarlyStopping::ValidationCrossEntropy);
    let model = params.fit_with_validation(&cpu(), &labelled(&train, &labels[..100]), &labelled(&val, &labels[100..])).unwrap();
    let h = model.history();
    let ces: Vec<f64> = h.epochs.iter().map(|e| e.validation_cross_entropy.unwrap()).collect();
    let lowest = ces.iter().cloned().fold(f64::INFINITY, f64::min);
    let at = ces.iter().position(|&c| c == lowest).unwrap() + 1;
    assert_eq!(model.best_epoch(), at);
    assert!(h.epochs.len() == 25 || h.epochs.len() == at + 4, "stopped after {} epochs, best {at}", h.epochs.len());
    let ce = model.loss(&labelled(&val, &labels[100..]), 1.0).unwrap().cross_entropy;
    assert!((ce - lowest).abs() < 1e-9 * lowest.max(1.0), "kept model validation CE {ce} vs lowest {lowest}");
}

/// The exact mean, variance and range (largest minus smallest value) of the
/// stacked feature maps (`[Q, n, d_phi]`, row-major) under inverted dropout
/// with `p = 1/2` on the one hidden layer of `weights`: for each row, every
/// mask of the hidden units in Gray-code
/// order (one unit flips between consecutive masks, so the output layer's
/// input is updated by one row of `A_2`).
fn dropout_moments_over_all_masks(weights: &NeuralWeights, sources: &[DMatrix<f64>]) -> Vec<(f64, f64, f64)> {
    let mut out = Vec::new();
    for (q, x) in sources.iter().enumerate() {
        let [(a1, b1), (a2, b2)] = &weights.feature_maps[q][..] else { panic!("one hidden layer") };
        let (hidden, d_phi) = (a2.nrows(), a2.ncols());
        let masks = 1usize << hidden;
        for i in 0..x.nrows() {
            let h: Vec<f64> = (0..hidden).map(|u| weights.activation.apply_f64((x.row(i) * a1.column(u))[0] + b1[u])).collect();
            // Mask 0 (every unit dropped): z = b_2.
            let mut z: Vec<f64> = b2.iter().copied().collect();
            let mut kept = vec![false; hidden];
            let (mut sum, mut sum_sq) = (vec![0.0; d_phi], vec![0.0; d_phi]);
            let (mut low, mut high) = (vec![f64::INFINITY; d_phi], vec![f64::NEG_INFINITY; d_phi]);
            for step in 0..masks {
                if step > 0 {
                    let u = step.trailing_zeros() as usize;
                    let sign = if kept[u] { -1.0 } else { 1.0 };
                    kept[u] = !kept[u];
                    for j in 0..d_phi {
                        z[j] += sign * 2.0 * h[u] * a2[(u, j)];
                    }
                }
                for j in 0..d_phi {
                    let phi = weights.activation.apply_f64(z[j]);
                    sum[j] += phi;
                    sum_sq[j] += phi * phi;
                    low[j] = low[j].min(phi);
                    high[j] = high[j].max(phi);
                }
            }
            let m = masks as f64;
            out.extend((0..d_phi).map(|j| (sum[j] / m, (sum_sq[j] / m - (sum[j] / m).powi(2)).max(0.0), high[j] - low[j])));
        }
    }
    out
}

/// Dropout: the stacked map without dropout is each source's own feature
/// map (to f32 rounding); with `p = 0.5`
/// each hidden unit is zeroed half the time and the survivors scaled by 2,
/// so the mean of many draws approaches the exact mean over all masks
/// (enumerated on the host in f64; not the plain map, which the output
/// layer's ReLU puts below it, the gap that failed the earlier check for
/// GRAMIAN_TEST_SEED=1796468485582996856); training
/// with dropout is replayable for a seed, differs from training without, and
/// a probability outside `[0, 1)` is a typed error.
#[test]
fn dropout_in_the_feature_maps() {
    let mut rng = common::rng();
    let (data, labels) = synthetic(&mut rng, 80, 3);
    let device = burn_device(&gramian::Device::Cpu).unwrap();
    // No hidden layer after which to drop: one hidden layer of 16 units,
    // evaluated with a linear activation would hide the mask, so ReLU.
    let model = small_params(3).hidden(vec![16]).init(&cpu(), data.sources().iter().map(|x| x.ncols()).collect(), 3).unwrap();
    let net = model.net();
    let x = per_source(data.sources(), &device);
    let plain: Vec<f32> = net.stacked_features(x.clone(), 0.0).into_data().try_to_vec::<f32>().unwrap();
    // Source 0's block of the stacked features is its own feature map.
    let first: Vec<f32> = net.features(0, rows_to_tensor(data.source(0), &device)).into_data().try_to_vec::<f32>().unwrap();
    assert!(first.iter().zip(&plain).all(|(a, b)| (a - b).abs() <= 1e-5 * a.abs().max(1.0)));
    // Every hidden unit dropped: the output layer sees zeros, and its bias is
    // zero at initialisation, so phi is ReLU(0) = 0.
    let all_dropped: Vec<f32> = net.stacked_features(x.clone(), 1.0).into_data().try_to_vec::<f32>().unwrap();
    assert!(all_dropped.iter().all(|&v| v == 0.0));
    device.seed(7);
    let draws = 2000;
    let mut mean = vec![0.0f64; plain.len()];
    for _ in 0..draws {
        let d: Vec<f32> = net.stacked_features(x.clone(), 0.5).into_data().try_to_vec::<f32>().unwrap();
        for (m, v) in mean.iter_mut().zip(&d) {
            *m += *v as f64 / draws as f64;
        }
    }
    // The exact mean over masks, in f64 on the host: the output layer's
    // ReLU makes it differ from the plain map (Jensen), so the reference is
    // E_m[ReLU((2 m * h) A_2 + b_2)] over all 2^16 masks of the 16 hidden
    // units, enumerated in Gray-code order (one unit flips per mask).
    let weights = model.weights();
    let exact = dropout_moments_over_all_masks(&weights, data.sources());
    assert_eq!(exact.len(), plain.len());
    let scale = plain.iter().map(|v| v.abs() as f64).fold(0.0, f64::max);
    // Each entry's mean of 2000 draws against its exact mean, within
    // Bernstein's bound for a mean of independent draws of variance v and
    // range R at probability 1e-9 an entry (L = ln(2e9)):
    // sqrt(2 v L / n) + 2 R L / (3 n), plus f32 rounding. It holds for rare
    // outputs too (one mask in thousands positive), where a normal
    // approximation does not.
    let log_term = (2e9f64).ln();
    let n = draws as f64;
    let mut worst = 0.0f64;
    for (m, (e, variance, range)) in mean.iter().zip(&exact) {
        let bound = (2.0 * variance * log_term / n).sqrt() + 2.0 * range * log_term / (3.0 * n);
        worst = worst.max((m - e).abs() / (bound + 1e-5 * scale.max(1.0)));
    }
    eprintln!("largest gap to the exact mean: {worst:.3} of the tolerance");
    assert!(worst <= 1.0, "mean of {draws} dropout draws off its exact mean by {worst} times the tolerance (scale {scale})");
    let one = mean.iter().zip(&plain).any(|(m, p)| (m - *p as f64).abs() > 1e-6);
    assert!(one, "dropout changed nothing");

    let train = |p: f64| small_params(5).hidden(vec![16]).max_epochs(3).dropout(p).fit(&cpu(), &labelled(&data, &labels)).unwrap().weights().projections[0].clone();
    assert_eq!(train(0.3), train(0.3), "dropout training is not replayable for a seed");
    assert_ne!(train(0.3), train(0.0));
    for bad in [1.0, -0.1, f64::NAN] {
        assert!(matches!(small_params(1).dropout(bad).fit(&cpu(), &labelled(&data, &labels)), Err(Error::InvalidParameter { name: "dropout", .. })), "dropout {bad}");
    }
}

/// Input noise: 0 is the plain training bit for bit; a positive standard
/// deviation changes the fit, is replayable for a seed, and a fit on noisy
/// inputs still learns (training macro-F1 well above chance); a negative
/// or non-finite value is a typed error.
#[test]
fn gaussian_noise_on_the_inputs() {
    let mut rng = common::rng();
    let (data, labels) = synthetic(&mut rng, 80, 3);
    let train = |s: f64| small_params(5).max_epochs(3).input_noise(s).fit(&cpu(), &labelled(&data, &labels)).unwrap().weights().projections[0].clone();
    let plain = small_params(5).max_epochs(3).fit(&cpu(), &labelled(&data, &labels)).unwrap().weights().projections[0].clone();
    assert_eq!(train(0.0), plain, "zero input noise changed the fit");
    assert_eq!(train(0.2), train(0.2), "noisy training is not replayable for a seed");
    assert_ne!(train(0.2), plain, "input noise changed nothing");
    let model = small_params(5).max_epochs(30).input_noise(0.1).fit(&cpu(), &labelled(&data, &labels)).unwrap();
    let f1 = gramian::data::macro_f1(&labels, &model.predict(&data).unwrap()).unwrap();
    assert!(f1 > 0.8, "training macro-F1 {f1} after 30 noisy epochs");
    for bad in [-0.1, f64::NAN, f64::INFINITY] {
        assert!(matches!(small_params(1).input_noise(bad).fit(&cpu(), &labelled(&data, &labels)), Err(Error::InvalidParameter { name: "input_noise", .. })), "input noise {bad}");
    }
}

/// NaN input, values that overflow f32 and a diverging run give typed
/// errors, never a model.
#[test]
fn bad_input_and_divergence_give_errors() {
    let mut rng = common::rng();
    let (data, labels) = synthetic(&mut rng, 60, 3);
    let mut with_nan = data.sources().to_vec();
    with_nan[1][(3, 2)] = f64::NAN;
    assert!(matches!(MultiSource::paired(with_nan.clone()), Err(Error::NonFiniteSource { source_index: 1, row: 3, col: 2, .. })));
    let model = small_params(1).init(&cpu(), vec![4, 5, 6], 3).unwrap();
    assert!(matches!(model.transform_source(1, &with_nan[1]), Err(Error::NonFiniteSource { source_index: 1, .. })));
    assert!(matches!(model.transform_source(0, &with_nan[1]), Err(Error::ShapeMismatch { .. })));
    let mut huge = data.sources().to_vec();
    huge[2][(0, 0)] = 1e300;
    let huge = MultiSource::paired(huge).unwrap();
    assert!(matches!(small_params(1).fit(&cpu(), &labelled(&huge, &labels)), Err(Error::SourceNotRepresentable { source_index: 2, .. })));
    assert!(matches!(Labelled::new(data.clone(), labels[..10].to_vec()), Err(Error::ShapeMismatch { .. })));
    assert!(matches!(small_params(1).learning_rate(f64::NAN).fit(&cpu(), &labelled(&data, &labels)), Err(Error::InvalidParameter { name: "learning_rate", .. })));
    assert!(matches!(small_params(1).weight_decay(-1.0).fit(&cpu(), &labelled(&data, &labels)), Err(Error::InvalidParameter { name: "weight_decay", .. })));
    assert!(matches!(small_params(1).gamma_init(-1.0).fit(&cpu(), &labelled(&data, &labels)), Err(Error::InvalidParameter { name: "gamma_init", .. })));
    match small_params(rng.random()).learning_rate(1e4).max_epochs(3).fit(&cpu(), &labelled(&data, &labels)) {
        Err(Error::Diverged { epoch, .. }) => assert!(epoch >= 1),
        other => panic!("expected Diverged, got {:?}", other.map(|m| m.gamma())),
    }
}

/// Weights -> network -> weights is exact (the f64 weights hold f32
/// values), gamma to f32 rounding; weights that fit no architecture are
/// typed errors, not panics.
#[test]
fn network_from_weights_round_trips_and_checks_shapes() {
    let model = small_params(3).hidden(vec![16, 8]).init(&cpu(), vec![4, 5, 6], 3).unwrap();
    let (w, device) = (model.weights(), model.burn_device().clone());
    let back = NeuralEksvdNet::from_weights(&w, &device).unwrap().export();
    assert_eq!((&back.feature_maps, &back.projections, &back.classifier), (&w.feature_maps, &w.projections, &w.classifier));
    assert!((back.gamma - w.gamma).abs() <= 1e-6 * w.gamma);
    type Break = fn(&mut gramian::eksvd::neural::NeuralWeights);
    let breaks: [(&str, Break); 7] = [
        ("a hidden width differs", |w| w.feature_maps[1][1].0 = DMatrix::zeros(16, 7)),
        ("a layer missing", |w| {
            w.feature_maps[2].pop();
        }),
        ("a bias too short", |w| w.feature_maps[0][0].1 = DVector::zeros(3)),
        ("a projection missing", |w| {
            w.projections.pop();
        }),
        ("a projection of another k", |w| w.projections[1] = DMatrix::zeros(16, 5)),
        ("a classifier of the wrong rows", |w| w.classifier.0 = DMatrix::zeros(11, 3)),
        ("gamma NaN", |w| w.gamma = f64::NAN),
    ];
    for (what, break_it) in breaks {
        let mut bad = w.clone();
        break_it(&mut bad);
        assert!(matches!(NeuralEksvdNet::from_weights(&bad, &device), Err(Error::InvalidParameter { name: "weights", .. })), "{what}");
    }
}

/// save -> load gives the identical transform and predictions.
#[test]
fn save_and_load_round_trip() {
    let mut rng = common::rng();
    let (data, labels) = synthetic(&mut rng, 60, 3);
    let model = small_params(rng.random()).activation(Activation::Tanh).hidden(vec![8, 12]).max_epochs(2).fit(&cpu(), &labelled(&data, &labels)).unwrap();
    let dir = std::env::temp_dir().join(format!("gramian-neural-{}-{}", std::process::id(), rng.random::<u32>()));
    model.save(&dir).unwrap();
    let loaded = NeuralEksvd::load(&dir).unwrap();
    assert_eq!(loaded.architecture(), model.architecture());
    for q in 0..3 {
        assert_eq!(loaded.transform_source(q, data.source(q)).unwrap(), model.transform_source(q, data.source(q)).unwrap());
    }
    assert_eq!(loaded.predict(&data).unwrap(), model.predict(&data).unwrap());
    assert_eq!(loaded.gamma(), model.gamma());
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(matches!(NeuralEksvd::load(&dir), Err(Error::Record(_))));
}

/// Each source's first layer has exactly its own `d_q` rows: the network's
/// parameters are `sum_q (d_q + 1) h_1` for the first layers, nothing for
/// padding, and a saved model writes `format=2`.
#[test]
fn first_layers_are_as_wide_as_their_sources() {
    let dims = vec![3, 40, 7];
    let model = small_params(5).hidden(vec![8]).init(&cpu(), dims.clone(), 3).unwrap();
    let w = model.weights();
    let (h1, d_phi, k, q) = (8, w.projections[0].nrows(), w.projections[0].ncols(), dims.len());
    let first: usize = dims.iter().map(|d| (d + 1) * h1).sum();
    let expected = first + q * (h1 + 1) * d_phi + q * d_phi * k + 1 + (q * k + 1) * 3;
    assert_eq!(model.net().num_params(), expected);
    for (s, &d) in dims.iter().enumerate() {
        assert_eq!(w.feature_maps[s][0].0.shape(), (d, h1));
    }
    let dir = std::env::temp_dir().join(format!("gramian-neural-format-2-{}", std::process::id()));
    model.save(&dir).unwrap();
    assert!(std::fs::read_to_string(dir.join("architecture.txt")).unwrap().starts_with("format=2\n"));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The same first Adam steps on Wgpu (lavapipe in CI) and the CPU: same
/// initial weights and batches, so the curves and weights agree up to f32
/// rounding (tolerance 1e-3 relative on the losses, 2e-3 absolute on the
/// weights, which move by about the learning rate 1e-2 per step).
#[test]
fn wgpu_and_cpu_agree_over_the_first_steps() {
    if NeuralBackend::Wgpu.device().is_err() {
        let e = NeuralBackend::Wgpu.device().unwrap_err();
        if std::env::var(common::REQUIRE_GPU_ENV).as_deref() == Ok("1") {
            panic!("{}=1 but burn's Wgpu backend has no adapter: {e}", common::REQUIRE_GPU_ENV);
        }
        eprintln!("SKIPPED: {e}");
        return;
    }
    let mut rng = common::rng();
    let (data, labels) = synthetic(&mut rng, 64, 3);
    let params = small_params(rng.random()).max_epochs(2);
    let cpu = params.fit(&NeuralBackend::Cpu.device().unwrap(), &labelled(&data, &labels)).unwrap();
    let gpu = params.fit(&NeuralBackend::Wgpu.device().unwrap(), &labelled(&data, &labels)).unwrap();
    for (a, b) in cpu.history().epochs.iter().zip(&gpu.history().epochs) {
        eprintln!("epoch {}: J^2 {} vs {}, CE {} vs {}", a.epoch, a.objective_squared, b.objective_squared, a.cross_entropy, b.cross_entropy);
        assert!((a.objective_squared - b.objective_squared).abs() <= 1e-3 * a.objective_squared.max(1e-3));
        assert!((a.cross_entropy - b.cross_entropy).abs() <= 1e-3 * a.cross_entropy);
        assert!((a.gamma - b.gamma).abs() <= 1e-3 * a.gamma);
    }
    let max_diff = max_network_difference(&cpu.weights(), &gpu.weights());
    eprintln!("max weight difference {max_diff:e}");
    assert!(max_diff < 2e-3, "weights differ by {max_diff}");
    let (sa, sb) = (cpu.transform_source(0, data.source(0)).unwrap(), gpu.transform_source(0, data.source(0)).unwrap());
    assert!((&sa - &sb).amax() <= 1e-2 * sa.amax().max(1.0));
}

/// Replayed GPU steps (one step captured, then replayed; the default) train
/// exactly as eager GPU steps: 200 samples in batches of 32 (six full steps
/// and one of 8 per epoch), weight decay on, a validation set keeping the
/// best epoch. Both give the same curves (1e-5 relative), weights (1e-5) and
/// predictions; the replayed fit replays 2 + 2 steps in epoch 1 (three
/// warm-ups run eagerly, then the recorded step, the check, the last full
/// step and the short one, padded to 32 rows) and all seven steps in every
/// later epoch, the eager one none; it evaluates epoch 1 eagerly and
/// replays the evaluation (training loss, validation scores) of every later
/// one. Where padding the last minibatch would cost more than an eighth of
/// an epoch's rows (batches of 38), that step runs eagerly after the
/// replayed ones, with the same training. A cosine schedule (a rate per
/// step) is not replayed. With
/// `GRAMIAN_REQUIRE_GPU=1` a missing adapter fails the test.
#[test]
fn replayed_gpu_steps_train_as_eager_ones() {
    let Some(device) = common::gpu_device(gramian::GpuOptions::default()) else { return };
    let mut rng = common::rng();
    let (data, labels) = synthetic(&mut rng, 260, 3);
    let split = |range: std::ops::Range<usize>| (MultiSource::paired(data.sources().iter().map(|x| x.rows(range.start, range.len()).into_owned()).collect()).unwrap(), labels[range].to_vec());
    let ((train, train_labels), (validation, validation_labels)) = (split(0..200), split(200..260));
    let epochs = 3;
    let params = small_params(rng.random()).weight_decay(0.05).max_epochs(epochs).patience(epochs);
    let fit = |replay: bool| params.clone().graph_replay(replay).fit_with_validation(&device, &labelled(&train, &train_labels), &labelled(&validation, &validation_labels)).unwrap();
    let (replayed, eager) = (fit(true), fit(false));
    assert_eq!(replayed.history().replayed_steps, 4 + 7 * (epochs - 1));
    assert_eq!(eager.history().replayed_steps, 0);
    // The per-epoch evaluation is captured after epoch 1 and replayed after
    // every later one.
    assert_eq!(replayed.history().replayed_evaluations, epochs - 1);
    assert_eq!(eager.history().replayed_evaluations, 0);
    assert_eq!(replayed.history().epochs.len(), epochs);
    for (a, b) in replayed.history().epochs.iter().zip(&eager.history().epochs) {
        eprintln!("epoch {}: J^2 {} vs {}, CE {} vs {}, val F1 {:?} vs {:?}", a.epoch, a.objective_squared, b.objective_squared, a.cross_entropy, b.cross_entropy, a.validation_f1, b.validation_f1);
        assert!((a.objective_squared - b.objective_squared).abs() <= 1e-5 * b.objective_squared.max(1e-3));
        assert!((a.cross_entropy - b.cross_entropy).abs() <= 1e-5 * b.cross_entropy);
        assert_eq!(a.validation_f1, b.validation_f1);
    }
    assert_eq!(replayed.best_epoch(), eager.best_epoch());
    let (wa, wb) = (replayed.weights(), eager.weights());
    let max_diff = max_network_difference(&wa, &wb).max((&wa.classifier.0 - &wb.classifier.0).amax()).max((wa.gamma - wb.gamma).abs());
    eprintln!("max weight difference {max_diff:e}");
    assert!(max_diff <= 1e-5, "replayed and eager weights differ by {max_diff}");
    assert_eq!(replayed.predict(&validation).unwrap(), eager.predict(&validation).unwrap());
    // Without a validation set the replayed evaluation covers the training
    // loss alone: the same curve (the validation set does not change the
    // steps), and the returned network predicts.
    let unvalidated = params.clone().graph_replay(true).fit(&device, &labelled(&train, &train_labels)).unwrap();
    assert_eq!(unvalidated.history().replayed_evaluations, epochs - 1);
    for (a, b) in unvalidated.history().epochs.iter().zip(&replayed.history().epochs) {
        assert!((a.objective_squared - b.objective_squared).abs() <= 1e-6 * b.objective_squared.max(1e-3));
        assert!((a.cross_entropy - b.cross_entropy).abs() <= 1e-6 * b.cross_entropy);
        assert_eq!(a.validation_f1, None);
    }
    assert_eq!(unvalidated.predict(&validation).unwrap().len(), validation_labels.len());
    // Batches of 38: padding the last 10 rows would cost 28 rows, more than
    // an eighth of 200, so that step runs eagerly after the replayed ones
    // (2 + 5 (epochs - 1) replayed: epoch 1 has five full steps), with the
    // same training.
    let wide = |replay: bool| params.clone().batch_size(38).graph_replay(replay).fit(&device, &labelled(&train, &train_labels)).unwrap();
    let (replayed, eager) = (wide(true), wide(false));
    assert_eq!(replayed.history().replayed_steps, 2 + 5 * (epochs - 1));
    assert_eq!(replayed.history().replayed_evaluations, epochs - 1);
    for (a, b) in replayed.history().epochs.iter().zip(&eager.history().epochs) {
        assert!((a.objective_squared - b.objective_squared).abs() <= 1e-5 * b.objective_squared.max(1e-3));
        assert!((a.cross_entropy - b.cross_entropy).abs() <= 1e-5 * b.cross_entropy);
    }
    let cosine = params.schedule(gramian::eksvd::neural::LearningRateSchedule::Cosine).max_epochs(1).fit(&device, &labelled(&train, &train_labels)).unwrap();
    assert_eq!(cosine.history().replayed_steps, 0);
}

/// CubeCL's kernel profiler (`CUBECL_DEBUG_OPTION=profile`) times every
/// kernel, which graph capture cannot record: a fit with it on must train
/// eagerly (before the guard, burn's capture failed in its worker thread and
/// the next read panicked). CubeCL reads its configuration once per
/// process, so the fit runs in a child process of this test binary
/// ([`profiled_fit_child`]). With `GRAMIAN_REQUIRE_GPU=1` a missing adapter
/// fails the test.
#[test]
fn fit_under_the_cubecl_profiler_trains_eagerly() {
    if common::gpu_device(gramian::GpuOptions::default()).is_none() {
        return;
    }
    common::run_test_in_child("eksvd::neural::profiled_fit_child", true, |c| c.env("CUBECL_DEBUG_OPTION", "profile"));
}

/// The child of [`fit_under_the_cubecl_profiler_trains_eagerly`]: a fit that
/// would replay its steps (six full batches an epoch) trains eagerly and
/// ends with finite losses. Without `CUBECL_DEBUG_OPTION` it has nothing to
/// check and returns.
#[test]
#[ignore = "run by fit_under_the_cubecl_profiler_trains_eagerly in a child process with CubeCL's profiler on"]
fn profiled_fit_child() {
    if std::env::var("CUBECL_DEBUG_OPTION").is_err() {
        return;
    }
    let Some(device) = common::gpu_device(gramian::GpuOptions::default()) else { return };
    let mut rng = common::rng();
    let (data, labels) = synthetic(&mut rng, 200, 3);
    let model = small_params(rng.random()).max_epochs(2).patience(2).graph_replay(true).fit(&device, &labelled(&data, &labels)).unwrap();
    assert_eq!(model.history().replayed_steps, 0);
    assert_eq!(model.history().epochs.len(), 2);
    assert!(model.history().epochs.iter().all(|e| e.objective_squared.is_finite() && e.cross_entropy.is_finite()));
}

/// One GPU for burn and gramian: Neural eKSVD given a gramian GPU device
/// trains with burn's Wgpu backend on that context's own wgpu device. The
/// compute pipelines burn builds appear in the context's wgpu instance
/// (which holds that one device), burn is registered once per context, a
/// gramian kernel then runs on the same queue and matches the CPU path
/// (1e-5, f32 rounding of values in [0, 1]), the model's scores are the same
/// before and after it, and training agrees with the CPU from the same
/// start (tolerances of `wgpu_and_cpu_agree_over_the_first_steps`).
/// With `GRAMIAN_REQUIRE_GPU=1` a missing adapter fails the test.
#[test]
fn burn_and_gramian_share_one_gpu() {
    let Some(device) = common::gpu_device(gramian::GpuOptions::default()) else { return };
    let gramian::Device::Gpu(ctx) = &device else { panic!("gpu_device returned the CPU path") };
    let handles = ctx.wgpu_handles();
    assert!(handles.all_features, "the device lacks the adapter's features burn assumes");
    let pipelines = || handles.instance.generate_report().expect("wgpu-core instance").hub_report().compute_pipelines.num_allocated;
    let devices = || handles.instance.generate_report().expect("wgpu-core instance").hub_report().devices.num_allocated;
    let before = pipelines();
    let mut rng = common::rng();
    let (data, labels) = synthetic(&mut rng, 64, 3);
    let params = small_params(rng.random()).max_epochs(2);
    let model = params.fit(&device, &labelled(&data, &labels)).unwrap();
    assert_eq!(model.backend(), NeuralBackend::Wgpu);
    assert!(matches!(model.device(), gramian::Device::Gpu(c) if c.id() == ctx.id()));
    assert_eq!(burn_device(&device).unwrap(), *model.burn_device(), "registered once per context");
    let after = pipelines();
    eprintln!("compute pipelines in gramian's instance: {before} -> {after}; devices {}", devices());
    assert!(after > before, "burn built no pipeline on gramian's device ({before} -> {after})");
    assert_eq!(devices(), 1, "one wgpu device in gramian's instance");
    let scores = model.transform_source(0, data.source(0)).unwrap();
    // A gramian kernel on the same device and queue, between burn's work.
    let x = common::random_matrix(&mut rng, 48, 5);
    let kernel = gramian::Kernel::rbf(0.5).unwrap();
    let (k_gpu, k_cpu) = (device.kernel_matrix(&kernel, &x, &x).unwrap(), gramian::Device::Cpu.kernel_matrix(&kernel, &x, &x).unwrap());
    assert!((&k_gpu - &k_cpu).amax() < 1e-5, "gramian kernel on the shared device differs by {}", (&k_gpu - &k_cpu).amax());
    assert_eq!(model.transform_source(0, data.source(0)).unwrap(), scores);
    let cpu = params.fit(&gramian::Device::Cpu, &labelled(&data, &labels)).unwrap();
    assert_eq!(cpu.backend(), NeuralBackend::Cpu);
    for (a, b) in cpu.history().epochs.iter().zip(&model.history().epochs) {
        assert!((a.objective_squared - b.objective_squared).abs() <= 1e-3 * a.objective_squared.max(1e-3), "J^2 {} vs {}", a.objective_squared, b.objective_squared);
        assert!((a.cross_entropy - b.cross_entropy).abs() <= 1e-3 * a.cross_entropy, "CE {} vs {}", a.cross_entropy, b.cross_entropy);
    }
    // The named backend runs on the process's shared GPU, which gramian's
    // kernels can use as well.
    let shared = shared_gpu().unwrap();
    assert_eq!(burn_device(&NeuralBackend::Wgpu.device().unwrap()).unwrap(), burn_device(&shared).unwrap());
    assert!((shared.kernel_matrix(&kernel, &x, &x).unwrap() - &k_cpu).amax() < 1e-5);
}

/// `n` paired samples of `classes` classes in three sparse sources of
/// widths 40, 57, 33 (about 12 % non-zero, positive like term weights,
/// each class more often at its own block of columns), the second
/// source's row 1 all zero.
fn sparse_synthetic(rng: &mut StdRng, n: usize, classes: usize) -> (MultiSource, Vec<usize>) {
    let labels: Vec<usize> = (0..n).map(|i| i % classes).collect();
    let sources = [40usize, 57, 33]
        .iter()
        .enumerate()
        .map(|(q, &d)| {
            DMatrix::from_fn(n, d, |i, j| {
                let own = j * classes / d == labels[i];
                let p = if own { 0.25 } else { 0.06 };
                if (q == 1 && i == 1) || rng.random::<f64>() >= p { 0.0 } else { rng.random_range(0.1..1.0) }
            })
        })
        .collect();
    (MultiSource::paired(sources).unwrap(), labels)
}

/// The CPU fit's first layer from the minibatches' non-zeros
/// (`sparse_first_layer`, the default) trains the network of the dense
/// first layer: fresh random sparse inputs (90 training samples: two full
/// minibatches of 32 and one of 26 per epoch), weight decay on, early
/// stopping on a validation set; once with the default single layer and
/// once with a hidden layer and dropout (the masks are drawn in the same
/// order). The two differ only in the order of the f32 sums of the first
/// layer's products and gradients (about 1e-7 relative per step), which
/// Adam's normalised steps of about the learning rate (1e-3) keep about
/// as small: the curves agree within 1e-4 relative and every weight
/// within 1e-5 absolute (over 12 steps the weights move by about 1e-2;
/// the runs seen differ by 3e-8 to 5e-8), the validation scores exactly.
#[test]
fn sparse_first_layer_trains_as_the_dense_one() {
    let mut rng = common::rng();
    let (data, labels) = sparse_synthetic(&mut rng, 120, 3);
    let split = |range: std::ops::Range<usize>| (MultiSource::paired(data.sources().iter().map(|x| x.rows(range.start, range.len()).into_owned()).collect()).unwrap(), labels[range].to_vec());
    let ((train, train_labels), (validation, validation_labels)) = (split(0..90), split(90..120));
    let epochs = 4;
    let single = NeuralEksvdParams::new(4).hidden(vec![]).d_phi(16).batch_size(32).learning_rate(1e-3).weight_decay(0.05).max_epochs(epochs).patience(epochs).seed(rng.random());
    let hidden = single.clone().hidden(vec![12]).dropout(0.2);
    for params in [single, hidden] {
        let fit = |sparse: bool| params.clone().sparse_first_layer(sparse).fit_with_validation(&cpu(), &labelled(&train, &train_labels), &labelled(&validation, &validation_labels)).unwrap();
        let (sparse, dense) = (fit(true), fit(false));
        assert_eq!(sparse.history().epochs.len(), epochs);
        for (a, b) in sparse.history().epochs.iter().zip(&dense.history().epochs) {
            eprintln!("epoch {}: J^2 {} vs {}, CE {} vs {}, val F1 {:?} vs {:?}", a.epoch, a.objective_squared, b.objective_squared, a.cross_entropy, b.cross_entropy, a.validation_f1, b.validation_f1);
            assert!((a.objective_squared - b.objective_squared).abs() <= 1e-4 * b.objective_squared, "J^2 {} vs {}", a.objective_squared, b.objective_squared);
            assert!((a.cross_entropy - b.cross_entropy).abs() <= 1e-4 * b.cross_entropy, "CE {} vs {}", a.cross_entropy, b.cross_entropy);
            assert_eq!(a.validation_f1, b.validation_f1);
        }
        assert_eq!(sparse.best_epoch(), dense.best_epoch());
        let (ws, wd, start) = (sparse.weights(), dense.weights(), params.init(&cpu(), vec![40, 57, 33], 3).unwrap().weights());
        let gap = max_network_difference(&ws, &wd).max((&ws.classifier.0 - &wd.classifier.0).amax()).max((ws.gamma - wd.gamma).abs());
        let moved = max_network_difference(&ws, &start);
        eprintln!("sparse against dense first layer: largest weight difference {gap:e}, largest change {moved:e}");
        assert!(moved > 1e-3, "the fit moved the weights by {moved}");
        assert!(gap <= 1e-5, "sparse and dense first layers differ by {gap}");
    }
}

/// Training is seeded: the same parameters and seed give bit-identical
/// weights and curves on the CPU; another seed gives other weights.
#[test]
fn training_is_reproducible_for_a_seed() {
    let mut rng = common::rng();
    let (data, labels) = synthetic(&mut rng, 60, 3);
    let seed: u64 = rng.random();
    let params = small_params(seed).max_epochs(2).weight_decay(0.01);
    let (a, b) = (params.fit(&cpu(), &labelled(&data, &labels)).unwrap(), params.fit(&cpu(), &labelled(&data, &labels)).unwrap());
    let (wa, wb) = (a.weights(), b.weights());
    assert_eq!(wa.projections, wb.projections);
    assert_eq!(wa.feature_maps, wb.feature_maps);
    assert_eq!(wa.gamma, wb.gamma);
    let curve = |m: &NeuralEksvd| m.history().epochs.iter().map(|e| (e.objective_squared, e.cross_entropy)).collect::<Vec<_>>();
    assert_eq!(curve(&a), curve(&b));
    let other = small_params(seed.wrapping_add(1)).max_epochs(2).weight_decay(0.01).fit(&cpu(), &labelled(&data, &labels)).unwrap();
    assert_ne!(other.weights().projections, wa.projections);
}

/// The cosine schedule starts at the base rate, halves it midway and ends at
/// zero (Loshchilov & Hutter's annealing without restarts); the constant one
/// never changes it. Training with it is replayable for a seed and differs
/// from training at a constant rate.
#[test]
fn cosine_learning_rate_schedule() {
    use gramian::eksvd::neural::LearningRateSchedule;
    let cosine = LearningRateSchedule::Cosine;
    assert_eq!(cosine.rate(0.01, 0, 100), 0.01);
    assert!((cosine.rate(0.01, 50, 100) - 0.005).abs() < 1e-15);
    assert!((cosine.rate(0.01, 25, 100) - 0.005 * (1.0 + std::f64::consts::FRAC_1_SQRT_2)).abs() < 1e-15);
    assert!(cosine.rate(0.01, 100, 100).abs() < 1e-15 && cosine.rate(0.01, 200, 100).abs() < 1e-15);
    assert!((1..100).all(|t| cosine.rate(0.01, t, 100) < cosine.rate(0.01, t - 1, 100)), "strictly decreasing");
    assert_eq!(LearningRateSchedule::Constant.rate(0.01, 70, 100), 0.01);
    assert_eq!(LearningRateSchedule::default(), LearningRateSchedule::Constant);

    let mut rng = common::rng();
    let (data, labels) = synthetic(&mut rng, 90, 3);
    let seed = rng.random();
    let fit = |schedule| small_params(seed).max_epochs(4).schedule(schedule).fit(&cpu(), &labelled(&data, &labels)).unwrap().weights().projections[0].clone();
    let (a, b, constant) = (fit(LearningRateSchedule::Cosine), fit(LearningRateSchedule::Cosine), fit(LearningRateSchedule::Constant));
    assert_eq!(a, b, "replayable for a seed");
    assert!((&a - &constant).amax() > 1e-6, "the schedule changes the steps");
}

/// Weight averaging: the kept network after two epochs is
/// `decay W_1 + (1 - decay) W_2`, where `W_e` are the plain weights after
/// epoch `e` (the averaging does not change the Adam steps); decay 0 is no
/// averaging, bit for bit; a decay outside `[0, 1)` is a typed error.
#[test]
fn weight_averaging_is_the_moving_average_of_the_epochs() {
    let mut rng = common::rng();
    let (data, labels) = synthetic(&mut rng, 90, 3);
    let seed = rng.random();
    let fit = |epochs: usize, decay: f64| small_params(seed).max_epochs(epochs).weight_averaging(decay).fit(&cpu(), &labelled(&data, &labels)).unwrap().weights();
    let (w1, w2) = (fit(1, 0.0), fit(2, 0.0));
    let decay = 0.7;
    let averaged = fit(2, decay);
    let check = |got: &DMatrix<f64>, a: &DMatrix<f64>, b: &DMatrix<f64>, what: &str| {
        let want = a * decay + b * (1.0 - decay);
        let err = (got - &want).amax();
        // f32 storage of the averaged weights: within a few f32 roundings.
        assert!(err <= 1e-6 * want.amax().max(1.0), "{what}: {err:e}");
        assert!((a - b).amax() > 1e-4, "{what}: the second epoch moved nothing");
    };
    for q in 0..3 {
        check(&averaged.projections[q], &w1.projections[q], &w2.projections[q], "W_q");
        for (l, (a, _)) in averaged.feature_maps[q].iter().enumerate() {
            check(a, &w1.feature_maps[q][l].0, &w2.feature_maps[q][l].0, "feature map layer");
        }
    }
    check(&averaged.classifier.0, &w1.classifier.0, &w2.classifier.0, "classifier");
    let log_gamma = decay * w1.gamma.ln() + (1.0 - decay) * w2.gamma.ln();
    assert!((averaged.gamma.ln() - log_gamma).abs() < 1e-6, "gamma {} vs exp({log_gamma})", averaged.gamma);
    assert_eq!(fit(2, 0.0).projections, w2.projections, "decay 0 is no averaging");
    for bad in [1.0, -0.1, f64::NAN] {
        assert!(matches!(small_params(1).weight_averaging(bad).fit(&cpu(), &labelled(&data, &labels)), Err(Error::InvalidParameter { name: "weight_averaging", .. })), "decay {bad}");
    }
}

/// `Labelled` checks its data on construction: paired sources, one label
/// per sample, labels below `MAX_CLASSES`, at least 2 classes; `select`
/// keeps the labels with their rows and the number of classes.
#[test]
fn labelled_data_is_checked_and_selected_by_row() {
    let mut rng = common::rng();
    let (data, labels) = synthetic(&mut rng, 12, 3);
    let set = Labelled::new(data.clone(), labels.clone()).unwrap();
    assert_eq!((set.n_samples(), set.n_classes(), set.labels()), (12, 3, &labels[..]));
    let unpaired = MultiSource::new(data.sources().to_vec()).unwrap();
    assert!(matches!(Labelled::new(unpaired, labels.clone()), Err(Error::Labels(_))));
    assert!(matches!(Labelled::new(data.clone(), labels[..11].to_vec()), Err(Error::ShapeMismatch { .. })));
    let mut stray = labels.clone();
    stray[4] = gramian::eksvd::neural::MAX_CLASSES;
    assert!(matches!(Labelled::new(data.clone(), stray), Err(Error::Labels(_))));
    assert!(matches!(Labelled::new(data.clone(), vec![0; 12]), Err(Error::Labels(_))));
    // Rows 0 and 3 both have class 0: the selection keeps 3 classes.
    let part = gramian::estimator::Samples::select(&set, &[3, 0]).unwrap();
    assert_eq!((part.labels(), part.n_classes()), (&[0, 0][..], 3));
    assert_eq!(part.sources().source(1).row(0), data.source(1).row(3));
    assert!(matches!(set.select(&[12]), Err(Error::InvalidParameter { .. })));
}

/// The estimator traits: `Transform<MultiSource>` is the per-source scores
/// side by side, `Predict<MultiSource>` the arg max of the logits, and
/// `cross_validate` fits `NeuralEksvdParams` on `Labelled` folds.
#[test]
fn estimator_traits_and_cross_validation() {
    let mut rng = common::rng();
    let (data, labels) = synthetic(&mut rng, 60, 3);
    let set = labelled(&data, &labels);
    let model = small_params(rng.random()).max_epochs(2).fit(&cpu(), &set).unwrap();
    assert!(!model.device().is_gpu());
    let all = model.transform(&data).unwrap();
    assert_eq!((all.nrows(), all.ncols()), (60, 12));
    for q in 0..3 {
        assert_eq!(all.columns(q * 4, 4), model.transform_source(q, data.source(q)).unwrap());
    }
    let logits = model.logits(&data).unwrap();
    let argmax: Vec<usize> = logits.row_iter().map(|r| r.transpose().argmax().0).collect();
    assert_eq!(model.predict(&data).unwrap(), argmax);
    let candidates = [small_params(1).max_epochs(1), small_params(2).max_epochs(2)];
    let splits = gramian::estimator::Splits::k_fold(3).unwrap().seed(1);
    let cv = gramian::estimator::cross_validate(&cpu(), &candidates, &set, &splits, |m: &NeuralEksvd, held: &Labelled| Ok(accuracy(held.labels(), &m.predict(held.sources())?))).unwrap();
    assert!(cv.failures.is_empty(), "{:?}", cv.failures);
    assert_eq!(cv.scores.len(), 2);
    assert!(cv.scores.iter().flatten().all(|s| (0.0..=1.0).contains(s)));
}

/// `to_device` moves the network: the same scores (within f32 rounding)
/// after CPU -> CPU and, where there is a GPU (lavapipe in CI), CPU -> GPU
/// and back; a loaded model is on the CPU. With `GRAMIAN_REQUIRE_GPU=1` a
/// missing adapter fails the test.
#[test]
fn to_device_moves_the_network() {
    let mut rng = common::rng();
    let (data, labels) = synthetic(&mut rng, 50, 3);
    let model = small_params(rng.random()).max_epochs(2).fit(&cpu(), &labelled(&data, &labels)).unwrap();
    let scores = model.transform(&data).unwrap();
    let close = |other: &DMatrix<f64>| (other - &scores).amax() <= 1e-5 * scores.amax().max(1.0);
    let moved = model.to_device(&cpu());
    assert!(!moved.device().is_gpu());
    assert!(close(&moved.transform(&data).unwrap()));
    assert_eq!(moved.predict(&data).unwrap(), model.predict(&data).unwrap());
    let dir = std::env::temp_dir().join(format!("gramian-neural-move-{}-{}", std::process::id(), rng.random::<u32>()));
    model.save(&dir).unwrap();
    let loaded = NeuralEksvd::load(&dir).unwrap();
    // The loaded model has read its files: it works without them.
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(!loaded.device().is_gpu());
    assert_eq!(loaded.backend(), NeuralBackend::Cpu);
    assert!(close(&loaded.to_device(&cpu()).transform(&data).unwrap()));
    let Some(gpu) = common::gpu_device(gramian::GpuOptions::default()) else {
        return;
    };
    let on_gpu = loaded.try_to_device(&gpu).unwrap();
    assert!(on_gpu.device().is_gpu());
    assert_eq!(on_gpu.backend(), NeuralBackend::Wgpu);
    assert_eq!(*on_gpu.burn_device(), burn_device(&gpu).unwrap());
    let gpu_scores = on_gpu.transform(&data).unwrap();
    eprintln!("CPU -> GPU scores differ by {:e}", (&gpu_scores - &scores).amax());
    assert!(close(&gpu_scores));
    assert!(close(&on_gpu.to_device(&cpu()).transform(&data).unwrap()));
    assert!((on_gpu.gamma() - model.gamma()).abs() <= 1e-6 * model.gamma());
}
