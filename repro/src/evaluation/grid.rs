//! Grid search over any number of hyperparameters that never settles on a
//! grid edge silently.
//!
//! Every point of the Cartesian grid is scored once (scores are cached by
//! point); when the best point sits on the lowest or highest value of an
//! axis that has more than one value, that axis is extended one step beyond
//! the edge (a geometric axis by the ratio of its two outermost values, an
//! integer axis the same, rounded to a new integer; clamped into the
//! axis's bounds, and not extended where they leave no room) and the new points are scored. Each edge is extended at
//! most [`GridSearch::max_extensions`] times; an extension that improves
//! the best score by less than [`GridSearch::min_gain`] ends the extension
//! at that edge (the score is flat there). The outcome says which axes the
//! choice still sits on an edge of, and why, and carries a warning when the
//! extension limit was reached with the choice on an edge.

use std::collections::HashMap;

use super::{EvaluationError, Result};

/// How an axis is extended beyond its edges.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Spacing {
    /// By the ratio of the two outermost values (at least `fallback` where
    /// the axis has one value).
    Geometric { fallback: f64 },
    /// The same, rounded to integers (at least one apart).
    Integer { fallback: f64 },
    /// Choices `0, 1, ..` without an order: never extended.
    Categorical,
}

/// One hyperparameter: its name, values and bounds.
#[derive(Debug, Clone, PartialEq)]
pub struct Axis {
    name: String,
    values: Vec<f64>,
    spacing: Spacing,
    lower: f64,
    upper: f64,
}

impl Axis {
    /// A positive real axis extended geometrically (e.g. a kernel width or a
    /// regularisation constant); `ratio > 1` is the step of an extension
    /// where the axis has one value.
    pub fn geometric(name: &str, values: &[f64], ratio: f64) -> Self {
        Axis { name: name.into(), values: values.to_vec(), spacing: Spacing::Geometric { fallback: ratio }, lower: f64::MIN_POSITIVE, upper: f64::MAX }
    }

    /// A positive integer axis (e.g. a number of components) extended
    /// geometrically and rounded.
    pub fn integers(name: &str, values: &[usize], ratio: f64) -> Self {
        Axis { name: name.into(), values: values.iter().map(|&v| v as f64).collect(), spacing: Spacing::Integer { fallback: ratio }, lower: 1.0, upper: f64::MAX }
    }

    /// `count` unordered choices (e.g. kernels), the values `0, 1, ..,
    /// count - 1` standing for them: never extended, no edges.
    pub fn categorical(name: &str, count: usize) -> Self {
        Axis { name: name.into(), values: (0..count).map(|v| v as f64).collect(), spacing: Spacing::Categorical, lower: 0.0, upper: f64::MAX }
    }

    /// No extension below `lower` or above `upper` (e.g. the number of
    /// components a data set has, or a solver's smallest regularisation).
    pub fn bounds(mut self, lower: f64, upper: f64) -> Self {
        self.lower = lower;
        self.upper = upper;
        self
    }

    /// Name of the axis.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Values, sorted, the extensions included.
    pub fn values(&self) -> &[f64] {
        &self.values
    }

    fn validate(&self) -> Result<()> {
        let bad = |reason: String| Err(EvaluationError::InvalidParameter { name: "axis", reason: format!("{}: {reason}", self.name) });
        if self.values.is_empty() {
            return bad("no values".into());
        }
        let fallback = match self.spacing {
            Spacing::Geometric { fallback } | Spacing::Integer { fallback } => fallback,
            Spacing::Categorical => return Ok(()),
        };
        if let Some(v) = self.values.iter().find(|v| !(v.is_finite() && **v > 0.0)) {
            return bad(format!("values must be finite and > 0, got {v}"));
        }
        if matches!(self.spacing, Spacing::Integer { .. }) && self.values.iter().any(|v| v.fract() != 0.0) {
            return bad("an integer axis takes integers".into());
        }
        if !(fallback.is_finite() && fallback > 1.0) {
            return bad(format!("the extension ratio must be finite and > 1, got {fallback}"));
        }
        if !(self.lower <= self.upper) || self.lower.is_nan() {
            return bad(format!("bounds [{}, {}] are empty", self.lower, self.upper));
        }
        if self.values.iter().any(|&v| v < self.lower || v > self.upper) {
            return bad(format!("values outside the bounds [{}, {}]", self.lower, self.upper));
        }
        Ok(())
    }

