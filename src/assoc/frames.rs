//! Whole frames off a stream: [`FrameReader`], one reused buffer per stream,
//! frames opened in place where they were read.

use std::time::Instant;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite};

use super::error::LinkError;
use crate::wire::{Deframer, FrameSpan, Header};

/// A boxed read half of a stream (QUIC receive stream or TLS read half).
pub type BoxRead = Box<dyn AsyncRead + Send + Unpin>;
/// A boxed write half of a stream.
pub type BoxWrite = Box<dyn AsyncWrite + Send + Unpin>;

/// The read buffer a stream starts with: enough for the handshake and for a
/// quiet association (a gateway may hold one per client session).
const READ_BUFFER_START: usize = 4 << 10;
/// What a busy stream's buffer grows to (doubling each time a read fills
/// it), so that one read takes many frames.
const READ_BUFFER_BUSY: usize = 64 << 10;

/// Largest frame payload a peer may send before it is authenticated: the
/// handshake's frames are a few KiB (an ML-KEM-768 encapsulation key is
/// 1184 octets), so an unauthenticated peer cannot make a reader buffer a
/// megabyte.
pub const HANDSHAKE_MAX_PAYLOAD: u32 = 64 << 10;

/// Reads whole frames from a stream into one reused buffer.
///
/// Frames are handed out as ranges of that buffer ([`FrameReader::take`]),
/// opened in place there, and stay valid until the next read
/// ([`FrameReader::fill`] or [`FrameReader::next`]), which may move the
/// octets not yet taken to the front. The buffer starts small and grows
/// while reads keep filling it (up to 64 KiB) or when one
/// frame needs more (up to the frame limit); once such a large frame has
/// been taken, it shrinks back.
///
/// A new reader accepts frames up to [`HANDSHAKE_MAX_PAYLOAD`]; the
/// association raises that with [`FrameReader::set_max_payload`] once the
/// peer is authenticated.
pub struct FrameReader {
    inner: BoxRead,
    buf: Vec<u8>,
    start: usize,
    end: usize,
    deframer: Deframer,
    /// When the last read returned: the arrival time of what it read (one
    /// clock read per read, not per frame).
    read_at: Instant,
}

impl FrameReader {
    pub fn new(inner: BoxRead) -> Self {
        Self {
            inner,
            buf: vec![0; READ_BUFFER_START],
            start: 0,
            end: 0,
            deframer: Deframer::new(HANDSHAKE_MAX_PAYLOAD),
            read_at: Instant::now(),
        }
    }

    /// A reader for a stream opened after the handshake: frames up to
    /// `max_payload_len`.
    pub fn authenticated(inner: BoxRead, max_payload_len: u32) -> Self {
        let mut reader = Self::new(inner);
        reader.set_max_payload(max_payload_len);
        reader
    }

    /// The largest frame payload accepted from now on.
    pub fn set_max_payload(&mut self, max_payload_len: u32) {
        self.deframer = Deframer::new(max_payload_len);
    }

    /// When the octets read last arrived.
    pub fn read_at(&self) -> Instant {
        self.read_at
    }

    /// The header of the next whole frame already buffered, without taking
    /// it (the header is checked: a bad one is an error).
    pub fn peek(&self) -> Result<Option<FrameSpan>, LinkError> {
        Ok(self.deframer.span(&self.buf[self.start..self.end])?)
    }

    /// Takes the frame `peek` returned; its octets are `frame_mut(range)`.
    pub fn take(&mut self, span: &FrameSpan) -> std::ops::Range<usize> {
        let range = self.start..self.start + span.len;
        self.start = range.end;
        range
    }

    /// The octets of a frame taken since the last read.
    pub fn frame_mut(&mut self, range: std::ops::Range<usize>) -> &mut [u8] {
        &mut self.buf[range]
    }

    /// The octets of a frame taken since the last read.
    pub fn octets(&self, range: std::ops::Range<usize>) -> &[u8] {
        &self.buf[range]
    }

