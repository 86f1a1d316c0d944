//! The Language Server Protocol's base framing (LSP 3.17, "Base
//! Protocol"), as language servers and editors speak it on stdio, pipes and
//! TCP: each message is a header block, then its body,
//!
//! ```text
//! Content-Length: 52\r\n
//! Content-Type: application/vscode-jsonrpc; charset=utf-8\r\n
//! \r\n
//! {"jsonrpc":"2.0","id":1,"method":"initialize",...}
//! ```
//!
//! What is read, exactly:
//! - Header names are case-insensitive. `Content-Length` is required, once,
//!   in decimal digits; `Content-Type` is optional and its charset, if
//!   given, must be UTF-8 (`utf-8` or `utf8`, as vscode-jsonrpc accepts);
//!   other header names are allowed and have no effect.
//! - A header line ends with `\r\n` (a bare `\n` is taken too); blank space
//!   (empty lines, say) before a header block is skipped.
//! - A header block is at most [`MAX_HEADER_BLOCK`] octets, blank lines
//!   before it included.
//!
//! What is refused, and how ([`LspReader::next`]):
//! - A body over the reader's limit (`--max-body`): the message is skipped
//!   whole (its length is known) and reported as a
//!   [`crate::lines::LineSkipped`], with its first octets so that its id
//!   can be answered; the stream reads on.
//! - A header block that is malformed (a line that is not `Name: value`, no
//!   `Content-Length`, one given twice, a length that is not decimal digits
//!   or is larger than any length, another charset), too long, or cut by
//!   the end of the stream, and a body cut by the end of the stream: the
//!   framing is lost ([`FramingLost`]), nothing after it can be read.
//!
//! [`parse_head`] is the sans-IO part; [`LspReader`] and [`write_message`]
//! are the stream's two sides (the fuzz target `lsp` drives all three).
//!
//! Memory: while a message is read, the buffer grows with what arrived
//! (about twice its octets at most), not with what its header announced;
//! after a large message it is let go. With [`LspReader::stalling`], a
//! message begun whose next octet does not come in time is given up.

use bytes::{Buf, Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};

pub use crate::lines::FramingLost;
use crate::lines::{LineSkipped, SKIPPED_HEAD};

/// The most octets of one header block, blank lines before it and its
/// empty line included. Editors send two headers, under 100 octets.
pub const MAX_HEADER_BLOCK: usize = 8 << 10;

/// What the front of a buffer holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Head {
    /// Not yet a whole header block: read more.
    Partial,
    /// A whole header block of `header_len` octets (blank lines before it
    /// included), announcing a body of `body_len` octets after it.
    Message { header_len: usize, body_len: u64 },
}

/// Why a header block cannot be read: the framing is lost.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum HeaderError {
    #[error("a header block of more than {MAX_HEADER_BLOCK} octets (no empty line ends it)")]
    TooLong,
    #[error("header line {0:?} is not `Name: value`")]
    Malformed(String),
    #[error("a header block without Content-Length")]
    NoLength,
    #[error("Content-Length given twice")]
    LengthTwice,
    #[error("Content-Length {0:?} is not a length in decimal digits")]
    BadLength(String),
    #[error("Content-Type {0:?}: only UTF-8 is carried")]
    Charset(String),
}

/// Reads the header block at the front of `buf`.
pub fn parse_head(buf: &[u8]) -> Result<Head, HeaderError> {
    let mut at = buf
        .iter()
        .position(|b| !b.is_ascii_whitespace())
        .unwrap_or(buf.len());
    let mut length = None;
    loop {
        let Some(nl) = buf[at..].iter().position(|&b| b == b'\n') else {
            return match buf.len() > MAX_HEADER_BLOCK {
                true => Err(HeaderError::TooLong),
                false => Ok(Head::Partial),
            };
        };
        let end = at + nl + 1;
        if end > MAX_HEADER_BLOCK {
            return Err(HeaderError::TooLong);
        }
        let line = &buf[at..at + nl];
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        at = end;
        if line.is_empty() {
            return match length {
                Some(body_len) => Ok(Head::Message {
                    header_len: end,
                    body_len,
                }),
                None => Err(HeaderError::NoLength),
            };
        }
        // What is shown of a bad line (it goes back to the client and to
        // the log): its first 80 octets.
        let shown = || String::from_utf8_lossy(&line[..line.len().min(80)]).into_owned();
        let Some(colon) = line.iter().position(|&b| b == b':') else {
            return Err(HeaderError::Malformed(shown()));
        };
        let (name, value) = (&line[..colon], trim(&line[colon + 1..]));
        if name.is_empty() || !name.iter().all(|&b| is_token(b)) {
            return Err(HeaderError::Malformed(shown()));
        }
        if name.eq_ignore_ascii_case(b"content-length") {
            if length.is_some() {
                return Err(HeaderError::LengthTwice);
            }
            let bad = || HeaderError::BadLength(String::from_utf8_lossy(value).into_owned());
            if value.is_empty() || !value.iter().all(u8::is_ascii_digit) {
                return Err(bad());
            }
            let digits = std::str::from_utf8(value).map_err(|_| bad())?;
            length = Some(digits.parse::<u64>().map_err(|_| bad())?);
        } else if name.eq_ignore_ascii_case(b"content-type") && !utf8_charset(value) {
            return Err(HeaderError::Charset(
                String::from_utf8_lossy(value).into_owned(),
            ));
        }
    }
}

