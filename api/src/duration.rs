//! Durations in Go's syntax (`metav1.Duration`: `24h`, `1h30m`, `90s`, `1.5h`, `300ms`), as
//! KubeVirt's API writes them.

use std::time::Duration;

/// Parses a Go duration. Negative durations are refused: no KubeVirt setting takes one.
pub fn parse(text: &str) -> Result<Duration, String> {
    let bad =
        |why: &str| format!("{text:?} is not a duration ({why}); write it as 24h, 1h30m or 90s");
    let mut rest = text.trim();
    if let Some(unsigned) = rest.strip_prefix('+') {
        rest = unsigned;
    } else if rest.starts_with('-') {
        return Err(bad("negative"));
    }
    if rest == "0" {
        return Ok(Duration::ZERO);
    }
    if rest.is_empty() {
        return Err(bad("empty"));
    }
    let mut nanos: f64 = 0.0;
    while !rest.is_empty() {
        let number_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(|| bad("a number without a unit"))?;
        let (number, tail) = rest.split_at(number_len);
        let value: f64 = number.parse().map_err(|_| bad("not a number"))?;
        let unit_len = tail
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(tail.len());
        let (unit, tail) = tail.split_at(unit_len);
        let scale = match unit {
            "ns" => 1.0,
            "us" | "µs" | "μs" => 1e3,
            "ms" => 1e6,
            "s" => 1e9,
            "m" => 60e9,
            "h" => 3600e9,
            _ => return Err(bad("units are ns, us, ms, s, m and h")),
        };
        nanos += value * scale;
        rest = tail;
    }
    if !nanos.is_finite() || nanos > u64::MAX as f64 {
        return Err(bad("too large"));
    }
    Ok(Duration::from_nanos(nanos.round() as u64))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_durations() {
        let secs = |s| Duration::from_secs(s);
        assert_eq!(parse("24h"), Ok(secs(24 * 3600)));
        assert_eq!(parse("1h30m"), Ok(secs(5400)));
        assert_eq!(parse("2h0m0s"), Ok(secs(7200)));
        assert_eq!(parse("90s"), Ok(secs(90)));
        assert_eq!(parse("1.5h"), Ok(secs(5400)));
        assert_eq!(parse("300ms"), Ok(Duration::from_millis(300)));
        assert_eq!(parse("0"), Ok(Duration::ZERO));
        for bad in ["", "24", "1d", "-1h", "h", "1h30", "1..5s"] {
            let err = parse(bad).expect_err(bad);
            assert!(err.contains("is not a duration"), "{bad}: {err}");
        }
    }
}