    /// The next frame already in the buffer, without reading.
    pub fn buffered(&mut self) -> Result<Option<(Header, &mut [u8])>, LinkError> {
        match self.peek()? {
            Some(span) => {
                let range = self.take(&span);
                Ok(Some((span.header, &mut self.buf[range])))
            }
            None => Ok(None),
        }
    }

    /// Reads until a whole frame is buffered: `true`, or `false` at a clean
    /// end of stream between frames. Cancel-safe: a read that does not
    /// complete consumes nothing.
    pub async fn fill(&mut self) -> Result<bool, LinkError> {
        loop {
            if self.peek()?.is_some() {
                return Ok(true);
            }
            if self.start > 0 {
                self.buf.copy_within(self.start..self.end, 0);
                self.end -= self.start;
                self.start = 0;
            }
            if self.buf.len() > READ_BUFFER_BUSY && self.end <= READ_BUFFER_BUSY / 2 {
                // The large frame that grew the buffer is gone: give the
                // memory back rather than keep it for the association's life.
                self.buf.truncate(READ_BUFFER_BUSY);
                self.buf.shrink_to_fit();
            }
            if self.end == self.buf.len() {
                // Room for the whole frame whose header is in view (at once,
                // not by doubling: a large frame is not copied over and over),
                // else twice the room. Never past the deframer's limit: it
                // refused larger headers.
                let frame = Header::decode_prefix(&self.buf[..self.end])
                    .ok()
                    .flatten()
                    .map_or(0, |h| crate::wire::HEADER_LEN + h.payload_len as usize);
                let double = (self.buf.len() * 2).min(self.deframer.max_frame_len());
                self.buf.resize(frame.max(double).max(self.end + 1), 0);
            }
            let n = self.inner.read(&mut self.buf[self.end..]).await?;
            if n == 0 {
                return if self.end == 0 {
                    Ok(false)
                } else {
                    Err(LinkError::TruncatedFrame)
                };
            }
            self.read_at = Instant::now();
            self.end += n;
            if self.end == self.buf.len() && self.buf.len() < READ_BUFFER_BUSY {
                // The stream had more than fitted: a busy one.
                self.buf.resize(self.buf.len() * 2, 0);
            }
        }
    }

    /// The next frame, opened in place by the caller; `None` at a clean end
    /// of stream between frames.
    pub async fn next(&mut self) -> Result<Option<(Header, &mut [u8])>, LinkError> {
        if !self.fill().await? {
            return Ok(None);
        }
        self.buffered()
    }

