//! A Bridge payload as the driver hands it to its sink ([`Payload`]), and
//! the one rule for keeping part of it past the call ([`Payload::keep`]).
//!
//! A payload is opened in place where it was read: in the reader's shared
//! buffer (up to 64 KiB, reused read after read, holding many frames), or,
//! for a frame of [`OWN_FRAME`] octets or more, in an allocation of its own
//! that holds that frame and nothing else (`frames.rs`). What a sink keeps
//! is charged by its own length (the byte budgets count the message's
//! octets), so a kept `Bytes` must not hold alive much more than that:
//!
//! - in an allocation of its own, a part that is nearly all of it (at least
//!   8/9: the envelope, header and tag around a large message) is a slice of
//!   it, not a copy;
//! - otherwise (the shared buffer, or a small part of a large frame) the
//!   part is copied, then and only then: a slice would keep the whole
//!   buffer alive for one small message.

use bytes::Bytes;

/// Frames this long or longer are read into an allocation of their own
/// (exactly the frame) instead of the shared buffer, so the message in them
/// can be kept without a copy. Smaller ones are copied when kept: their
/// copy costs less than the read a frame of its own takes (the header is
/// read first, then the rest into the new allocation), and a slice of the
/// shared buffer would pin all of it.
pub const OWN_FRAME: usize = 8 << 10;

/// At most how much a kept slice may hold alive beyond its own octets, as a
/// fraction of them: one eighth.
const SLACK_SHIFT: u32 = 3;

/// A Bridge payload, opened in place, for the length of one
/// [`super::BridgeSink::frame`] call. Read it as a slice; keep a part of
/// it with [`Payload::keep`].
#[derive(Clone, Copy, Debug)]
pub struct Payload<'a> {
    octets: &'a [u8],
    /// The allocation the payload lies in, when it holds this one frame and
    /// nothing else; `None`: a shared buffer.
    frame: Option<&'a Bytes>,
}

impl<'a> Payload<'a> {
    /// A payload in a buffer that others share (or a borrowed one): what is
    /// kept of it is copied.
    pub fn shared(octets: &'a [u8]) -> Self {
        Self {
            octets,
            frame: None,
        }
    }

    /// A payload inside `frame`, an allocation that holds this frame alone.
    /// `octets` is a part of `frame` (else what is kept is copied).
    pub fn in_frame(frame: &'a Bytes, octets: &'a [u8]) -> Self {
        Self {
            octets,
            frame: Some(frame),
        }
    }

    /// The payload's octets.
    pub fn octets(&self) -> &'a [u8] {
        self.octets
    }

    /// `part` (a part of this payload) as `Bytes` that hold alive at most
    /// `part.len() * 9 / 8` octets: a slice of the frame's own allocation
    /// when the part is nearly all of it, a copy of exactly `part` otherwise
    /// (a shared buffer, a small part, or `part` not inside the frame).
    pub fn keep(&self, part: &[u8]) -> Bytes {
        if let Some(frame) = self.frame
            && within(frame, part)
            && frame.len() - part.len() <= part.len() >> SLACK_SHIFT
        {
            return frame.slice_ref(part);
        }
        Bytes::copy_from_slice(part)
    }
}

impl std::ops::Deref for Payload<'_> {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        self.octets
    }
}

/// Whether `part` lies inside `whole`'s octets (by address).
fn within(whole: &[u8], part: &[u8]) -> bool {
    let (start, end) = (
        whole.as_ptr() as usize,
        whole.as_ptr() as usize + whole.len(),
    );
    let p = part.as_ptr() as usize;
    p >= start && p + part.len() <= end
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether `kept` shares `frame`'s allocation (it lies inside it).
    fn shares(frame: &Bytes, kept: &Bytes) -> bool {
        !kept.is_empty() && within(frame, kept)
    }

    #[test]
    fn a_large_part_of_its_own_frame_is_kept_without_a_copy() {
        let frame = Bytes::from(vec![7u8; 20_000]);
        let payload = Payload::in_frame(&frame, &frame[36..frame.len() - 16]);
        // The message: all of the payload but a 200-octet envelope.
        let part = &payload[200..];
        let kept = payload.keep(part);
        assert_eq!(&kept[..], part);
        assert!(shares(&frame, &kept), "sliced, not copied");
        assert!(frame.len() - kept.len() <= kept.len() / 8);
    }

    #[test]
    fn a_small_message_never_pins_a_large_buffer() {
        // In an allocation of its own, but a small part of it: copied.
        let frame = Bytes::from(vec![7u8; 20_000]);
        let payload = Payload::in_frame(&frame, &frame[36..frame.len() - 16]);
        let small = payload.keep(&payload[..100]);
        assert_eq!(small.len(), 100);
        assert!(!shares(&frame, &small), "copied");
        // Just under 8/9 of the allocation: copied; at it: sliced.
        let edge = frame.len() * 8 / 9;
        assert!(!shares(&frame, &payload.keep(&frame[..edge - 1])));
        assert!(shares(&frame, &payload.keep(&frame[..edge + 1])));
        // In a shared buffer, however large: copied.
        let buffer = vec![7u8; 64 << 10];
        let kept = Payload::shared(&buffer).keep(&buffer[..60 << 10]);
        assert_eq!(kept.len(), 60 << 10);
        assert!(!within(&buffer, &kept), "copied out of the shared buffer");
        // Not inside the frame it names: copied, no panic.
        let elsewhere = [1u8; 10];
        let kept = Payload::in_frame(&frame, &frame[..]).keep(&elsewhere);
        assert_eq!(&kept[..], &elsewhere);
    }
}
