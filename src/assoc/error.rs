//! The one error type of the association's async shell: reaching a peer,
//! the transports (TLS, QUIC), the handshake over them, framing, and a
//! running association's failures. Every variant carries its cause as a
//! typed source, so a caller can tell a refused ALPN from a silent peer
//! without reading a message.
//!
//! (Not to be confused with [`crate::bridge::TransportError`], the
//! NPAMP-BRIDGE §6 wire code a peer sends when a message could not be
//! delivered.)

use std::net::SocketAddr;
use std::time::Duration;

use std::sync::Arc;

use super::association::AssocError;
use crate::handshake::HandshakeError;
use crate::record::RecordError;
use crate::wire::WireError;

/// The QUIC application error code a listener closes a connection with
/// when the N-PAMP handshake fails (its reason says why).
pub(crate) const HANDSHAKE_FAILED_CODE: u32 = 1;

/// Errors of the association's async shell.
#[derive(Debug, thiserror::Error)]
pub enum LinkError {
    #[error("I/O: {}", error_chain(.0))]
    Io(#[from] std::io::Error),
    #[error("handshake: {0}")]
    Handshake(#[from] HandshakeError),
    #[error("association: {0}")]
    Assoc(#[from] AssocError),
    #[error("frame: {0}")]
    Wire(#[from] WireError),
    #[error("TLS: {0}")]
    Tls(#[from] rustls::Error),
    #[error("QUIC connect: {0}")]
    QuicConnect(#[from] quinn::ConnectError),
    #[error("QUIC connection: {0}")]
    QuicConnection(#[from] quinn::ConnectionError),
    #[error(
        "the peer negotiated {} where this N-PAMP endpoint needs ALPN n-pamp/2 \
         (is the other side an N-PAMP gateway?)",
        alpn_name(.0.as_deref())
    )]
    Alpn(Option<Vec<u8>>),
    #[error("handshake did not finish within {0:?}")]
    HandshakeTimeout(Duration),
    #[error("the peer sent nothing within {0:?} of connecting")]
    FirstOctetsTimeout(Duration),
    #[error("the peer closed the stream inside a frame")]
    TruncatedFrame,
    #[error("the peer closed the stream before the handshake finished")]
    EarlyEof,
    #[error(
        "the peer closed the connection right after the handshake, without an N-PAMP CLOSE: \
         a peer that does not trust this identity does that (check the peer's pinned keys)"
    )]
    ClosedAfterHandshake,
    #[error("the peer closed the connection without an N-PAMP CLOSE")]
    ClosedWithoutClose,
    #[error("the peer never opened the Bridge stream")]
    NoBridgeStream,
    #[error("the peer sent nothing for {:.1} s; keepalive PINGs went unanswered", .0.as_secs_f64())]
    PeerSilent(Duration),
    #[error(
        "bad address {url:?}: {why} (expected quic://HOST:PORT, tls://HOST:PORT or npamp://HOST:PORT)"
    )]
    BadUrl { url: String, why: &'static str },
    #[error("neither transport reached {addr}: QUIC: {quic}; TCP + TLS: {tls}")]
    NoTransport {
        addr: SocketAddr,
        quic: Box<LinkError>,
        tls: Box<LinkError>,
    },
    #[error("certificate ({context}): {source}")]
    Certificate {
        context: String,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    #[error("OS random number generator failed")]
    Random,
    #[error("association ended: {0}")]
    Ended(End),
}

impl LinkError {
    /// Whether the peer refused this endpoint in the N-PAMP handshake: its
    /// QUIC connection closed with `HANDSHAKE_FAILED_CODE` (1). A client's
    /// handshake ends with its last flight, so it may have sent requests
    /// already; the peer ran none of them. (Over TCP + TLS a refusal is only
    /// a closed stream, which says nothing of what ran.)
    pub fn refused_in_handshake(&self) -> bool {
        let refusal = |e: &quinn::ConnectionError| {
            matches!(e, quinn::ConnectionError::ApplicationClosed(c)
                if c.error_code == quinn::VarInt::from_u32(HANDSHAKE_FAILED_CODE))
        };
        match self {
            LinkError::QuicConnection(e) => refusal(e),
            LinkError::Io(e) => e.get_ref().is_some_and(|inner| {
                let read = inner.downcast_ref::<quinn::ReadError>();
                let write = inner.downcast_ref::<quinn::WriteError>();
                matches!(read, Some(quinn::ReadError::ConnectionLost(c)) if refusal(c))
                    || matches!(write, Some(quinn::WriteError::ConnectionLost(c)) if refusal(c))
                    || inner
                        .downcast_ref::<quinn::ConnectionError>()
                        .is_some_and(refusal)
            }),
            _ => false,
        }
    }

    /// Whether the peer never answered: QUIC's handshake timed out, or the
    /// N-PAMP handshake did not finish in time.
    pub fn no_answer(&self) -> bool {
        matches!(
            self,
            LinkError::QuicConnection(quinn::ConnectionError::TimedOut)
                | LinkError::HandshakeTimeout(_)
        )
    }

    /// A certificate problem, with what was being done when it happened.
    pub(crate) fn certificate(
        context: impl Into<String>,
        source: impl Into<Box<dyn std::error::Error + Send + Sync>>,
    ) -> Self {
        Self::Certificate {
            context: context.into(),
            source: source.into(),
        }
    }
}

/// How an ALPN value is named in an error: the protocol when printable.
/// An error and its sources, `: `-separated: a QUIC stream's "connection
/// lost" says why the connection was (reset by peer, timed out, closed by
/// the peer) only in its source, as hyper's errors say what failed.
pub(crate) fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut msg = e.to_string();
    let mut src = e.source();
    while let Some(s) = src {
        msg = format!("{msg}: {s}");
        src = s.source();
    }
    msg
}

fn alpn_name(alpn: Option<&[u8]>) -> String {
    match alpn {
        None => "no ALPN".to_owned(),
        Some(p) => match std::str::from_utf8(p) {
            Ok(name) if !name.is_empty() && name.chars().all(|c| c.is_ascii_graphic()) => {
                format!("ALPN {name}")
            }
            _ => format!("ALPN 0x{}", hex::encode(p)),
        },
    }
}

/// Why an association closed with an error, as counted in metrics.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorClass {
    Tampered,
    OutOfSequence,
    Malformed,
    Io,
}

impl ErrorClass {
    pub const ALL: [ErrorClass; 4] = [
        Self::Tampered,
        Self::OutOfSequence,
        Self::Malformed,
        Self::Io,
    ];

