//! rpm's version comparison (`rpmvercmp`), which grub's blscfg and the BLS sort order use.
//!
//! Both strings are cut into segments of digits or of letters, skipping other characters.
//! Numeric segments compare as numbers (leading zeros ignored), letter segments
//! lexicographically, a numeric segment is newer than a letter one, and when one string runs
//! out first the longer one is newer. `~` sorts before everything (even the end: `1.0~rc1` is
//! older than `1.0`); `^` sorts after the end but before any other segment.

use std::cmp::Ordering;

/// Compares two version strings the way rpm does.
pub fn vercmp(a: &str, b: &str) -> Ordering {
    let (mut a, mut b) = (a.as_bytes(), b.as_bytes());
    let skip = |s: &mut &[u8]| {
        while let Some((&c, rest)) = s.split_first() {
            if c.is_ascii_alphanumeric() || c == b'~' || c == b'^' {
                break;
            }
            *s = rest;
        }
    };
    loop {
        skip(&mut a);
        skip(&mut b);
        match (a.first(), b.first()) {
            (Some(b'~'), Some(b'~')) => {
                a = &a[1..];
                b = &b[1..];
                continue;
            }
            (Some(b'~'), _) => return Ordering::Less,
            (_, Some(b'~')) => return Ordering::Greater,
            (Some(b'^'), Some(b'^')) => {
                a = &a[1..];
                b = &b[1..];
                continue;
            }
            (Some(b'^'), None) => return Ordering::Greater,
            (None, Some(b'^')) => return Ordering::Less,
            (Some(b'^'), _) => return Ordering::Less,
            (_, Some(b'^')) => return Ordering::Greater,
            (None, None) => return Ordering::Equal,
            (None, Some(_)) => return Ordering::Less,
            (Some(_), None) => return Ordering::Greater,
            (Some(&ca), Some(&cb)) => {
                let numeric = ca.is_ascii_digit();
                if numeric != cb.is_ascii_digit() {
                    return if numeric {
                        Ordering::Greater
                    } else {
                        Ordering::Less
                    };
                }
                let take = |s: &mut &[u8]| -> Vec<u8> {
                    let n = s
                        .iter()
                        .take_while(|c| {
                            if numeric {
                                c.is_ascii_digit()
                            } else {
                                c.is_ascii_alphabetic()
                            }
                        })
                        .count();
                    let (seg, rest) = s.split_at(n);
                    *s = rest;
                    seg.to_vec()
                };
                let (mut sa, mut sb) = (take(&mut a), take(&mut b));
                let ord = if numeric {
                    let strip = |v: &mut Vec<u8>| {
                        let z = v.iter().take_while(|&&c| c == b'0').count();
                        v.drain(..z);
                    };
                    strip(&mut sa);
                    strip(&mut sb);
                    sa.len().cmp(&sb.len()).then_with(|| sa.cmp(&sb))
                } else {
                    sa.cmp(&sb)
                };
                if ord != Ordering::Equal {
                    return ord;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Ordering::*;

    #[test]
    fn rpm_examples() {
        for (a, b, want) in [
            ("1.0", "1.0", Equal),
            ("1.0", "2.0", Less),
            ("2.0.1", "2.0", Greater),
            ("5.5p1", "5.5p10", Less),
            ("10xyz", "10.1xyz", Less),
            ("xyz10", "xyz10.1", Less),
            ("1.0~rc1", "1.0", Less),
            ("1.0~rc1", "1.0~rc2", Less),
            ("1.0^", "1.0", Greater),
            ("1.0^git1", "1.01", Less),
            ("6.5.6-300.fc39.x86_64", "6.5.12-300.fc39.x86_64", Less),
            ("010", "9", Greater),
            ("a", "1", Less),
        ] {
            assert_eq!(vercmp(a, b), want, "{a} vs {b}");
            assert_eq!(vercmp(b, a), want.reverse(), "{b} vs {a}");
        }
    }
}
