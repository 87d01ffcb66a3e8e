//! The communicators and row shards.

use gramian::distributed::{local_vector, Communicator, RowShard, SingleProcess, ThreadGroup};
use gramian::Error;
use nalgebra::{DMatrix, DVector};
use rand::Rng;

use crate::common;

fn sample(n: usize, d: usize) -> DMatrix<f64> {
    let mut rng = common::rng();
    DMatrix::from_fn(n, d, |_, _| rng.random_range(-1.0..1.0))
}

#[test]
fn shards_gather_back_to_the_whole_matrix() {
    let x = sample(11, 3);
    for p in 1..5 {
        let out = ThreadGroup::run(p, |c| {
            let shard = RowShard::from_full(c, &x)?;
            let again = RowShard::new(c, shard.local().clone())?;
            assert_eq!(again, shard);
            let rows = shard.rows(c, &[10, 0, 5])?;
            Ok::<_, Error>((shard.gather(c)?, shard.row(c, 7)?, rows))
        })
        .unwrap();
        for r in out {
            let (all, row, rows) = r.unwrap();
            assert_eq!(all, x);
            assert_eq!(row, x.row(7).transpose());
            assert_eq!(rows.row(0), x.row(10));
            assert_eq!(rows.row(2), x.row(5));
        }
    }
}

#[test]
fn a_nan_in_one_shard_fails_every_rank_and_widths_must_agree() {
    let x = sample(9, 2);
    let out = ThreadGroup::run(3, |c| {
        let mut local = RowShard::from_full(c, &x).unwrap().local().clone();
        if c.rank() == 2 {
            local[(1, 1)] = f64::NAN;
        }
        RowShard::new(c, local)
    })
    .unwrap();
    for r in out {
        assert!(matches!(r, Err(Error::RankFailed { rank: 2, invalid_input: true, .. })), "{r:?}");
    }
    let out = ThreadGroup::run(2, |c| RowShard::new(c, sample(4, 2 + c.rank()))).unwrap();
    for r in out {
        assert!(matches!(r, Err(Error::ShardMismatch { rank: 1, .. })), "{r:?}");
    }
}

#[test]
fn targets_must_match_the_rows_of_their_shard() {
    let x = sample(8, 2);
    let out = ThreadGroup::run(2, |c| {
        let shard = RowShard::from_full(c, &x).unwrap();
        let n = if c.rank() == 0 { shard.local().nrows() } else { 1 };
        local_vector(c, &shard, DVector::<f64>::zeros(n))
    })
    .unwrap();
    for r in out {
        assert!(matches!(r, Err(Error::RankFailed { rank: 1, invalid_input: true, .. })), "{r:?}");
    }
}

#[test]
fn one_process_is_the_identity() {
    let c = SingleProcess::new();
    let mut v = [1.0, 2.0];
    c.sum(&mut v).unwrap();
    assert_eq!(v, [1.0, 2.0]);
    assert_eq!(c.arg_max(3.0, 4).unwrap(), (3.0, 4));
    let x = sample(5, 2);
    assert_eq!(RowShard::new(&c, x.clone()).unwrap().gather(&c).unwrap(), x);
}

#[test]
fn large_sums_take_the_recursive_halving_path_with_the_tree_s_bits() {
    let mut rng = common::rng();
    let parts: Vec<Vec<f64>> = (0..3).map(|_| (0..5000).map(|_| rng.random_range(-1.0..1.0)).collect()).collect();
    let out = ThreadGroup::run(3, |c| {
        let mut v = parts[c.rank()].clone();
        c.sum(&mut v).unwrap();
        v
    })
    .unwrap();
    for i in 0..5000 {
        // Three ranks: rank 2 folds into rank 0, then ranks 0 and 1 add.
        let expected = (parts[0][i] + parts[2][i]) + parts[1][i];
        assert!(out.iter().all(|v| v[i].to_bits() == expected.to_bits()));
    }
}

#[test]
fn csv_rows_are_read_by_byte_range_and_cover_the_file_once() {
    let x = sample(23, 3);
    let dir = std::env::temp_dir().join(format!("gramian-csv-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("x.csv");
    let mut text = String::from("a,b,c\n");
    for i in 0..x.nrows() {
        text.push_str(&format!("{:?}, {:?},{:?}\n", x[(i, 0)], x[(i, 1)], x[(i, 2)]));
        if i == 4 {
            text.push('\n');
        }
    }
    std::fs::write(&path, &text).unwrap();
    for p in [1, 2, 3, 5, 40] {
        let out = ThreadGroup::run(p, |c| RowShard::read_csv(c, &path, true).and_then(|s| s.gather(c))).unwrap();
        for r in out {
            assert_eq!(r.unwrap(), x, "{p} ranks");
        }
    }
    std::fs::write(&path, "1,2\n3,x\n4,5\n").unwrap();
    let out = ThreadGroup::run(2, |c| RowShard::read_csv(c, &path, false)).unwrap();
    for r in out {
        assert!(matches!(&r, Err(Error::RankFailed { message, .. }) if message.contains("not a number")), "{r:?}");
    }
    std::fs::remove_dir_all(&dir).ok();
}