    pub(super) async fn next_owned(&mut self) -> Result<Vec<u8>, LinkError> {
        match self.next().await? {
            Some((_, frame)) => Ok(frame.to_vec()),
            None => Err(LinkError::EarlyEof),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{ChannelId, WireError};

    /// `n` sealed frames of `len` plaintext octets, back to back.
    fn frames(n: u64, len: usize) -> Vec<u8> {
        let keys =
            crate::record::TrafficKeys::new(crate::record::Suite::AES_256_GCM, &[7; 32], &[9; 12])
                .expect("keys");
        let mut out = Vec::new();
        for seq in 0..n {
            keys.seal_frame_into(
                &mut out,
                crate::wire::Flags::NONE,
                crate::wire::FrameType(0x0100),
                ChannelId::BRIDGE,
                seq,
                |b| b.resize(b.len() + len, 0x5A),
            )
            .expect("seal");
        }
        out
    }

    async fn read_all(stream: Vec<u8>) -> (u64, usize) {
        let mut reader = FrameReader::new(Box::new(std::io::Cursor::new(stream)));
        let mut count = 0;
        while reader.next().await.expect("frame").is_some() {
            count += 1;
        }
        (count, reader.buf.len())
    }

    #[tokio::test]
    async fn the_read_buffer_stays_small_when_quiet_and_grows_when_busy() {
        // A handshake-sized exchange fits the starting buffer.
        assert_eq!(read_all(frames(3, 1000)).await, (3, READ_BUFFER_START));
        // A stream that keeps filling the buffer doubles it up to the busy size.
        assert_eq!(read_all(frames(400, 300)).await, (400, READ_BUFFER_BUSY));
        // One frame larger than that grows it as far as the frame needs,
        // and once it is taken the buffer shrinks back.
        let mut reader = FrameReader::new(Box::new(std::io::Cursor::new(frames(3, 3 << 20))));
        reader.set_max_payload(4 << 20);
        let mut sizes = Vec::new();
        while let Some((_, frame)) = reader.next().await.expect("frame") {
            sizes.push((frame.len(), reader.buf.len()));
        }
        assert_eq!(sizes.len(), 3);
        for (frame, buf) in sizes {
            assert!(
                frame > 3 << 20 && buf >= frame && buf < 7 << 20,
                "{frame} in {buf}"
            );
        }
        assert!(reader.fill().await.is_ok_and(|more| !more));
        assert_eq!(reader.buf.len(), READ_BUFFER_BUSY);
    }

    /// Hands out a byte stream in reads of the given sizes (cycled), as a
    /// socket would: frames split anywhere, several in one read.
    struct Chunked {
        data: Vec<u8>,
        at: usize,
        sizes: Vec<usize>,
        next: usize,
    }

    impl tokio::io::AsyncRead for Chunked {
        fn poll_read(
            mut self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
            buf: &mut tokio::io::ReadBuf<'_>,
        ) -> std::task::Poll<std::io::Result<()>> {
            let size = self.sizes[self.next % self.sizes.len()];
            self.next += 1;
            let n = size.min(buf.remaining()).min(self.data.len() - self.at);
            let at = self.at;
            buf.put_slice(&self.data[at..at + n]);
            self.at += n;
            std::task::Poll::Ready(Ok(()))
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(48))]
        /// Against the oracle of the frames as written: whatever their sizes
        /// (a few past the busy buffer) and however the reads cut the
        /// stream, every frame comes out whole and in order, the buffer
        /// never holds much more than the largest frame needs, and it is
        /// back to the busy size at the end.
        #[test]
        fn frames_come_out_whole_however_reads_cut_them(
            lens in proptest::collection::vec(
                proptest::prop_oneof![4 => 0usize..2000, 1 => 60_000usize..300_000],
                1..12,
            ),
            sizes in proptest::collection::vec(
                proptest::prop_oneof![1usize..64, 64usize..5000, 5000usize..200_000],
                1..8,
            ),
        ) {
            let written: Vec<Vec<u8>> = lens.iter().map(|&len| frames(1, len)).collect();
            let largest = written.iter().map(Vec::len).max().unwrap_or(0);
            let data = written.concat();
            let rt = tokio::runtime::Builder::new_current_thread().build().expect("runtime");
            rt.block_on(async {
                let stream = Chunked { data, at: 0, sizes, next: 0 };
                let mut reader = FrameReader::authenticated(Box::new(stream), 1 << 20);
                for want in &written {
                    let (_, got) = reader.next().await.expect("frame").expect("not the end");
                    proptest::prop_assert_eq!(&got[..], &want[..]);
                    let bound = (2 * largest).max(READ_BUFFER_BUSY);
                    proptest::prop_assert!(reader.buf.len() <= bound, "{} > {}", reader.buf.len(), bound);
                }
                proptest::prop_assert!(reader.next().await.expect("clean end").is_none());
                proptest::prop_assert!(reader.buf.len() <= READ_BUFFER_BUSY);
                Ok(())
            })?;
        }
    }

    #[tokio::test]
    async fn frames_over_the_limit_are_refused_before_buffering() {
        // Before the handshake a peer may send no more than 64 KiB a frame.
        let mut reader = FrameReader::new(Box::new(std::io::Cursor::new(frames(1, 100 << 10))));
        assert!(matches!(
            reader.next().await,
            Err(LinkError::Wire(WireError::PayloadTooLarge { limit, .. })) if limit == HANDSHAKE_MAX_PAYLOAD
        ));
        assert!(
            reader.buf.len() <= 2 * READ_BUFFER_START,
            "{}",
            reader.buf.len()
        );
        // Once it is authenticated, up to the association's limit.
        let stream = frames(1, 100 << 10);
        let mut reader =
            FrameReader::authenticated(Box::new(std::io::Cursor::new(stream)), 1 << 20);
        assert!(reader.next().await.expect("frame").is_some());
    }
}
