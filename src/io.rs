//! Saving and loading fitted models (feature `serde`).
//!
//! A saved model is an envelope `{format, version, kind, crate_version,
//! model}` written as JSON (readable, diffable) or CBOR (RFC 8949, compact
//! binary). Loading reads the envelope first: another `format` or `kind`, or
//! a `version` newer than [`FORMAT_VERSION`], is [`Error::Record`] with the
//! reason, before the model itself is decoded; a decoded model is checked
//! for consistency ([`SavedModel::check_loaded`]) so that a damaged file
//! fails at load, not in a later `predict`.
//!
//! A saved model is untrusted input. Every matrix is read as its entries and
//! shape, and built only when the shape, multiplied with checked arithmetic,
//! matches the entries; every loaded model is then checked for all that its
//! methods rely on: shapes consistent with each other, kernels consistent
//! with their widths, positive eigenvalues, norms and scales, numbers finite
//! and within [`MAX_STORED_MAGNITUDE`] (with bounds of derived quantities
//! such as a density's largest value), and counts within what the methods
//! can allocate. A file that fails any check is [`Error::Record`] naming what
//! is wrong; methods of a model that loaded return typed errors, not NaN or
//! infinities, where their arithmetic overflows on their inputs.
//!
//! The device a model was fitted on is not saved (a file is the same
//! whichever device fitted the model): a loaded model computes on the CPU,
//! and [`OnDevice::to_device`](crate::estimator::OnDevice::to_device) moves
//! it to another device.
//!
//! ```
//! use gramian::prelude::*;
//! use gramian::io::SavedModel;
//! use nalgebra::DMatrix;
//!
//! let x = DMatrix::<f64>::from_fn(30, 3, |i, j| ((i * 5 + j) % 7) as f64);
//! let z = DMatrix::<f64>::from_fn(30, 3, |i, j| ((i + 3 * j) % 5) as f64);
//! let data = MultiSource::paired(vec![x, z])?;
//! let model = EksvdParams::new(2).fit(&Device::cpu(), &data)?;
//! let json = model.to_json()?;
//! let loaded = Eksvd::from_json(&json)?;
//! assert!(!loaded.device().is_gpu()); // loaded on the CPU; .to_device(&device) moves it
//! assert_eq!(loaded.transform(&data)?, model.transform(&data)?);
//! # Ok::<(), gramian::Error>(())
//! ```

use std::path::Path;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// The envelope's `format` field.
pub const FORMAT_NAME: &str = "gramian-model";

/// The version of the saved-model format written by this build. Files of
/// this or an older version load; newer ones fail with [`Error::Record`].
pub const FORMAT_VERSION: u32 = 1;

/// The encoding of a saved model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// JSON text.
    Json,
    /// CBOR (RFC 8949), compact binary.
    Cbor,
}

/// A fitted model that can be saved and loaded.
pub trait SavedModel: Serialize + DeserializeOwned {
    /// The envelope's `kind` (e.g. `"eksvd"`): a file of another kind does
    /// not load as this model.
    const KIND: &'static str;

    /// Checks a decoded model for every invariant its methods rely on
    /// (shapes, kernels, positive scales, magnitudes, counts; see the module
    /// docs); called by every loader.
    fn check_loaded(&self) -> Result<()>;

    /// The model as JSON.
    fn to_json(&self) -> Result<String> {
        serde_json::to_string(&Envelope::of(self)).map_err(|e| Error::Record(format!("JSON encoding: {e}")))
    }

    /// A model from JSON written by [`SavedModel::to_json`], on the CPU (as
    /// [`SavedModel::load`]).
    fn from_json(text: &str) -> Result<Self> {
        // A byte-order mark (as some editors write) is not part of the JSON.
        let text = text.strip_prefix('\u{feff}').unwrap_or(text);
        let header: Header = serde_json::from_str(text).map_err(|e| Error::Record(format!("not a saved model (JSON): {e}")))?;
        header.check(Self::KIND)?;
        let envelope: Envelope<Self> = serde_json::from_str(text).map_err(|e| Error::Record(format!("{} model (JSON): {e}", Self::KIND)))?;
        envelope.model.check_loaded()?;
        Ok(envelope.model)
    }

    /// The model as CBOR bytes.
    fn to_cbor(&self) -> Result<Vec<u8>> {
        let mut out = Vec::new();
        ciborium::into_writer(&Envelope::of(self), &mut out).map_err(|e| Error::Record(format!("CBOR encoding: {e}")))?;
        Ok(out)
    }

