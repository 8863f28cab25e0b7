//! Kubernetes resource quantities (`128Mi`, `1G`, `1.5Gi`, `500m`) as whole numbers.

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

/// Why a quantity string is not a quantity.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QuantityError {
    #[error("{0:?} is not a quantity")]
    Syntax(String),
    #[error("{0:?} is too large")]
    Overflow(String),
    #[error("{0:?} is negative")]
    Negative(String),
}

/// Parses a quantity and rounds it up to a whole number (bytes, for memory and disks).
pub fn to_u64(quantity: &Quantity) -> Result<u64, QuantityError> {
    parse(&quantity.0)
}

/// Parses a quantity string and rounds it up to a whole number.
pub fn parse(text: &str) -> Result<u64, QuantityError> {
    let syntax = || QuantityError::Syntax(text.to_string());
    let overflow = || QuantityError::Overflow(text.to_string());
    let s = text.trim();
    if s.starts_with('-') {
        return Err(QuantityError::Negative(text.to_string()));
    }
    let s = s.strip_prefix('+').unwrap_or(s);
    let number_end = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (number, suffix) = s.split_at(number_end);
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    let all_digits = |part: &str| part.bytes().all(|b| b.is_ascii_digit());
    if (whole.is_empty() && fraction.is_empty()) || !all_digits(whole) || !all_digits(fraction) {
        return Err(syntax());
    }
    // value = digits / 10^scale * multiplier, computed exactly in u128.
    let digits: String = format!("{whole}{fraction}");
    let mantissa: u128 = digits.parse().map_err(|_| overflow())?;
    let mut scale = i32::try_from(fraction.len()).map_err(|_| overflow())?;
    let mut multiplier: u128 = 1;
    match suffix {
        "" => {}
        "Ki" => multiplier = 1 << 10,
        "Mi" => multiplier = 1 << 20,
        "Gi" => multiplier = 1 << 30,
        "Ti" => multiplier = 1 << 40,
        "Pi" => multiplier = 1 << 50,
        "Ei" => multiplier = 1 << 60,
        "m" => scale += 3,
        "k" => scale -= 3,
        "M" => scale -= 6,
        "G" => scale -= 9,
        "T" => scale -= 12,
        "P" => scale -= 15,
        "E" => scale -= 18,
        exponent if exponent.starts_with(['e', 'E']) => {
            let e: i32 = exponent[1..].parse().map_err(|_| syntax())?;
            scale -= e;
        }
        _ => return Err(syntax()),
    }
    let mut numerator = mantissa.checked_mul(multiplier).ok_or_else(overflow)?;
    let mut denominator: u128 = 1;
    if scale < 0 {
        let factor = 10u128
            .checked_pow(scale.unsigned_abs())
            .ok_or_else(overflow)?;
        numerator = numerator.checked_mul(factor).ok_or_else(overflow)?;
    } else {
        denominator = 10u128
            .checked_pow(scale.unsigned_abs())
            .ok_or_else(overflow)?;
    }
    let value = numerator.div_ceil(denominator);
    u64::try_from(value).map_err(|_| overflow())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_binary_decimal_and_exponent_forms() {
        let cases = [
            ("128Mi", 128 << 20),
            ("1Gi", 1 << 30),
            ("1.5Gi", 3 << 29),
            ("1024M", 1_024_000_000),
            ("2G", 2_000_000_000),
            ("64", 64),
            ("1e3", 1000),
            ("500m", 1),
            ("1k", 1000),
            ("0", 0),
            ("+4Ki", 4096),
        ];
        for (text, want) in cases {
            assert_eq!(parse(text), Ok(want), "{text}");
        }
    }

    #[test]
    fn rejects_garbage() {
        for text in ["", "Mi", "12Q", "1.2.3Gi", "abc", "1e"] {
            assert!(
                matches!(parse(text), Err(QuantityError::Syntax(_))),
                "{text}"
            );
        }
        assert_eq!(parse("-1Gi"), Err(QuantityError::Negative("-1Gi".into())));
        assert!(matches!(parse("100Ei"), Err(QuantityError::Overflow(_))));
    }
}
