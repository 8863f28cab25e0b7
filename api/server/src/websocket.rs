//! The small part of WebSocket (RFC 6455) the console needs, on any async byte stream.
//!
//! Handshake: the client sends `GET` with `Upgrade: websocket`, `Sec-WebSocket-Key` and
//! `Sec-WebSocket-Protocol: plain.kubevirt.io`; the server answers `101 Switching Protocols`
//! with `Sec-WebSocket-Accept` = base64(SHA-1(key + GUID)) and the chosen protocol.
//!
//! Frames: `FIN|opcode`, a 7/16/64-bit length, a 4-byte mask when sent by a client, then the
//! payload. With `plain.kubevirt.io` each binary (or text) message carries raw console bytes;
//! close, ping and pong are control frames.

use base64::Engine;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// The console subprotocol KubeVirt speaks.
pub const PLAIN_PROTOCOL: &str = "plain.kubevirt.io";
const GUID: &str = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";
/// Largest frame accepted (the console sends small ones).
const MAX_PAYLOAD: u64 = 1 << 20;

pub const OP_CONTINUATION: u8 = 0x0;
pub const OP_TEXT: u8 = 0x1;
pub const OP_BINARY: u8 = 0x2;
pub const OP_CLOSE: u8 = 0x8;
pub const OP_PING: u8 = 0x9;
pub const OP_PONG: u8 = 0xa;

/// `Sec-WebSocket-Accept` for a `Sec-WebSocket-Key`.
pub fn accept_key(key: &str) -> String {
    let digest = ring::digest::digest(
        &ring::digest::SHA1_FOR_LEGACY_USE_ONLY,
        format!("{}{GUID}", key.trim()).as_bytes(),
    );
    base64::engine::general_purpose::STANDARD.encode(digest.as_ref())
}

/// A key for a client handshake (any 16 bytes, base64).
pub fn client_key(seed: u64) -> String {
    let mut bytes = [0u8; 16];
    bytes[..8].copy_from_slice(&seed.to_le_bytes());
    bytes[8..].copy_from_slice(&seed.rotate_left(29).to_be_bytes());
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// One frame.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Frame {
    pub fin: bool,
    pub opcode: u8,
    pub payload: Vec<u8>,
}

/// Why a frame could not be read.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    #[error("reading a frame")]
    Io(#[from] std::io::Error),
    #[error("frame of {0} bytes is too large")]
    TooLarge(u64),
}

/// Reads one frame, unmasking it; `None` at a clean end of stream.
pub async fn read_frame<R: AsyncRead + Unpin>(reader: &mut R) -> Result<Option<Frame>, FrameError> {
    let mut head = [0u8; 2];
    match reader.read_exact(&mut head).await {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e.into()),
    }
    let fin = head[0] & 0x80 != 0;
    let opcode = head[0] & 0x0f;
    let masked = head[1] & 0x80 != 0;
    let length = match head[1] & 0x7f {
        126 => u64::from(reader.read_u16().await?),
        127 => reader.read_u64().await?,
        n => u64::from(n),
    };
    if length > MAX_PAYLOAD {
        return Err(FrameError::TooLarge(length));
    }
    let mut mask = [0u8; 4];
    if masked {
        reader.read_exact(&mut mask).await?;
    }
    let mut payload = vec![0u8; length as usize];
    reader.read_exact(&mut payload).await?;
    if masked {
        apply_mask(&mut payload, mask);
    }
    Ok(Some(Frame {
        fin,
        opcode,
        payload,
    }))
}

fn apply_mask(payload: &mut [u8], mask: [u8; 4]) {
    for (i, b) in payload.iter_mut().enumerate() {
        *b ^= mask[i % 4];
    }
}

/// Encodes one final frame; `mask` is required from clients and absent from servers.
pub fn encode_frame(opcode: u8, payload: &[u8], mask: Option<[u8; 4]>) -> Vec<u8> {
    let mut out = Vec::with_capacity(payload.len() + 14);
    out.push(0x80 | opcode);
    let mask_bit = if mask.is_some() { 0x80 } else { 0 };
    match payload.len() {
        n if n < 126 => out.push(mask_bit | n as u8),
        n if n <= usize::from(u16::MAX) => {
            out.push(mask_bit | 126);
            out.extend_from_slice(&(n as u16).to_be_bytes());
        }
        n => {
            out.push(mask_bit | 127);
            out.extend_from_slice(&(n as u64).to_be_bytes());
        }
    }
    match mask {
        None => out.extend_from_slice(payload),
        Some(mask) => {
            out.extend_from_slice(&mask);
            let start = out.len();
            out.extend_from_slice(payload);
            apply_mask(&mut out[start..], mask);
        }
    }
    out
}

/// Writes one final frame and flushes.
pub async fn write_frame<W: AsyncWrite + Unpin>(
    writer: &mut W,
    opcode: u8,
    payload: &[u8],
    mask: Option<[u8; 4]>,
) -> std::io::Result<()> {
    writer
        .write_all(&encode_frame(opcode, payload, mask))
        .await?;
    writer.flush().await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accept_key_matches_rfc_6455_example() {
        assert_eq!(
            accept_key("dGhlIHNhbXBsZSBub25jZQ=="),
            "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="
        );
    }

    #[tokio::test]
    async fn frames_round_trip_masked_and_unmasked() {
        for (len, mask) in [
            (5usize, None),
            (300, Some([1, 2, 3, 4])),
            (70_000, Some([9, 8, 7, 6])),
        ] {
            let payload: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
            let bytes = encode_frame(OP_BINARY, &payload, mask);
            let frame = read_frame(&mut bytes.as_slice()).await.unwrap().unwrap();
            assert_eq!(
                frame,
                Frame {
                    fin: true,
                    opcode: OP_BINARY,
                    payload
                }
            );
        }
        assert!(read_frame(&mut &b""[..]).await.unwrap().is_none());
    }

    #[test]
    fn rfc_6455_masked_hello() {
        let bytes = encode_frame(OP_TEXT, b"Hello", Some([0x37, 0xfa, 0x21, 0x3d]));
        assert_eq!(
            bytes,
            [0x81, 0x85, 0x37, 0xfa, 0x21, 0x3d, 0x7f, 0x9f, 0x4d, 0x51, 0x58]
        );
    }
}
