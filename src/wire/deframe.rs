//! Deframing a byte stream into frames without copying.
//!
//! Frames are self-delimiting on a stream: header plus `payload_len` octets.
//! The contract (`STYLE.md`): `Ok(None)` means "need more bytes",
//! `Ok(Some(..))` a frame borrowed from the caller's buffer with the octets it
//! consumed, `Err` a typed error after which the stream cannot be resynchronised.

use super::{HEADER_LEN, Header, WireError};

/// Default limit on a frame's payload (sealed payload plus tag): 1 MiB + 64 KiB,
/// room for a 1 MiB foreign message plus envelope and tag.
pub const DEFAULT_MAX_PAYLOAD_LEN: u32 = (1 << 20) + (64 << 10);

/// A frame borrowed from the deframer's input.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Frame<'a> {
    pub header: Header,
    /// The whole frame: header octets followed by the payload.
    pub octets: &'a [u8],
}

impl<'a> Frame<'a> {
    /// The octets after the header (sealed payload and tag).
    pub fn payload(&self) -> &'a [u8] {
        &self.octets[HEADER_LEN..]
    }
}

/// Where a complete frame sits at the start of a buffer: its header and total
/// length. Lets a caller split a `&mut` buffer to open the frame in place.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FrameSpan {
    pub header: Header,
    /// Header plus payload octets.
    pub len: usize,
}

/// Checks frames in the spec's order: full header present, CRC32C, magic,
/// version, reserved zero, then the payload length against the limit, before
/// any payload is waited for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Deframer {
    max_payload_len: u32,
}

impl Default for Deframer {
    fn default() -> Self {
        Self::new(DEFAULT_MAX_PAYLOAD_LEN)
    }
}

impl Deframer {
    pub const fn new(max_payload_len: u32) -> Self {
        Self { max_payload_len }
    }

    pub const fn max_payload_len(&self) -> u32 {
        self.max_payload_len
    }

    /// The largest frame (header + payload) this deframer accepts; a reader
    /// sizes its buffer from it.
    pub const fn max_frame_len(&self) -> usize {
        HEADER_LEN + self.max_payload_len as usize
    }

    /// Locates the frame at the start of `buf`.
    pub fn span(&self, buf: &[u8]) -> Result<Option<FrameSpan>, WireError> {
        let Some(header) = Header::decode_prefix(buf)? else {
            return Ok(None);
        };
        if header.payload_len > self.max_payload_len {
            return Err(WireError::PayloadTooLarge {
                len: header.payload_len,
                limit: self.max_payload_len,
            });
        }
        // Cannot overflow: payload_len <= u32::MAX fits usize on 32/64-bit targets.
        let len = HEADER_LEN + header.payload_len as usize;
        if buf.len() < len {
            return Ok(None);
        }
        Ok(Some(FrameSpan { header, len }))
    }

    /// The frame at the start of `buf` and the octets it consumed.
    pub fn deframe<'a>(&self, buf: &'a [u8]) -> Result<Option<(Frame<'a>, usize)>, WireError> {
        Ok(self.span(buf)?.map(|span| {
            let frame = Frame {
                header: span.header,
                octets: &buf[..span.len],
            };
            (frame, span.len)
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{ChannelId, Flags, FrameType};

    fn frame(seq: u64, payload: &[u8]) -> Vec<u8> {
        let h = Header::new(
            Flags::ENC,
            FrameType(0x0100),
            ChannelId::BRIDGE,
            seq,
            payload.len() as u32,
        );
        let mut v = h.encode().unwrap().to_vec();
        v.extend_from_slice(payload);
        v
    }

    #[test]
    fn needs_more_bytes_until_the_frame_is_complete() {
        let f = frame(3, b"hello world");
        let d = Deframer::default();
        for cut in 0..f.len() {
            assert_eq!(d.deframe(&f[..cut]), Ok(None), "cut at {cut}");
        }
        let (got, used) = d.deframe(&f).unwrap().unwrap();
        assert_eq!(used, f.len());
        assert_eq!(got.payload(), b"hello world");
        assert_eq!(got.header.seq, 3);
    }

    #[test]
    fn rejects_oversized_payload_before_it_arrives() {
        let d = Deframer::new(8);
        let f = frame(0, &[0; 9]);
        assert_eq!(
            d.deframe(&f[..HEADER_LEN]),
            Err(WireError::PayloadTooLarge { len: 9, limit: 8 })
        );
    }

    #[test]
    fn two_frames_back_to_back() {
        let mut s = frame(0, b"a");
        s.extend(frame(1, b"bc"));
        let d = Deframer::default();
        let (f0, n0) = d.deframe(&s).unwrap().unwrap();
        let (f1, n1) = d.deframe(&s[n0..]).unwrap().unwrap();
        assert_eq!((f0.payload(), f1.payload()), (&b"a"[..], &b"bc"[..]));
        assert_eq!(n0 + n1, s.len());
    }
}
