//! Flag values read as KubeVirt's virtctl (Go's pflag) reads them, with the same errors:
//! `int64` flags through `strconv.ParseInt(text, 0, 64)`, `bool` flags through
//! `strconv.ParseBool`, string-slice flags through `encoding/csv` (first record only), and the
//! `uint` parameters of `key:value` flags through `strconv.ParseUint(text, 10, 32)`.

use std::fmt::Write;

/// Go's `strconv.Quote` (`%q`) for the text of a flag: quotes, backslashes and control
/// characters escaped, other characters kept.
pub fn quote(text: &str) -> String {
    let mut out = String::from("\"");
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            '\u{7}' => out.push_str("\\a"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\u{b}' => out.push_str("\\v"),
            c if (c as u32) < 0x20 || c == '\u{7f}' => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c if ('\u{80}'..='\u{9f}').contains(&c) => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// pflag's wrapping of a value its type refuses.
pub fn invalid_argument(flag: &str, text: &str, why: impl std::fmt::Display) -> String {
    format!(
        "invalid argument {} for \"--{flag}\" flag: {why}",
        quote(text)
    )
}

/// Why `strconv` refused a number.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NumError {
    Syntax,
    Range,
}

impl NumError {
    /// `strconv.<func>: parsing "<text>": <why>`.
    pub fn message(self, func: &str, text: &str) -> String {
        let why = match self {
            NumError::Syntax => "invalid syntax",
            NumError::Range => "value out of range",
        };
        format!("strconv.{func}: parsing {}: {why}", quote(text))
    }
}

/// Go's `underscoreOK`: underscores only between digits, or between a base prefix and a digit.
fn underscores_ok(text: &str) -> bool {
    let s = text.strip_prefix(['+', '-']).unwrap_or(text).as_bytes();
    let mut saw = b'^';
    let mut i = 0;
    let mut hex = false;
    if s.len() >= 2 && s[0] == b'0' && matches!(s[1].to_ascii_lowercase(), b'b' | b'o' | b'x') {
        i = 2;
        saw = b'0';
        hex = s[1].eq_ignore_ascii_case(&b'x');
    }
    for &c in &s[i..] {
        if c.is_ascii_digit() || hex && c.is_ascii_hexdigit() {
            saw = b'0';
        } else if c == b'_' {
            if saw != b'0' {
                return false;
            }
            saw = b'_';
        } else {
            if saw == b'_' {
                return false;
            }
            saw = b'!';
        }
    }
    saw != b'_'
}

/// Go's `strconv.ParseUint(text, base, bits)` for base 0 or 10.
pub fn parse_uint(text: &str, base: u32, bits: u32) -> Result<u64, NumError> {
    if text.is_empty() {
        return Err(NumError::Syntax);
    }
    let base0 = base == 0;
    let bytes = text.as_bytes();
    let (radix, digits) = if base0 && bytes[0] == b'0' {
        match bytes.get(1).map(u8::to_ascii_lowercase) {
            Some(b'b') if bytes.len() >= 3 => (2, &text[2..]),
            Some(b'o') if bytes.len() >= 3 => (8, &text[2..]),
            Some(b'x') if bytes.len() >= 3 => (16, &text[2..]),
            _ => (8, &text[1..]),
        }
    } else {
        (if base0 { 10 } else { base }, text)
    };
    let max = if bits >= 64 {
        u64::MAX
    } else {
        (1u64 << bits) - 1
    };
    let mut n: u64 = 0;
    let mut underscores = false;
    for c in digits.chars() {
        if c == '_' && base0 {
            underscores = true;
            continue;
        }
        let d = c.to_digit(radix).ok_or(NumError::Syntax)?;
        n = n
            .checked_mul(u64::from(radix))
            .and_then(|n| n.checked_add(u64::from(d)))
            .filter(|n| *n <= max)
            .ok_or(NumError::Range)?;
    }
    if underscores && !underscores_ok(text) {
        return Err(NumError::Syntax);
    }
    Ok(n)
}

/// pflag's `int64` flag: `strconv.ParseInt(text, 0, 64)`.
pub fn parse_int64(flag: &str, text: &str) -> Result<i64, String> {
    let error = |e: NumError| invalid_argument(flag, text, e.message("ParseInt", text));
    let (negative, unsigned) = match text.as_bytes().first() {
        Some(b'+') => (false, &text[1..]),
        Some(b'-') => (true, &text[1..]),
        _ => (false, text),
    };
    if text.is_empty() {
        return Err(error(NumError::Syntax));
    }
    let magnitude = match parse_uint(unsigned, 0, 64) {
        Ok(n) => n,
        Err(NumError::Range) => return Err(error(NumError::Range)),
        Err(e) => return Err(error(e)),
    };
    let cutoff = 1u64 << 63;
    match (negative, magnitude) {
        (false, n) if n >= cutoff => Err(error(NumError::Range)),
        (true, n) if n > cutoff => Err(error(NumError::Range)),
        (true, n) => Ok(0i64.wrapping_sub_unsigned(n)),
        (false, n) => Ok(n as i64),
    }
}

/// pflag's `bool` flag: `strconv.ParseBool`.
pub fn parse_bool(flag: &str, text: &str) -> Result<bool, String> {
    match text {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Ok(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Ok(false),
        _ => Err(invalid_argument(
            flag,
            text,
            format!("strconv.ParseBool: parsing {}: invalid syntax", quote(text)),
        )),
    }
}

/// `encoding/csv`'s `ParseError`.
fn csv_error(start_line: usize, line: usize, column: usize, bare: bool) -> String {
    let why = if bare {
        "bare \" in non-quoted-field"
    } else {
        "extraneous or missing \" in quoted-field"
    };
    if start_line != line {
        format!("record on line {start_line}; parse error on line {line}, column {column}: {why}")
    } else {
        format!("parse error on line {line}, column {column}: {why}")
    }
}

/// pflag's string-slice flag: the first record of `text` read by a default `csv.Reader`
/// (empty lines skipped, quoted fields may span lines); an empty value is no item.
pub fn parse_string_slice(flag: &str, text: &str) -> Result<Vec<String>, String> {
    if text.is_empty() {
        return Ok(Vec::new());
    }
    let normalized = text.replace("\r\n", "\n");
    // Lines with their newline, numbered from 1.
    let mut lines = normalized.split_inclusive('\n').enumerate().peekable();
    let Some((mut number, mut line)) = lines.find(|(_, l)| *l != "\n").map(|(i, l)| (i + 1, l))
    else {
        return Err(invalid_argument(flag, text, "EOF"));
    };
    let start = number;
    let newline_len = |l: &str| usize::from(l.ends_with('\n'));
    let mut fields = Vec::new();
    let mut column = 1;
    loop {
        if !line.starts_with('"') {
            let end = line.find(',');
            let field = &line[..end.unwrap_or(line.len() - newline_len(line))];
            if let Some(j) = field.find('"') {
                return Err(invalid_argument(
                    flag,
                    text,
                    csv_error(start, number, column + j, true),
                ));
            }
            fields.push(field.to_string());
            match end {
                Some(i) => {
                    line = &line[i + 1..];
                    column += i + 1;
                    continue;
                }
                None => return Ok(fields),
            }
        }
        // A quoted field.
        let mut field = String::new();
        line = &line[1..];
        column += 1;
        loop {
            if let Some(i) = line.find('"') {
                field.push_str(&line[..i]);
                line = &line[i + 1..];
                column += i + 1;
                if line.starts_with('"') {
                    field.push('"');
                    line = &line[1..];
                    column += 1;
                } else if line.starts_with(',') {
                    line = &line[1..];
                    column += 1;
                    fields.push(field);
                    break;
                } else if newline_len(line) == line.len() {
                    fields.push(field);
                    return Ok(fields);
                } else {
                    return Err(invalid_argument(
                        flag,
                        text,
                        csv_error(start, number, column - 1, false),
                    ));
                }
            } else if !line.is_empty() {
                field.push_str(line);
                column += line.len();
                match lines.next() {
                    Some((i, next)) => {
                        line = next;
                        number = i + 1;
                        column = 1;
                    }
                    None => line = "",
                }
            } else {
                return Err(invalid_argument(
                    flag,
                    text,
                    csv_error(start, number, column, false),
                ));
            }
        }
    }
}

#[cfg(test)]
#[path = "goflags_tests.rs"]
mod tests;
