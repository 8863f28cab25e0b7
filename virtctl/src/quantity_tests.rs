//! Expected texts are what KubeVirt's virtctl writes for `--memory` (Kubernetes' Quantity).

use super::*;

fn canonical(text: &str) -> String {
    Quantity::parse(text)
        .unwrap_or_else(|e| panic!("{text}: {e}"))
        .canonical()
}

#[test]
fn canonical_forms() {
    for (input, expected) in [
        ("256Mi", "256Mi"),
        ("1024Mi", "1Gi"),
        ("2048Mi", "2Gi"),
        ("3072Mi", "3Gi"),
        ("1536Ki", "1536Ki"),
        ("8Ki", "8Ki"),
        ("1023Ki", "1023Ki"),
        ("1.5Gi", "1536Mi"),
        ("1.0Gi", "1Gi"),
        ("0.5Gi", "512Mi"),
        ("0.5Ki", "512"),
        ("1.5Ki", "1536"),
        ("1.3Ki", "1331200m"),
        ("1Ei", "1Ei"),
        ("8Ei", "9223372036854775807"),
        ("100Ei", "9223372036854775807"),
        ("-1Gi", "-1Gi"),
        ("-1024Mi", "-1Gi"),
        ("+1Gi", "+1Gi"),
        ("1000000", "1M"),
        ("1M", "1M"),
        ("1000m", "1"),
        ("1500m", "1500m"),
        ("0.5", "500m"),
        (".5", "500m"),
        ("1.", "1."),
        ("1.Gi", "1.Gi"),
        ("2048k", "2048k"),
        ("2000k", "2M"),
        ("1k", "1k"),
        ("1e3", "1e3"),
        ("1000e0", "1e3"),
        ("1E3", "1E3"),
        ("1e+3", "1e+3"),
        ("1e-3", "1e-3"),
        ("10e5", "1e6"),
        ("1e7", "10e6"),
        ("1e100", "10e99"),
        ("1e21", "1e21"),
        ("1e-12", "1e-9"),
        ("1E", "1E"),
        ("1000E", "1"),
        ("100P", "100P"),
        ("10000P", "10E"),
        ("1n", "1n"),
        ("1.5n", "2n"),
        ("0.0000000001", "1n"),
        ("1u", "1u"),
        ("12.345", "12.345"),
        ("0", "0"),
        ("00", "0"),
        ("-0", "0"),
        ("0Gi", "0"),
        ("Mi", "0"),
        ("123456789012345678", "123456789012345678"),
        ("1234567890123456789", "1234567890123456789"),
        ("12345678901234567890", "12345678901234567890"),
        ("0.123456789012345678", "123456790n"),
        ("-", "0"),
        (".", "0"),
    ] {
        assert_eq!(canonical(input), expected, "{input}");
    }
}

#[test]
fn errors() {
    for (input, error) in [
        ("", QuantityError::Format),
        ("bad", QuantityError::Format),
        ("1.2.3", QuantityError::Format),
        ("1Mib", QuantityError::Format),
        ("1e3e3", QuantityError::Format),
        ("1e", QuantityError::Suffix),
        ("1ki", QuantityError::Suffix),
        ("1K", QuantityError::Suffix),
        ("1+3", QuantityError::Suffix),
    ] {
        assert_eq!(Quantity::parse(input), Err(error.clone()), "{input}");
    }
    assert_eq!(
        QuantityError::Format.to_string(),
        "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
    );
    assert_eq!(
        QuantityError::Suffix.to_string(),
        "unable to parse quantity's suffix"
    );
}
