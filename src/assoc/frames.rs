//! Whole frames off a stream: [`FrameReader`], one reused buffer per stream
//! (and an allocation of its own for each large frame), frames opened in
//! place where they were read.

use std::time::Instant;

use bytes::{BufMut, Bytes};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite};

use super::error::LinkError;
use super::payload::OWN_FRAME;
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

// A frame that does not fit the busy buffer is read into its own
// allocation, so the shared buffer never grows past the busy size.
const _: () = assert!(OWN_FRAME <= READ_BUFFER_BUSY);

/// Largest frame payload a peer may send before it is authenticated: the
/// handshake's frames are a few KiB (an ML-KEM-768 encapsulation key is
/// 1184 octets), so an unauthenticated peer cannot make a reader buffer a
/// megabyte.
pub const HANDSHAKE_MAX_PAYLOAD: u32 = 64 << 10;

/// Reads whole frames from a stream into one reused buffer, and large ones
/// into an allocation of their own.
///
/// Frames are handed out as places ([`Taken`]) in that buffer
/// ([`FrameReader::take`]), opened in place there, and stay valid until the
/// next read ([`FrameReader::fill`] or [`FrameReader::next`]), which may move
/// the octets not yet taken to the front. The buffer starts small and grows
/// while reads keep filling it (up to 64 KiB) or when one frame needs more.
///
/// A frame of [`OWN_FRAME`] octets or more whose header is in view before
/// the rest of it is read into an allocation of exactly its length instead
/// (the octets of it already buffered are moved there, as they would have
/// been moved to the front): [`FrameReader::take_own`] hands it on as
/// `Bytes`, so what is kept of it is not copied again ([`super::payload`]).
/// After such a frame the reader reads the next header on its own first,
/// so that a stream of large frames lands each in its own allocation; a
/// small frame then reads as before, many in one read.
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
    /// A large frame being read into its own allocation (capacity: exactly
    /// the frame), or read whole and not yet taken; empty when none.
    own: Vec<u8>,
    /// The frame `own` is for: its header and length.
    own_span: Option<FrameSpan>,
    /// The large frame taken since the last read, until handed on.
    taken: Vec<u8>,
    /// The last frame taken was large: read the next header alone.
    header_first: bool,
}