    pub const fn name(self) -> &'static str {
        match self {
            Self::Tampered => "tampered",
            Self::OutOfSequence => "out_of_sequence",
            Self::Malformed => "malformed",
            Self::Io => "io",
        }
    }

    pub fn of(e: &LinkError) -> Self {
        match e {
            LinkError::Assoc(a) => Self::of_assoc(a),
            LinkError::Wire(_) | LinkError::TruncatedFrame => Self::Malformed,
            _ => Self::Io,
        }
    }

    pub fn of_assoc(e: &AssocError) -> Self {
        match e {
            AssocError::Tampered { .. } | AssocError::Record(RecordError::Open) => Self::Tampered,
            AssocError::Record(RecordError::OutOfSequence { .. }) => Self::OutOfSequence,
            AssocError::Record(_) | AssocError::Malformed(_) => Self::Malformed,
            AssocError::Closed => Self::Io,
        }
    }
}

/// A running association's failure: its class and its cause.
#[derive(Clone, Debug)]
pub struct Failure {
    pub class: ErrorClass,
    pub error: Arc<LinkError>,
}

impl Failure {
    pub fn new(error: LinkError) -> Self {
        Self {
            class: ErrorClass::of(&error),
            error: Arc::new(error),
        }
    }
}

impl PartialEq for Failure {
    /// The same class and the same cause, as far as a cause can be compared
    /// (I/O errors are not comparable, their messages are).
    fn eq(&self, other: &Self) -> bool {
        self.class == other.class
            && (Arc::ptr_eq(&self.error, &other.error)
                || self.error.to_string() == other.error.to_string())
    }
}

