//! What the guest's SMBIOS System Information (type 1) may hold, as virt-api admits it and the
//! VMM writes it: `firmware.uuid` must be a UUID the 16 bytes of the table can carry, and every
//! string (`firmware.serial`, the manufacturer, product and family) must fit an SMBIOS string.
//!
//! KubeVirt leaves both to libvirt, which refuses a malformed UUID when the VMI starts; here
//! virt-api refuses it with its field path when the VMI is created.

/// Bytes one SMBIOS string may have: SMBIOS strings are NUL-terminated and their tables sit in
/// the 64 KiB BIOS area, so the VMM bounds each of the five it writes.
pub const MAX_STRING: usize = 1024;

/// The 16 bytes of an RFC 4122 UUID written as `8-4-4-4-12` hexadecimal digits (either case),
/// in the order they are written: what `firmware.uuid` must be.
pub fn parse_uuid(text: &str) -> Option<[u8; 16]> {
    let groups: Vec<&str> = text.split('-').collect();
    let lengths: Vec<usize> = groups.iter().map(|g| g.len()).collect();
    if lengths != [8, 4, 4, 4, 12] {
        return None;
    }
    let digits: String = groups.concat();
    let mut bytes = [0u8; 16];
    for (i, byte) in bytes.iter_mut().enumerate() {
        let pair = digits.get(2 * i..2 * i + 2)?;
        if !pair.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        *byte = u8::from_str_radix(pair, 16).ok()?;
    }
    Some(bytes)
}

/// Why `text` cannot be an SMBIOS string, if it cannot.
pub fn string_problem(text: &str) -> Option<String> {
    if text.contains('\0') {
        return Some("contains a NUL character, which ends an SMBIOS string".into());
    }
    (text.len() > MAX_STRING).then(|| {
        format!(
            "is {} bytes, more than the {MAX_STRING} an SMBIOS string may have here",
            text.len()
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uuids_are_the_hyphenated_form_only() {
        assert_eq!(
            parse_uuid("5B1E36BA-1b7b-4d6a-9a65-0f2cd1c2ad63"),
            Some([
                0x5b, 0x1e, 0x36, 0xba, 0x1b, 0x7b, 0x4d, 0x6a, 0x9a, 0x65, 0x0f, 0x2c, 0xd1, 0xc2,
                0xad, 0x63
            ])
        );
        for bad in [
            "fake-uuid",
            "",
            "5b1e36ba1b7b4d6a9a650f2cd1c2ad63",
            "5b1e36ba-1b7b-4d6a-9a65-0f2cd1c2ad6",
            "5b1e36ba-1b7b-4d6a-9a65-0f2cd1c2ad63-",
            "5b1e36bg-1b7b-4d6a-9a65-0f2cd1c2ad63",
            "+b1e36ba-1b7b-4d6a-9a65-0f2cd1c2ad63",
            "5b1e36ba-1b7b-4d6a-9a65-0f2cd1c2adé",
        ] {
            assert_eq!(parse_uuid(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn strings_without_nul_and_within_the_bound() {
        assert_eq!(string_problem("serial-1"), None);
        assert_eq!(string_problem(&"s".repeat(MAX_STRING)), None);
        assert!(string_problem("a\0b").unwrap().contains("NUL"));
        assert!(string_problem(&"s".repeat(MAX_STRING + 1))
            .unwrap()
            .contains("1025 bytes"));
    }
}
