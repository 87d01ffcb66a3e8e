//! mklaren in a few lines: a target that depends on two of five inputs,
//! three kernels of different widths, a rank-40 low-rank model chosen by
//! least-angle regression with look-ahead, and its test error against the
//! mean predictor.
//!
//! ```text
//! cargo run --example mklaren_quick
//! ```

use gramian::prelude::*;
use nalgebra::{DMatrix, DVector};
use rand::{rngs::StdRng, Rng, SeedableRng};

fn main() -> Result<(), Error> {
    let device = Device::auto();
    let mut rng = StdRng::seed_from_u64(3);
    let (n, d) = (1200, 5);
    let x = DMatrix::<f64>::from_fn(n, d, |_, _| rng.random_range(-1.0..1.0));
    let y = DVector::from_fn(n, |i, _| (3.0 * x[(i, 0)]).sin() + x[(i, 1)] * x[(i, 1)] + 0.05 * rng.random_range(-1.0..1.0));
    let train = Supervised::new(x.rows(0, 1000).into_owned(), y.rows(0, 1000).into_owned())?;
    let (x_test, y_test) = (x.rows(1000, 200).into_owned(), y.rows(1000, 200).into_owned());

    let kernels = [Kernel::rbf(0.3)?, Kernel::rbf(1.0)?, Kernel::rbf(3.0)?];
    let model = MklarenParams::new(40).lookahead(10).lambda(1e-3).kernels(&kernels).fit(&device, &train)?;
    let prediction = model.predict(&x_test)?;
    let baseline = DVector::from_element(y_test.len(), train.y.mean());

    println!("mklaren on {} (n = 1000, rank 40, 3 RBF kernels)", device.describe());
    println!("kernel weights: {:.3?}", model.kernel_weights().as_slice());
    println!("test RMSE {:.4} (mean predictor {:.4})", rmse(&y_test, &prediction), rmse(&y_test, &baseline));
    Ok(())
}

/// Root mean squared error.
fn rmse(truth: &DVector<f64>, predicted: &DVector<f64>) -> f64 {
    ((truth - predicted).norm_squared() / truth.len() as f64).sqrt()
}