    /// A model from CBOR bytes written by [`SavedModel::to_cbor`], on the CPU
    /// (as [`SavedModel::load`]).
    fn from_cbor(bytes: &[u8]) -> Result<Self> {
        let header: Header = ciborium::from_reader(bytes).map_err(|e| Error::Record(format!("not a saved model (CBOR): {e}")))?;
        header.check(Self::KIND)?;
        let envelope: Envelope<Self> = ciborium::from_reader(bytes).map_err(|e| Error::Record(format!("{} model (CBOR): {e}", Self::KIND)))?;
        envelope.model.check_loaded()?;
        Ok(envelope.model)
    }

    /// Writes the model to `path` in `format`.
    fn save(&self, path: impl AsRef<Path>, format: Format) -> Result<()> {
        let bytes = match format {
            Format::Json => self.to_json()?.into_bytes(),
            Format::Cbor => self.to_cbor()?,
        };
        std::fs::write(path.as_ref(), bytes).map_err(|e| Error::Record(format!("writing {}: {e}", path.as_ref().display())))
    }

    /// Reads a model saved by [`SavedModel::save`] in either format (JSON
    /// files start with `{`, after white space and an optional UTF-8
    /// byte-order mark; anything else is read as CBOR). An empty file is
    /// [`Error::Record`] saying so.
    ///
    /// The loaded model computes on the CPU (files do not record a device);
    /// [`OnDevice::to_device`](crate::estimator::OnDevice::to_device) moves
    /// it, e.g. `Eksvd::load(path)?.to_device(&Device::gpu()?)`.
    fn load(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        let bytes = std::fs::read(path).map_err(|e| Error::Record(format!("reading {}: {e}", path.display())))?;
        let body = bytes.strip_prefix(b"\xef\xbb\xbf".as_slice()).unwrap_or(&bytes);
        match body.iter().find(|b| !b.is_ascii_whitespace()) {
            None => Err(Error::Record(format!("{}: the file is empty{}, not a saved model", path.display(), if bytes.is_empty() { "" } else { " (white space only)" }))),
            Some(b'{') => {
                let text = std::str::from_utf8(body).map_err(|e| Error::Record(format!("{}: not UTF-8 JSON: {e}", path.display())))?;
                Self::from_json(text).map_err(|e| match e {
                    Error::Record(m) => Error::Record(format!("{}: {m}", path.display())),
                    e => e,
                })
            }
            _ => Self::from_cbor(body).map_err(|e| match e {
                Error::Record(m) => Error::Record(format!("{}: {m}", path.display())),
                e => e,
            }),
        }
    }
}

#[derive(Serialize, Deserialize)]
struct Envelope<M> {
    format: String,
    version: u32,
    kind: String,
    crate_version: String,
    model: M,
}

impl<'a, M: SavedModel> Envelope<&'a M> {
    fn of(model: &'a M) -> Self {
        Envelope { format: FORMAT_NAME.into(), version: FORMAT_VERSION, kind: M::KIND.into(), crate_version: env!("CARGO_PKG_VERSION").into(), model }
    }
}

/// The envelope without the model (unknown fields are skipped).
#[derive(Deserialize)]
struct Header {
    format: String,
    version: u32,
    kind: String,
    crate_version: String,
}

impl Header {
    fn check(&self, kind: &str) -> Result<()> {
        if self.format != FORMAT_NAME {
            return Err(Error::Record(format!("format {:?} is not {FORMAT_NAME:?}", self.format)));
        }
        if self.version > FORMAT_VERSION {
            return Err(Error::Record(format!(
                "model format version {} (written by gramian {}) is newer than this build reads ({FORMAT_VERSION}, gramian {}): upgrade gramian",
                self.version,
                self.crate_version,
                env!("CARGO_PKG_VERSION")
            )));
        }
        if self.kind != kind {
            return Err(Error::Record(format!("the file holds a {:?} model, not {kind:?}", self.kind)));
        }
        Ok(())
    }
}

/// Serde adapters for solver-report numbers that can be non-finite (a
/// duality gap before the first feasible primal point is `+inf`): JSON has
/// no infinities, so a non-finite number is written as `null` and loads as
/// `+inf` (in CBOR too, so both formats give the same model).
pub(crate) mod nonfinite {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    fn encode(v: f64) -> Option<f64> {
        v.is_finite().then_some(v)
    }

    fn decode(v: Option<f64>) -> f64 {
        v.unwrap_or(f64::INFINITY)
    }

    /// `Vec<f64>`, e.g. the objective reached from each start.
    pub(crate) mod values {
        use super::*;

        pub(crate) fn serialize<S: Serializer>(v: &[f64], s: S) -> Result<S::Ok, S::Error> {
            v.iter().map(|&x| encode(x)).collect::<Vec<_>>().serialize(s)
        }

        pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<f64>, D::Error> {
            Ok(Vec::<Option<f64>>::deserialize(d)?.into_iter().map(decode).collect())
        }
    }

    /// `Vec<(usize, f64)>`, e.g. `(iteration, gap)` at every check.
    pub(crate) mod history {
        use super::*;

