//! Host values written into device matrices that already exist: every
//! upload (a new matrix, then written), and small coefficient matrices of
//! an iteration whose device buffers are allocated once and written each
//! step. A write is counted as one upload of its
//! bytes ([`super::TransferStats`]) and allocates nothing.

use rayon::prelude::*;

use super::buffers::GpuMatrix;
use super::GpuContext;
use crate::error::{Error, Result};
use crate::precision::Precision;

impl GpuContext {
    /// Writes the row-major `values` (`m.nrows() x m.ncols()`) into the
    /// rows of `m` (a matrix or a row view of one), stored in its
    /// precision. The write reaches the device before the work submitted
    /// after it and after the work submitted before it.
    ///
    /// Errors: [`Error::DimensionMismatch`] for a length other than the
    /// view's; [`Error::DeviceMismatch`] for a matrix of another context.
    pub(crate) fn write_rows(&self, m: &GpuMatrix, values: &[f64]) -> Result<()> {
        self.check_owned(m)?;
        let cols = m.ncols();
        let len = m.nrows().checked_mul(cols).ok_or(Error::InvalidParameter { name: "shape", reason: "rows x cols overflows".into() })?;
        if values.len() != len {
            return Err(Error::DimensionMismatch { what: "elements written into a device matrix", expected: len, found: values.len() });
        }
        let eb = m.precision().bytes();
        self.counters.count_matrix_upload();
        let mut breaks = m.block_breaks();
        breaks.push(m.nrows());
        self.checked(|| {
            let mut start = 0;
            for end in breaks {
                let s = m.locate(start);
                let part = &values[start * cols..end * cols];
                let offset = (s.local_row * cols * eb) as u64;
                match m.precision() {
                    Precision::F64 => self.write_counted(m.buffer(s.block), offset, bytemuck::cast_slice(part)),
                    Precision::F32 => {
                        let v: Vec<f32> = part.par_iter().with_min_len(1 << 14).map(|&x| x as f32).collect();
                        self.write_counted(m.buffer(s.block), offset, bytemuck::cast_slice(&v));
                    }
                }
                start = end;
            }
            Ok(())
        })
    }
}
