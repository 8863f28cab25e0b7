//! A guest that counts on its serial console, to tell a guest that kept running from one that
//! restarted: its cloud-init script keeps a random token in RAM and prints
//! `fv-count N UPTIME TOKEN` twice a second. After a migration, a restarted component or a
//! killed API server, the same token with a larger count and uptime is the same boot.

use std::time::{Duration, Instant};

use crate::read_console;

/// The cloud-init user data of the counting guest: `before` (shell lines) runs first, then the
/// counter starts in the background.
pub fn user_data(before: &str) -> String {
    format!(
        "#!/bin/sh\n\
         head -c 8 /dev/urandom | od -An -tx1 | tr -d ' \\n' > /tmp/fv-token\n\
         {before}\
         ( i=0; while true; do i=$((i+1)); echo \"fv-count $i $(cut -d' ' -f1 /proc/uptime) $(cat /tmp/fv-token)\" >/dev/console; sleep 0.5; done ) </dev/null >/dev/null 2>&1 &\n"
    )
}

/// One `fv-count` line.
#[derive(Clone, Debug, PartialEq)]
pub struct Count {
    pub n: u64,
    pub uptime: f64,
    pub token: String,
}

impl Count {
    /// Whether `self` comes later in the same boot as `earlier`.
    pub fn continues(&self, earlier: &Count) -> bool {
        self.token == earlier.token && self.n > earlier.n && self.uptime > earlier.uptime
    }
}

/// The complete `fv-count` lines of `text`. A line the console cut (the read ended in it, or
/// other output broke into it) has a token shorter than its 16 hex digits and is skipped.
pub fn counts(text: &str) -> Vec<Count> {
    text.lines()
        .filter_map(|l| {
            let line = l.trim();
            let at = line.find("fv-count ")?;
            let mut parts = line[at + "fv-count ".len()..].split_whitespace();
            let count = Count {
                n: parts.next()?.parse().ok()?,
                uptime: parts.next()?.parse().ok()?,
                token: parts.next()?.to_string(),
            };
            let whole =
                count.token.len() == 16 && count.token.chars().all(|c| c.is_ascii_hexdigit());
            whole.then_some(count)
        })
        .collect()
}

/// Reads the console of `uid` on `node` until it shows at least `at_least` counts.
pub async fn console_counts(
    node: &str,
    uid: &str,
    at_least: usize,
    timeout: Duration,
) -> Vec<Count> {
    let deadline = Instant::now() + timeout;
    loop {
        let (n, u) = (node.to_string(), uid.to_string());
        let text =
            tokio::task::spawn_blocking(move || read_console(&n, &u, Duration::from_secs(3)))
                .await
                .expect("console reader");
        let found = counts(&text);
        if found.len() >= at_least {
            return found;
        }
        assert!(
            Instant::now() < deadline,
            "fewer than {at_least} counter lines on {node}'s console of {uid}; console:\n{text}"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cut_counter_lines_are_skipped() {
        let text = "fv-count 1 0.50 0123456789abcdef\nfv-count 2 1.00 0123\nfv-count 3 1.50 0123456789abcdef";
        let seen = counts(text);
        assert_eq!(seen.iter().map(|c| c.n).collect::<Vec<_>>(), vec![1, 3]);
    }

    #[test]
    fn a_count_continues_only_its_own_boot() {
        let at = |n, uptime, token: &str| Count {
            n,
            uptime,
            token: token.into(),
        };
        let first = at(5, 2.5, "0123456789abcdef");
        assert!(at(9, 4.5, "0123456789abcdef").continues(&first));
        // A reboot: a new token, or the count and uptime starting over.
        assert!(!at(9, 4.5, "fedcba9876543210").continues(&first));
        assert!(!at(2, 1.0, "0123456789abcdef").continues(&first));
        assert!(!at(5, 2.5, "0123456789abcdef").continues(&first));
    }

    #[test]
    fn the_script_runs_its_prelude_before_the_counter() {
        let script = user_data("echo marker > /dev/vdc\n");
        let prelude = script.find("echo marker").expect("the prelude");
        assert!(script.starts_with("#!/bin/sh\n"));
        assert!(prelude > script.find("/tmp/fv-token").unwrap());
        assert!(prelude < script.find("fv-count").unwrap());
    }
}
