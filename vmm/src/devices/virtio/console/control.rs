//! The control protocol of the multiport console as pure state: the messages the driver sends
//! on the control transmitq, the messages the device owes it on the control receiveq, and what
//! the driver has readied and opened. No queues and no sockets: the worker
//! ([`super::device`]) feeds it the driver's bytes and the host side's connects and
//! disconnects, and writes [`ControlState::next_outgoing`] into receive buffers.
//!
//! Every byte of a driver's message is untrusted: [`ControlState::handle_driver_message`]
//! returns an error for anything out of protocol, and changes nothing then.

use std::collections::VecDeque;

use super::*;
use crate::wire::{Decoder, Encoder, WireError};

/// Messages waiting for control receive buffers at most. The driver's messages each add at most
/// three (DEVICE_READY: one PORT_ADD per port); a driver that keeps sending without giving
/// receive buffers would grow the queue without end, so beyond this new ones are dropped.
pub const MAX_OUTGOING: usize = 64;

/// Version of [`ControlState::encode`]'s layout.
const STATE_VERSION: u8 = 1;

/// One control message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ControlMessage {
    pub id: u32,
    pub event: u16,
    pub value: u16,
}

impl ControlMessage {
    /// The message at the start of `bytes` (what follows the header is ignored: the driver
    /// sends nothing after it).
    pub fn parse(bytes: &[u8]) -> Result<ControlMessage, ControlError> {
        let header: &[u8; CONTROL_HEADER_LEN] = bytes
            .get(..CONTROL_HEADER_LEN)
            .and_then(|h| h.try_into().ok())
            .ok_or(ControlError::TooShort(bytes.len()))?;
        Ok(ControlMessage {
            id: u32::from_le_bytes([header[0], header[1], header[2], header[3]]),
            event: u16::from_le_bytes([header[4], header[5]]),
            value: u16::from_le_bytes([header[6], header[7]]),
        })
    }

    /// The bytes the driver receives: the header, then for PORT_NAME the port's name without a
    /// terminating NUL (Linux takes the used length as the end of the name).
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut bytes = Vec::with_capacity(CONTROL_HEADER_LEN + AGENT_PORT_NAME.len());
        bytes.extend_from_slice(&self.id.to_le_bytes());
        bytes.extend_from_slice(&self.event.to_le_bytes());
        bytes.extend_from_slice(&self.value.to_le_bytes());
        if self.event == PORT_NAME {
            bytes.extend_from_slice(port_name(self.id).unwrap_or_default().as_bytes());
        }
        bytes
    }
}

/// The name of port `id`, if it has one.
pub fn port_name(id: u32) -> Option<&'static str> {
    (id == AGENT_PORT).then_some(AGENT_PORT_NAME)
}

/// A control message from the driver that is out of protocol; it is ignored.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ControlError {
    #[error("control message of {0} bytes, shorter than its 8-byte header")]
    TooShort(usize),
    #[error("control event {0} is unknown")]
    UnknownEvent(u16),
    #[error("control event {0} is one the device sends, not the driver")]
    DeviceEvent(u16),
    #[error("control event {event} names port {id}, which does not exist")]
    NoSuchPort { event: u16, id: u32 },
    #[error("control event {0} before the driver sent DEVICE_READY")]
    DeviceNotReady(u16),
    #[error("PORT_OPEN for port {0}, which the driver has not readied")]
    PortNotReady(u32),
    #[error("the driver failed to set the device up (DEVICE_READY 0)")]
    DriverFailed,
    #[error("the driver failed to add port {0} (PORT_READY 0)")]
    PortFailed(u32),
}

/// One port as the driver has set it up.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PortState {
    /// The driver added the port (PORT_READY 1).
    pub ready: bool,
    /// A guest program has the port open (PORT_OPEN 1 from the driver).
    pub guest_open: bool,
    /// The host side as the driver was last told (PORT_OPEN from the device).
    pub host_open_told: bool,
}

/// The control protocol's state: the driver's side (migrated), whether a host client is
/// connected (the host's, not migrated), and the messages the driver has yet to receive.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ControlState {
    device_ready: bool,
    ports: [PortState; PORTS],
    host_connected: bool,
    outgoing: VecDeque<ControlMessage>,
}

impl ControlState {
    /// Whether the driver sent DEVICE_READY.
    pub fn device_ready(&self) -> bool {
        self.device_ready
    }

    /// Port `id` as the driver set it up (`None` if there is no such port).
    pub fn port(&self, id: u32) -> Option<PortState> {
        self.ports.get(id as usize).copied()
    }

    /// Whether a guest program has port `id` open: only then may data be put in its receiveq
    /// (Linux drops what arrives on a closed port).
    pub fn guest_open(&self, id: u32) -> bool {
        self.port(id).is_some_and(|p| p.ready && p.guest_open)
    }

    /// Messages waiting for a control receive buffer.
    pub fn outgoing(&self) -> usize {
        self.outgoing.len()
    }

    /// The next message for the driver, if any (it stays queued until [`Self::pop_outgoing`]).
    pub fn next_outgoing(&self) -> Option<ControlMessage> {
        self.outgoing.front().copied()
    }

    /// Drops the message [`Self::next_outgoing`] returned: it reached the driver.
    pub fn pop_outgoing(&mut self) {
        self.outgoing.pop_front();
    }