/// An HTTP token character (RFC 9110 §5.6.2): what a header name is made of.
fn is_token(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

fn trim(mut s: &[u8]) -> &[u8] {
    while let [b' ' | b'\t', rest @ ..] = s {
        s = rest;
    }
    while let [rest @ .., b' ' | b'\t'] = s {
        s = rest;
    }
    s
}

/// Whether a `Content-Type` value leaves the body UTF-8: no charset
/// parameter, or `utf-8` / `utf8` (quoted or not, any case).
fn utf8_charset(value: &[u8]) -> bool {
    value.split(|&b| b == b';').skip(1).all(|param| {
        let param = trim(param);
        let Some(eq) = param.iter().position(|&b| b == b'=') else {
            return true;
        };
        if !trim(&param[..eq]).eq_ignore_ascii_case(b"charset") {
            return true;
        }
        let v = trim(&param[eq + 1..]);
        let v = v
            .strip_prefix(b"\"")
            .and_then(|v| v.strip_suffix(b"\""))
            .unwrap_or(v);
        v.eq_ignore_ascii_case(b"utf-8") || v.eq_ignore_ascii_case(b"utf8")
    })
}

/// Reads LSP-framed messages, each body at most `max` octets.
pub struct LspReader<R> {
    inner: R,
    buf: BytesMut,
    max: usize,
    /// The framing was lost: every later read fails.
    lost: bool,
    /// A body over the limit being skipped (kept here, so that a read
    /// given up midway, by a timeout, resumes it).
    skipping: Option<Skip>,
    /// A message begun must move on within this ([`LspReader::stalling`]).
    stall: Option<std::time::Duration>,
}

/// Where the skipping of a body over the limit stands.
struct Skip {
    len: u64,
    /// Octets still to skip.
    left: u64,
    /// Its first octets, once read.
    head: Option<Bytes>,
}

impl<R: AsyncRead + Unpin> LspReader<R> {
    pub fn new(inner: R, max: usize) -> Self {
        Self::after(inner, max, BytesMut::with_capacity(8 << 10))
    }

    /// A reader of `inner` whose first octets were read already, into `read`.
    pub fn after(inner: R, max: usize, read: BytesMut) -> Self {
        Self {
            inner,
            buf: read,
            max,
            lost: false,
            skipping: None,
            stall: None,
        }
    }

    /// The reader, with a message begun given up (a [`FramingLost`],
    /// final) when no octet of it comes for `stall`: a client that sends
    /// half a message and goes quiet holds no buffer past it.
    pub fn stalling(mut self, stall: std::time::Duration) -> Self {
        self.stall = Some(stall);
        self
    }

    /// The next message's body; `None` at the end of the stream between
    /// messages. A body over the limit is skipped and reported as a
    /// [`LineSkipped`] (the reader reads on); a lost framing is a
    /// [`FramingLost`], final.
    pub async fn next(&mut self) -> std::io::Result<Option<Bytes>> {
        if self.lost {
            return Err(FramingLost::error("the stream was given up"));
        }
        let r = self.read_one().await;
        if let Err(e) = &r
            && LineSkipped::of(e).is_none()
        {
            self.lost = true;
        }
        r
    }

    async fn read_one(&mut self) -> std::io::Result<Option<Bytes>> {
        if self.skipping.is_some() {
            return Err(self.skip().await);
        }
        let (header_len, body_len) = loop {
            match parse_head(&self.buf).map_err(FramingLost::error)? {
                Head::Message {
                    header_len,
                    body_len,
                } => break (header_len, body_len),
                Head::Partial => {
                    if self.fill(8 << 10).await? == 0 {
                        if self.buf.iter().all(|&b| b == b'\r' || b == b'\n') {
                            return Ok(None);
                        }
                        return Err(FramingLost::error("the stream ended inside a header block"));
                    }
                }
            }
        };
        let fits = usize::try_from(body_len).ok().filter(|&n| n <= self.max);
        let Some(len) = fits else {
            self.buf.advance(header_len);
            self.skipping = Some(Skip {
                len: body_len,
                left: body_len,
                head: None,
            });
            return Err(self.skip().await);
        };
        while self.buf.len() < header_len + len {
            // The buffer grows with what arrives, not with what the header
            // announced.
            let missing = header_len + len - self.buf.len();
            if self.fill(missing.min(64 << 10)).await? == 0 {
                return Err(FramingLost::error(format_args!(
                    "the stream ended inside a message: {} of the {len} octets its Content-Length announced",
                    self.buf.len() - header_len
                )));
            }
        }
        self.buf.advance(header_len);
        let message = self.buf.split_to(len).freeze();
        if self.buf.capacity() > 64 << 10 {
            // What is left would keep the large allocation the message
            // shares: what follows it gets one of its own.
            self.buf = BytesMut::from(&self.buf[..]);
        }
        Ok(Some(message))
    }

    /// Skips the body at the front of the stream ([`Self::skipping`]),
    /// keeping its first octets: the error that reports it.
    async fn skip(&mut self) -> std::io::Error {
        loop {
            let Some(s) = self.skipping.as_mut() else {
                return FramingLost::error("nothing to skip");
            };
            if s.head.is_none() {
                let want = usize::try_from(s.len)
                    .unwrap_or(usize::MAX)
                    .min(SKIPPED_HEAD);
                if self.buf.len() >= want {
                    s.head = Some(Bytes::copy_from_slice(&self.buf[..want]));
                }
            }
            if s.head.is_some() {
                let n = s.left.min(self.buf.len() as u64) as usize;
                self.buf.advance(n);
                s.left -= n as u64;
            }
            if s.left == 0 {
                let len = s.len;
                let head = s.head.take().unwrap_or_default();
                self.skipping = None;
                return std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    LineSkipped {
                        len: usize::try_from(len).unwrap_or(usize::MAX),
                        max: self.max,
                        head,
                    },
                );
            }
            let len = s.len;
            match self.fill(8 << 10).await {
                Ok(0) => return self.cut(len),
                Ok(_) => {}
                Err(e) => return e,
            }
        }
    }

    fn cut(&self, len: u64) -> std::io::Error {
        FramingLost::error(format_args!(
            "the stream ended inside a message of {len} octets, over the limit of {}",
            self.max
        ))
    }

    /// Reads more, room for `room` octets more made first; within the stall
    /// bound when a message is begun (anything but a little blank space
    /// read, or a body being skipped).
    async fn fill(&mut self, room: usize) -> std::io::Result<usize> {
        self.buf.reserve(room);
        let begun = self.skipping.is_some()
            || self.buf.len() > 64
            || self.buf.iter().any(|b| !b.is_ascii_whitespace());
        let stall = self.stall.filter(|_| begun);
        crate::lines::read_within(&mut self.inner, &mut self.buf, stall).await
    }
}

