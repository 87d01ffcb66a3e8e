//! Multi-view model selection: a method's representations of a split
//! ([`RepresentationFamily`]: kernels x forms x number of components), a
//! downstream classifier and its constant `C`, chosen by macro-F1 on the
//! validation part of one split or averaged over the folds of a
//! cross-validation, by [`GridSearch`] (the grids of the components and of
//! `C` extended where the choice sits on their edge).

use std::cell::RefCell;

use super::grid::{Axis, GridOutcome, GridSearch};
use super::{select_on_validation_scaled, Classify, EvaluationError, Representation, Result, SplitData};

/// A function building the representation of (kernel, form, `k`).
pub type Build<'f> = dyn Fn(usize, usize, usize) -> Result<Representation> + 'f;

/// A method's representations on one split, built on demand: one per
/// kernel (or any unordered choice of the method), form (e.g. the sources'
/// scores side by side or summed) and number of components `k <= k_max`.
pub struct RepresentationFamily<'f> {
    /// Names of the kernels.
    pub kernels: Vec<String>,
    /// Names of the forms.
    pub forms: Vec<String>,
    /// The largest `k` (the grid of `k` is not extended beyond it; 1 for a
    /// method without components).
    pub k_max: usize,
    /// `build(kernel, form, k)`.
    pub build: Box<Build<'f>>,
}

impl std::fmt::Debug for RepresentationFamily<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RepresentationFamily").field("kernels", &self.kernels).field("forms", &self.forms).field("k_max", &self.k_max).finish_non_exhaustive()
    }
}

impl<'f> RepresentationFamily<'f> {
    /// One representation (a method without kernels, forms or components,
    /// e.g. the views side by side).
    pub fn single(name: &str, representation: Representation) -> Self {
        RepresentationFamily { kernels: vec![name.into()], forms: vec!["-".into()], k_max: 1, build: Box::new(move |_, _, _| Ok(representation.clone())) }
    }

    /// The representation of `point` (kernel, form, scaling, `k`, `C`).
    fn build_point(&self, point: &[f64]) -> Result<Representation> {
        (self.build)(point[0] as usize, point[1] as usize, point[3] as usize)
    }
}

/// A fitted method's representation built once per key and kept (e.g. an
/// eKSVD fit per kernel), refitted when a larger `k` is asked for than the
/// kept one has: for families whose `k` grid extends beyond the first fit.
#[derive(Debug, Default)]
pub struct FitCache<K> {
    fits: RefCell<Vec<(K, usize, Representation)>>,
}

impl<K: PartialEq + Clone> FitCache<K> {
    /// An empty cache.
    pub fn new() -> Self {
        FitCache { fits: RefCell::new(Vec::new()) }
    }

    /// The kept representation of `key` with at least `k` components, or
    /// `fit(k)` (which returns the representation and its components) kept
    /// in its place; with the components it has.
    pub fn get(&self, key: &K, k: usize, fit: impl FnOnce(usize) -> Result<(Representation, usize)>) -> Result<(Representation, usize)> {
        if let Some((_, have, rep)) = self.fits.borrow().iter().find(|(key2, have, _)| key2 == key && *have >= k) {
            return Ok((rep.clone(), *have));
        }
        let (rep, have) = fit(k)?;
        let mut fits = self.fits.borrow_mut();
        fits.retain(|(key2, _, _)| key2 != key);
        fits.push((key.clone(), have, rep.clone()));
        Ok((rep, have))
    }
}

/// What [`choose_representation`] chose.
#[derive(Debug, Clone, PartialEq)]
pub struct Choice {
    /// The point: kernel, form, scaling (index into the scalings), `k`, `C`.
    pub point: Vec<f64>,
    /// The search (mean validation macro-F1 as the score, extensions,
    /// edges, warning).
    pub outcome: GridOutcome,
    /// A description: kernel, form, `k`, scaling, `C`, the score and where
    /// the choice sits on an edge.
    pub label: String,
}

/// The grid of a selection: the components per source and the classifier
/// constants to start from, and the scalings to try (`true`: standardised
/// column-wise on the training rows; the first wins ties).
#[derive(Debug, Clone, PartialEq)]
pub struct SelectionGrid {
    /// Numbers of components to start from (capped at the families' `k_max`).
    pub components: Vec<usize>,
    /// Classifier constants to start from.
    pub classifier_cs: Vec<f64>,
    /// Scalings to try.
    pub scalings: Vec<bool>,
}

