//! Saved models (feature `serde`): every fitted model survives JSON and CBOR
//! round trips exactly (same predictions bit for bit), and damaged, foreign
//! or newer files fail at load with `Error::Record`.
#![cfg(feature = "serde")]

use crate::common;

use gramian::eksvd::{Eigensolver, FeatureMap};
use gramian::io::{Format, SavedModel, FORMAT_VERSION};
use gramian::prelude::*;

fn eksvd_model() -> (Eksvd, MultiSource) {
    let mut rng = common::rng();
    let data = MultiSource::paired(vec![common::random_matrix(&mut rng, 40, 3), common::random_matrix(&mut rng, 40, 4), common::random_matrix(&mut rng, 40, 16)]).unwrap();
    // All three kinds of fitted maps, each giving 16 features.
    let params = EksvdParams::new(3)
        .feature_maps(vec![FeatureMap::random_fourier(0.5, 16).unwrap(), FeatureMap::nystrom(Kernel::rbf(0.3).unwrap(), 16, 20).unwrap(), FeatureMap::Linear])
        .solver(Solver::Dual(Eigensolver::Dense))
        .seed(3);
    (params.fit(&Device::cpu(), &data).unwrap(), data)
}

fn assert_same_eksvd(a: &Eksvd, b: &Eksvd, data: &MultiSource) {
    assert_eq!(a.eigenvalues(), b.eigenvalues());
    assert_eq!(a.transform_paired(data).unwrap(), b.transform_paired(data).unwrap());
    for q in 0..data.n_sources() {
        assert_eq!(a.transform_source(q, data.source(q)).unwrap(), b.transform_source(q, data.source(q)).unwrap());
    }
}

