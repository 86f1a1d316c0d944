//! How JSON-RPC messages are framed on a stream transport (the TCP and
//! Unix-socket line ingresses, `connect`'s stdio, child-process, TCP and
//! Unix-socket upstreams): one message per line ([`crate::lines`]), or the
//! Language Server Protocol's `Content-Length` headers ([`crate::lsp`]),
//! or either, found from the stream's first octets (`--framing auto`).
//!
//! `auto` is unambiguous because the two cannot start alike: a JSON-RPC
//! line starts with `{` or `[` (after blank space), an LSP header block
//! with `Content-` (`Content-Length` or `Content-Type`, in any case). A
//! stream that starts with neither is read as lines, where whatever it is
//! gets the parse error a line client gets. What a gateway writes to such
//! a stream follows what it read; where it writes first (a request to an
//! upstream), it writes in the protocol's own framing
//! ([`Framing::written`]).

use std::sync::{Arc, OnceLock};

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncWrite};

use crate::lines::LineReader;
use crate::lsp::LspReader;

/// `--framing`: how messages are framed on a stream transport.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Framing {
    /// One message per line (newline-delimited JSON).
    Lines,
    /// LSP's base protocol: `Content-Length` headers, then the message.
    Lsp,
    /// Either, found from each stream's first octets.
    #[default]
    Auto,
}

impl Framing {
    /// How a stream of this framing is written when this side writes before
    /// it has read (`auto`: `first`, the protocol's own framing).
    pub fn written(self, first: Framing) -> Framing {
        match self {
            Framing::Auto => first,
            decided => decided,
        }
    }
}

impl std::str::FromStr for Framing {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "lines" => Ok(Self::Lines),
            "lsp" => Ok(Self::Lsp),
            "auto" => Ok(Self::Auto),
            other => Err(format!(
                "unknown framing {other:?}: expected lines, lsp or auto"
            )),
        }
    }
}

impl std::fmt::Display for Framing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Framing::Lines => "lines",
            Framing::Lsp => "lsp",
            Framing::Auto => "auto",
        })
    }
}

/// The framing a stream turned out to have, shared between its reader
/// (which finds it) and its writer (which follows it).
#[derive(Clone, Debug)]
pub struct Decided {
    found: Arc<OnceLock<Framing>>,
    /// What is written before anything was found.
    first: Framing,
}

impl Decided {
    /// The framing of a stream in `framing`: for `auto`, `first` until one is
    /// found ([`Decided::found`]).
    pub fn new(framing: Framing, first: Framing) -> Self {
        let found = Arc::new(OnceLock::new());
        if framing != Framing::Auto {
            let _ = found.set(framing);
        }
        Self { found, first }
    }

    /// The stream turned out to be in `framing` (the first one found stays).
    pub fn found(&self, framing: Framing) {
        let _ = self.found.set(framing);
    }

    /// The framing written: the one found, else `first`.
    pub fn get(&self) -> Framing {
        self.found.get().copied().unwrap_or(self.first)
    }
}

/// Reads a stream's messages in its framing, finding it first for `auto`.
/// Lines and bodies over `max` octets are skipped and reported (see
/// [`LineReader::skipping_long_lines`] and [`LspReader::next`]).
pub struct MessageReader<R> {
    state: State<R>,
    max: usize,
    decided: Decided,
    /// A message begun must move on within this ([`MessageReader::stalling`]).
    stall: Option<std::time::Duration>,
}

enum State<R> {
    /// `auto`, nothing told yet: the octets read so far.
    Finding(R, BytesMut),
    Lines(LineReader<R>),
    Lsp(LspReader<R>),
    /// What stands in while the reader found moves in (never seen).
    Moving,
}

impl<R: AsyncRead + Unpin> State<R> {
    /// The reader, with `stall` (if any) on a message begun.
    fn stalling(self, stall: Option<std::time::Duration>) -> Self {
        match (self, stall) {
            (State::Lines(r), Some(s)) => State::Lines(r.stalling(s)),
            (State::Lsp(r), Some(s)) => State::Lsp(r.stalling(s)),
            (state, _) => state,
        }
    }
}

/// What an LSP header block starts with, in any case.
const LSP_START: &[u8] = b"content-";

