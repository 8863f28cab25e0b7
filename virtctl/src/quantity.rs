//! Kubernetes resource quantities as KubeVirt's virtctl writes them into manifests: read as
//! `resource.ParseQuantity` reads them (same errors) and written back as `Quantity`'s JSON
//! form: the text given when it already is canonical (`2048k`, `-1Gi`, `1e3`), otherwise the
//! canonical form (`1024Mi` is `1Gi`, `1.5Gi` is `1536Mi`, `1000000` is `1M`, `0.5` is `500m`).
//!
//! Values are held as a sign, a `u128` mantissa and a power of ten; the few inputs that need
//! more than 38 digits are refused as non-numeric instead of being carried in big numbers.

use std::cmp::Ordering;

/// `resource.ParseQuantity`'s errors, in its words.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum QuantityError {
    #[error("quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'")]
    Format,
    #[error("unable to parse numeric part of quantity")]
    Numeric,
    #[error("unable to parse quantity's suffix")]
    Suffix,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Format {
    DecimalExponent,
    BinarySi,
    DecimalSi,
}

/// A parsed quantity: `(-1)^negative * mantissa * 10^exponent`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Quantity {
    negative: bool,
    mantissa: u128,
    exponent: i32,
    format: Format,
    /// The input, kept when it is already in canonical form.
    text: Option<String>,
}

const DECIMAL_SUFFIXES: [(&str, i32); 10] = [
    ("n", -9),
    ("u", -6),
    ("m", -3),
    ("", 0),
    ("k", 3),
    ("M", 6),
    ("G", 9),
    ("T", 12),
    ("P", 15),
    ("E", 18),
];
const BINARY_SUFFIXES: [&str; 7] = ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"];
/// Binary quantities are capped at the largest int64.
const MAX_BINARY: u128 = i64::MAX as u128;

/// The pieces of a quantity's text: sign, integer digits (leading zeros dropped, `0` when
/// none), fraction digits, suffix.
struct Pieces<'a> {
    negative: bool,
    integer: &'a str,
    fraction: &'a str,
    suffix: &'a str,
}

fn pieces(text: &str) -> Result<Pieces<'_>, QuantityError> {
    let bytes = text.as_bytes();
    let end = bytes.len();
    let mut pos = 0;
    let mut negative = false;
    match bytes.first() {
        Some(b'-') => {
            negative = true;
            pos = 1;
        }
        Some(b'+') => pos = 1,
        _ => {}
    }
    let digits_from = |mut at: usize| {
        while at < end && bytes[at].is_ascii_digit() {
            at += 1;
        }
        at
    };
    while pos < end && bytes[pos] == b'0' {
        pos += 1;
    }
    let zero = |negative| Pieces {
        negative,
        integer: "0",
        fraction: "",
        suffix: "",
    };
    if pos == end {
        return Ok(zero(negative));
    }
    let integer_end = digits_from(pos);
    let integer = match &text[pos..integer_end] {
        "" => "0",
        digits => digits,
    };
    pos = integer_end;
    let mut fraction = "";
    if pos < end && bytes[pos] == b'.' {
        let fraction_end = digits_from(pos + 1);
        fraction = &text[pos + 1..fraction_end];
        pos = fraction_end;
    }
    let suffix_start = pos;
    while pos < end && b"eEinumkKMGTP".contains(&bytes[pos]) {
        pos += 1;
    }
    if pos < end && matches!(bytes[pos], b'-' | b'+') {
        pos += 1;
    }
    if digits_from(pos) != end {
        return Err(QuantityError::Format);
    }
    Ok(Pieces {
        negative,
        integer,
        fraction,
        suffix: &text[suffix_start..],
    })
}

/// The base (10 or 2), power and format a suffix stands for.
fn interpret(suffix: &str) -> Option<(u32, i32, Format)> {
    if let Some(&(_, power)) = DECIMAL_SUFFIXES.iter().find(|(s, _)| *s == suffix) {
        return Some((10, power, Format::DecimalSi));
    }
    if let Some(index) = BINARY_SUFFIXES[1..].iter().position(|s| *s == suffix) {
        return Some((2, 10 * (index as i32 + 1), Format::BinarySi));
    }
    let rest = suffix.strip_prefix(['e', 'E'])?;
    if rest.is_empty() {
        return None;
    }
    // Go keeps the low 32 bits of the int64 it parses.
    let power = rest.parse::<i64>().ok()? as i32;
    Some((10, power, Format::DecimalExponent))
}

fn pow10(power: u32) -> Option<u128> {
    10u128.checked_pow(power)
}

fn digits_value(digits: &str) -> Result<u128, QuantityError> {
    digits.bytes().try_fold(0u128, |acc, d| {
        acc.checked_mul(10)
            .and_then(|acc| acc.checked_add(u128::from(d - b'0')))
            .ok_or(QuantityError::Numeric)
    })
}

