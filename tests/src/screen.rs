//! A look at a VM's screen as a VNC viewer and an image reader see it: the size of a PNG and
//! whether it shows anything, and the RFB 3.8 handshake up to the server's framebuffer size.

use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

/// Width and height of a PNG (its IHDR chunk), after checking its signature.
pub fn png_size(png: &[u8]) -> Result<(u32, u32), String> {
    let be = |at: usize| u32::from_be_bytes(png[at..at + 4].try_into().expect("4 bytes"));
    if png.len() < 24 || !png.starts_with(b"\x89PNG\r\n\x1a\n") || &png[12..16] != b"IHDR" {
        return Err(format!("not a PNG: {:02x?}", &png[..png.len().min(24)]));
    }
    Ok((be(16), be(20)))
}

/// Whether a PNG shows anything: its image data (the IDAT chunks, inflated) holds a byte above
/// the filter types' 0 to 4, which a uniformly black screen never does (every filtered byte of it
/// is 0).
pub fn png_shows_something(png: &[u8]) -> Result<bool, String> {
    let mut data = Vec::new();
    let mut at = 8;
    while at + 8 <= png.len() {
        let len = u32::from_be_bytes(png[at..at + 4].try_into().expect("4 bytes")) as usize;
        let kind = &png[at + 4..at + 8];
        let end = at + 8 + len;
        if end > png.len() {
            return Err(format!("a chunk {kind:?} of {len} bytes past the end"));
        }
        if kind == b"IDAT" {
            data.extend_from_slice(&png[at + 8..end]);
        }
        at = end + 4;
    }
    let mut pixels = Vec::new();
    flate2::read::ZlibDecoder::new(&data[..])
        .read_to_end(&mut pixels)
        .map_err(|e| format!("inflating the image data: {e}"))?;
    Ok(pixels.iter().any(|b| *b > 4))
}

/// Connects to a VNC server at `address` and makes the RFB 3.8 handshake as a viewer does.
/// Returns the server's version line and the framebuffer size of its ServerInit.
pub fn rfb_handshake(address: impl ToSocketAddrs) -> Result<(String, (u32, u32)), String> {
    let mut stream = TcpStream::connect(address).map_err(|e| e.to_string())?;
    stream
        .set_read_timeout(Some(Duration::from_secs(60)))
        .map_err(|e| e.to_string())?;
    let send =
        |stream: &mut TcpStream, bytes: &[u8]| stream.write_all(bytes).map_err(|e| e.to_string());
    // RFB 3.8: the versions both ways, then the server's security types; the client picks
    // None, the server says it succeeded; then ClientInit (shared) and ServerInit.
    let version = String::from_utf8_lossy(&read_n(&mut stream, 12)?).into_owned();
    send(&mut stream, b"RFB 003.008\n")?;
    let count = read_n(&mut stream, 1)?[0] as usize;
    let types = read_n(&mut stream, count)?;
    if !types.contains(&1) {
        return Err(format!("security types {types:?} without None (1)"));
    }
    send(&mut stream, &[1])?;
    let result = read_n(&mut stream, 4)?;
    if result != [0, 0, 0, 0] {
        return Err(format!("SecurityResult {result:?}"));
    }
    send(&mut stream, &[1])?;
    let init = read_n(&mut stream, 4)?;
    let size = (
        u32::from(u16::from_be_bytes([init[0], init[1]])),
        u32::from(u16::from_be_bytes([init[2], init[3]])),
    );
    Ok((version, size))
}

/// Reads exactly `n` bytes.
fn read_n(stream: &mut TcpStream, n: usize) -> Result<Vec<u8>, String> {
    let mut buf = vec![0u8; n];
    stream
        .read_exact(&mut buf)
        .map(|_| buf)
        .map_err(|e| format!("reading {n} bytes: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A grayscale PNG of `rows` (each row with its filter byte 0 in front); CRCs are zero,
    /// which these readers do not check.
    fn png(width: u32, rows: &[&[u8]]) -> Vec<u8> {
        let chunk = |kind: &[u8], data: &[u8]| {
            let mut c = (data.len() as u32).to_be_bytes().to_vec();
            c.extend_from_slice(kind);
            c.extend_from_slice(data);
            c.extend_from_slice(&[0; 4]);
            c
        };
        let mut ihdr = width.to_be_bytes().to_vec();
        ihdr.extend_from_slice(&(rows.len() as u32).to_be_bytes());
        ihdr.extend_from_slice(&[8, 0, 0, 0, 0]);
        let mut raw = Vec::new();
        for row in rows {
            raw.push(0);
            raw.extend_from_slice(row);
        }
        let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
        z.write_all(&raw).unwrap();
        let mut png = b"\x89PNG\r\n\x1a\n".to_vec();
        png.extend(chunk(b"IHDR", &ihdr));
        png.extend(chunk(b"IDAT", &z.finish().unwrap()));
        png.extend(chunk(b"IEND", &[]));
        png
    }

    #[test]
    fn a_black_screen_shows_nothing_and_one_lit_pixel_something() {
        let black = png(3, &[&[0, 0, 0], &[0, 0, 0]]);
        assert_eq!(png_size(&black), Ok((3, 2)));
        assert_eq!(png_shows_something(&black), Ok(false));
        let lit = png(3, &[&[0, 0, 0], &[0, 0xaa, 0]]);
        assert_eq!(png_shows_something(&lit), Ok(true));
    }

    #[test]
    fn what_is_not_a_png_is_said() {
        assert!(png_size(b"GIF89a and more bytes than that").is_err());
        let mut cut = png(3, &[&[0, 0, 0]]);
        cut.truncate(40);
        assert!(png_shows_something(&cut).is_err());
    }
}