impl<R: AsyncRead + Unpin> MessageReader<R> {
    /// A reader of `inner` in `framing`; for `auto`, what is written before
    /// the framing is found is `first`.
    pub fn new(inner: R, framing: Framing, first: Framing, max: usize) -> Self {
        let state = match framing {
            Framing::Lines => State::Lines(LineReader::skipping_long_lines(inner, max)),
            Framing::Lsp => State::Lsp(LspReader::new(inner, max)),
            Framing::Auto => State::Finding(inner, BytesMut::with_capacity(8 << 10)),
        };
        Self {
            state,
            max,
            decided: Decided::new(framing, first),
            stall: None,
        }
    }

    /// The reader, with a message begun given up (a
    /// [`crate::lsp::FramingLost`], final) when no octet of it comes for
    /// `stall`: a client that sends half a message and goes quiet holds no
    /// buffer past it (a client ingress's `--stall-timeout`).
    pub fn stalling(mut self, stall: std::time::Duration) -> Self {
        self.stall = Some(stall);
        self.state = self.state.stalling(self.stall);
        self
    }

    /// The framing found, for the stream's writer.
    pub fn decided(&self) -> Decided {
        self.decided.clone()
    }

    /// The next message; `None` at the end of the stream.
    pub async fn next(&mut self) -> std::io::Result<Option<Bytes>> {
        if let State::Finding(..) = self.state {
            self.find().await?;
        }
        match &mut self.state {
            State::Lines(r) => r.next().await,
            State::Lsp(r) => r.next().await,
            State::Finding(..) | State::Moving => Ok(None),
        }
    }

    /// Reads until the framing shows, then hands what was read to its reader.
    async fn find(&mut self) -> std::io::Result<()> {
        let State::Finding(inner, buf) = &mut self.state else {
            return Ok(());
        };
        let framing = find(inner, buf, self.stall).await?;
        let State::Finding(inner, buf) = std::mem::replace(&mut self.state, State::Moving) else {
            return Ok(());
        };
        self.state = match framing {
            Framing::Lsp => State::Lsp(LspReader::after(inner, self.max, buf)),
            _ => State::Lines(LineReader::skipping_long_lines_after(inner, self.max, buf)),
        }
        .stalling(self.stall);
        self.decided.found(framing);
        Ok(())
    }
}

/// Reads `inner` into `buf` until its framing shows: LSP's when it starts
/// with `Content-` (any case, after blank space), else lines (also when
/// the stream ends first). What was read stays in `buf`, for the reader
/// of that framing (a read of nothing but blank space is dropped). With
/// `stall`, a start that does not go on within it is given up.
pub async fn find<R: AsyncRead + Unpin>(
    inner: &mut R,
    buf: &mut BytesMut,
    stall: Option<std::time::Duration>,
) -> std::io::Result<Framing> {
    loop {
        let start = buf.iter().position(|b| !b.is_ascii_whitespace());
        if let Some(start) = start {
            let seen = &buf[start..];
            let n = seen.len().min(LSP_START.len());
            if !seen[..n].eq_ignore_ascii_case(&LSP_START[..n]) {
                return Ok(Framing::Lines);
            }
            if n == LSP_START.len() {
                return Ok(Framing::Lsp);
            }
        } else {
            // Either reader skips it: none of it is kept.
            buf.clear();
        }
        buf.reserve(1 << 10);
        let begun = stall.filter(|_| !buf.is_empty());
        if crate::lines::read_within(inner, buf, begun).await? == 0 {
            return Ok(Framing::Lines);
        }
    }
}