        pub(crate) fn serialize<S: Serializer>(v: &[(usize, f64)], s: S) -> Result<S::Ok, S::Error> {
            v.iter().map(|&(k, x)| (k, encode(x))).collect::<Vec<_>>().serialize(s)
        }

        pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<(usize, f64)>, D::Error> {
            Ok(Vec::<(usize, Option<f64>)>::deserialize(d)?.into_iter().map(|(k, x)| (k, decode(x))).collect())
        }
    }
}

/// Serde adapter of every matrix and vector in a saved model
/// (`#[serde(with = "crate::io::matrix")]` on `DMatrix<f64>`, `DVector<f64>`,
/// and `Vec`s and `Option`s of them).
///
/// The stored form is nalgebra's, `[entries, rows, cols]` (column-major
/// entries; `cols` is `null` for a vector). Loading reads the three parts
/// and builds the matrix only when `rows * cols`, computed with checked
/// arithmetic, equals the number of entries: a file that declares a shape
/// its entries do not fill is a decoding error, never a matrix whose shape
/// lies about its storage. (nalgebra's own `Deserialize` compares a product
/// that can wrap around.)
pub(crate) mod matrix {
    use nalgebra::{DMatrix, DVector};
    use serde::de::{Deserialize, Deserializer, Error as _};
    use serde::ser::{Serialize, Serializer};

    /// A matrix-valued field of a saved model.
    pub(crate) trait Stored: Sized {
        /// Writes the field in nalgebra's form.
        fn save<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error>;
        /// Reads the field, checking every shape against its entries.
        fn load<'de, D: Deserializer<'de>>(d: D) -> Result<Self, D::Error>;
    }

    pub(crate) fn serialize<T: Stored, S: Serializer>(v: &T, s: S) -> Result<S::Ok, S::Error> {
        v.save(s)
    }

    pub(crate) fn deserialize<'de, T: Stored, D: Deserializer<'de>>(d: D) -> Result<T, D::Error> {
        T::load(d)
    }

    struct Saved<'a, T>(&'a T);

    impl<T: Stored> Serialize for Saved<'_, T> {
        fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            self.0.save(s)
        }
    }

    struct Loaded<T>(T);

    impl<'de, T: Stored> Deserialize<'de> for Loaded<T> {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            T::load(d).map(Loaded)
        }
    }

    /// `rows x cols` entries, or the reason they are not `len`.
    fn check_shape(rows: usize, cols: usize, len: usize) -> Result<(), String> {
        match rows.checked_mul(cols) {
            Some(n) if n == len => Ok(()),
            Some(n) => Err(format!("a {rows} x {cols} matrix needs {n} entries, the file has {len}")),
            None => Err(format!("a {rows} x {cols} matrix has more entries than memory can address (the file has {len})")),
        }
    }

    impl Stored for DMatrix<f64> {
        fn save<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            self.serialize(s)
        }

        fn load<'de, D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            let (entries, rows, cols): (Vec<f64>, usize, usize) = Deserialize::deserialize(d)?;
            check_shape(rows, cols, entries.len()).map_err(D::Error::custom)?;
            Ok(DMatrix::from_vec(rows, cols, entries))
        }
    }

    impl Stored for DVector<f64> {
        fn save<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            self.serialize(s)
        }

        fn load<'de, D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            let (entries, rows, ()): (Vec<f64>, usize, ()) = Deserialize::deserialize(d)?;
            check_shape(rows, 1, entries.len()).map_err(D::Error::custom)?;
            Ok(DVector::from_vec(entries))
        }
    }

    impl<T: Stored> Stored for Vec<T> {
        fn save<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            s.collect_seq(self.iter().map(Saved))
        }

        fn load<'de, D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            Ok(Vec::<Loaded<T>>::deserialize(d)?.into_iter().map(|v| v.0).collect())
        }
    }

    impl<T: Stored> Stored for Option<T> {
        fn save<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            match self {
                Some(v) => s.serialize_some(&Saved(v)),
                None => s.serialize_none(),
            }
        }

        fn load<'de, D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            Ok(Option::<Loaded<T>>::deserialize(d)?.map(|v| v.0))
        }
    }
}

/// The largest magnitude a loaded model may store in its coefficients,
/// centres and other numbers: products of up to three such numbers, and
/// sums of squares over any dimension a file can hold, stay finite, so the
/// arithmetic of a loaded model's methods on its own numbers does not
/// overflow (bounds of derived quantities, such as a density's largest
/// value, are checked by each model). Fitted models are many orders of
/// magnitude inside it.
pub const MAX_STORED_MAGNITUDE: f64 = 1e100;

