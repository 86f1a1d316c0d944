//! Newline-delimited JSON-RPC (TCP ingress, stdio, child processes): one
//! message per line, bounded in length.

use bytes::{Buf, Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// Reads lines of at most `max` octets; a longer line is an error (the
/// peer is not speaking line-delimited JSON-RPC, or is hostile), final
/// unless the reader was made with [`LineReader::skipping_long_lines`].
pub struct LineReader<R> {
    inner: R,
    buf: BytesMut,
    max: usize,
    /// Octets of `buf` already searched for a newline.
    searched: usize,
    /// Over-long lines are skipped (reported once each), not final.
    resync: bool,
    /// The over-long line being skipped: octets so far, and its head.
    skipping: Option<(usize, Bytes)>,
    /// A line begun must move on within this ([`LineReader::stalling`]).
    stall: Option<std::time::Duration>,
}

/// How much of a skipped line is kept ([`LineSkipped::head`]).
pub const SKIPPED_HEAD: usize = 1 << 10;

/// A line over the limit, skipped whole: the reader goes on with the next.
#[derive(Debug, thiserror::Error)]
#[error("a line of {len} octets, over the limit of {max}, was skipped")]
pub struct LineSkipped {
    pub len: usize,
    pub max: usize,
    /// Its first octets (at most [`SKIPPED_HEAD`]): enough to tell, often,
    /// which request a reply was for.
    pub head: Bytes,
}

impl LineSkipped {
    /// The skipped line an error from [`LineReader::next`] reports, if it
    /// is one (the reader is still usable).
    pub fn of(e: &std::io::Error) -> Option<&Self> {
        e.get_ref()?.downcast_ref()
    }
}

impl<R: AsyncRead + Unpin> LineReader<R> {
    pub fn new(inner: R, max: usize) -> Self {
        Self {
            inner,
            buf: BytesMut::with_capacity(8 << 10),
            max,
            searched: 0,
            resync: false,
            skipping: None,
            stall: None,
        }
    }

    /// The reader, with a line begun given up (a [`FramingLost`]
    /// error, final) when no octet of it comes for `stall`: a client that
    /// sends half a message and goes quiet holds no buffer past it.
    pub fn stalling(mut self, stall: std::time::Duration) -> Self {
        self.stall = Some(stall);
        self
    }

    /// A reader that skips a line over `max` (never holding more than `max`
    /// and one read of it) and reports it as a [`LineSkipped`] error, after
    /// which it reads on: for a party that is trusted to speak JSON-RPC
    /// lines but may send one message too large (an upstream's reply).
    pub fn skipping_long_lines(inner: R, max: usize) -> Self {
        Self {
            resync: true,
            ..Self::new(inner, max)
        }
    }

    /// A [`LineReader::skipping_long_lines`] whose first octets were read
    /// already, into `read` (to find the stream's framing).
    pub fn skipping_long_lines_after(inner: R, max: usize, read: BytesMut) -> Self {
        Self {
            buf: read,
            ..Self::skipping_long_lines(inner, max)
        }
    }

    /// The next non-empty line without its terminator (`\n` or `\r\n`);
    /// `None` at the end of the stream. A last line without a newline counts.
    pub async fn next(&mut self) -> std::io::Result<Option<Bytes>> {
        loop {
            if let Some((skipped, head)) = self.skipping.take() {
                match self.buf.iter().position(|&b| b == b'\n') {
                    Some(i) => {
                        self.buf.advance(i + 1);
                        return Err(self.skipped(skipped + i, head));
                    }
                    None => {
                        let n = self.buf.len();
                        self.buf.clear();
                        self.buf.reserve(8 << 10);
                        // Kept before the read: a read given up midway (a
                        // timeout around `next`) resumes the skip.
                        self.skipping = Some((skipped + n, head.clone()));
                        if self.read_more(true).await? == 0 {
                            self.skipping = None;
                            return Err(self.skipped(skipped + n, head));
                        }
                        continue;
                    }
                }
            }
            if let Some(i) = self.buf[self.searched..].iter().position(|&b| b == b'\n') {
                let end = self.searched + i;
                if end > self.max {
                    if self.resync {
                        let head = self.head(end);
                        self.buf.advance(end + 1);
                        self.searched = 0;
                        return Err(self.skipped(end, head));
                    }
                    return Err(too_long(self.max));
                }
                let mut line = self.buf.split_to(end + 1);
                self.searched = 0;
                line.truncate(end);
                if line.last() == Some(&b'\r') {
                    line.truncate(end - 1);
                }
                if line.iter().all(u8::is_ascii_whitespace) {
                    continue;
                }
                return Ok(Some(line.freeze()));
            }
            self.searched = self.buf.len();
            if self.buf.len() > self.max {
                if self.resync {
                    self.skipping = Some((self.buf.len(), self.head(self.buf.len())));
                    self.buf.clear();
                    self.searched = 0;
                    continue;
                }
                return Err(too_long(self.max));
            }
            self.buf.reserve(8 << 10);
            let midway = !self.buf.iter().all(u8::is_ascii_whitespace);
            if self.read_more(midway).await? == 0 {
                if self.buf.iter().all(u8::is_ascii_whitespace) {
                    return Ok(None);
                }
                self.searched = 0;
                return Ok(Some(self.buf.split().freeze()));
            }
        }
    }
}

impl<R: AsyncRead + Unpin> LineReader<R> {
    /// Reads more into the buffer, within the stall bound when a line is
    /// `midway`.
    async fn read_more(&mut self, midway: bool) -> std::io::Result<usize> {
        read_within(
            &mut self.inner,
            &mut self.buf,
            self.stall.filter(|_| midway),
        )
        .await
    }
}

/// One read of `inner` into `buf`; with `stall`, one that brings nothing
/// for that long is a [`FramingLost`] (kind `TimedOut`): the
/// message begun cannot be finished.
pub(crate) async fn read_within<R: AsyncRead + Unpin>(
    inner: &mut R,
    buf: &mut BytesMut,
    stall: Option<std::time::Duration>,
) -> std::io::Result<usize> {
    let Some(stall) = stall else {
        return inner.read_buf(buf).await;
    };
    match tokio::time::timeout(stall, inner.read_buf(buf)).await {
        Ok(read) => read,
        Err(_) => Err(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            FramingLost(format!(
                "no octet of a message begun came for {:.1} s (--stall-timeout)",
                stall.as_secs_f64()
            )),
        )),
    }
}

