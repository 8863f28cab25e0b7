//! The bandwidth limit of an outgoing migration on the KVM VMM (KubeVirt's
//! `bandwidthPerMigration`, which QEMU applies as `max-bandwidth`): a token bucket that fills
//! at the limit and holds at most a tenth of a second's worth, so a stream that stalled gains
//! no burst beyond that. The writer asks how long to wait before each piece it writes.

use std::time::{Duration, Instant};

/// The smallest piece written at once, whatever the limit.
const MIN_PIECE: usize = 4096;

#[derive(Debug)]
pub struct Throttle {
    /// Bytes per second.
    rate: f64,
    /// The most the bucket holds, and the largest piece written at once.
    capacity: f64,
    tokens: f64,
    last: Option<Instant>,
}

impl Throttle {
    /// A limit of `bytes_per_second`; `None` for 0 (no limit).
    pub fn new(bytes_per_second: u64) -> Option<Throttle> {
        if bytes_per_second == 0 {
            return None;
        }
        let rate = bytes_per_second as f64;
        let capacity = (rate / 10.0).max(MIN_PIECE as f64);
        Some(Throttle {
            rate,
            capacity,
            tokens: capacity,
            last: None,
        })
    }

    /// How many of `len` bytes to write next.
    pub fn piece(&self, len: usize) -> usize {
        len.min(self.capacity as usize)
    }

    /// Takes `n` bytes (at most [`Throttle::piece`]) from the bucket at `now` and says how long
    /// to wait before writing them.
    pub fn take(&mut self, n: usize, now: Instant) -> Duration {
        if let Some(last) = self.last {
            let refill = now.saturating_duration_since(last).as_secs_f64() * self.rate;
            self.tokens = (self.tokens + refill).min(self.capacity);
        }
        self.last = Some(now);
        self.tokens -= n as f64;
        if self.tokens >= 0.0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64(-self.tokens / self.rate)
        }
    }

    /// Gives back `n` bytes taken but not written (a short write).
    pub fn give_back(&mut self, n: usize) {
        self.tokens = (self.tokens + n as f64).min(self.capacity);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_limit_is_none() {
        assert!(Throttle::new(0).is_none());
    }

    #[test]
    fn pieces_are_a_tenth_of_a_second_or_4_kib() {
        let t = Throttle::new(10 << 20).unwrap();
        assert_eq!(t.piece(64 << 20), (1 << 20) as usize);
        assert_eq!(t.piece(100), 100);
        assert_eq!(Throttle::new(1000).unwrap().piece(1 << 20), MIN_PIECE);
    }

    #[test]
    fn a_full_bucket_then_the_rate() {
        let mut t = Throttle::new(10_000).unwrap(); // pieces of 4096 (a tenth would be 1000)
        let t0 = Instant::now();
        assert_eq!(t.take(4096, t0), Duration::ZERO);
        let wait = t.take(4096, t0);
        assert!((wait.as_secs_f64() - 0.4096).abs() < 1e-6, "{wait:?}");
        // After waiting that long, the next piece waits as long again.
        let wait = t.take(4096, t0 + wait);
        assert!((wait.as_secs_f64() - 0.4096).abs() < 1e-6, "{wait:?}");
    }

    #[test]
    fn an_idle_stream_gains_at_most_one_piece() {
        let mut t = Throttle::new(100_000).unwrap(); // pieces of 10 000
        let t0 = Instant::now();
        assert_eq!(t.take(10_000, t0), Duration::ZERO);
        let later = t0 + Duration::from_secs(60);
        assert_eq!(t.take(10_000, later), Duration::ZERO);
        let wait = t.take(10_000, later);
        assert!((wait.as_secs_f64() - 0.1).abs() < 1e-6, "{wait:?}");
    }

    #[test]
    fn a_long_transfer_takes_its_size_over_the_rate() {
        // 8 MiB at 1 MiB/s on a clock that advances only by the waits asked for.
        let rate = 1 << 20;
        let mut t = Throttle::new(rate).unwrap();
        let start = Instant::now();
        let mut now = start;
        let mut left: usize = 8 << 20;
        while left > 0 {
            let n = t.piece(left);
            now += t.take(n, now);
            left -= n;
        }
        let took = (now - start).as_secs_f64();
        // The first piece (the full bucket) goes at once.
        let expected = (8.0 * rate as f64 - rate as f64 / 10.0) / rate as f64;
        assert!(
            (took - expected).abs() < 1e-3,
            "took {took} s, expected {expected} s"
        );
    }

    #[test]
    fn a_short_write_gives_its_rest_back() {
        let mut t = Throttle::new(100_000).unwrap();
        let t0 = Instant::now();
        assert_eq!(t.take(10_000, t0), Duration::ZERO);
        t.give_back(6_000);
        assert_eq!(t.take(6_000, t0), Duration::ZERO);
        assert!(t.take(1, t0) > Duration::ZERO);
    }
}
