//! Expectations from Go's `strconv` and `encoding/csv`, as KubeVirt's virtctl reported them
//! for `--termination-grace-period`, `--infer-instancetype` and `--ssh-key`.

use super::*;

#[test]
fn quote_escapes_as_go_does() {
    assert_eq!(quote("a\"b"), "\"a\\\"b\"");
    assert_eq!(quote("\n\t\\"), "\"\\n\\t\\\\\"");
    assert_eq!(quote("\u{1}é"), "\"\\x01é\"");
}

#[test]
fn int64_as_strconv_parses_it() {
    for (text, value) in [
        ("180", 180),
        ("-5", -5),
        ("+7", 7),
        ("0x10", 16),
        ("010", 8),
        ("0o10", 8),
        ("0b11", 3),
        ("1_000", 1000),
        ("0", 0),
        ("9223372036854775807", i64::MAX),
        ("-9223372036854775808", i64::MIN),
    ] {
        assert_eq!(parse_int64("f", text), Ok(value), "{text}");
    }
    for (text, why) in [
        ("", "invalid syntax"),
        ("abc", "invalid syntax"),
        ("1__0", "invalid syntax"),
        ("_1", "invalid syntax"),
        ("1_", "invalid syntax"),
        ("08", "invalid syntax"),
        ("0x", "invalid syntax"),
        ("--1", "invalid syntax"),
        ("9223372036854775808", "value out of range"),
        ("-9223372036854775809", "value out of range"),
        ("99999999999999999999", "value out of range"),
    ] {
        assert_eq!(
            parse_int64("f", text),
            Err(format!(
                "invalid argument \"{text}\" for \"--f\" flag: strconv.ParseInt: parsing \"{text}\": {why}"
            )),
            "{text}"
        );
    }
}

#[test]
fn uint_parameters_are_base_ten() {
    assert_eq!(parse_uint("12", 10, 32), Ok(12));
    assert_eq!(parse_uint("1_0", 10, 32), Err(NumError::Syntax));
    assert_eq!(parse_uint("0x1", 10, 32), Err(NumError::Syntax));
    assert_eq!(parse_uint("4294967296", 10, 32), Err(NumError::Range));
    assert_eq!(parse_uint("", 10, 32), Err(NumError::Syntax));
}

#[test]
fn bool_as_strconv_parses_it() {
    for text in ["1", "t", "T", "TRUE", "true", "True"] {
        assert_eq!(parse_bool("f", text), Ok(true));
    }
    for text in ["0", "f", "F", "FALSE", "false", "False"] {
        assert_eq!(parse_bool("f", text), Ok(false));
    }
    assert_eq!(
        parse_bool("f", "yes"),
        Err("invalid argument \"yes\" for \"--f\" flag: strconv.ParseBool: parsing \"yes\": invalid syntax".into())
    );
}

#[test]
fn string_slice_reads_the_first_csv_record() {
    let read = |text: &str| parse_string_slice("k", text);
    assert_eq!(read(""), Ok(vec![]));
    assert_eq!(read("a,b"), Ok(vec!["a".into(), "b".into()]));
    assert_eq!(read(" a , b "), Ok(vec![" a ".into(), " b ".into()]));
    assert_eq!(read("\"a,b\",c"), Ok(vec!["a,b".into(), "c".into()]));
    assert_eq!(read("\"a\"\"b\""), Ok(vec!["a\"b".into()]));
    assert_eq!(read("a\nb"), Ok(vec!["a".into()]));
    assert_eq!(read("\n\nk1,k2\nk3"), Ok(vec!["k1".into(), "k2".into()]));
    assert_eq!(read("\"a\nb\",c"), Ok(vec!["a\nb".into(), "c".into()]));
    assert_eq!(read("a,"), Ok(vec!["a".into(), "".into()]));
    let error = |text: &str, why: &str| {
        Err(format!(
            "invalid argument {} for \"--k\" flag: {why}",
            quote(text)
        ))
    };
    assert_eq!(
        read("a\"b"),
        error(
            "a\"b",
            "parse error on line 1, column 2: bare \" in non-quoted-field"
        )
    );
    assert_eq!(
        read("\"ab"),
        error(
            "\"ab",
            "parse error on line 1, column 4: extraneous or missing \" in quoted-field"
        )
    );
    assert_eq!(
        read("x,\"ab\"c"),
        error(
            "x,\"ab\"c",
            "parse error on line 1, column 6: extraneous or missing \" in quoted-field"
        )
    );
    assert_eq!(read("\n"), error("\n", "EOF"));
}