/// Writes one message in `framing` (`auto` is written as lines).
pub async fn write_message<W: AsyncWrite + Unpin>(
    w: &mut W,
    framing: Framing,
    text: &[u8],
) -> std::io::Result<()> {
    match framing {
        Framing::Lsp => crate::lsp::write_message(w, text).await,
        Framing::Lines | Framing::Auto => crate::lines::write_line(w, text).await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn read(input: &[u8], framing: Framing) -> (Vec<String>, Framing) {
        let mut r = MessageReader::new(input, framing, Framing::Lines, 1024);
        let mut out = Vec::new();
        while let Ok(Some(m)) = r.next().await {
            out.push(String::from_utf8_lossy(&m).into_owned());
        }
        (out, r.decided().get())
    }

    #[tokio::test]
    async fn auto_tells_lsp_from_lines_by_the_first_octets() {
        let lsp = b"Content-Length: 7\r\n\r\n{\"a\":1}content-type: application/json\r\ncontent-length: 2\r\n\r\n[]";
        assert_eq!(
            read(lsp, Framing::Auto).await,
            (vec!["{\"a\":1}".into(), "[]".into()], Framing::Lsp)
        );
        let lines = b"\n  {\"a\":1}\n[]\n";
        assert_eq!(
            read(lines, Framing::Auto).await,
            (vec!["  {\"a\":1}".into(), "[]".into()], Framing::Lines)
        );
        // Neither: read as lines (the line is then the client's parse
        // error), as are a stream that ends before it shows and one that
        // starts like a header but is not one.
        assert_eq!(
            read(b"hello\n", Framing::Auto).await,
            (vec!["hello".into()], Framing::Lines)
        );
        assert_eq!(
            read(b"Cont", Framing::Auto).await,
            (vec!["Cont".into()], Framing::Lines)
        );
        assert_eq!(
            read(b"Contents: x\n", Framing::Auto).await,
            (vec!["Contents: x".into()], Framing::Lines)
        );
        assert_eq!(read(b"", Framing::Auto).await, (vec![], Framing::Lines));
    }

    #[tokio::test]
    async fn a_set_framing_is_not_second_guessed() {
        let (got, framing) = read(b"Content-Length: 2\r\n\r\n{}", Framing::Lines).await;
        assert_eq!(framing, Framing::Lines);
        assert_eq!(got, ["Content-Length: 2", "{}"]);
        let (got, _) = read(b"{}\n", Framing::Lsp).await;
        assert!(got.is_empty(), "no header block: the framing is lost");
        // Nothing read yet: what is written first is the one given.
        let r = MessageReader::new(&b""[..], Framing::Auto, Framing::Lsp, 64);
        assert_eq!(r.decided().get(), Framing::Lsp);
        assert_eq!(Framing::Auto.written(Framing::Lsp), Framing::Lsp);
        assert_eq!(Framing::Lines.written(Framing::Lsp), Framing::Lines);
    }

    /// Reads of the sizes given, in turn (the last repeated), as a pipe or
    /// socket may give them.
    struct Pieces {
        data: Vec<u8>,
        sizes: Vec<usize>,
        at: usize,
        turn: usize,
    }

    impl AsyncRead for Pieces {
        fn poll_read(
            mut self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
            buf: &mut tokio::io::ReadBuf<'_>,
        ) -> std::task::Poll<std::io::Result<()>> {
            let size = self.sizes[self.turn.min(self.sizes.len() - 1)].max(1);
            self.turn += 1;
            let n = size.min(self.data.len() - self.at).min(buf.remaining());
            let at = self.at;
            buf.put_slice(&self.data[at..at + n]);
            self.at += n;
            std::task::Poll::Ready(Ok(()))
        }
    }

    proptest::proptest! {
        /// However a framed stream arrives, in pieces of any sizes, the
        /// same messages come out, in either framing, set or found.
        #[test]
        fn any_split_of_a_framed_stream_yields_the_same_messages(
            bodies in proptest::collection::vec("[ -~]{0,40}", 0..8),
            sizes in proptest::collection::vec(1usize..64, 1..16),
            lsp: bool,
            auto: bool,
        ) {
            let rt = tokio::runtime::Builder::new_current_thread().build().expect("runtime");
            // JSON-ish bodies that a line cannot confuse: no line breaks, and
            // not blank (a blank line is no message).
            let bodies: Vec<String> = bodies.iter().map(|b| format!("{{\"v\":{b:?}}}")).collect();
            let framing = if lsp { Framing::Lsp } else { Framing::Lines };
            let mut data = Vec::new();
            rt.block_on(async {
                for b in &bodies {
                    write_message(&mut data, framing, b.as_bytes()).await.expect("write");
                }
            });
            let read_as = if auto { Framing::Auto } else { framing };
            let got = rt.block_on(async {
                let pieces = Pieces { data, sizes, at: 0, turn: 0 };
                let mut r = MessageReader::new(pieces, read_as, Framing::Lines, 1 << 10);
                let mut got = Vec::new();
                while let Some(m) = r.next().await.expect("no error") {
                    got.push(String::from_utf8_lossy(&m).into_owned());
                }
                got
            });
            proptest::prop_assert_eq!(got, bodies);
        }
    }
}
