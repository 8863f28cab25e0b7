//! Prometheus' text exposition format (0.0.4), the part the components' `/metrics` share.

/// `a="x",b="y"`, with the values escaped as the text format requires (backslash, double quote
/// and line feed).
pub fn encode_labels(labels: &[(&str, &str)]) -> String {
    labels
        .iter()
        .map(|(name, value)| {
            let value = value
                .replace('\\', "\\\\")
                .replace('"', "\\\"")
                .replace('\n', "\\n");
            format!("{name}=\"{value}\"")
        })
        .collect::<Vec<_>>()
        .join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(
            encode_labels(&[("a", "x\"y\\z\nw"), ("b", "c")]),
            "a=\"x\\\"y\\\\z\\nw\",b=\"c\""
        );
        assert_eq!(encode_labels(&[]), "");
    }
}