/// The range `[1 / MAX_STORED_MAGNITUDE, MAX_STORED_MAGNITUDE]` of a loaded
/// scale (kernel width, standard deviation, norm, eigenvalue) that methods
/// divide by or square.
pub const MIN_STORED_SCALE: f64 = 1.0 / MAX_STORED_MAGNITUDE;

/// Every number finite and at most [`MAX_STORED_MAGNITUDE`] in magnitude:
/// the check of a loaded model's numbers (`what` names them in the error).
pub(crate) fn ensure_bounded<'a>(what: &str, values: impl IntoIterator<Item = &'a f64>) -> Result<()> {
    for (i, &v) in values.into_iter().enumerate() {
        ensure(v.is_finite() && v.abs() <= MAX_STORED_MAGNITUDE, || {
            if v.is_finite() {
                format!("{what}: entry {i} is {v:e}, beyond the magnitude a model may store ({MAX_STORED_MAGNITUDE:e})")
            } else {
                format!("{what}: entry {i} is {v} (not finite)")
            }
        })?;
    }
    Ok(())
}

/// A positive scale within `[MIN_STORED_SCALE, MAX_STORED_MAGNITUDE]`.
pub(crate) fn ensure_scale(what: &str, v: f64) -> Result<()> {
    ensure(v.is_finite() && (MIN_STORED_SCALE..=MAX_STORED_MAGNITUDE).contains(&v), || format!("{what} is {v:e}, outside the range of a stored scale ({MIN_STORED_SCALE:e} ..= {MAX_STORED_MAGNITUDE:e})"))
}

/// The kernel is the Gaussian kernel of width `sigma` (as built by
/// [`Kernel::gaussian_with_width`], to rounding), `sigma` a stored scale.
pub(crate) fn ensure_gaussian_of_width(what: &str, kernel: &crate::Kernel, sigma: f64) -> Result<()> {
    ensure_scale(&format!("{what}: kernel width sigma"), sigma)?;
    ensure(kernel.gaussian_width().is_some_and(|w| (w - sigma).abs() <= 1e-12 * sigma), || format!("{what}: the kernel {kernel:?} is not the Gaussian kernel of the width sigma = {sigma:e}"))
}

/// A valid kernel whose parameters are stored numbers (see
/// [`MAX_STORED_MAGNITUDE`]).
pub(crate) fn ensure_kernel(what: &str, kernel: &crate::Kernel) -> Result<()> {
    use crate::Kernel;
    ensure(kernel.validate().is_ok(), || format!("{what}: invalid kernel {kernel:?}"))?;
    match *kernel {
        Kernel::Rbf { gamma } | Kernel::Laplacian { gamma } => ensure_scale(&format!("{what}: kernel gamma"), gamma),
        Kernel::Linear => Ok(()),
        Kernel::Polynomial { gamma, coef0, .. } | Kernel::Sigmoid { gamma, coef0 } => {
            ensure_scale(&format!("{what}: kernel gamma"), gamma)?;
            ensure_bounded(&format!("{what}: kernel coef0"), [coef0].iter())
        }
    }
}

/// Fails with [`Error::Record`] unless `ok`: the check of a loaded model.
pub(crate) fn ensure(ok: bool, what: impl FnOnce() -> String) -> Result<()> {
    if ok {
        Ok(())
    } else {
        Err(Error::Record(format!("inconsistent saved model: {}", what())))
    }
}

#[cfg(test)]
mod tests {
    use serde::{Deserialize, Serialize};

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct Report {
        #[serde(with = "super::nonfinite::history")]
        history: Vec<(usize, f64)>,
        #[serde(with = "super::nonfinite::values")]
        values: Vec<f64>,
    }

    #[test]
    fn non_finite_report_numbers_survive_json_and_cbor() {
        let report = Report { history: vec![(2, 0.5), (4, f64::INFINITY), (6, 1e-7)], values: vec![f64::INFINITY, -1.25, f64::MAX] };
        let json = serde_json::to_string(&report).unwrap();
        assert_eq!(json, r#"{"history":[[2,0.5],[4,null],[6,1e-7]],"values":[null,-1.25,1.7976931348623157e+308]}"#);
        assert_eq!(serde_json::from_str::<Report>(&json).unwrap(), report);
        let mut cbor = Vec::new();
        ciborium::into_writer(&report, &mut cbor).unwrap();
        assert_eq!(ciborium::from_reader::<Report, _>(cbor.as_slice()).unwrap(), report);
        // NaN has no meaning to keep: it loads as +inf, like an infinite gap.
        let nan = Report { history: vec![(1, f64::NAN)], values: vec![f64::NAN] };
        let back: Report = serde_json::from_str(&serde_json::to_string(&nan).unwrap()).unwrap();
        assert_eq!(back, Report { history: vec![(1, f64::INFINITY)], values: vec![f64::INFINITY] });
    }
}