    /// The value one step beyond the low or high edge, or `None` beyond
    /// the bounds.
    fn beyond(&self, low: bool) -> Option<f64> {
        let v = &self.values;
        let n = v.len();
        let (fallback, integer) = match self.spacing {
            Spacing::Geometric { fallback } => (fallback, false),
            Spacing::Integer { fallback } => (fallback, true),
            Spacing::Categorical => return None,
        };
        let ratio = if n > 1 { if low { v[1] / v[0] } else { v[n - 1] / v[n - 2] } } else { fallback }.max(1.05);
        let mut next = if low { v[0] / ratio } else { v[n - 1] * ratio };
        if integer {
            next = if low { next.floor().min(v[0] - 1.0) } else { next.ceil().max(v[n - 1] + 1.0) };
        }
        // Clamped into the bounds; an extension only where that leaves room.
        let (lower, upper) = if integer { (self.lower.ceil(), self.upper.floor()) } else { (self.lower, self.upper) };
        let next = next.clamp(lower, upper);
        let beyond = if low { next < v[0] } else { next > v[n - 1] };
        (next.is_finite() && next > 0.0 && beyond).then_some(next)
    }
}

/// The search: its axes, the extension limit and the gain that counts.
#[derive(Debug, Clone, PartialEq)]
pub struct GridSearch {
    axes: Vec<Axis>,
    max_extensions: usize,
    min_gain: f64,
}

/// What [`GridSearch::run`] found.
#[derive(Debug, Clone, PartialEq)]
pub struct GridOutcome {
    /// The best point, one value per axis in the order of the axes.
    pub best: Vec<f64>,
    /// Its score.
    pub score: f64,
    /// Points scored.
    pub evaluated: usize,
    /// The axes, extensions included.
    pub axes: Vec<Axis>,
    /// Per ordered axis of more than one value: where the choice sits (`None`
    /// inside the grid, else why it was not extended further).
    pub edges: Vec<(String, Option<String>)>,
    /// What the search did, in order (extensions, flat edges, bounds).
    pub notes: Vec<String>,
    /// Set when the extension limit was reached with the choice still on
    /// an edge: the grid should be widened by the caller.
    pub warning: Option<String>,
}

impl GridSearch {
    /// A search over `axes` (a point is one value of each), each edge
    /// extended at most 3 times, gains below `1e-3` counting as flat.
    pub fn new(axes: Vec<Axis>) -> Self {
        GridSearch { axes, max_extensions: 3, min_gain: 1e-3 }
    }

    /// Extensions per edge (0: the grid as given, edges still reported).
    pub fn max_extensions(mut self, max_extensions: usize) -> Self {
        self.max_extensions = max_extensions;
        self
    }

    /// The smallest improvement of the best score an extension must bring
    /// for its edge to be extended again.
    pub fn min_gain(mut self, min_gain: f64) -> Self {
        self.min_gain = min_gain;
        self
    }