/// Writes one message with its header block (`Content-Length` alone, as
/// editors and servers write it).
pub async fn write_message<W: AsyncWrite + Unpin>(w: &mut W, text: &[u8]) -> std::io::Result<()> {
    let mut head = [0u8; 40];
    let n = {
        use std::io::Write;
        let mut cursor = std::io::Cursor::new(&mut head[..]);
        // 40 octets hold the header of any length a usize gives.
        let _ = write!(cursor, "Content-Length: {}\r\n\r\n", text.len());
        cursor.position() as usize
    };
    w.write_all(&head[..n]).await?;
    w.write_all(text).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn framed(body: &str) -> Vec<u8> {
        format!("Content-Length: {}\r\n\r\n{body}", body.len()).into_bytes()
    }

    async fn read_all(input: &[u8], max: usize) -> Vec<Result<String, String>> {
        let mut r = LspReader::new(input, max);
        let mut out = Vec::new();
        loop {
            match r.next().await {
                Ok(Some(m)) => out.push(Ok(String::from_utf8_lossy(&m).into_owned())),
                Ok(None) => return out,
                Err(e) => {
                    let lost = FramingLost::of(&e).is_some();
                    out.push(Err(match LineSkipped::of(&e) {
                        Some(s) => format!("skipped {}", s.len),
                        None => e.to_string(),
                    }));
                    if lost {
                        return out;
                    }
                }
            }
        }
    }

    #[test]
    fn heads_are_read_as_editors_and_servers_write_them() {
        let ok = |s: &str| parse_head(s.as_bytes());
        let m = |header_len, body_len| {
            Ok(Head::Message {
                header_len,
                body_len,
            })
        };
        assert_eq!(ok("Content-Length: 12\r\n\r\n"), m(22, 12));
        assert_eq!(ok("content-length:12\n\n"), m(19, 12));
        assert_eq!(
            ok(
                "Content-Type: application/vscode-jsonrpc; charset=utf-8\r\nCONTENT-LENGTH:  7 \r\n\r\n"
            ),
            m(80, 7)
        );
        assert_eq!(ok("\r\n\r\nContent-Length: 0\r\n\r\n"), m(25, 0));
        assert_eq!(ok("X-Editor: vim\r\nContent-Length: 3\r\n\r\n"), m(36, 3));
        assert_eq!(
            ok("Content-Type: application/json; charset=\"UTF8\"\r\nContent-Length: 1\r\n\r\n"),
            m(69, 1)
        );
        assert_eq!(ok("Content-Length: 12\r\n"), Ok(Head::Partial));
        assert_eq!(ok("Content-Len"), Ok(Head::Partial));
        assert_eq!(ok(""), Ok(Head::Partial));
    }

    #[test]
    fn a_bad_head_says_what_is_wrong_with_it() {
        let bad = |s: &str| parse_head(s.as_bytes()).expect_err(s);
        assert_eq!(
            bad("\r\n{\"a\":1}\r\n\r\n"),
            HeaderError::Malformed("{\"a\":1}".into())
        );
        assert_eq!(
            bad("Content-Type: application/json\r\n\r\n"),
            HeaderError::NoLength
        );
        assert_eq!(
            bad("Content-Length: -5\r\n\r\n"),
            HeaderError::BadLength("-5".into())
        );
        assert_eq!(
            bad("Content-Length: 99999999999999999999999\r\n\r\n"),
            HeaderError::BadLength("99999999999999999999999".into())
        );
        assert_eq!(
            bad("Content-Length:\r\n\r\n"),
            HeaderError::BadLength("".into())
        );
        assert_eq!(
            bad("Content-Length: 1\r\nContent-Length: 1\r\n\r\n"),
            HeaderError::LengthTwice
        );
        assert_eq!(
            bad("Content-Type: text/plain; charset=utf-16\r\nContent-Length: 2\r\n\r\n"),
            HeaderError::Charset("text/plain; charset=utf-16".into())
        );
        assert_eq!(
            bad("Content Length: 3\r\n\r\n"),
            HeaderError::Malformed("Content Length: 3".into())
        );
        let endless = format!("Content-Length: 3\r\nX: {}", "y".repeat(MAX_HEADER_BLOCK));
        assert_eq!(bad(&endless), HeaderError::TooLong);
        let blank = "\r\n".repeat(MAX_HEADER_BLOCK);
        assert_eq!(
            bad(&format!("{blank}Content-Length: 3\r\n\r\n")),
            HeaderError::TooLong
        );
    }

    #[tokio::test]
    async fn messages_come_out_whole_and_an_oversized_one_is_skipped() {
        let mut input = framed("{\"id\":1}");
        input.extend(framed(&format!(
            "{{\"id\":2,\"pad\":\"{}\"}}",
            "x".repeat(100)
        )));
        input.extend(b"\r\n");
        input.extend(framed("{\"id\":3}"));
        assert_eq!(
            read_all(&input, 64).await,
            [
                Ok("{\"id\":1}".into()),
                Err("skipped 117".into()),
                Ok("{\"id\":3}".into())
            ]
        );
        // The skipped message's head shows its id.
        let mut r = LspReader::new(&input[..], 64);
        r.next().await.expect("first");
        let e = r.next().await.expect_err("too large");
        let skipped = LineSkipped::of(&e).expect("skipped");
        assert!(skipped.head.starts_with(b"{\"id\":2,"));
    }

    #[tokio::test]
    async fn a_stream_cut_short_or_malformed_loses_the_framing_once_for_all() {
        let mut short = framed("{\"id\":1}");
        short.extend(b"Content-Length: 50\r\n\r\n{\"id\":2}");
        let got = read_all(&short, 1024).await;
        assert_eq!(got[0], Ok("{\"id\":1}".into()));
        assert_eq!(
            got[1],
            Err("framing lost: the stream ended inside a message: 8 of the 50 octets its Content-Length announced".into())
        );
        let got = read_all(b"Content-Length: 5\r\n", 1024).await;
        assert_eq!(
            got,
            [Err(
                "framing lost: the stream ended inside a header block".into()
            )]
        );
        let got = read_all(b"{\"jsonrpc\":\"2.0\"}\n", 1024).await;
        assert!(
            matches!(&got[..], [Err(e)] if e.contains("is not `Name: value`")),
            "{got:?}"
        );
        let mut r = LspReader::new(&b"Content-Length: x\r\n\r\n"[..], 64);
        assert!(r.next().await.is_err());
        let again = r.next().await.expect_err("lost for good");
        assert!(FramingLost::of(&again).is_some());
        // The end of the stream between messages (blank lines after the
        // last one allowed) is the end.
        let mut tail = framed("{}");
        tail.extend(b"\r\n\r\n");
        assert_eq!(read_all(&tail, 64).await, [Ok("{}".into())]);
    }

    /// A read given up midway (as `stream_client`'s idle timeout gives up
    /// `next`) loses nothing: reads cut at every point still yield the
    /// same messages and skips.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn reads_given_up_midway_resume_where_they_were() {
        let mut input = Vec::new();
        let mut want = Vec::new();
        for i in 0..40 {
            let body = match i % 7 {
                3 => format!("{{\"id\":{i},\"pad\":\"{}\"}}", "x".repeat(3000)),
                _ => format!("{{\"id\":{i}}}"),
            };
            want.push(match body.len() > 1024 {
                true => Err(body.len()),
                false => Ok(body.clone()),
            });
            input.extend(framed(&body));
        }
        let (mut w, r) = tokio::io::duplex(64);
        let writer = tokio::spawn(async move {
            for chunk in input.chunks(7) {
                w.write_all(chunk).await.expect("write");
                tokio::task::yield_now().await;
            }
        });
        let mut reader = LspReader::new(r, 1024);
        let mut got = Vec::new();
        let mut cut = 0;
        loop {
            match tokio::time::timeout(Duration::from_micros(20), reader.next()).await {
                Err(_) => cut += 1,
                Ok(Ok(Some(m))) => got.push(Ok(String::from_utf8_lossy(&m).into_owned())),
                Ok(Ok(None)) => break,
                Ok(Err(e)) => got.push(Err(LineSkipped::of(&e).expect("only skips").len)),
            }
        }
        writer.await.expect("writer");
        assert_eq!(got, want, "{cut} reads given up");
    }

    #[tokio::test]
    async fn a_message_begun_and_left_is_given_up_after_the_stall_bound() {
        let (mut w, r) = tokio::io::duplex(1024);
        let mut reader = LspReader::new(r, 1024).stalling(Duration::from_millis(50));
        w.write_all(b"Content-Length: 2\r\n\r\n{}Content-Length: 9\r\n\r\n{\"id\"")
            .await
            .expect("write");
        assert_eq!(
            reader.next().await.expect("one").as_deref(),
            Some(&b"{}"[..])
        );
        let e = reader.next().await.expect_err("stalled");
        assert!(
            e.to_string().contains("no octet of a message begun came"),
            "{e}"
        );
        assert!(FramingLost::of(&e).is_some());
        // Nothing begun: no bound (the idle timeout is the caller's).
        let (_w, r) = tokio::io::duplex(64);
        let mut idle = LspReader::new(r, 1024).stalling(Duration::from_millis(10));
        let waited = tokio::time::timeout(Duration::from_millis(100), idle.next()).await;
        assert!(waited.is_err(), "an idle stream is not stalled");
    }

    #[tokio::test]
    async fn what_is_written_reads_back() {
        let mut out = Vec::new();
        for body in ["{\"id\":1}", "", "{\"text\":\"line\\nbreak\"}\n"] {
            write_message(&mut out, body.as_bytes())
                .await
                .expect("write");
        }
        assert!(out.starts_with(b"Content-Length: 8\r\n\r\n{\"id\":1}Content-Length: 0\r\n\r\n"));
        let got = read_all(&out, 64).await;
        assert_eq!(
            got,
            [
                Ok("{\"id\":1}".into()),
                Ok(String::new()),
                Ok("{\"text\":\"line\\nbreak\"}\n".into())
            ]
        );
    }
}
