//! A user's session on a VM's serial console through `virtctl console` on a pseudo-terminal,
//! typed as a user types: Enter until a prompt comes, a login, commands whose output only the
//! guest's shell prints, Ctrl+] to leave. Errors carry what the terminal showed.

use std::time::{Duration, Instant};

use crate::pty::PtyProgram;
use crate::{virtctl_args, virtctl_binary};

pub struct ConsoleSession {
    virtctl: PtyProgram,
}

impl ConsoleSession {
    /// `virtctl console VM` in `namespace`, once it says it is connected.
    pub fn open(namespace: &str, vm: &str) -> Result<ConsoleSession, String> {
        let args = virtctl_args(namespace, &["console", vm]);
        let mut virtctl = PtyProgram::spawn(&virtctl_binary(), &args);
        virtctl
            .expect("The escape sequence is ^]", Duration::from_secs(120))
            .map_err(|e| format!("virtctl console did not connect: {e}"))?;
        // The console's backlog arrives first and raw mode goes on: let both settle.
        std::thread::sleep(Duration::from_secs(2));
        Ok(ConsoleSession { virtctl })
    }

    /// Waits up to `within` for `text` among what the console showed since the last match, the
    /// boot's backlog included; types nothing.
    pub fn shown(&mut self, text: &str, within: Duration) -> Result<(), String> {
        self.virtctl
            .expect(text, within)
            .map(|_| ())
            .map_err(|e| format!("the guest did not show {text:?}: {e}"))
    }

    /// Presses Enter until `prompt` comes back (the guest may still be booting).
    pub fn prompt(&mut self, prompt: &str, within: Duration) -> Result<(), String> {
        let deadline = Instant::now() + within;
        loop {
            self.virtctl.skip_output();
            self.virtctl.send(b"\r");
            match self.virtctl.expect(prompt, Duration::from_secs(10)) {
                Ok(_) => return Ok(()),
                Err(e) if Instant::now() >= deadline => {
                    return Err(format!("the guest did not show {prompt:?}: {e}"))
                }
                Err(_) => {}
            }
        }
    }

    /// Waits up to `within` for `login_prompt` and types `user` at it.
    fn enter_user(
        &mut self,
        login_prompt: &str,
        user: &str,
        within: Duration,
    ) -> Result<(), String> {
        self.prompt(login_prompt, within)?;
        // Let the Enter presses of a slow boot drain before the user name goes in.
        std::thread::sleep(Duration::from_secs(1));
        self.virtctl.skip_output();
        self.virtctl.send(format!("{user}\r").as_bytes());
        Ok(())
    }

    /// Waits up to `within` for the login prompt, logs in, and waits for a shell prompt
    /// ending in `$ `. A refused login is tried again, as a user would, until `within` has
    /// passed: a serial getty can ask before cloud-init has set the user's password.
    pub fn login(&mut self, user: &str, password: &str, within: Duration) -> Result<(), String> {
        let deadline = Instant::now() + within;
        loop {
            self.enter_user(
                "login: ",
                user,
                deadline.saturating_duration_since(Instant::now()),
            )?;
            self.virtctl
                .expect("Password: ", Duration::from_secs(60))
                .map_err(|e| format!("no password prompt after the user name: {e}"))?;
            self.virtctl.send(format!("{password}\r").as_bytes());
            // A login that never saw the password's line end times out (a user name typed
            // while getty was still setting up the terminal can leave Enter not ending the
            // password's line): the login prompt comes back and is tried again.
            let answers = ["$ ", "Login incorrect", "Login timed out"];
            // A guest starved of CPU can take long; a silent console gets Enter, as a user
            // would give it (a shell prompts again, a lost password is refused and retried).
            let answer = match self.virtctl.expect_any(&answers, Duration::from_secs(45)) {
                Ok((answer, _)) => answer,
                Err(_) => {
                    println!("console: nothing 45 s after the password of {user}; pressing Enter");
                    self.virtctl.send(b"\r");
                    let (answer, _) = self
                        .virtctl
                        .expect_any(&answers, Duration::from_secs(90))
                        .map_err(|e| {
                            format!(
                                "no shell prompt after logging in as {user}, nor after Enter: {e}"
                            )
                        })?;
                    answer
                }
            };
            if answer == 0 {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(format!(
                    "the login as {user} was refused until the deadline; the terminal showed:\n{}",
                    self.virtctl.output_tail()
                ));
            }
            println!(
                "console: the login as {user} was {}; logging in again",
                ["", "refused", "timed out"][answer]
            );
        }
    }

    /// Waits up to `within` for `login_prompt`, logs in as `user`, an account without a
    /// password (Alpine's root), and waits for `shell_prompt`.
    pub fn login_without_password(
        &mut self,
        login_prompt: &str,
        user: &str,
        shell_prompt: &str,
        within: Duration,
    ) -> Result<(), String> {
        self.enter_user(login_prompt, user, within)?;
        self.virtctl
            .expect(shell_prompt, Duration::from_secs(60))
            .map_err(|e| format!("no shell prompt after logging in as {user}: {e}"))?;
        Ok(())
    }

    /// Types `command` and waits up to a minute for `output` (which the typed line itself must
    /// not contain).
    pub fn run(&mut self, command: &str, output: &str) -> Result<(), String> {
        self.run_within(command, output, Duration::from_secs(60))
    }

    /// [`ConsoleSession::run`] with its own deadline.
    pub fn run_within(
        &mut self,
        command: &str,
        output: &str,
        within: Duration,
    ) -> Result<(), String> {
        assert!(!command.contains(output), "the echo alone would match");
        self.virtctl.send(format!("{command}\r").as_bytes());
        self.virtctl
            .expect(output, within)
            .map_err(|e| format!("`{command}` in the guest: {e}"))?;
        Ok(())
    }

    /// Everything the terminal showed so far.
    pub fn output(&self) -> String {
        self.virtctl.output()
    }

    /// Ctrl+]: virtctl must end with exit code 0; returns what the terminal showed.
    pub fn escape(mut self) -> Result<String, String> {
        self.virtctl.send(&[0x1d]);
        match self.virtctl.wait(Duration::from_secs(15)) {
            Some(status) if status.success() => Ok(self.virtctl.output()),
            Some(status) => Err(format!(
                "virtctl console ended with {status} after Ctrl+]; the terminal showed:\n{}",
                self.virtctl.output_tail()
            )),
            None => Err(format!(
                "virtctl console still runs 15 s after Ctrl+]; the terminal showed:\n{}",
                self.virtctl.output_tail()
            )),
        }
    }
}
