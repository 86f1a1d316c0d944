//! Whole frames off a stream: [`FrameReader`], one reused buffer per stream
//! (and an allocation of its own for each large frame), frames opened in
//! place where they were read.

use std::time::Instant;

use bytes::{BufMut, Bytes};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite};

use super::error::LinkError;
use super::payload::OWN_FRAME;
use crate::record::{Sealed, TAG_LEN};
use crate::wire::{Deframer, FrameSpan, HEADER_LEN, Header};

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
// allocation, so the shared buffer never grows past the busy size. Such a
// frame is longer than a header and a tag.
const _: () = assert!(OWN_FRAME <= READ_BUFFER_BUSY && OWN_FRAME > HEADER_LEN + TAG_LEN);

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
/// while reads keep filling it, up to 64 KiB (frames of [`OWN_FRAME`] or more
/// go elsewhere, so it holds many small ones, or the start of a large one).
///
/// A frame of [`OWN_FRAME`] octets or more whose header is in view before
/// the rest of it is read into an allocation of exactly its header and
/// ciphertext instead, and its tag into an array apart (the octets of it
/// already buffered are moved there, as they would have been moved to the
/// front): [`FrameReader::sealed`] gives it as [`Sealed::Split`], so that
/// the plaintext, opened in place, ends the allocation, and
/// [`FrameReader::take_own`] hands the allocation on as `Bytes`, so what is
/// kept of it is not copied again ([`super::payload`]). After such a
/// frame's ciphertext the reader reads its tag and the next header, no
/// more, so that a stream of large frames lands each in its own
/// allocation; a small frame then reads as before, many in one read.
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
    /// its header and ciphertext), or read whole and not yet taken; empty
    /// when none.
    own: Vec<u8>,
    /// The tag of the frame in `own`, and how many of its octets are in.
    own_tag: ([u8; TAG_LEN], usize),
    /// The frame `own` is for: its header and length (the tag included).
    own_span: Option<FrameSpan>,
    /// The large frame taken since the last read, until handed on, and its
    /// tag.
    taken: Vec<u8>,
    taken_tag: [u8; TAG_LEN],
    /// The last frame taken was large: read the next header alone.
    header_first: bool,
}

