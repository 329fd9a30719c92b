//! Paired measurement: a store and its bare engine run in alternating blocks, and the ratio is
//! the median of the blocks' ratios.
//!
//! On a machine whose disk is shared, `fsync` latency swings several-fold within seconds, so two
//! criterion rows measured a few seconds apart can disagree by more than the difference being
//! measured. Alternating short blocks exposes both sides to the same load, and the median of
//! the block ratios ignores the blocks a burst of foreign traffic hit.

use std::time::Duration;

/// The ratio of two alternating measurements.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Paired {
    /// Median over the blocks of (side A's rate / side B's rate).
    pub ratio: f64,
    /// The lowest block ratio.
    pub low: f64,
    /// The highest block ratio.
    pub high: f64,
    /// How many block pairs.
    pub blocks: usize,
}

/// Pairs up block timings of A and B that did the same number of records each (`a_records`
/// and `b_records` per block) and returns the median ratio of A's rate to B's.
///
/// ```
/// use std::time::Duration;
/// use outbox_benches::paired::ratio;
///
/// let ms = Duration::from_millis;
/// // A takes twice as long as B for the same records in two blocks, and a disturbed third
/// // block does not move the median.
/// let p = ratio(&[ms(20), ms(40), ms(500)], 10, &[ms(10), ms(20), ms(30)], 10).unwrap();
/// assert_eq!(p.ratio, 0.5);
/// assert_eq!(p.blocks, 3);
/// assert!(p.low < 0.1);
/// ```
pub fn ratio(a: &[Duration], a_records: u64, b: &[Duration], b_records: u64) -> Option<Paired> {
    let mut ratios: Vec<f64> = a
        .iter()
        .zip(b)
        .filter(|(a, b)| !a.is_zero() && !b.is_zero())
        .map(|(a, b)| {
            let a_rate = a_records as f64 / a.as_secs_f64();
            let b_rate = b_records as f64 / b.as_secs_f64();
            a_rate / b_rate
        })
        .collect();
    if ratios.is_empty() {
        return None;
    }
    ratios.sort_by(f64::total_cmp);
    let mid = ratios.len() / 2;
    let median = if ratios.len() % 2 == 1 {
        ratios[mid]
    } else {
        (ratios[mid - 1] + ratios[mid]) / 2.0
    };
    Some(Paired {
        ratio: median,
        low: ratios[0],
        high: ratios[ratios.len() - 1],
        blocks: ratios.len(),
    })
}
