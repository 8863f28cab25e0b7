//! Error reporting shared by every layer of the VMM: an error and its sources on one line, as
//! the logs, a VM's exit reason and the binaries print them.

/// An error and its sources on one line.
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}