impl Quantity {
    /// Reads `text` as `resource.ParseQuantity` does.
    pub fn parse(text: &str) -> Result<Quantity, QuantityError> {
        if text.is_empty() {
            return Err(QuantityError::Format);
        }
        if text == "0" {
            return Ok(Quantity {
                negative: false,
                mantissa: 0,
                exponent: 0,
                format: Format::DecimalSi,
                text: Some(text.to_string()),
            });
        }
        let p = pieces(text)?;
        let (base, power, mut format) = interpret(p.suffix).ok_or(QuantityError::Suffix)?;
        let fraction_len = p.fraction.len() as i32;
        let digit_count = (p.integer.len() + p.fraction.len()) as i32;

        // The int64 fast path, which is also where the text may be kept as it is.
        let (precision, mut scale, factor) = match format {
            Format::DecimalExponent | Format::DecimalSi => (18 - digit_count, power, 1i64),
            Format::BinarySi if p.fraction.is_empty() => (
                15 - p.integer.len() as i32 - power * 3 / 10 - 1,
                0,
                1i64 << power,
            ),
            Format::BinarySi => (-1, 0, 1),
        };
        if precision >= 0 {
            scale -= fraction_len;
            if scale >= -9 {
                let shifted = format!("{}{}", p.integer, p.fraction);
                let value: i64 = shifted.parse().map_err(|_| QuantityError::Numeric)?;
                if let Some(result) = value.checked_mul(factor) {
                    let canonical = match format {
                        Format::BinarySi => power % 10 == 0 && value & 0x07 != 0,
                        _ => {
                            scale % 3 == 0 && !shifted.ends_with("000") && !shifted.starts_with('0')
                        }
                    };
                    return Ok(Quantity {
                        negative: p.negative && result != 0,
                        mantissa: u128::from(result.unsigned_abs()),
                        exponent: scale,
                        format,
                        text: canonical.then(|| text.to_string()),
                    });
                }
            }
        }

        // The exact path.
        let mut mantissa = digits_value(&format!("{}{}", p.integer, p.fraction))?;
        let mut exponent = -fraction_len;
        if base == 10 {
            exponent = exponent.checked_add(power).ok_or(QuantityError::Numeric)?;
        } else {
            mantissa = 1u128
                .checked_shl(power as u32)
                .and_then(|f| mantissa.checked_mul(f))
                .ok_or(QuantityError::Numeric)?;
        }
        // Non-zero amounts are rounded up to whole nanos.
        if mantissa != 0 && exponent < -9 {
            let divisor = u32::try_from(-9 - exponent).ok().and_then(pow10);
            mantissa = match divisor {
                Some(d) => mantissa.div_ceil(d),
                None => 1,
            };
            exponent = -9;
        }
        let mut amount = Quantity {
            negative: p.negative && mantissa != 0,
            mantissa,
            exponent,
            format,
            text: None,
        };
        if format == Format::BinarySi && amount.cmp_magnitude(MAX_BINARY) == Ordering::Greater {
            amount.mantissa = MAX_BINARY;
            amount.exponent = 0;
        }
        if format == Format::BinarySi && amount.mantissa != 0 && amount.cmp_magnitude(1).is_lt() {
            format = Format::DecimalSi;
        }
        amount.format = format;
        Ok(amount)
    }

    /// Compares `|self|` with `n`.
    fn cmp_magnitude(&self, n: u128) -> Ordering {
        if self.exponent >= 0 {
            match pow10(self.exponent as u32).and_then(|p| self.mantissa.checked_mul(p)) {
                Some(v) => v.cmp(&n),
                None => Ordering::Greater,
            }
        } else {
            match pow10(self.exponent.unsigned_abs()).and_then(|p| n.checked_mul(p)) {
                Some(scaled) => self.mantissa.cmp(&scaled),
                None => Ordering::Less,
            }
        }
    }

    /// `|self|` rounded up to a whole number, and whether that was exact.
    fn whole(&self) -> (u128, bool) {
        if self.exponent >= 0 {
            let value = pow10(self.exponent as u32)
                .and_then(|p| self.mantissa.checked_mul(p))
                .unwrap_or(u128::MAX);
            (value, true)
        } else {
            match pow10(self.exponent.unsigned_abs()) {
                Some(d) => (self.mantissa.div_ceil(d), self.mantissa % d == 0),
                None => (1, false),
            }
        }
    }

    /// The text `Quantity.MarshalJSON` gives.
    pub fn canonical(&self) -> String {
        if let Some(text) = &self.text {
            return text.clone();
        }
        if self.mantissa == 0 {
            return "0".to_string();
        }
        let sign = if self.negative { "-" } else { "" };
        let mut format = self.format;
        let mut whole = 0;
        if format == Format::BinarySi {
            let exact;
            (whole, exact) = self.whole();
            if self.cmp_magnitude(1024).is_lt() || !exact {
                format = Format::DecimalSi;
            }
        }
        if format == Format::BinarySi {
            let mut times = 0;
            while whole >= 1024 && whole % 1024 == 0 {
                whole /= 1024;
                times += 1;
            }
            let suffix = BINARY_SUFFIXES.get(times).copied().unwrap_or("");
            return format!("{sign}{whole}{suffix}");
        }
        let (mut mantissa, mut exponent) = (self.mantissa, self.exponent);
        while mantissa >= 10 && mantissa % 10 == 0 {
            mantissa /= 10;
            exponent += 1;
        }
        while exponent % 3 != 0 {
            mantissa = mantissa.saturating_mul(10);
            exponent -= 1;
        }
        let suffix = match format {
            Format::DecimalExponent if exponent == 0 => String::new(),
            Format::DecimalExponent => format!("e{exponent}"),
            // An exponent without a suffix (above E, below n) gets none, as in Go.
            _ => DECIMAL_SUFFIXES
                .iter()
                .find(|(_, p)| *p == exponent)
                .map(|(s, _)| s.to_string())
                .unwrap_or_default(),
        };
        format!("{sign}{mantissa}{suffix}")
    }
}

#[cfg(test)]
#[path = "quantity_tests.rs"]
mod tests;
