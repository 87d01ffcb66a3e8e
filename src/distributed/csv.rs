//! Reading a rank's rows of a CSV file without reading the others'.
//!
//! The file's bytes are split into `P` equal ranges; rank `r` takes the
//! lines that start inside its range (a line starts at byte 0 and after
//! every newline). Every line belongs to exactly one rank, the ranks' blocks
//! follow the file's order, and each rank reads about `1/P` of the file.

use std::fs::File;
use std::io::{BufRead, BufReader, Read, Seek, SeekFrom};
use std::path::Path;

use nalgebra::DMatrix;

use super::communicator::{agree, segment, Communicator};
use super::shard::RowShard;
use crate::error::{Error, Result};

impl RowShard {
    /// This rank's rows of a CSV file of numbers (one sample per line,
    /// values separated by commas, an optional header line that is
    /// skipped, blank lines ignored), read by its byte range (module docs).
    /// Collective; every rank passes the same path.
    ///
    /// Errors: on every rank, [`Error::RankFailed`] when a rank cannot read
    /// or parse its part ([`Error::Record`] there); those of [`RowShard::new`].
    pub fn read_csv(comm: &dyn Communicator, path: impl AsRef<Path>, header: bool) -> Result<RowShard> {
        let path = path.as_ref();
        comm.check_same("the CSV path", &path.display().to_string())?;
        let local = agree(comm, read_rows(path, header, comm.size(), comm.rank()));
        RowShard::new(comm, local?)
    }
}

fn record(path: &Path, what: impl std::fmt::Display) -> Error {
    Error::Record(format!("{}: {what}", path.display()))
}

/// The lines starting in byte range `part` of `parts`, parsed.
fn read_rows(path: &Path, header: bool, parts: usize, part: usize) -> Result<DMatrix<f64>> {
    let mut file = File::open(path).map_err(|e| record(path, e))?;
    let size = file.metadata().map_err(|e| record(path, e))?.len();
    let size_usize = usize::try_from(size).map_err(|_| record(path, "too large for this platform"))?;
    let range = segment(size_usize, parts, part);
    let (start, end) = (range.start as u64, range.end as u64);
    // The first line starting at or after `start`.
    let mut at = start;
    if start > 0 {
        file.seek(SeekFrom::Start(start - 1)).map_err(|e| record(path, e))?;
        let mut previous = [0u8];
        file.read_exact(&mut previous).map_err(|e| record(path, e))?;
        let mut reader = BufReader::new(&mut file);
        if previous[0] != b'\n' {
            let mut skipped = Vec::new();
            at += reader.read_until(b'\n', &mut skipped).map_err(|e| record(path, e))? as u64;
        }
        return parse_lines(path, reader, at, end, false);
    }
    parse_lines(path, BufReader::new(&mut file), at, end, header)
}

/// Parses the lines starting before byte `end`, the first at byte `at`.
fn parse_lines(path: &Path, mut reader: impl BufRead, mut at: u64, end: u64, mut skip_first: bool) -> Result<DMatrix<f64>> {
    let mut values = Vec::new();
    let mut width: Option<usize> = None;
    let mut rows = 0usize;
    let mut line = String::new();
    while at < end {
        line.clear();
        let read = reader.read_line(&mut line).map_err(|e| record(path, e))?;
        if read == 0 {
            break;
        }
        let line_start = at;
        at += read as u64;
        if std::mem::take(&mut skip_first) {
            continue;
        }
        let text = line.trim();
        if text.is_empty() {
            continue;
        }
        let before = values.len();
        for field in text.split(',') {
            let v: f64 = field.trim().parse().map_err(|_| record(path, format!("the line at byte {line_start}: {:?} is not a number", field.trim())))?;
            values.push(v);
        }
        let count = values.len() - before;
        match width {
            None => width = Some(count),
            Some(w) if w != count => return Err(record(path, format!("the line at byte {line_start} has {count} values, earlier lines {w}"))),
            _ => {}
        }
        rows += 1;
    }
    Ok(DMatrix::from_row_slice(rows, width.unwrap_or(0), &values))
}
