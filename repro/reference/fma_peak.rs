//! Register-only fused multiply-add throughput of one core (issue 17: the
//! ceiling the thin products are measured against). 24 independent chains,
//! no memory operands; prints GFLOP/s for 512-bit (AVX-512F) and 256-bit
//! (AVX2+FMA) vectors.
//!
//! rustc -O repro/reference/fma_peak.rs -o /tmp/fma_peak && /tmp/fma_peak
use std::arch::x86_64::*;

#[target_feature(enable = "avx512f")]
unsafe fn zmm(n: usize) -> f64 {
    let mut acc = [_mm512_set1_pd(1.0); 24];
    let (x, y) = (_mm512_set1_pd(0.9999999), _mm512_set1_pd(1e-9));
    for _ in 0..n {
        for a in acc.iter_mut() {
            *a = _mm512_fmadd_pd(*a, x, y);
        }
    }
    acc.iter().map(|&a| _mm512_reduce_add_pd(a)).sum()
}

#[target_feature(enable = "avx2,fma")]
unsafe fn ymm(n: usize) -> f64 {
    let mut acc = [_mm256_set1_pd(1.0); 12];
    let (x, y) = (_mm256_set1_pd(0.9999999), _mm256_set1_pd(1e-9));
    for _ in 0..n {
        for a in acc.iter_mut() {
            *a = _mm256_fmadd_pd(*a, x, y);
        }
    }
    let mut s = 0.0;
    for a in acc {
        let mut t = [0.0; 4];
        _mm256_storeu_pd(t.as_mut_ptr(), a);
        s += t.iter().sum::<f64>();
    }
    s
}

fn main() {
    let n = 100_000_000usize;
    for _ in 0..3 {
        // AVX-512F only where the CPU (or the hypervisor) reports it.
        let zmm_part = if std::arch::is_x86_feature_detected!("avx512f") {
            let t = std::time::Instant::now();
            let s = unsafe { zmm(n) };
            let zmm_rate = (n * 24 * 16) as f64 / t.elapsed().as_secs_f64() / 1e9;
            format!("AVX-512 {zmm_rate:.1} GFLOP/s (checksum {s:.3})")
        } else {
            "AVX-512 not available".to_string()
        };
        let t = std::time::Instant::now();
        let s2 = unsafe { ymm(n) };
        let ymm_rate = (n * 12 * 8) as f64 / t.elapsed().as_secs_f64() / 1e9;
        println!("one core, f64 FMA: {zmm_part}, AVX2 {ymm_rate:.1} GFLOP/s (checksum {s2:.3})");
    }
}