impl<R> LineReader<R> {
    /// The first octets of the `len`-octet line at the front of the buffer.
    fn head(&self, len: usize) -> Bytes {
        Bytes::copy_from_slice(&self.buf[..len.min(SKIPPED_HEAD)])
    }

    fn skipped(&self, len: usize, head: Bytes) -> std::io::Error {
        std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            LineSkipped {
                len,
                max: self.max,
                head,
            },
        )
    }
}

/// The framing of a stream is lost: what was read cannot be split into
/// messages any more, so the stream is given up (its peer told why, where it
/// can be).
#[derive(Debug, thiserror::Error)]
#[error("framing lost: {0}")]
pub struct FramingLost(pub String);

impl FramingLost {
    /// The lost framing an error from a stream reader reports, if it is one.
    pub fn of(e: &std::io::Error) -> Option<&Self> {
        e.get_ref()?.downcast_ref()
    }

    pub(crate) fn error(why: impl std::fmt::Display) -> std::io::Error {
        std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            FramingLost(why.to_string()),
        )
    }
}

fn too_long(max: usize) -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::InvalidData,
        format!("line longer than the limit of {max} octets"),
    )
}

/// Writes one message and its newline. JSON allows raw line breaks only as
/// whitespace between tokens (inside strings they must be escaped), so a
/// message with line breaks is written with spaces in their place: the
/// framing needs it, the meaning is unchanged.
pub async fn write_line<W: AsyncWrite + Unpin>(w: &mut W, text: &[u8]) -> std::io::Result<()> {
    if text.iter().any(|&b| b == b'\n' || b == b'\r') {
        let flat: Vec<u8> = text
            .iter()
            .map(|&b| if b == b'\n' || b == b'\r' { b' ' } else { b })
            .collect();
        w.write_all(&flat).await?;
    } else {
        w.write_all(text).await?;
    }
    w.write_all(b"\n").await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn splits_lines_skips_blank_ones_and_bounds_length() {
        let input: &[u8] = b"{\"a\":1}\r\n\n  \n{\"b\":2}\n{\"c\":3}";
        let mut r = LineReader::new(input, 64);
        assert_eq!(r.next().await.unwrap().as_deref(), Some(&b"{\"a\":1}"[..]));
        assert_eq!(r.next().await.unwrap().as_deref(), Some(&b"{\"b\":2}"[..]));
        assert_eq!(r.next().await.unwrap().as_deref(), Some(&b"{\"c\":3}"[..]));
        assert_eq!(r.next().await.unwrap(), None);

        let long = [b'x'; 100];
        let mut r = LineReader::new(&long[..], 64);
        assert!(r.next().await.is_err());
        let mut with_newline = [b'x'; 100];
        with_newline[99] = b'\n';
        let mut r = LineReader::new(&with_newline[..], 64);
        assert!(
            r.next().await.is_err(),
            "a whole over-long line in one read"
        );
    }

    /// Reads of at most `n` octets, as a pipe may give them.
    struct Trickle<'a>(&'a [u8], usize);

    impl tokio::io::AsyncRead for Trickle<'_> {
        fn poll_read(
            mut self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
            buf: &mut tokio::io::ReadBuf<'_>,
        ) -> std::task::Poll<std::io::Result<()>> {
            let n = self.1.min(self.0.len()).min(buf.remaining());
            buf.put_slice(&self.0[..n]);
            self.0 = &self.0[n..];
            std::task::Poll::Ready(Ok(()))
        }
    }

    #[tokio::test]
    async fn a_skipping_reader_reports_a_long_line_once_and_reads_on() {
        let mut input = b"{\"a\":1}\n".to_vec();
        input.extend(std::iter::repeat_n(b'x', 1000));
        input.extend(b"\n{\"b\":2}\n");
        input.extend(std::iter::repeat_n(b'y', 300));
        // In one read, in reads smaller than the limit, and in reads of
        // one octet: the same lines, the same skips.
        for chunk in [usize::MAX, 50, 1] {
            let mut r = LineReader::skipping_long_lines(Trickle(&input, chunk), 64);
            let mut seen = Vec::new();
            loop {
                match r.next().await {
                    Ok(Some(line)) => seen.push(String::from_utf8_lossy(&line).into_owned()),
                    Ok(None) => break,
                    Err(e) => {
                        let skipped = LineSkipped::of(&e).expect("only skips");
                        assert_eq!(skipped.max, 64);
                        let head = String::from_utf8_lossy(&skipped.head[..3]).into_owned();
                        seen.push(format!("skipped {} {head}", skipped.len));
                    }
                }
                assert!(r.buf.capacity() <= 64 + (16 << 10), "{}", r.buf.capacity());
            }
            assert_eq!(
                seen,
                [
                    "{\"a\":1}",
                    "skipped 1000 xxx",
                    "{\"b\":2}",
                    "skipped 300 yyy"
                ],
                "reads of {chunk}"
            );
        }
        // A reader that does not skip fails for good, as before.
        let mut r = LineReader::new(&input[..], 64);
        assert!(r.next().await.is_ok());
        let e = r.next().await.expect_err("too long");
        assert!(LineSkipped::of(&e).is_none());
    }

    #[tokio::test]
    async fn line_breaks_between_tokens_become_spaces() {
        let mut out = Vec::new();
        write_line(&mut out, b"{\n  \"a\": 1\r\n}").await.unwrap();
        assert_eq!(out, b"{   \"a\": 1  }\n");
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["a"], 1);
    }
}