    /// Scores every point with `score` (larger is better; a non-finite score
    /// is a failed point, never chosen), extending the grid as the module
    /// docs say, and returns the best point. Ties keep the point scored
    /// first: an extension is chosen only for a better score, and among the
    /// first grid's points the one with the lowest values (axes compared in
    /// order).
    ///
    /// Errors: no axes, an empty axis, values not finite and positive,
    /// non-integers on an integer axis, values outside the bounds, a
    /// negative or non-finite gain ([`EvaluationError::InvalidParameter`]);
    /// no point with a finite score ([`EvaluationError::NoCandidates`]);
    /// the first error of `score`.
    pub fn run(&self, mut score: impl FnMut(&[f64]) -> Result<f64>) -> Result<GridOutcome> {
        if self.axes.is_empty() {
            return Err(EvaluationError::InvalidParameter { name: "axes", reason: "a grid search needs at least one axis".into() });
        }
        if !(self.min_gain.is_finite() && self.min_gain >= 0.0) {
            return Err(EvaluationError::InvalidParameter { name: "min_gain", reason: format!("must be finite and >= 0, got {}", self.min_gain) });
        }
        let mut axes = self.axes.clone();
        for axis in &mut axes {
            axis.validate()?;
            axis.values.sort_by(f64::total_cmp);
            axis.values.dedup();
        }
        // Score and the order in which the point was scored.
        let mut scores: HashMap<Vec<u64>, (f64, usize)> = HashMap::new();
        let mut notes = Vec::new();
        // Per axis and edge (low, high): extensions made, and whether the
        // edge is closed (flat, bounded or at the limit) with the reason.
        let mut used = vec![[0usize; 2]; axes.len()];
        let mut closed: Vec<[Option<String>; 2]> = vec![[None, None]; axes.len()];
        let mut last: Option<(f64, usize, usize)> = None;
        loop {
            for point in cartesian(&axes) {
                let key: Vec<u64> = point.iter().map(|v| v.to_bits()).collect();
                if !scores.contains_key(&key) {
                    let s = score(&point)?;
                    let order = scores.len();
                    scores.insert(key, (s, order));
                }
            }
            let (best_score, best) = best_point(&axes, &scores).ok_or(EvaluationError::NoCandidates("no grid point has a finite score"))?;
            if let Some((previous, a, e)) = last.take() {
                if best_score - previous < self.min_gain && closed[a][e].is_none() {
                    let reason = format!("flat: the last extension gained {:.1e} (< {:.0e})", best_score - previous, self.min_gain);
                    notes.push(format!("{} {} edge: {reason}", axes[a].name, ["low", "high"][e]));
                    closed[a][e] = Some(reason);
                }
            }
            let mut extended = None;
            for (a, axis) in axes.iter_mut().enumerate() {
                if axis.values.len() < 2 || axis.spacing == Spacing::Categorical {
                    continue;
                }
                let n = axis.values.len();
                for (e, at_edge) in [best[a] == axis.values[0], best[a] == axis.values[n - 1]].into_iter().enumerate() {
                    if !at_edge || closed[a][e].is_some() {
                        continue;
                    }
                    if used[a][e] >= self.max_extensions {
                        closed[a][e] = Some(format!("extension limit ({}) reached", self.max_extensions));
                        continue;
                    }
                    match axis.beyond(e == 0) {
                        Some(v) => {
                            used[a][e] += 1;
                            notes.push(format!("{} extended {} to {v:.4e}", axis.name, ["below", "above"][e]));
                            if e == 0 { axis.values.insert(0, v) } else { axis.values.push(v) }
                            extended = Some((a, e));
                        }
                        None => {
                            let reason = format!("bounded: no value {} within [{:e}, {:e}]", ["below", "above"][e], axis.lower, axis.upper);
                            notes.push(format!("{} {} edge: {reason}", axis.name, ["low", "high"][e]));
                            closed[a][e] = Some(reason);
                        }
                    }
                    break;
                }
                if extended.is_some() {
                    break;
                }
            }
            match extended {
                Some((a, e)) => last = Some((best_score, a, e)),
                None => {
                    let edges: Vec<(String, Option<String>)> = axes
                        .iter()
                        .enumerate()
                        .filter(|(_, axis)| axis.values.len() > 1 && axis.spacing != Spacing::Categorical)
                        .map(|(a, axis)| {
                            let n = axis.values.len();
                            let e = if best[a] == axis.values[0] { Some(0) } else if best[a] == axis.values[n - 1] { Some(1) } else { None };
                            (axis.name.clone(), e.map(|e| format!("{} edge, {}", ["low", "high"][e], closed[a][e].clone().unwrap_or_default())))
                        })
                        .collect();
                    let at_limit: Vec<String> = edges.iter().filter(|(_, e)| e.as_deref().is_some_and(|e| e.contains("limit"))).map(|(name, _)| name.clone()).collect();
                    let warning = (!at_limit.is_empty()).then(|| format!("the choice sits on an edge of {} after {} extensions: widen the grid", at_limit.join(", "), self.max_extensions));
                    return Ok(GridOutcome { best, score: best_score, evaluated: scores.len(), axes, edges, notes, warning });
                }
            }
        }
    }
}