#[test]
fn eksvd_round_trips_in_both_formats() {
    let (model, data) = eksvd_model();
    let from_json = Eksvd::from_json(&model.to_json().unwrap()).unwrap();
    assert_same_eksvd(&model, &from_json, &data);
    let bytes = model.to_cbor().unwrap();
    assert!(bytes.len() < model.to_json().unwrap().len(), "CBOR should be smaller than JSON");
    assert_same_eksvd(&model, &Eksvd::from_cbor(&bytes).unwrap(), &data);
    let dir = std::env::temp_dir().join(format!("gramian-saved-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for (format, name) in [(Format::Json, "m.json"), (Format::Cbor, "m.cbor")] {
        let path = dir.join(name);
        model.save(&path, format).unwrap();
        assert_same_eksvd(&model, &Eksvd::load(&path).unwrap(), &data);
    }
    assert!(matches!(Eksvd::load(dir.join("missing")), Err(Error::Record(_))));
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn ksvd_round_trips() {
    let mut rng = common::rng();
    let (x, z) = (common::random_matrix(&mut rng, 30, 3), common::random_matrix(&mut rng, 25, 3));
    let model = KsvdParams::new(2).fit_pair(&Device::cpu(), &x, &z).unwrap();
    let loaded = Ksvd::from_cbor(&model.to_cbor().unwrap()).unwrap();
    assert_eq!(model.singular_values(), loaded.singular_values());
    assert_eq!(model.transform_z(&z).unwrap(), loaded.transform_z(&z).unwrap());
    // A KSVD file is not an eKSVD file, and the other way round.
    assert!(matches!(Eksvd::from_cbor(&model.to_cbor().unwrap()), Err(Error::Record(ref m)) if m.contains("ksvd")));
    assert!(matches!(Ksvd::from_json(&model.as_eksvd().to_json().unwrap()), Err(Error::Record(_))));
}

#[test]
fn damaged_foreign_and_newer_files_fail_at_load() {
    let (model, _) = eksvd_model();
    let json = model.to_json().unwrap();
    // A newer format version.
    let newer = json.replacen(&format!("\"version\":{FORMAT_VERSION}"), &format!("\"version\":{}", FORMAT_VERSION + 1), 1);
    assert_ne!(newer, json);
    assert!(matches!(Eksvd::from_json(&newer), Err(Error::Record(ref m)) if m.contains("newer")));
    // Another format name.
    let foreign = json.replacen("gramian-model", "other-model", 1);
    assert!(matches!(Eksvd::from_json(&foreign), Err(Error::Record(_))));
    // Shapes that disagree: a weight block removed.
    let mut v: serde_json::Value = serde_json::from_str(&json).unwrap();
    v["model"]["weights"].as_array_mut().unwrap().pop();
    assert!(matches!(Eksvd::from_json(&v.to_string()), Err(Error::Record(ref m)) if m.contains("inconsistent")));
    // Garbage and truncation.
    assert!(matches!(Eksvd::from_json("not json"), Err(Error::Record(_))));
    assert!(matches!(Eksvd::from_json(&json[..json.len() / 2]), Err(Error::Record(_))));
    let bytes = model.to_cbor().unwrap();
    assert!(matches!(Eksvd::from_cbor(&bytes[..bytes.len() / 2]), Err(Error::Record(_))));
    assert!(matches!(Eksvd::from_cbor(&[]), Err(Error::Record(_))));
}

#[test]
fn mklaren_and_its_baselines_round_trip() {
    use gramian::mklaren::{FullKernelRidge, FullKernelRidgeParams, KernelCombination, LowRankMethod, LowRankRidge, LowRankRidgeParams};
    use nalgebra::DVector;
    let mut rng = common::rng();
    let x = common::random_matrix(&mut rng, 60, 3);
    let y = DVector::from_fn(60, |i, _| (2.0 * x[(i, 0)]).sin() + x[(i, 1)]);
    let data = Supervised::new(x.clone(), y).unwrap();
    let test = common::random_matrix(&mut rng, 15, 3);
    let kernels = [Kernel::rbf(0.5).unwrap(), Kernel::linear()];
    let cpu = Device::cpu();

    let model = MklarenParams::new(8).lookahead(3).kernels(&kernels).fit(&cpu, &data).unwrap();
    let loaded = Mklaren::from_json(&model.to_json().unwrap()).unwrap();
    assert_eq!(model.predict(&test).unwrap(), loaded.predict(&test).unwrap());
    assert_eq!(model.order(), loaded.order());
    let loaded = Mklaren::from_cbor(&model.to_cbor().unwrap()).unwrap();
    assert_eq!(model.predict(&test).unwrap(), loaded.predict(&test).unwrap());
    // A selected column pointing outside its kernel's factor is caught at load.
    let mut v: serde_json::Value = serde_json::from_str(&model.to_json().unwrap()).unwrap();
    v["model"]["selected"][0]["position"] = serde_json::json!(10_000);
    assert!(matches!(Mklaren::from_json(&v.to_string()), Err(Error::Record(ref m)) if m.contains("inconsistent")));

    let full = FullKernelRidgeParams::new(KernelCombination::Uniform).lambda(0.1).kernels(&kernels).fit(&cpu, &data).unwrap();
    let loaded = FullKernelRidge::from_cbor(&full.to_cbor().unwrap()).unwrap();
    assert_eq!(full.predict(&test).unwrap(), loaded.predict(&test).unwrap());

    let low = LowRankRidgeParams::new(LowRankMethod::Icd, 4).lambda(0.1).kernels(&kernels).fit(&cpu, &data).unwrap();
    let loaded = LowRankRidge::from_json(&low.to_json().unwrap()).unwrap();
    assert_eq!(low.predict(&test).unwrap(), loaded.predict(&test).unwrap());
    // A model of one kind does not load as another.
    assert!(matches!(LowRankRidge::from_json(&full.to_json().unwrap()), Err(Error::Record(_))));
}

#[test]
fn psd_density_and_quantile_models_round_trip() {
    use gramian::psd::{BaseMeasure, DensityParams, PsdDensity, QuantileParams, QuantileRegression};
    let cpu = Device::cpu();
    let mut rng = common::rng();
    let x = common::random_matrix(&mut rng, 50, 2);
    let density = DensityParams::new(gramian::Kernel::gaussian_with_width(0.7).unwrap()).unwrap().base_measure(BaseMeasure::isotropic_gaussian(2, 2.0).unwrap()).fit(&cpu, &x).unwrap();
    let grid = common::random_matrix(&mut rng, 20, 2);
    for loaded in [PsdDensity::from_json(&density.to_json().unwrap()).unwrap(), PsdDensity::from_cbor(&density.to_cbor().unwrap()).unwrap()] {
        assert_eq!(density.predict(&grid).unwrap(), loaded.predict(&grid).unwrap());
        assert_eq!(density.integral().unwrap(), loaded.integral().unwrap());
    }
    // A base measure of the wrong dimension is caught at load.
    let mut v: serde_json::Value = serde_json::from_str(&density.to_json().unwrap()).unwrap();
    v["model"]["base"] = serde_json::from_str(&serde_json::to_string(&BaseMeasure::isotropic_gaussian(3, 2.0).unwrap()).unwrap()).unwrap();
    assert!(matches!(PsdDensity::from_json(&v.to_string()), Err(Error::Record(ref m)) if m.contains("inconsistent")));

    let (xq, yq) = common::quantile_appendix_e(40, &mut rng);
    let quantile = QuantileParams::new(gramian::Kernel::gaussian_with_width(0.2).unwrap(), &[0.25, 0.5, 0.75]).unwrap().fit(&cpu, &Supervised::new(xq.clone(), yq).unwrap()).unwrap();
    let loaded = QuantileRegression::from_cbor(&quantile.to_cbor().unwrap()).unwrap();
    assert_eq!(quantile.predict(&xq).unwrap(), loaded.predict(&xq).unwrap());
    // A missing gap model would make predict fail: caught at load instead.
    let mut v: serde_json::Value = serde_json::from_str(&quantile.to_json().unwrap()).unwrap();
    v["model"]["parts"].as_array_mut().unwrap().pop();
    assert!(matches!(QuantileRegression::from_json(&v.to_string()), Err(Error::Record(_))));
}

#[test]
fn psd_heteroscedastic_and_the_baselines_round_trip() {
    use gramian::psd::{BaselineDensity, BaselineHeteroscedastic, BaselineHeteroscedasticParams, BaselineKind, BaselineParams, BaselineQuantile, BaselineQuantileParams, HeteroscedasticRegression};
    use nalgebra::DVector;
    let cpu = Device::cpu();
    let mut rng = common::rng();
    // Heteroscedastic data: noise growing with |x|.
    let x = common::random_matrix(&mut rng, 50, 1);
    let noise = common::random_matrix(&mut rng, 50, 1);
    let y = DVector::from_fn(50, |i, _| (3.0 * x[(i, 0)]).sin() + (0.1 + 0.3 * x[(i, 0)].abs()) * noise[(i, 0)]);
    let data = Supervised::new(x.clone(), y).unwrap();
    let grid = common::random_matrix(&mut rng, 20, 1);

    let het = HeteroscedasticParams::new(gramian::Kernel::gaussian_with_width(0.3).unwrap()).unwrap().fit(&cpu, &data).unwrap();
    for loaded in [HeteroscedasticRegression::from_json(&het.to_json().unwrap()).unwrap(), HeteroscedasticRegression::from_cbor(&het.to_cbor().unwrap()).unwrap()] {
        assert_eq!(het.predict_mean(&grid).unwrap(), loaded.predict_mean(&grid).unwrap());
        assert_eq!(het.predict_variance(&grid).unwrap(), loaded.predict_variance(&grid).unwrap());
    }
    let mut v: serde_json::Value = serde_json::from_str(&het.to_json().unwrap()).unwrap();
    v["model"]["theta_offset"].as_array_mut().unwrap().pop();
    assert!(matches!(HeteroscedasticRegression::from_json(&v.to_string()), Err(Error::Record(_))));

    for kind in [BaselineKind::Pnm, BaselineKind::Ncm, BaselineKind::Glm] {
        let density = BaselineParams::new(kind, gramian::Kernel::gaussian_with_width(0.5).unwrap()).unwrap().monte_carlo(500, 1).fit(&cpu, &x).unwrap();
        let loaded = BaselineDensity::from_cbor(&density.to_cbor().unwrap()).unwrap();
        assert_eq!(density.density(&grid).unwrap(), loaded.density(&grid).unwrap(), "{kind:?}");

        let b = BaselineHeteroscedasticParams::new(kind, gramian::Kernel::gaussian_with_width(0.3).unwrap()).unwrap().restarts(2, 1).fit(&cpu, &data).unwrap();
        let loaded = BaselineHeteroscedastic::from_json(&b.to_json().unwrap()).unwrap();
        assert_eq!(b.predict_mean(&grid).unwrap(), loaded.predict_mean(&grid).unwrap(), "{kind:?}");
        assert_eq!(b.predict_variance(&grid).unwrap(), loaded.predict_variance(&grid).unwrap(), "{kind:?}");
        // A weight vector of the wrong length is caught at load.
        let mut v: serde_json::Value = serde_json::from_str(&b.to_json().unwrap()).unwrap();
        v["model"]["theta_weights"].as_array_mut().unwrap().pop();
        assert!(matches!(BaselineHeteroscedastic::from_json(&v.to_string()), Err(Error::Record(_))), "{kind:?}");

        let (xq, yq) = common::quantile_appendix_e(40, &mut rng);
        // With the default budget (NCM's projected Newton stopped at 500
        // iterations on 3 of 60 seeds before its box-constrained Newton
        // direction, e.g. GRAMIAN_TEST_SEED=1796188143905263564).
        let params = BaselineQuantileParams::new(kind, gramian::Kernel::gaussian_with_width(0.2).unwrap(), &[0.25, 0.5, 0.75]).unwrap().restarts(2, 1);
        let q = params.fit(&cpu, &Supervised::new(xq.clone(), yq).unwrap()).unwrap();
        let loaded = BaselineQuantile::from_cbor(&q.to_cbor().unwrap()).unwrap();
        assert_eq!(q.predict(&xq).unwrap(), loaded.predict(&xq).unwrap(), "{kind:?}");
        let mut v: serde_json::Value = serde_json::from_str(&q.to_json().unwrap()).unwrap();
        v["model"]["part_weights"].as_array_mut().unwrap().pop();
        assert!(matches!(BaselineQuantile::from_json(&v.to_string()), Err(Error::Record(_))), "{kind:?}");
        // One kind of file does not load as another.
        assert!(matches!(BaselineQuantile::from_json(&b.to_json().unwrap()), Err(Error::Record(_))));
    }
}

/// The error message of a load that must fail with `Error::Record`.
fn record_error<M: SavedModel + std::fmt::Debug>(r: Result<M, Error>) -> String {
    match r {
        Err(Error::Record(m)) => m,
        other => panic!("expected Error::Record, got {other:?}"),
    }
}

fn psd_density() -> gramian::psd::PsdDensity {
    use gramian::psd::{BaseMeasure, DensityParams};
    let mut rng = common::rng();
    let x = common::random_matrix(&mut rng, 20, 2);
    DensityParams::new(gramian::Kernel::gaussian_with_width(0.7).unwrap()).unwrap().base_measure(BaseMeasure::isotropic_gaussian(2, 2.0).unwrap()).fit(&Device::cpu(), &x).unwrap()
}

fn edited(json: &str, edit: impl FnOnce(&mut serde_json::Value)) -> String {
    let mut v: serde_json::Value = serde_json::from_str(json).unwrap();
    edit(&mut v["model"]);
    v.to_string()
}

/// A matrix declaring 2^63 x 2 with no entries (the product wraps to 0 in
/// 64 bits) is a decoding error, in JSON and CBOR, before any matrix exists.
#[test]
fn matrix_shapes_whose_product_wraps_do_not_load() {
    use gramian::psd::PsdDensity;
    let density = psd_density();
    for (shape, wraps) in [(serde_json::json!([[], 1u64 << 63, 2]), true), (serde_json::json!([[1.0], 1u64 << 32, 1u64 << 32]), true), (serde_json::json!([[], u64::MAX, 0]), false), (serde_json::json!([[], 0, u64::MAX]), false)] {
        let json = edited(&density.to_json().unwrap(), |m| m["model"]["factor"] = shape.clone());
        let message = record_error(PsdDensity::from_json(&json));
        // A product that wraps is a decoding error; an empty matrix of a huge side decodes and fails the shape check.
        assert!(message.contains(if wraps { "matrix" } else { "factor" }), "{message}");
        let v: serde_json::Value = serde_json::from_str(&json).unwrap();
        let mut cbor = Vec::new();
        ciborium::into_writer(&v, &mut cbor).unwrap();
        record_error(PsdDensity::from_cbor(&cbor));
    }
    // eKSVD weights and duals of a wrapping shape (objective and kkt would allocate by them).
    let (model, _) = eksvd_model();
    for field in ["weights", "alphas", "features"] {
        let json = edited(&model.to_json().unwrap(), |m| m[field][0] = serde_json::json!([[], 1u64 << 63, 2]));
        record_error(Eksvd::from_json(&json));
    }
    let json = edited(&model.to_json().unwrap(), |m| m["eigenvalues"] = serde_json::json!([[], 1u64 << 63, null]));
    record_error(Eksvd::from_json(&json));
}

/// Factor transforms of no rows and 2^63 columns on two kernels (their
/// column count overflows a sum) are an error naming the transform.
#[test]
fn low_rank_ridge_with_empty_transforms_of_huge_width_does_not_load() {
    use gramian::mklaren::{LowRankMethod, LowRankRidge, LowRankRidgeParams};
    let mut rng = common::rng();
    let x = common::random_matrix(&mut rng, 30, 3);
    let y = nalgebra::DVector::from_fn(30, |i, _| x[(i, 0)]);
    let low = LowRankRidgeParams::new(LowRankMethod::Icd, 3).lambda(0.1).kernels(&[Kernel::rbf(0.5).unwrap(), Kernel::linear()]).fit(&Device::cpu(), &Supervised::new(x, y).unwrap()).unwrap();
    let json = edited(&low.to_json().unwrap(), |m| {
        for t in m["transforms"].as_array_mut().unwrap() {
            t["pivot_rows"] = serde_json::json!([[], 0, 3]);
            t["transform"] = serde_json::json!([[], 0, 1u64 << 63]);
        }
    });
    let message = record_error(LowRankRidge::from_json(&json));
    assert!(message.contains("without pivots"), "{message}");
}

/// A GLM density whose Monte Carlo size is 2^62 (`4 x` it overflows in
/// `integral`) fails at load, naming `monte_carlo`.
#[test]
fn glm_baseline_with_a_huge_monte_carlo_size_does_not_load() {
    use gramian::psd::{BaseMeasure, BaselineDensity, BaselineKind, BaselineParams};
    let mut rng = common::rng();
    let x = common::random_matrix(&mut rng, 20, 1);
    let glm = BaselineParams::new(BaselineKind::Glm, gramian::Kernel::gaussian_with_width(0.5).unwrap()).unwrap().base_measure(BaseMeasure::isotropic_gaussian(1, 2.0).unwrap()).monte_carlo(200, 1).fit(&Device::cpu(), &x).unwrap();
    BaselineDensity::from_json(&glm.to_json().unwrap()).unwrap();
    for mc in [1u64 << 62, 0, u64::MAX] {
        let json = edited(&glm.to_json().unwrap(), |m| m["monte_carlo"] = serde_json::json!(mc));
        let message = record_error(BaselineDensity::from_json(&json));
        assert!(message.contains("monte_carlo"), "{message}");
    }
}

/// A PSD density whose kernel is not the Gaussian of its width `sigma`
/// (density and integral would use different widths) fails at load.
#[test]
fn psd_density_with_a_kernel_that_disagrees_with_sigma_does_not_load() {
    use gramian::psd::PsdDensity;
    let density = psd_density();
    for kernel in [serde_json::json!({"Rbf": {"gamma": 3.0}}), serde_json::json!("Linear"), serde_json::json!({"Laplacian": {"gamma": 1.0}})] {
        let json = edited(&density.to_json().unwrap(), |m| m["model"]["kernel"] = kernel.clone());
        let message = record_error(PsdDensity::from_json(&json));
        assert!(message.contains("kernel"), "{message}");
    }
}

/// Finite but extreme numbers (factor entries x 1e160, a base standard
/// deviation of 1e-300, a pivot column norm of 1e-320, an eigenvalue of
/// 1e-320) fail at load instead of giving NaN or Inf from the methods.
#[test]
fn models_with_extreme_finite_values_do_not_load() {
    use gramian::psd::PsdDensity;
    let density = psd_density();
    let scaled = edited(&density.to_json().unwrap(), |m| {
        for e in m["model"]["factor"][0].as_array_mut().unwrap() {
            *e = serde_json::json!(e.as_f64().unwrap() * 1e160);
        }
    });
    assert!(record_error(PsdDensity::from_json(&scaled)).contains("factor"));
    let narrow = edited(&density.to_json().unwrap(), |m| m["base"]["Gaussian"]["std"][0][0] = serde_json::json!(1e-300));
    assert!(record_error(PsdDensity::from_json(&narrow)).contains("standard deviation"));
    // Every method of the unmodified model is finite.
    let grid = nalgebra::DMatrix::from_fn(5, 2, |i, j| i as f64 * 0.3 - j as f64);
    assert!(density.density(&grid).unwrap().iter().all(|v| v.is_finite()) && density.integral().unwrap().is_finite());

    let mut rng = common::rng();
    let x = common::random_matrix(&mut rng, 30, 3);
    let y = nalgebra::DVector::from_fn(30, |i, _| (2.0 * x[(i, 0)]).sin());
    let model = MklarenParams::new(4).lookahead(2).kernels(&[Kernel::rbf(0.5).unwrap()]).fit(&Device::cpu(), &Supervised::new(x, y).unwrap()).unwrap();
    let json = edited(&model.to_json().unwrap(), |m| m["selected"][0]["norm"] = serde_json::json!(1e-320));
    assert!(record_error(Mklaren::from_json(&json)).contains("norm"));

    let (eksvd, _) = eksvd_model();
    let json = edited(&eksvd.to_json().unwrap(), |m| m["eigenvalues"][0][0] = serde_json::json!(1e-320));
    assert!(record_error(Eksvd::from_json(&json)).contains("eigenvalue 0"));
}

/// Eigenvalues `<= 0` are named as such at load (not as an invalid
/// `gamma` of a later `objective`).
#[test]
fn eksvd_with_non_positive_eigenvalues_says_so() {
    let (model, _) = eksvd_model();
    for v in [0.0, -1.0] {
        let json = edited(&model.to_json().unwrap(), |m| m["eigenvalues"][0][1] = serde_json::json!(v));
        let message = record_error(Eksvd::from_json(&json));
        assert!(message.contains("eigenvalue 1") && message.contains("positive") && !message.contains("gamma"), "{message}");
    }
}

/// A JSON file with a UTF-8 byte-order mark loads as JSON; an empty file
/// is an error that says it is empty (neither is reported as bad CBOR).
#[test]
fn byte_order_marks_and_empty_files_are_read_as_what_they_are() {
    let (model, data) = eksvd_model();
    let dir = std::env::temp_dir().join(format!("gramian-bom-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("m.json");
    std::fs::write(&path, [b"\xef\xbb\xbf".as_slice(), model.to_json().unwrap().as_bytes()].concat()).unwrap();
    assert_same_eksvd(&model, &Eksvd::load(&path).unwrap(), &data);
    assert_same_eksvd(&model, &Eksvd::from_json(&format!("\u{feff}{}", model.to_json().unwrap())).unwrap(), &data);
    for (name, bytes) in [("empty", b"".as_slice()), ("blank", b" \n".as_slice()), ("bom only", b"\xef\xbb\xbf".as_slice())] {
        std::fs::write(&path, bytes).unwrap();
        let message = record_error(Eksvd::load(&path));
        assert!(message.contains("empty") && !message.contains("CBOR"), "{name}: {message}");
    }
    std::fs::remove_dir_all(&dir).ok();
}

/// Matrices and vectors are stored in nalgebra's own form, `[entries, rows,
/// cols]` (`cols` null for a vector): the form files written before the
/// checked reader had, so those files still load.
#[test]
fn matrices_keep_nalgebra_s_stored_form() {
    let density = psd_density();
    let v: serde_json::Value = serde_json::from_str(&density.to_json().unwrap()).unwrap();
    assert_eq!(v["model"]["model"]["factor"], serde_json::to_value(density.model().factor()).unwrap());
    assert_eq!(v["model"]["model"]["centres"], serde_json::to_value(density.model().centres()).unwrap());
    let (model, data) = eksvd_model();
    let v: serde_json::Value = serde_json::from_str(&model.to_json().unwrap()).unwrap();
    assert_eq!(v["model"]["eigenvalues"], serde_json::to_value(model.eigenvalues()).unwrap());
    assert_eq!(v["model"]["eigenvalues"][2], serde_json::Value::Null);
    assert_eq!(v["model"]["weights"][1], serde_json::to_value(model.weights(1)).unwrap());
    assert_eq!(v["model"]["maps"][0]["kind"]["RandomFourier"]["phases"][2], serde_json::Value::Null);
    // A file whose matrices were written by nalgebra's serializer loads.
    let mut old = v.clone();
    for q in 0..3 {
        old["model"]["alphas"][q] = serde_json::to_value(model.alphas(q)).unwrap();
    }
    assert_same_eksvd(&model, &Eksvd::from_json(&old.to_string()).unwrap(), &data);
}

/// The device is not part of a saved model: a model saves the same whichever
/// device it is on, loads on the CPU, and moves only through `to_device`.
#[test]
fn the_device_is_not_saved_and_a_loaded_model_is_on_the_cpu() {
    let (model, data) = eksvd_model();
    let json = model.to_json().unwrap();
    let loaded = Eksvd::from_json(&json).unwrap();
    assert!(!loaded.device().is_gpu());
    assert!(!loaded.feature_map(0).unwrap().device().is_gpu());
    let Some(gpu) = common::gpu_device(gramian::GpuOptions::default()) else { return };
    let on_gpu = loaded.to_device(&gpu);
    assert!(on_gpu.device().is_gpu() && (0..3).all(|q| on_gpu.feature_map(q).unwrap().device().is_gpu()));
    assert!(!loaded.device().is_gpu(), "to_device leaves the original where it was");
    assert_eq!(on_gpu.to_json().unwrap(), json);
    assert_eq!(on_gpu.to_cbor().unwrap(), model.to_cbor().unwrap());
    assert!(!Eksvd::from_cbor(&on_gpu.to_cbor().unwrap()).unwrap().device().is_gpu());
    let (c, g) = (model.transform_paired(&data).unwrap(), on_gpu.transform_paired(&data).unwrap());
    assert!((&c - &g).amax() <= 1e-3 * c.amax(), "scores on the GPU differ by {}", (&c - &g).amax());
}