impl Eq for Failure {}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.error.fmt(f)
    }
}

/// Why an association ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum End {
    /// The peer sent CLOSE (code).
    PeerClosed(u16),
    /// We sent CLOSE (and the peer acknowledged it, or did not in time).
    LocalClose,
    /// The streams ended without a CLOSE.
    Eof,
    /// A transport or protocol error; the association is unusable.
    Error(Failure),
}

impl End {
    /// The end an error brings.
    pub fn error(e: impl Into<LinkError>) -> Self {
        Self::Error(Failure::new(e.into()))
    }

    /// Whether the peer refused this endpoint in the handshake
    /// ([`LinkError::refused_in_handshake`]).
    pub fn refused_in_handshake(&self) -> bool {
        matches!(self, End::Error(f) if f.error.refused_in_handshake())
    }
}

impl std::fmt::Display for End {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            End::PeerClosed(code) => write!(f, "the peer closed the association (code {code})"),
            End::LocalClose => f.write_str("closed locally"),
            End::Eof => f.write_str("the peer's streams ended without CLOSE"),
            End::Error(e) => e.fmt(f),
        }
    }
}

/// Sending on an association that has ended.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("the association has ended: {0}")]
pub struct Gone(pub End);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alpn_errors_name_what_was_negotiated() {
        assert!(
            LinkError::Alpn(None)
                .to_string()
                .contains("negotiated no ALPN")
        );
        let h2 = LinkError::Alpn(Some(b"h2".to_vec())).to_string();
        assert!(
            h2.contains("negotiated ALPN h2") && h2.contains("n-pamp/2"),
            "{h2}"
        );
        let odd = LinkError::Alpn(Some(vec![0, 0xff])).to_string();
        assert!(odd.contains("0x00ff"), "{odd}");
    }

    #[test]
    fn a_refusal_in_the_handshake_is_told_from_other_ends() {
        let closed = |code: u32| {
            quinn::ConnectionError::ApplicationClosed(quinn::ApplicationClose {
                error_code: quinn::VarInt::from_u32(code),
                reason: bytes::Bytes::from_static(b"N-PAMP handshake failed: not pinned"),
            })
        };
        let read: std::io::Error = quinn::ReadError::ConnectionLost(closed(1)).into();
        let write: std::io::Error = quinn::WriteError::ConnectionLost(closed(1)).into();
        assert!(LinkError::from(read).refused_in_handshake());
        assert!(LinkError::from(write).refused_in_handshake());
        assert!(LinkError::QuicConnection(closed(1)).refused_in_handshake());
        assert!(End::error(LinkError::QuicConnection(closed(1))).refused_in_handshake());
        // Another code, a reset, a plain I/O error, a CLOSE: not refusals.
        let other: std::io::Error = quinn::ReadError::ConnectionLost(closed(0)).into();
        assert!(!LinkError::from(other).refused_in_handshake());
        assert!(!LinkError::QuicConnection(quinn::ConnectionError::Reset).refused_in_handshake());
        assert!(!LinkError::from(std::io::Error::other("x")).refused_in_handshake());
        assert!(!End::PeerClosed(1).refused_in_handshake());
    }

    #[test]
    fn a_lost_quic_stream_says_why_the_connection_was_lost() {
        let lost = |why| {
            let e: std::io::Error = quinn::WriteError::ConnectionLost(why).into();
            LinkError::from(e).to_string()
        };
        assert_eq!(
            lost(quinn::ConnectionError::Reset),
            "I/O: connection lost: reset by peer"
        );
        assert_eq!(
            lost(quinn::ConnectionError::TimedOut),
            "I/O: connection lost: timed out"
        );
        // An error with no cause under it reads as before.
        let plain = std::io::Error::other("refused");
        assert_eq!(LinkError::from(plain).to_string(), "I/O: refused");
    }
}