/// Every point of the grid, the last axis varying fastest.
fn cartesian(axes: &[Axis]) -> Vec<Vec<f64>> {
    let mut points = vec![Vec::with_capacity(axes.len())];
    for axis in axes {
        points = points.into_iter().flat_map(|p| axis.values.iter().map(move |&v| [p.as_slice(), &[v]].concat())).collect();
    }
    points
}

/// The best finite score of the grid and its point (ties: the point scored
/// first, so an extension wins only by a better score, and within the
/// first grid the lowest values).
fn best_point(axes: &[Axis], scores: &HashMap<Vec<u64>, (f64, usize)>) -> Option<(f64, Vec<f64>)> {
    let mut best: Option<(f64, usize, Vec<f64>)> = None;
    for point in cartesian(axes) {
        let key: Vec<u64> = point.iter().map(|v| v.to_bits()).collect();
        let (s, order) = scores[&key];
        if s.is_finite() && best.as_ref().is_none_or(|(b, o, _)| s > *b || (s == *b && order < *o)) {
            best = Some((s, order, point));
        }
    }
    best.map(|(s, _, p)| (s, p))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A smooth score peaked at `(log10 sigma, k) = (peak, k_peak)`.
    fn peaked(peak: f64, k_peak: f64) -> impl FnMut(&[f64]) -> Result<f64> {
        move |p: &[f64]| Ok(-(p[0].log10() - peak).powi(2) - 0.01 * (p[1] - k_peak).powi(2))
    }

    #[test]
    fn a_peak_beyond_the_grid_is_reached_and_lies_inside() {
        let search = GridSearch::new(vec![Axis::geometric("sigma", &[0.1, 1.0, 10.0], 10.0), Axis::integers("k", &[8, 16, 32], 2.0)]).max_extensions(4);
        let out = search.run(peaked(3.0, 50.0)).unwrap();
        assert_eq!(out.best[0], 1000.0, "{out:?}");
        assert_eq!(out.best[1], 64.0, "{out:?}");
        assert!(out.edges.iter().all(|(_, e)| e.is_none()), "{out:?}");
        assert!(out.warning.is_none());
        assert_eq!(out.axes[0].values(), &[0.1, 1.0, 10.0, 100.0, 1000.0, 10000.0]);
        assert_eq!(out.axes[1].values(), &[8.0, 16.0, 32.0, 64.0, 128.0]);
        // Each point scored once.
        assert_eq!(out.evaluated, out.axes[0].values().len() * out.axes[1].values().len());
    }

    #[test]
    fn the_limit_gives_a_warning_and_bounds_a_reason() {
        let search = GridSearch::new(vec![Axis::geometric("sigma", &[0.1, 1.0], 10.0), Axis::integers("k", &[2, 3], 2.0).bounds(1.0, 4.0)]).max_extensions(2);
        let out = search.run(peaked(9.0, 100.0)).unwrap();
        assert_eq!(out.best, vec![100.0, 4.0], "{out:?}");
        assert!(out.warning.as_deref().is_some_and(|w| w.contains("sigma") && !w.contains(" k")), "{out:?}");
        let reason = |name: &str| out.edges.iter().find(|(n, _)| n == name).unwrap().1.clone().unwrap();
        assert!(reason("sigma").contains("limit"), "{out:?}");
        assert!(reason("k").contains("bounded"), "{out:?}");
        // Without extensions the edges are still reported.
        let out = GridSearch::new(vec![Axis::geometric("sigma", &[0.1, 1.0], 10.0)]).max_extensions(0).run(|p| Ok(p[0])).unwrap();
        assert_eq!(out.best, vec![1.0]);
        assert!(out.warning.is_some() && out.evaluated == 2);
    }

    #[test]
    fn a_flat_edge_stops_extending_and_single_values_stay_fixed() {
        // Saturating in sigma: the first extension gains < 1e-3.
        let search = GridSearch::new(vec![Axis::geometric("sigma", &[1.0, 2.0, 4.0], 2.0), Axis::geometric("lambda", &[1e-3], 10.0)]);
        let out = search.run(|p| Ok(1.0 - 1e-4 / p[0])).unwrap();
        assert_eq!(out.axes[0].values(), &[1.0, 2.0, 4.0, 8.0]);
        assert_eq!(out.axes[1].values(), &[1e-3], "one value: fixed");
        assert_eq!(out.edges.len(), 1);
        assert!(out.edges[0].1.as_deref().is_some_and(|e| e.contains("flat")), "{out:?}");
        assert!(out.warning.is_none());
        // A tie with an extension keeps the first grid's point.
        let out = GridSearch::new(vec![Axis::geometric("c", &[1.0, 2.0], 2.0)]).run(|_| Ok(0.5)).unwrap();
        assert_eq!((out.best.clone(), out.axes[0].values().to_vec()), (vec![1.0], vec![0.5, 1.0, 2.0]), "{out:?}");
        assert_eq!(out.edges[0].1, None);
    }

    #[test]
    fn categorical_axes_are_searched_and_never_extended() {
        let search = GridSearch::new(vec![Axis::categorical("kernel", 3), Axis::geometric("c", &[1.0, 10.0], 10.0)]);
        let out = search.run(|p| Ok(if p[0] == 2.0 { 1.0 } else { 0.0 } - (p[1].log10() - 1.5).powi(2))).unwrap();
        assert_eq!(out.best[0], 2.0, "{out:?}");
        assert_eq!(out.axes[0].values(), &[0.0, 1.0, 2.0]);
        assert_eq!(out.edges.len(), 1, "only the ordered axis: {out:?}");
        assert!(GridSearch::new(vec![Axis::categorical("kernel", 0)]).run(|_| Ok(0.0)).is_err());
    }

    #[test]
    fn failed_points_are_skipped_and_bad_searches_are_typed_errors() {
        let out = GridSearch::new(vec![Axis::geometric("c", &[1.0, 2.0, 4.0], 2.0)]).run(|p| Ok(if p[0] == 2.0 { f64::NAN } else { -p[0] })).unwrap();
        assert_eq!(out.best, vec![0.125], "{out:?}");
        assert!(out.warning.is_some());
        let all_nan = GridSearch::new(vec![Axis::geometric("c", &[1.0, 2.0], 2.0)]).run(|_| Ok(f64::NAN));
        assert!(matches!(all_nan, Err(EvaluationError::NoCandidates(_))));
        let failing = GridSearch::new(vec![Axis::geometric("c", &[1.0], 2.0)]).run(|_| Err(EvaluationError::Classifier("boom".into())));
        assert!(matches!(failing, Err(EvaluationError::Classifier(_))));
        for axes in [vec![], vec![Axis::geometric("c", &[], 2.0)], vec![Axis::geometric("c", &[-1.0], 2.0)], vec![Axis::geometric("c", &[1.0], 1.0)], vec![Axis::integers("k", &[3], 2.0).bounds(4.0, 8.0)]] {
            assert!(matches!(GridSearch::new(axes).run(|_| Ok(0.0)), Err(EvaluationError::InvalidParameter { .. })));
        }
        assert!(GridSearch::new(vec![Axis::geometric("c", &[1.0], 2.0)]).min_gain(f64::NAN).run(|_| Ok(0.0)).is_err());
    }
}