/// The kernel, form, scaling, `k` and `C` with the best mean validation
/// macro-F1 over `parts` (one split and its family, or the folds of a
/// cross-validation and theirs: the families must have the same kernels
/// and forms), by [`GridSearch`] with `k` extended up to the smallest
/// `k_max` of the families and `C` within
/// `[1e-6, 1e6]` (extensions by the ratio of the outermost values of an
/// axis, see [`GridSearch`]). Ties keep the point scored first (see
/// [`GridSearch::run`]).
///
/// Errors: no parts, families that disagree, an empty grid
/// ([`EvaluationError::InvalidParameter`]); those of the families, the
/// classifier and the search.
pub fn choose_representation(parts: &[(&SplitData, &RepresentationFamily<'_>)], grid: &SelectionGrid, classify: &Classify<'_>) -> Result<Choice> {
    let family = parts.first().ok_or(EvaluationError::InvalidParameter { name: "parts", reason: "nothing to choose on".into() })?.1;
    if parts.iter().any(|(_, f)| f.kernels.len() != family.kernels.len() || f.forms.len() != family.forms.len()) {
        return Err(EvaluationError::InvalidParameter { name: "parts", reason: "the families of the parts have different kernels or forms".into() });
    }
    if grid.components.is_empty() || grid.classifier_cs.is_empty() || grid.scalings.is_empty() {
        return Err(EvaluationError::InvalidParameter { name: "grid", reason: "components, classifier constants and scalings need a value each".into() });
    }
    let k_max = parts.iter().map(|(_, f)| f.k_max).min().unwrap_or(1).max(1);
    let ks: Vec<usize> = grid.components.iter().map(|&k| k.clamp(1, k_max)).collect();
    let axes = vec![
        Axis::categorical("kernel", family.kernels.len()),
        Axis::categorical("form", family.forms.len()),
        Axis::categorical("scaling", grid.scalings.len()),
        Axis::integers("k", &ks, 1.5).bounds(1.0, k_max as f64),
        Axis::geometric("C", &grid.classifier_cs, 10.0).bounds(1e-6, 1e6),
    ];
    let outcome = GridSearch::new(axes).run(|p| {
        let mut mean = 0.0;
        for (split, family) in parts {
            mean += score_choice(split, family, &grid.scalings, p, classify)?.0 / parts.len() as f64;
        }
        Ok(mean)
    })?;
    let b = &outcome.best;
    let mut label = format!(
        "{} {}{} {}C={} ({} {:.1}, {} points)",
        family.kernels[b[0] as usize],
        family.forms[b[1] as usize],
        if k_max > 1 { format!(" k={}", b[3]) } else { String::new() },
        if grid.scalings[b[2] as usize] { "" } else { "raw " },
        b[4],
        if parts.len() > 1 { "CV" } else { "val" },
        100.0 * outcome.score,
        outcome.evaluated
    );
    for (axis, edge) in &outcome.edges {
        if let Some(e) = edge {
            label.push_str(&format!(" [{axis} on its {e}]"));
        }
    }
    Ok(Choice { point: outcome.best.clone(), outcome, label })
}

/// Validation and test macro-F1 of `point` (kernel, form, scaling index,
/// `k`, `C`) of `family` on `split`.
///
/// Errors: those of the family and the classifier.
pub fn score_choice(split: &SplitData, family: &RepresentationFamily<'_>, scalings: &[bool], point: &[f64], classify: &Classify<'_>) -> Result<(f64, f64)> {
    let scaling = *scalings.get(point[2] as usize).ok_or(EvaluationError::InvalidParameter { name: "point", reason: "scaling index out of range".into() })?;
    let rep = family.build_point(point)?;
    let sel = select_on_validation_scaled(split, &[((), rep)], &[point[4]], classify, scaling)?;
    Ok((sel.validation_f1, sel.test_f1))
}

#[cfg(test)]
mod tests {
    use super::*;
    use gramian::MultiSource;
    use nalgebra::DMatrix;

    /// A split of `n` rows per part, labels `row % 3` (the views are not
    /// used: the families below build their representations directly).
    fn split(n: usize) -> SplitData {
        let part = || MultiSource::paired(vec![DMatrix::zeros(n, 1), DMatrix::zeros(n, 1)]).unwrap();
        let labels: Vec<usize> = (0..n).map(|i| i % 3).collect();
        SplitData { train: part(), validation: part(), test: part(), train_labels: labels.clone(), validation_labels: labels.clone(), test_labels: labels }
    }

    /// `k` columns holding the label (kernel 1) or a wrong label (kernel 0)
    /// of each row in column 0 and the row's index in column 1.
    fn family(n: usize) -> RepresentationFamily<'static> {
        let build = move |kernel: usize, _form: usize, k: usize| {
            let m = DMatrix::from_fn(n, k.max(2), |i, j| match j {
                0 => ((i % 3 + if kernel == 1 { 0 } else { 1 }) % 3) as f64,
                1 => i as f64,
                _ => 0.0,
            });
            Ok(Representation { train: m.clone(), validation: m.clone(), test: m })
        };
        RepresentationFamily { kernels: vec!["wrong".into(), "right".into()], forms: vec!["-".into()], k_max: 30, build: Box::new(build) }
    }

    /// Predicts the label of column 0 for the rows whose index modulo 10 is
    /// below the number of columns, label 0 elsewhere: macro-F1 grows with
    /// `k` up to 10 and is flat after, whatever `C`.
    fn classify(_c: f64, _train: &DMatrix<f64>, _labels: &[usize], eval: &[&DMatrix<f64>]) -> Result<Vec<Vec<usize>>> {
        Ok(eval.iter().map(|x| (0..x.nrows()).map(|i| if ((x[(i, 1)] as usize) % 10) < x.ncols() { x[(i, 0)] as usize } else { 0 }).collect()).collect())
    }

    #[test]
    fn the_right_kernel_and_an_interior_k_beyond_the_first_grid_are_chosen() {
        let (s, f) = (split(60), family(60));
        let grid = SelectionGrid { components: vec![2, 4, 8], classifier_cs: vec![0.1, 1.0], scalings: vec![false] };
        let choice = choose_representation(&[(&s, &f)], &grid, &classify).unwrap();
        assert_eq!(choice.point[0], 1.0, "{choice:?}");
        // 8 -> 16 (the ratio of the outermost values; perfect) -> 30 (32
        // clamped to k_max; flat).
        assert_eq!(choice.point[3], 16.0, "{choice:?}");
        assert_eq!(choice.outcome.axes[3].values(), &[2.0, 4.0, 8.0, 16.0, 30.0]);
        assert!((choice.outcome.score - 1.0).abs() < 1e-12, "{choice:?}");
        assert!(choice.outcome.edges.iter().any(|(a, e)| a == "k" && e.is_none()), "{choice:?}");
        let (validation, test) = score_choice(&s, &f, &grid.scalings, &choice.point, &classify).unwrap();
        assert!((validation - 1.0).abs() < 1e-12 && (test - 1.0).abs() < 1e-12);
        // Folds: the mean over the parts, the same choice here.
        let cv = choose_representation(&[(&s, &f), (&s, &f)], &grid, &classify).unwrap();
        assert_eq!(cv.point, choice.point);
        assert!(cv.label.contains("CV"), "{}", cv.label);
        // A family whose k stops at 9: bounded there, and the search says so.
        let mut small = family(60);
        small.k_max = 9;
        let bounded = choose_representation(&[(&s, &small)], &grid, &classify).unwrap();
        assert_eq!(bounded.point[3], 9.0);
        assert!(bounded.label.contains("bounded"), "{}", bounded.label);
    }

    #[test]
    fn bad_selections_are_typed_errors_and_fits_are_kept() {
        let (s, f) = (split(30), family(30));
        let grid = SelectionGrid { components: vec![2], classifier_cs: vec![1.0], scalings: vec![true] };
        assert!(matches!(choose_representation(&[], &grid, &classify), Err(EvaluationError::InvalidParameter { .. })));
        let empty = SelectionGrid { components: vec![], ..grid.clone() };
        assert!(matches!(choose_representation(&[(&s, &f)], &empty, &classify), Err(EvaluationError::InvalidParameter { .. })));
        let mut other = family(30);
        other.forms.push("second".into());
        assert!(matches!(choose_representation(&[(&s, &f), (&s, &other)], &grid, &classify), Err(EvaluationError::InvalidParameter { .. })));
        assert!(score_choice(&s, &f, &grid.scalings, &[1.0, 0.0, 5.0, 2.0, 1.0], &classify).is_err());
        // The cache refits only for more components than it keeps.
        let cache = FitCache::new();
        let fits = std::cell::Cell::new(0);
        let fit = |k: usize| {
            fits.set(fits.get() + 1);
            Ok((Representation { train: DMatrix::zeros(1, k), validation: DMatrix::zeros(1, k), test: DMatrix::zeros(1, k) }, k))
        };
        assert_eq!(cache.get(&"a", 4, fit).unwrap().1, 4);
        assert_eq!(cache.get(&"a", 3, fit).unwrap().1, 4);
        assert_eq!(cache.get(&"a", 6, fit).unwrap().1, 6);
        assert_eq!(cache.get(&"b", 2, fit).unwrap().1, 2);
        assert_eq!(fits.get(), 3);
    }
}