/// Where a frame taken from a [`FrameReader`] lies.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Taken {
    /// These octets of the shared buffer.
    Shared(std::ops::Range<usize>),
    /// The large frame in its own allocation, its tag apart
    /// ([`FrameReader::take_own`]).
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
            own_tag: ([0; TAG_LEN], 0),
            own_span: None,
            taken: Vec::new(),
            taken_tag: [0; TAG_LEN],
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
        // A large frame read whole comes first: the shared buffer holds
        // only what was read after it.
        if let Some(span) = self.own_whole() {
            return Ok(Some(span));
        }
        Ok(self.deframer.span(&self.buf[self.start..self.end])?)
    }

    /// The large frame in its own allocation, once all of it is in.
    fn own_whole(&self) -> Option<FrameSpan> {
        self.own_span
            .filter(|s| self.own.len() + TAG_LEN == s.len && self.own_tag.1 == TAG_LEN)
    }

    /// Takes the frame `peek` returned; its octets are `sealed(&taken)`.
    pub fn take(&mut self, span: &FrameSpan) -> Taken {
        self.header_first = span.len >= OWN_FRAME;
        if self.own_whole().is_some() {
            self.own_span = None;
            self.taken = std::mem::take(&mut self.own);
            self.taken_tag = self.own_tag.0;
            self.own_tag.1 = 0;
            return Taken::Own;
        }
        let range = self.start..self.start + span.len;
        self.start = range.end;
        Taken::Shared(range)
    }

    /// A frame taken since the last read, to open in place: whole, or (a
    /// large frame) with its tag apart.
    pub fn sealed(&mut self, taken: &Taken) -> Sealed<'_> {
        match taken {
            Taken::Shared(range) => Sealed::Whole(&mut self.buf[range.clone()]),
            Taken::Own => Sealed::Split(&mut self.taken, self.taken_tag),
        }
    }

    /// The octets of a frame taken since the last read: the whole frame,
    /// or of a large one all but its tag ([`FrameReader::sealed`] gives
    /// both).
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
    /// its own allocation, exactly its header and ciphertext (the plaintext
    /// once opened) without the tag, without a copy.
    pub fn take_own(&mut self) -> Bytes {
        // Capacity is exactly the length (`Vec::with_capacity`, filled to
        // it), so this neither reallocates nor copies.
        Bytes::from(std::mem::take(&mut self.taken).into_boxed_slice())
    }

    /// The next frame already in the buffer, without reading.
    pub fn buffered(&mut self) -> Result<Option<(Header, Sealed<'_>)>, LinkError> {
        match self.peek()? {
            Some(span) => {
                let taken = self.take(&span);
                Ok(Some((span.header, self.sealed(&taken))))
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
                let room = span.len - TAG_LEN - self.own.len();
                let n = if room > 0 {
                    // The rest of a large frame's ciphertext, straight into
                    // its allocation (room for exactly the header and the
                    // ciphertext: reads stop there).
                    self.inner
                        .read_buf(&mut (&mut self.own).limit(room))
                        .await?
                } else {
                    // The tag's missing octets, and the next header with
                    // them (as after any large frame), into the shared
                    // buffer (empty: all of it went to `own`); the tag's
                    // octets move to their array.
                    let missing = TAG_LEN - self.own_tag.1;
                    let n = self
                        .inner
                        .read(&mut self.buf[..missing + HEADER_LEN])
                        .await?;
                    let tag = n.min(missing);
                    let (have, at) = (self.own_tag.1, &mut self.own_tag.0);
                    at[have..have + tag].copy_from_slice(&self.buf[..tag]);
                    self.own_tag.1 += tag;
                    (self.start, self.end) = (tag, n);
                    n
                };
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
            let frame = next.map_or(0, |h| HEADER_LEN + h.payload_len as usize);
            if let Some(header) = next.filter(|_| frame >= OWN_FRAME) {
                // Not all of the frame is in view (`peek` found none): what
                // is goes to its allocation, and any of the tag to its array.
                let body = frame - TAG_LEN;
                let in_body = self.end.min(body);
                let mut own = Vec::with_capacity(body);
                own.extend_from_slice(&self.buf[..in_body]);
                let tag = self.end - in_body;
                self.own_tag.0[..tag].copy_from_slice(&self.buf[in_body..self.end]);
                self.own_tag.1 = tag;
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
            let want = if self.header_first && self.end < HEADER_LEN {
                HEADER_LEN
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
    pub async fn next(&mut self) -> Result<Option<(Header, Sealed<'_>)>, LinkError> {
        if !self.fill().await? {
            return Ok(None);
        }
        self.buffered()
    }

    /// The next frame, whole, copied (the handshake's).
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

    fn keys() -> crate::record::TrafficKeys {
        let suite = crate::record::Suite::AES_256_GCM;
        crate::record::TrafficKeys::new(suite, &[7; 32], &[9; 12]).expect("keys")
    }

    /// `n` sealed frames of `len` plaintext octets, back to back.
    fn frames(n: u64, len: usize) -> Vec<u8> {
        let keys = keys();
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
            sizes.push((frame.to_vec().len(), reader.buf.len()));
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
        let written: Vec<Vec<u8>> = lens.iter().map(|&len| frames(1, len)).collect();
        let asked = std::sync::Arc::default();
        let stream = Logged {
            data: std::io::Cursor::new(written.concat()),
            asked: std::sync::Arc::clone(&asked),
        };
        let keys = keys();
        let mut reader = FrameReader::authenticated(Box::new(stream), 1 << 20);
        for (&len, want) in lens.iter().zip(&written) {
            let frame_len = HEADER_LEN + len + TAG_LEN;
            assert!(reader.fill().await.expect("frame"));
            let span = reader.peek().expect("header").expect("a whole frame");
            assert_eq!(span.len, frame_len);
            let taken = reader.take(&span);
            let sealed = reader.sealed(&taken);
            assert_eq!(&sealed.to_vec(), want, "{len}");
            let base = sealed.octets().as_ptr_range();
            let plaintext = keys.open_sealed(&span.header, sealed);
            let plaintext = plaintext.expect("open").as_ptr_range();
            let own = reader.take_own();
            if len < OWN_FRAME {
                assert!(matches!(taken, Taken::Shared(_)), "{len}: {taken:?}");
                assert!(own.is_empty());
            } else {
                // The header and the ciphertext, and nothing else: no
                // shared buffer behind it, no tag after the plaintext, and
                // no room to spare (`Bytes` from it neither reallocates nor
                // copies: it is where it was read).
                assert_eq!(taken, Taken::Own, "{len}");
                assert_eq!(own.len(), frame_len - TAG_LEN);
                assert_eq!(own.as_ptr_range(), base);
                assert_eq!(plaintext.end, base.end, "{len}: the plaintext ends it");
            }
        }
        assert!(!reader.fill().await.expect("clean end"));
        // The first read fills the small starting buffer; the large frame in
        // it has its header in view, so its rest is read into its own
        // allocation (exactly what is missing of its ciphertext). After a
        // large frame's ciphertext its tag is read with the next header
        // (16 + 36 octets).
        let asked = asked.lock().expect("log").clone();
        assert_eq!(asked[0], READ_BUFFER_START, "{asked:?}");
        assert!(asked.contains(&(TAG_LEN + HEADER_LEN)), "{asked:?}");
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

    #[tokio::test]
    async fn octets_of_the_tag_already_buffered_go_to_the_tag() {
        let keys = keys();
        let [ref large, ref next] = [frames(1, 9_000), frames(1, 10)];
        // The large frame's header is in view with all of it but `missing`
        // octets (a busy buffer has room for all of it): inside its tag,
        // just before it, or (none missing) the frame whole in the shared
        // buffer. Its rest, and the next frame, in reads of 7 octets.
        for missing in 0..=TAG_LEN + 2 {
            let stream = Chunked {
                data: [&large[..], &next[..]].concat(),
                at: 0,
                sizes: vec![large.len() - missing, 7],
                next: 0,
            };
            let mut reader = FrameReader::authenticated(Box::new(stream), 1 << 20);
            reader.buf.resize(READ_BUFFER_BUSY, 0);
            assert!(reader.fill().await.expect("frame"));
            let span = reader.peek().expect("header").expect("a whole frame");
            let taken = reader.take(&span);
            let sealed = reader.sealed(&taken);
            assert_eq!(&sealed.to_vec(), large, "{missing} missing");
            let whole = matches!(sealed, Sealed::Whole(_));
            assert_eq!(whole, missing == 0, "{missing} missing");
            let opened = keys.open_sealed(&span.header, sealed).expect("open");
            assert_eq!(opened, &[0x5A; 9_000][..]);
            if !whole {
                assert_eq!(reader.take_own().len(), large.len() - TAG_LEN);
            }
            let (_, got) = reader.next().await.expect("frame").expect("the next");
            assert_eq!(&got.to_vec(), next, "{missing} missing");
            assert!(reader.next().await.expect("clean end").is_none());
        }
    }

    #[tokio::test]
    async fn a_stream_that_ends_inside_a_tag_is_truncated() {
        let large = frames(1, 9_000);
        for cut in [
            large.len() - TAG_LEN - 1,
            large.len() - TAG_LEN,
            large.len() - 1,
        ] {
            let stream = std::io::Cursor::new(large[..cut].to_vec());
            let mut reader = FrameReader::authenticated(Box::new(stream), 1 << 20);
            assert!(
                matches!(reader.next().await, Err(LinkError::TruncatedFrame)),
                "cut at {cut}"
            );
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
                    proptest::prop_assert_eq!(&got.to_vec(), want);
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
