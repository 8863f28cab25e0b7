//! Fuzzes what virt-launcher reads from a QEMU guest's agent channel: the bytes are the agent's
//! side of the stream, written by the guest, untrusted. One session syncs first (sync id 1)
//! then runs every command the launcher polls and `guest-shutdown`; another runs the commands
//! without a sync, so that the reply parsers see the input from its first byte; and each line is
//! parsed as a reply on its own. No input may panic or hang.
#![no_main]

use std::io::{Read, Write};
use std::time::Duration;

use libfuzzer_sys::fuzz_target;
use vmm::agent::{parse_reply, AgentSession, ShutdownMode};

/// The agent's end of the channel: reads come from the input, writes go nowhere.
struct Channel<'a> {
    input: &'a [u8],
}

impl Read for Channel<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.input.read(buf)
    }
}

impl Write for Channel<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

const TIMEOUT: Duration = Duration::from_secs(5);

fn every_command(session: &mut AgentSession<Channel<'_>>) {
    let _ = session.info(TIMEOUT);
    let _ = session.os_info(TIMEOUT);
    let _ = session.host_name(TIMEOUT);
    let _ = session.timezone(TIMEOUT);
    let _ = session.users(TIMEOUT);
    let _ = session.filesystems(TIMEOUT);
    let _ = session.interfaces(TIMEOUT);
    let _ = session.fsfreeze_status(TIMEOUT);
    let _ = session.shutdown(ShutdownMode::Reboot, TIMEOUT);
}

fuzz_target!(|data: &[u8]| {
    let mut synced = AgentSession::with_first_sync_id(Channel { input: data }, 1);
    let _ = synced.sync(TIMEOUT);
    every_command(&mut synced);
    let mut unsynced = AgentSession::with_first_sync_id(Channel { input: data }, 1);
    every_command(&mut unsynced);
    for line in data.split(|&b| b == b'\n') {
        let _ = parse_reply("fuzz", line);
    }
});
