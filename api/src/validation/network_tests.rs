use super::*;

#[test]
fn cidr_parsing() {
    assert_eq!(
        parse_ipv4_cidr("10.0.2.0/24"),
        Ok(("10.0.2.0".parse().unwrap(), 24))
    );
    assert!(parse_ipv4_cidr("10.0.2.0/31").is_err());
    assert!(parse_ipv4_cidr("10.0.2.0").is_err());
    assert!(parse_ipv4_cidr("fd10::/64").is_err());
}

#[test]
fn mac_checks() {
    assert!(is_unicast_mac("02:00:00:00:00:01"));
    assert!(!is_unicast_mac("01:00:00:00:00:01"));
    assert!(!is_unicast_mac("02:00:00:00:00"));
    // Go's net.ParseMAC form with dashes, as KubeVirt accepts it; one separator throughout.
    assert!(is_unicast_mac("DE-AD-00-00-BE-AF"));
    assert!(!is_unicast_mac("DF-AD-00-00-BE-AF"));
    assert!(!is_unicast_mac("02-00:00:00:00:01"));
    assert!(!is_unicast_mac("02:00:00:00:00:0g"));
    assert_eq!(
        crate::domain::parse_mac_address("de-ad-00-00-be-af"),
        Some([0xde, 0xad, 0, 0, 0xbe, 0xaf])
    );
}
