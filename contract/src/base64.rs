//! The one base64 rule, for `cloudInitNoCloud.userDataBase64` and `networkDataBase64`: virt-api's
//! validation accepts exactly what the launcher decodes, since both call [`decode`].
//!
//! The rule: the standard alphabet (RFC 4648 section 4: `A-Z a-z 0-9 + /`), which is what
//! Kubernetes and KubeVirt use (Go's `base64.StdEncoding`), and
//! - ASCII whitespace anywhere (spaces, tabs, CR, LF) is ignored: a block pasted into YAML,
//!   folded at 76 columns or ending in a newline, decodes as if it were on one line;
//! - padding is optional, but where there is some it must be the right amount (`aGk=`, `aGk`;
//!   not `aGk==`) and come last;
//! - the unused low bits of the last character may be non-zero, as Go allows.
//!
//! Everything KubeVirt accepts is therefore accepted. The URL-safe alphabet (`-`, `_`) is not.

use ::base64::engine::general_purpose::{GeneralPurpose, GeneralPurposeConfig};
use ::base64::engine::{DecodePaddingMode, Engine};

const ENGINE: GeneralPurpose = GeneralPurpose::new(
    &::base64::alphabet::STANDARD,
    GeneralPurposeConfig::new()
        .with_decode_padding_mode(DecodePaddingMode::Indifferent)
        .with_decode_allow_trailing_bits(true),
);

/// Why a text is not base64. Offsets are byte offsets in the text as given (whitespace
/// included).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    #[error("not base64: {0:?} at offset {1} is not in the standard alphabet")]
    InvalidCharacter(char, usize),
    #[error("not base64: unexpected '=' at offset {0} (padding only ends the text, at most as much as is missing)")]
    UnexpectedPadding(usize),
    #[error(
        "not base64: {0} characters (whitespace and padding aside) are not a whole number of bytes"
    )]
    InvalidLength(usize),
    #[error("not base64: wrong padding")]
    WrongPadding,
}

/// Decodes `text` by the rule of this module.
pub fn decode(text: &str) -> Result<Vec<u8>, DecodeError> {
    // The first character outside the alphabet, reported as the user wrote it.
    if let Some((offset, c)) = text.char_indices().find(|(_, c)| {
        !(c.is_ascii_alphanumeric()
            || matches!(c, '+' | '/' | '=' | ' ' | '\t' | '\n' | '\r' | '\x0c'))
    }) {
        return Err(DecodeError::InvalidCharacter(c, offset));
    }
    // Where each byte kept (whitespace dropped) stood in `text`, to report offsets in it.
    let (kept, at): (Vec<u8>, Vec<usize>) = text
        .bytes()
        .enumerate()
        .filter(|(_, b)| !b.is_ascii_whitespace())
        .map(|(i, b)| (b, i))
        .unzip();
    let original = |offset: usize| at.get(offset).copied().unwrap_or(text.len());
    ENGINE.decode(&kept).map_err(|e| match e {
        ::base64::DecodeError::InvalidByte(offset, b'=') => {
            DecodeError::UnexpectedPadding(original(offset))
        }
        // Not reached: only alphabet characters and '=' are left, and trailing bits are allowed.
        ::base64::DecodeError::InvalidByte(offset, byte)
        | ::base64::DecodeError::InvalidLastSymbol(offset, byte) => {
            DecodeError::InvalidCharacter(char::from(byte), original(offset))
        }
        ::base64::DecodeError::InvalidLength(len) => DecodeError::InvalidLength(len),
        ::base64::DecodeError::InvalidPadding => DecodeError::WrongPadding,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepted() {
        let cases: &[(&str, &[u8])] = &[
            ("", b""),
            ("aGVsbG8=", b"hello"),
            ("aGVsbG8", b"hello"),
            ("aGVsbG8h", b"hello!"),
            ("aGk=", b"hi"),
            ("aGk", b"hi"),
            ("aA==", b"h"),
            ("aA", b"h"),
            ("aGVs\nbG8h", b"hello!"),
            ("aGVs\r\nbG8h\r\n", b"hello!"),
            ("  aGVs bG8h\t\n", b"hello!"),
            ("aGVsbG8=\n", b"hello"),
            ("aGVsbG8\n=", b"hello"),
            ("+/+/", &[0xfb, 0xff, 0xbf]),
            // Non-zero unused bits in the last character, as Go's StdEncoding allows.
            ("aGl=", b"hi"),
        ];
        for (text, bytes) in cases {
            assert_eq!(decode(text).as_deref(), Ok(*bytes), "{text:?}");
        }
    }

    #[test]
    fn refused() {
        let cases = [
            ("aGVsbG8*", DecodeError::InvalidCharacter('*', 7)),
            ("aGVs\nbG8*", DecodeError::InvalidCharacter('*', 8)),
            ("aGVsbG8é", DecodeError::InvalidCharacter('é', 7)),
            ("aGVs-G8_", DecodeError::InvalidCharacter('-', 4)),
            ("!!", DecodeError::InvalidCharacter('!', 0)),
            ("a", DecodeError::InvalidLength(1)),
            ("aGVsb", DecodeError::InvalidLength(5)),
            ("aGk==", DecodeError::UnexpectedPadding(3)),
            ("aGk=\n=", DecodeError::UnexpectedPadding(3)),
            ("aG=k", DecodeError::UnexpectedPadding(2)),
            ("aGk=aGk=", DecodeError::UnexpectedPadding(3)),
            ("=", DecodeError::UnexpectedPadding(0)),
        ];
        for (text, error) in cases {
            assert_eq!(decode(text), Err(error), "{text:?}");
        }
    }

    #[test]
    fn decodes_what_the_standard_encoder_writes() {
        let data: Vec<u8> = (0..=255).collect();
        for len in [0, 1, 2, 3, 4, 100, 256] {
            let text = ::base64::engine::general_purpose::STANDARD.encode(&data[..len]);
            assert_eq!(decode(&text).as_deref(), Ok(&data[..len]));
        }
    }
}