/// Where a frame taken from a [`FrameReader`] lies.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Taken {
    /// These octets of the shared buffer.
    Shared(std::ops::Range<usize>),
    /// The large frame in its own allocation ([`FrameReader::take_own`]).
    Own,
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
            own: Vec::new(),
            own_span: None,
            taken: Vec::new(),
            header_first: false,
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
        if let Some(span) = self.deframer.span(&self.buf[self.start..self.end])? {
            return Ok(Some(span));
        }
        Ok(self.own_span.filter(|s| self.own.len() == s.len))
    }

    /// Takes the frame `peek` returned; its octets are `frame_mut(&taken)`.
    pub fn take(&mut self, span: &FrameSpan) -> Taken {
        self.header_first = span.len >= OWN_FRAME;
        if self.start < self.end {
            let range = self.start..self.start + span.len;
            self.start = range.end;
            return Taken::Shared(range);
        }
        self.own_span = None;
        self.taken = std::mem::take(&mut self.own);
        Taken::Own
    }

    /// The octets of a frame taken since the last read.
    pub fn frame_mut(&mut self, taken: &Taken) -> &mut [u8] {
        match taken {
            Taken::Shared(range) => &mut self.buf[range.clone()],
            Taken::Own => &mut self.taken,
        }
    }

    /// Octets of the shared buffer, of frames taken since the last read.
    pub fn octets(&self, range: std::ops::Range<usize>) -> &[u8] {
        &self.buf[range]
    }

    /// Hands on the large frame taken since the last read (empty if none):
    /// its own allocation, exactly the frame, without a copy.
    pub fn take_own(&mut self) -> Bytes {
        // Capacity is exactly the length (`Vec::with_capacity`, filled to
        // it), so this neither reallocates nor copies.
        Bytes::from(std::mem::take(&mut self.taken).into_boxed_slice())
    }

    /// The next frame already in the buffer, without reading.
    pub fn buffered(&mut self) -> Result<Option<(Header, &mut [u8])>, LinkError> {
        match self.peek()? {
            Some(span) => {
                let taken = self.take(&span);
                Ok(Some((span.header, self.frame_mut(&taken))))
            }
            None => Ok(None),
        }
    }

    /// Reads until a whole frame is buffered: `true`, or `false` at a clean
    /// end of stream between frames. Cancel-safe: a read that does not
    /// complete consumes nothing.
    pub async fn fill(&mut self) -> Result<bool, LinkError> {
        // A large frame taken and not handed on is dropped now.
        self.taken = Vec::new();
        loop {
            if self.peek()?.is_some() {
                return Ok(true);
            }
            if let Some(span) = self.own_span {
                // The rest of a large frame, straight into its allocation
                // (`own` has room for exactly the frame: reads stop there).
                let room = span.len - self.own.len();
                let n = self
                    .inner
                    .read_buf(&mut (&mut self.own).limit(room))
                    .await?;
                if n == 0 {
                    return Err(LinkError::TruncatedFrame);
                }
                self.read_at = Instant::now();
                continue;
            }
            if self.start > 0 {
                self.buf.copy_within(self.start..self.end, 0);
                self.end -= self.start;
                self.start = 0;
            }
            let next = Header::decode_prefix(&self.buf[..self.end]).ok().flatten();
            // `peek` checked the header against the limit: the frame may be
            // that long.
            let frame = next.map_or(0, |h| crate::wire::HEADER_LEN + h.payload_len as usize);
            if let Some(header) = next.filter(|_| frame >= OWN_FRAME) {
                let mut own = Vec::with_capacity(frame);
                own.extend_from_slice(&self.buf[..self.end]);
                self.own = own;
                self.own_span = Some(FrameSpan { header, len: frame });
                self.end = 0;
                continue;
            }
            if self.end == self.buf.len() {
                // Room for the whole frame whose header is in view (smaller
                // than `OWN_FRAME`, so never past the busy size), else twice
                // the room. Never past the deframer's limit: it refused
                // larger headers.
                let double = (self.buf.len() * 2).min(self.deframer.max_frame_len());
                self.buf.resize(frame.max(double).max(self.end + 1), 0);
            }
            // After a large frame, the next header alone: if it is large
            // too, its octets go straight into its own allocation.
            let want = if self.header_first && self.end < crate::wire::HEADER_LEN {
                crate::wire::HEADER_LEN
            } else {
                self.buf.len()
            };
            let n = self.inner.read(&mut self.buf[self.end..want]).await?;
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
        // Frames larger than that are read into allocations of their own;
        // the shared buffer stays as it was.
        let mut reader = FrameReader::new(Box::new(std::io::Cursor::new(frames(3, 3 << 20))));
        reader.set_max_payload(4 << 20);
        let mut sizes = Vec::new();
        while let Some((_, frame)) = reader.next().await.expect("frame") {
            sizes.push((frame.len(), reader.buf.len()));
        }
        assert_eq!(sizes.len(), 3);
        for (frame, buf) in sizes {
            assert!(
                frame > 3 << 20 && buf <= READ_BUFFER_BUSY,
                "{frame} in {buf}"
            );
        }
        assert!(reader.fill().await.is_ok_and(|more| !more));
        assert!(reader.buf.len() <= READ_BUFFER_BUSY);
    }

    /// A stream that logs the size of every read it is asked for.
    struct Logged {
        data: std::io::Cursor<Vec<u8>>,
        asked: std::sync::Arc<std::sync::Mutex<Vec<usize>>>,
    }

    impl tokio::io::AsyncRead for Logged {
        fn poll_read(
            mut self: std::pin::Pin<&mut Self>,
            cx: &mut std::task::Context<'_>,
            buf: &mut tokio::io::ReadBuf<'_>,
        ) -> std::task::Poll<std::io::Result<()>> {
            self.asked.lock().expect("log").push(buf.remaining());
            std::pin::Pin::new(&mut self.data).poll_read(cx, buf)
        }
    }

    #[tokio::test]
    async fn large_frames_land_in_allocations_of_their_own() {
        // Small, large, large, small, small, large: as one stream.
        let lens = [100, 20_000, 9_000, 300, 40, 70_000];
        let data: Vec<u8> = lens.iter().flat_map(|&len| frames(1, len)).collect();
        let asked = std::sync::Arc::default();
        let stream = Logged {
            data: std::io::Cursor::new(data),
            asked: std::sync::Arc::clone(&asked),
        };
        let mut reader = FrameReader::authenticated(Box::new(stream), 1 << 20);
        for &len in &lens {
            let frame_len = crate::wire::HEADER_LEN + len + crate::record::TAG_LEN;
            assert!(reader.fill().await.expect("frame"));
            let span = reader.peek().expect("header").expect("a whole frame");
            assert_eq!(span.len, frame_len);
            let taken = reader.take(&span);
            assert_eq!(reader.frame_mut(&taken).len(), frame_len);
            let own = reader.take_own();
            if len < OWN_FRAME {
                assert!(matches!(taken, Taken::Shared(_)), "{len}: {taken:?}");
                assert!(own.is_empty());
            } else {
                // The frame and nothing else: no shared buffer behind it.
                assert_eq!(taken, Taken::Own, "{len}");
                assert_eq!(own.len(), frame_len);
            }
        }
        assert!(!reader.fill().await.expect("clean end"));
        // The first read fills the small starting buffer; the large frame in
        // it has its header in view, so its rest is read into its own
        // allocation (exactly what is missing). After a large frame the
        // next header is read alone (36 octets).
        let asked = asked.lock().expect("log").clone();
        assert_eq!(asked[0], READ_BUFFER_START, "{asked:?}");
        assert!(asked.contains(&crate::wire::HEADER_LEN), "{asked:?}");
        // Doubled by reads that filled it, never grown to a large frame.
        assert!(
            reader.buf.len() <= 4 * READ_BUFFER_START,
            "{}",
            reader.buf.len()
        );
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