    /// A driver reset: the driver's side and the queued messages are forgotten; the host side
    /// stays as it is.
    pub fn reset(&mut self) {
        *self = ControlState {
            host_connected: self.host_connected,
            ..ControlState::default()
        };
    }

    fn send(&mut self, id: u32, event: u16, value: u16) {
        if self.outgoing.len() >= MAX_OUTGOING {
            guest_warn!(
                "virtio-console: {MAX_OUTGOING} control messages wait for receive buffers; \
                 event {event} for port {id} dropped"
            );
            return;
        }
        self.outgoing.push_back(ControlMessage { id, event, value });
    }

    /// Handles one message the driver sent on the control transmitq.
    pub fn handle_driver_message(&mut self, bytes: &[u8]) -> Result<(), ControlError> {
        let msg = ControlMessage::parse(bytes)?;
        match msg.event {
            DEVICE_READY => {
                if msg.value == 0 {
                    return Err(ControlError::DriverFailed);
                }
                self.device_ready = true;
                for id in 0..PORTS as u32 {
                    self.send(id, PORT_ADD, 1);
                }
                Ok(())
            }
            PORT_READY => {
                let port = self.driver_port(&msg)?;
                if msg.value == 0 {
                    *port = PortState::default();
                    return Err(ControlError::PortFailed(msg.id));
                }
                port.ready = true;
                if port_name(msg.id).is_some() {
                    self.send(msg.id, PORT_NAME, 1);
                }
                if msg.id == AGENT_PORT && self.host_connected {
                    self.ports[AGENT_PORT as usize].host_open_told = true;
                    self.send(AGENT_PORT, PORT_OPEN, 1);
                }
                Ok(())
            }
            PORT_OPEN => {
                let port = self.driver_port(&msg)?;
                if !port.ready {
                    return Err(ControlError::PortNotReady(msg.id));
                }
                port.guest_open = msg.value != 0;
                Ok(())
            }
            PORT_ADD | PORT_REMOVE | CONSOLE_PORT | RESIZE | PORT_NAME => {
                Err(ControlError::DeviceEvent(msg.event))
            }
            other => Err(ControlError::UnknownEvent(other)),
        }
    }

    /// The port a PORT_READY or PORT_OPEN names, once the driver is ready.
    fn driver_port(&mut self, msg: &ControlMessage) -> Result<&mut PortState, ControlError> {
        if !self.device_ready {
            return Err(ControlError::DeviceNotReady(msg.event));
        }
        self.ports
            .get_mut(msg.id as usize)
            .ok_or(ControlError::NoSuchPort {
                event: msg.event,
                id: msg.id,
            })
    }

    /// A host client connected (`true`) or went away: the driver is told with PORT_OPEN once
    /// it has readied the agent port and when that changes what it was told.
    pub fn set_host_connected(&mut self, connected: bool) {
        self.host_connected = connected;
        let port = &mut self.ports[AGENT_PORT as usize];
        if port.ready && port.host_open_told != connected {
            port.host_open_told = connected;
            self.send(AGENT_PORT, PORT_OPEN, u16::from(connected));
        }
    }

    /// The driver's side and the queued messages, for a migration (the host side is the
    /// target's own).
    pub fn encode(&self) -> Vec<u8> {
        let mut e = Encoder::default();
        e.u8(STATE_VERSION)
            .u8(u8::from(self.device_ready))
            .u32(PORTS as u32);
        for port in &self.ports {
            e.u8(u8::from(port.ready))
                .u8(u8::from(port.guest_open))
                .u8(u8::from(port.host_open_told));
        }
        e.u32(self.outgoing.len() as u32);
        for msg in &self.outgoing {
            e.u32(msg.id).u16(msg.event).u16(msg.value);
        }
        e.0
    }

    /// What [`Self::encode`] wrote, checked (it comes from the migration source); no host
    /// client is connected.
    pub fn decode(bytes: &[u8]) -> Result<ControlState, WireError> {
        let mut d = Decoder::new(bytes, "virtio-console state");
        let version = d.u8()?;
        if version != STATE_VERSION {
            return Err(d.malformed(format!(
                "layout version {version}, this VMM reads {STATE_VERSION}"
            )));
        }
        let mut state = ControlState {
            device_ready: d.u8()? != 0,
            ..ControlState::default()
        };
        let ports = d.u32()?;
        if ports != PORTS as u32 {
            return Err(d.malformed(format!("{ports} ports where this device has {PORTS}")));
        }
        for port in &mut state.ports {
            *port = PortState {
                ready: d.u8()? != 0,
                guest_open: d.u8()? != 0,
                host_open_told: d.u8()? != 0,
            };
        }
        let count = d.count(MAX_OUTGOING as u32, "queued control messages")?;
        for _ in 0..count {
            let msg = ControlMessage {
                id: d.u32()?,
                event: d.u16()?,
                value: d.u16()?,
            };
            let sent_by_device = matches!(msg.event, PORT_ADD | PORT_NAME | PORT_OPEN);
            if !sent_by_device || msg.id as usize >= PORTS {
                return Err(d.malformed(format!(
                    "queued control message {msg:?} is not one this device sends"
                )));
            }
            state.outgoing.push_back(msg);
        }
        d.finish()?;
        Ok(state)
    }
}
