//! virtio-console with multiport (VIRTIO_CONSOLE_F_MULTIPORT, virtio 1.2 section 5.3): the
//! guest agent channel. Two ports: port 0, which exists because the spec gives it queues 0 and
//! 1 but has no host side (what the guest writes there is dropped, nothing is sent to it), and
//! port 1, named [`AGENT_PORT_NAME`], whose host side is a unix socket the device listens on, as
//! QEMU's `-chardev socket,server=on,wait=off` with
//! `virtserialport,name=org.qemu.guest_agent.0`. Linux's virtio_console driver makes it
//! `/dev/vportNp1` with the name in `/sys/class/virtio-ports/vportNp1/name` (udev links it as
//! `/dev/virtio-ports/org.qemu.guest_agent.0`), which qemu-guest-agent opens.
//!
//! Queues: 0 and 1 port 0's receiveq and transmitq, 2 and 3 the control receiveq (c_ivq,
//! device to driver) and transmitq (c_ovq, driver to device), 4 and 5 port 1's receiveq and
//! transmitq. Config space: `cols: u16, rows: u16, max_nr_ports: u32 (2), emerg_wr: u32`, all
//! little-endian (only VIRTIO_CONSOLE_F_MULTIPORT is offered, so cols, rows and emerg_wr are
//! unused).
//!
//! A control message is `id: u32, event: u16, value: u16` (little-endian), PORT_NAME followed by
//! the name's bytes. The handshake ([`control`]), step by step:
//! 1. the driver sends DEVICE_READY (value 1); the device answers PORT_ADD for ports 0 and 1;
//! 2. the driver answers PORT_READY (value 1) per port once it has set it up (and filled its
//!    receiveq); the device answers port 1's with PORT_NAME, then PORT_OPEN 1 if a host client
//!    is connected. Port 0 is not marked a console (no CONSOLE_PORT): it stays a plain port;
//! 3. the driver sends PORT_OPEN 1 when a guest program opens the port and PORT_OPEN 0 when it
//!    closes it; the device sends PORT_OPEN 1 when a host client connects and PORT_OPEN 0 when
//!    it goes away. Linux makes the guest's reads return 0 (EOF) and its writes wait while the
//!    host side is closed; qemu-guest-agent then retries every 100 ms.
//!
//! The host side ([`host`]): one client at a time; a new connection replaces the old one. Guest
//! to host: what the guest writes on port 1 goes to the client, and is dropped when none is
//! connected. Host to guest: the client's bytes are delivered in order on port 1 once the guest
//! has it open. While it is closed they wait, up to [`host::TO_GUEST_CAPACITY`] bytes in the
//! device and the rest in the socket's own buffer (the device stops reading, so the client's
//! writes wait too), as with QEMU, which stops reading its chardev while the guest port is
//! closed (Linux drops data that arrives on a closed port). What the previous client left
//! undelivered is dropped when a new client connects: the launcher's guest agent session
//! resynchronises on each connection (`guest-sync-delimited`).
//!
//! Everything the guest writes is untrusted. A control message that is too short, names a port
//! that does not exist or an event the driver may not send is logged and ignored (its buffer
//! goes back used); a malformed data or receive chain marks the device broken, as for the other
//! devices. [`device`] is the `VirtioDevice` and its worker.

pub mod control;
pub mod device;
pub mod host;
#[cfg(test)]
mod tests;

pub use device::VirtioConsole;

/// Device type of virtio-console.
pub const TYPE_CONSOLE: u32 = 3;
/// Feature bit: the device has several ports and a control queue pair.
pub const F_MULTIPORT: u64 = 1 << 1;

/// Ports of the device: port 0 (no host side) and the agent port.
pub const PORTS: usize = 2;
/// The port whose host side is the unix socket.
pub const AGENT_PORT: u32 = 1;
/// The agent port's name, which qemu-guest-agent looks for.
pub const AGENT_PORT_NAME: &str = "org.qemu.guest_agent.0";

/// Queue indexes (also the worker's event tokens of their notify eventfds).
pub const PORT0_RX_QUEUE: u16 = 0;
pub const PORT0_TX_QUEUE: u16 = 1;
pub const CONTROL_RX_QUEUE: u16 = 2;
pub const CONTROL_TX_QUEUE: u16 = 3;
pub const AGENT_RX_QUEUE: u16 = 4;
pub const AGENT_TX_QUEUE: u16 = 5;
/// How many queues the device has.
pub const QUEUES: usize = 6;

/// Control events (virtio 1.2, 5.3.6.2).
pub const DEVICE_READY: u16 = 0;
pub const PORT_ADD: u16 = 1;
pub const PORT_REMOVE: u16 = 2;
pub const PORT_READY: u16 = 3;
pub const CONSOLE_PORT: u16 = 4;
pub const RESIZE: u16 = 5;
pub const PORT_OPEN: u16 = 6;
pub const PORT_NAME: u16 = 7;

/// Bytes of a control message's header: id (u32), event (u16), value (u16).
pub const CONTROL_HEADER_LEN: usize = 8;
