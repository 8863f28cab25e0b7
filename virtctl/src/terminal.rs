//! Raw mode for the console: keystrokes go to the guest as typed (no line editing, no echo,
//! Ctrl+C goes to the guest), and the previous mode comes back when the guard is dropped.

use std::os::fd::AsFd;

use rustix::termios::{tcgetattr, tcsetattr, OptionalActions, Termios};

/// Restores the terminal when dropped.
pub struct RawMode {
    saved: Termios,
}

impl RawMode {
    /// Puts stdin's terminal in raw mode; `None` when stdin is not a terminal (input piped
    /// in, as tests do), which then passes through as it is.
    pub fn enable() -> Option<RawMode> {
        let stdin = std::io::stdin();
        let fd = stdin.as_fd();
        let saved = tcgetattr(fd).ok()?;
        let mut raw = saved.clone();
        raw.make_raw();
        tcsetattr(fd, OptionalActions::Now, &raw).ok()?;
        Some(RawMode { saved })
    }
}

impl Drop for RawMode {
    fn drop(&mut self) {
        let stdin = std::io::stdin();
        let _ = tcsetattr(stdin.as_fd(), OptionalActions::Now, &self.saved);
    }
}
