//! A Bridge payload as the driver hands it to its sink ([`Payload`]), and
//! the one rule for keeping part of it past the call ([`Payload::keep`]).
//!
//! A payload is opened in place where it was read: in the reader's shared
//! buffer (up to 64 KiB, reused read after read, holding many frames), or,
//! for a frame of [`OWN_FRAME`] octets or more, in an allocation of its own
//! that holds that frame and nothing else, its tag apart (`frames.rs`: the
//! plaintext ends the allocation). What a sink keeps is charged by its own
//! length (the byte budgets count the message's octets), so a kept `Bytes`
//! must not hold alive much more than that:
//!
//! - in an allocation of its own, a part that ends it and is nearly all of
//!   it (at least 8/9: the header and envelope before a large message) is
//!   that allocation, handed on: no copy, and no allocation either;
//! - otherwise (the shared buffer, or a small part of a large frame) the
//!   part is copied, then and only then: a slice would keep the whole
//!   buffer alive for one small message.

use bytes::{Buf, Bytes};

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

/// A Bridge payload, opened in place, handed to
/// [`super::BridgeSink::frame`]. Read it as a slice ([`Payload::octets`]);
/// keep a part of it with [`Payload::keep`], which gives the payload up.
#[derive(Debug)]
pub struct Payload<'a>(Place<'a>);

#[derive(Debug)]
enum Place<'a> {
    /// In a buffer that others share (or a borrowed one).
    Shared(&'a [u8]),
    /// `frame[at..]`: a large frame's plaintext, in the frame's own
    /// allocation, which it ends (the tag was read apart).
    Own { frame: Bytes, at: usize },
}

impl<'a> Payload<'a> {
    /// A payload in a buffer that others share (or a borrowed one): what is
    /// kept of it is copied.
    pub fn shared(octets: &'a [u8]) -> Self {
        Self(Place::Shared(octets))
    }

    /// The payload `frame[payload]`, in `frame`, an allocation that holds
    /// this one frame (without its tag) and nothing else, as
    /// [`super::frames::FrameReader::take_own`] hands it on: the plaintext
    /// ends it (were anything after it, it would be let go of first).
    pub fn own(mut frame: Bytes, payload: std::ops::Range<usize>) -> Payload<'static> {
        if payload.end < frame.len() {
            frame.truncate(payload.end);
        }
        let at = payload.start.min(frame.len());
        Payload(Place::Own { frame, at })
    }

    /// The payload's octets.
    pub fn octets(&self) -> &[u8] {
        match &self.0 {
            Place::Shared(octets) => octets,
            Place::Own { frame, at } => &frame[*at..],
        }
    }

    /// The octets `part` of [`Payload::octets`] as `Bytes` of their own,
    /// holding alive at most `part.len() * 9 / 8` octets; the payload is
    /// given up for them. When `part` ends a frame's own allocation and is
    /// nearly all of it (a large message: the last thing in a Bridge
    /// payload, after a header and envelope), that allocation itself,
    /// advanced to the part's start: no copy and no allocation (it is
    /// moved, not shared, so the `bytes` crate needs no reference count).
    /// Otherwise a copy of exactly `part`: a part of a shared buffer, a
    /// small part, or one that does not end the frame. Empty when `part` is
    /// not inside the payload.
    pub fn keep(self, part: std::ops::Range<usize>) -> Bytes {
        match self.0 {
            Place::Own { mut frame, at }
                if at.checked_add(part.end) == Some(frame.len())
                    && part.start <= part.end
                    && at + part.start <= (part.end - part.start) >> SLACK_SHIFT =>
            {
                frame.advance(at + part.start);
                frame
            }
            _ => self
                .octets()
                .get(part)
                .map_or_else(Bytes::new, Bytes::copy_from_slice),
        }
    }
}

impl std::ops::Deref for Payload<'_> {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        self.octets()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A large frame's allocation (20 000 octets) and a payload in it after
    /// a 36-octet header.
    fn own() -> (Payload<'static>, std::ops::Range<usize>) {
        let frame = Bytes::from(vec![7u8; 20_000]);
        let range = frame.as_ptr() as usize..frame.as_ptr() as usize + frame.len();
        (Payload::own(frame, 36..20_000), range)
    }

    /// Whether `kept` lies inside the allocation `range`.
    fn inside(range: &std::ops::Range<usize>, kept: &Bytes) -> bool {
        let p = kept.as_ptr() as usize;
        !kept.is_empty() && range.contains(&p) && p + kept.len() <= range.end
    }

    #[test]
    fn a_message_that_ends_its_frame_is_kept_as_the_frame_itself() {
        let (payload, range) = own();
        assert_eq!(payload.octets().len(), 20_000 - 36);
        // The message: all of the payload but a 264-octet envelope.
        let kept = payload.keep(264..20_000 - 36);
        assert_eq!(kept.len(), 20_000 - 300);
        assert!(inside(&range, &kept), "the frame's own octets");
        assert_eq!(kept.as_ptr() as usize, range.start + 300);
    }

    #[test]
    fn anything_else_is_copied_exactly() {
        let copied = |part: std::ops::Range<usize>| {
            let (payload, range) = own();
            let kept = payload.keep(part.clone());
            assert_eq!(kept.len(), part.len());
            !inside(&range, &kept)
        };
        let end = 20_000 - 36;
        // Not at the end: copied.
        assert!(copied(264..end - 16));
        // At the end, but under 8/9 of the frame: copied; at it: not.
        let edge = 20_000 / 9 - 36;
        assert!(copied(edge + 1..end));
        assert!(!copied(edge - 1..end));
        // A small part: copied.
        assert!(copied(end - 100..end));
        // In a shared buffer, however large: copied.
        let buffer = vec![7u8; 64 << 10];
        let kept = Payload::shared(&buffer).keep(4 << 10..buffer.len());
        assert_eq!(kept.len(), 60 << 10);
        assert!(!inside(
            &(buffer.as_ptr() as usize..buffer.as_ptr() as usize + buffer.len()),
            &kept
        ));
        // Outside the payload, or backwards: empty, no panic.
        assert!(own().0.keep(300..end + 1).is_empty());
        assert!(own().0.keep(end + 1..end + 1).is_empty());
        let backwards = std::ops::Range {
            start: 400,
            end: 300,
        };
        assert!(own().0.keep(backwards).is_empty());
        assert!(own().0.keep(0..usize::MAX).is_empty());
    }
}
