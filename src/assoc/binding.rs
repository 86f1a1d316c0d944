//! Which stream carries which channel: the one place that knows, for each
//! transport (`docs/quic-binding.md`).
//!
//! - TCP + TLS 1.3, the spec's fallback: every channel on the one stream.
//! - QUIC: the Control channel on the first bidirectional stream (the
//!   handshake runs on it); the Bridge channel on a bidirectional stream of
//!   its own, opened by the client once the association is established and
//!   announced by a PING on it, accepted by the server when it arrives.
//!
//! And how sealed octets are written to a stream ([`Writer`]): a QUIC
//! stream is given owned chunks, anything else is written and flushed.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::BytesMut;
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::sync::oneshot;

use super::addr::Scheme;
use super::error::LinkError;
use super::frames::{BoxWrite, FrameReader};
use crate::wire::ChannelId;

/// One stream's two halves: whole frames in, octets out.
pub struct Stream {
    pub reader: FrameReader,
    pub writer: Writer,
}

impl Stream {
    pub fn new(reader: FrameReader, writer: BoxWrite) -> Self {
        Self {
            reader,
            writer: Writer::Other(writer),
        }
    }
}

/// The buffer a QUIC stream's writes are cut from, and the largest write
/// cut from it (a request or reply of up to about this size goes out
/// without an allocation of its own).
const CHUNK_BUFFER: usize = 64 << 10;

/// A stream's writing half, with [`Writer::send`] for sealed octets.
///
/// A QUIC stream is given them as owned chunks (`write_chunk`), cut from
/// one reused buffer: quinn keeps a chunk, without copying it again, until
/// the peer has acknowledged it, and the buffer is used again once quinn
/// has dropped every chunk of it. quinn's own `write` copies into a new
/// allocation on every write; this copies into the reused buffer, so a
/// small write costs no allocation. A write larger than the buffer is
/// copied by quinn as before: handing such a batch over without a copy
/// takes a new buffer as large each time, whose pages fault in again (0.9
/// of quinn's copy with 8 KiB messages; results/2026-12-06-bytes-end-to-end/).
/// Any other stream (TLS, the Control stream) is written and flushed.
pub enum Writer {
    Quic {
        stream: quinn::SendStream,
        chunks: BytesMut,
    },
    Other(BoxWrite),
}

impl Writer {
    /// A QUIC stream's writer.
    pub fn quic(stream: quinn::SendStream) -> Self {
        Self::Quic {
            stream,
            // Allocated at the first write: an association that sends
            // nothing holds none.
            chunks: BytesMut::new(),
        }
    }

    /// Writes `octets` and flushes them.
    pub async fn send(&mut self, octets: &[u8]) -> Result<(), LinkError> {
        match self {
            Self::Quic { stream, chunks } if octets.len() <= CHUNK_BUFFER => {
                // Room in the buffer, or the buffer again if quinn has let
                // go of all of it, or a new one (`bytes` allocates at least
                // the first buffer's size).
                if chunks.capacity() == 0 {
                    // The first buffer's size is what `bytes` allocates
                    // again when quinn still holds the last one.
                    chunks.reserve(CHUNK_BUFFER);
                }
                chunks.reserve(octets.len());
                chunks.extend_from_slice(octets);
                let chunk = chunks.split().freeze();
                stream
                    .write_chunk(chunk)
                    .await
                    .map_err(std::io::Error::from)?;
            }
            w => {
                w.write_all(octets).await?;
                w.flush().await?;
            }
        }
        Ok(())
    }
}

impl AsyncWrite for Writer {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        match self.get_mut() {
            Self::Quic { stream, .. } => Pin::new(stream).poll_write(cx, buf).map_err(Into::into),
            Self::Other(w) => Pin::new(w).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Self::Quic { stream, .. } => Pin::new(stream).poll_flush(cx),
            Self::Other(w) => Pin::new(w).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Self::Quic { stream, .. } => Pin::new(stream).poll_shutdown(cx),
            Self::Other(w) => Pin::new(w).poll_shutdown(cx),
        }
    }
}

/// The streams of one association.
pub enum Binding {
    /// TCP + TLS 1.3: every channel on the one stream.
    Tls(Stream),
    /// QUIC: Control on `control`; Bridge on `bridge`, which a server has
    /// only once the client's stream has arrived (`None` until then).
    Quic {
        conn: quinn::Connection,
        control: Stream,
        /// Boxed: a stream (its reader's buffers, its writer) is large.
        bridge: Option<Box<Stream>>,
    },
}

impl Binding {
    /// The transport: [`Scheme::Tls`] or [`Scheme::Quic`].
    pub fn scheme(&self) -> Scheme {
        match self {
            Self::Tls(_) => Scheme::Tls,
            Self::Quic { .. } => Scheme::Quic,
        }
    }

    /// The QUIC connection, if this is QUIC.
    pub fn quic(&self) -> Option<&quinn::Connection> {
        match self {
            Self::Tls(_) => None,
            Self::Quic { conn, .. } => Some(conn),
        }
    }

    /// The Control channel's stream.
    pub fn control(&mut self) -> &mut Stream {
        match self {
            Self::Tls(stream) => stream,
            Self::Quic { control, .. } => control,
        }
    }

    /// The stream that carries `channel` now (`None`: a QUIC Bridge stream
    /// not opened yet).
    pub fn stream_for(&mut self, channel: ChannelId) -> Option<&mut Stream> {
        match self {
            Self::Tls(stream) => Some(stream),
            Self::Quic { control, .. } if channel != ChannelId::BRIDGE => Some(control),
            Self::Quic { bridge, .. } => bridge.as_deref_mut(),
        }
    }

    /// Client side: opens the QUIC Bridge stream, its frames up to
    /// `max_payload` octets (nothing to do over TLS).
    pub async fn open_bridge(&mut self, max_payload: u32) -> Result<(), LinkError> {
        if let Self::Quic { conn, bridge, .. } = self
            && bridge.is_none()
        {
            let (w, r) = conn.open_bi().await?;
            *bridge = Some(Box::new(Stream {
                reader: FrameReader::authenticated(Box::new(r), max_payload),
                writer: Writer::quic(w),
            }));
        }
        Ok(())
    }

    /// Whether the peer learns of the Bridge stream only from a frame on
    /// it: a QUIC client's stream, opened but not yet written.
    pub fn bridge_needs_announcing(&self) -> bool {
        matches!(
            self,
            Self::Quic {
                bridge: Some(_),
                ..
            }
        )
    }

    /// The halves the driver's reader and writer tasks take.
    pub(super) fn split(self) -> (Readers, Writers) {
        match self {
            Self::Tls(stream) => (
                Readers {
                    streams: ReadStreams {
                        control: stream.reader,
                        bridge: None,
                    },
                    pending: PendingBridge {
                        conn: None,
                        accept: None,
                    },
                },
                Writers {
                    control: stream.writer,
                    bridge: BridgeWriter::OnControl,
                },
            ),
            Self::Quic {
                conn,
                control,
                bridge: Some(bridge),
            } => (
                Readers {
                    streams: ReadStreams {
                        control: control.reader,
                        bridge: Some(bridge.reader),
                    },
                    pending: PendingBridge {
                        conn: Some(conn),
                        accept: None,
                    },
                },
                Writers {
                    control: control.writer,
                    bridge: BridgeWriter::Own(bridge.writer),
                },
            ),
            Self::Quic {
                conn,
                control,
                bridge: None,
            } => {
                let (tx, rx) = oneshot::channel();
                (
                    Readers {
                        streams: ReadStreams {
                            control: control.reader,
                            bridge: None,
                        },
                        pending: PendingBridge {
                            conn: Some(conn),
                            accept: Some(tx),
                        },
                    },
                    Writers {
                        control: control.writer,
                        bridge: BridgeWriter::Accepted(rx),
                    },
                )
            }
        }
    }
}

/// The reading side of a running association: the streams it reads, and
/// (QUIC server) the Bridge stream still to be accepted.
pub(super) struct Readers {
    pub streams: ReadStreams,
    pub pending: PendingBridge,
}

/// The streams a running association reads.
pub(super) struct ReadStreams {
    pub control: FrameReader,
    /// QUIC: the Bridge stream's frames, once there is a Bridge stream.
    pub bridge: Option<FrameReader>,
}

impl ReadStreams {
    /// Reads until one of the streams has a whole frame buffered: `false`
    /// at a clean end of either stream (between frames). Cancel-safe.
    pub async fn fill(&mut self) -> Result<bool, LinkError> {
        match &mut self.bridge {
            None => self.control.fill().await,
            Some(bridge) => tokio::select! {
                r = self.control.fill() => r,
                r = bridge.fill() => r,
            },
        }
    }
}

/// A QUIC connection's Bridge stream still to be accepted (server), and
/// where its writer goes (the writer task).
pub(super) struct PendingBridge {
    conn: Option<quinn::Connection>,
    accept: Option<oneshot::Sender<Writer>>,
}

impl PendingBridge {
    /// Waits for the client's Bridge stream and returns its reader (frames
    /// up to `max_payload`); pending forever when there is none to wait for.
    pub async fn accept(&mut self, max_payload: u32) -> Result<FrameReader, LinkError> {
        let (Some(conn), Some(_)) = (&self.conn, &self.accept) else {
            return std::future::pending().await;
        };
        let (w, r) = conn.accept_bi().await?;
        if let Some(tx) = self.accept.take() {
            let _ = tx.send(Writer::quic(w));
        }
        Ok(FrameReader::authenticated(Box::new(r), max_payload))
    }

    /// The QUIC connection, to close when the association has ended.
    pub fn into_conn(self) -> Option<quinn::Connection> {
        self.conn
    }
}

/// Where the Bridge channel's octets are written.
enum BridgeWriter {
    /// TLS: on the Control stream.
    OnControl,
    Own(Writer),
    /// QUIC server: the stream the reader accepts, once it has.
    Accepted(oneshot::Receiver<Writer>),
    /// The reader ended without accepting one.
    Missing,
}

/// The writing side of a running association.
pub(super) struct Writers {
    control: Writer,
    bridge: BridgeWriter,
}

impl Writers {
    /// Writes `octets` of `channel` and flushes them.
    pub async fn write(&mut self, channel: ChannelId, octets: &[u8]) -> Result<(), LinkError> {
        let w = if channel == ChannelId::BRIDGE {
            if let BridgeWriter::Accepted(rx) = &mut self.bridge {
                self.bridge = match rx.await {
                    Ok(w) => BridgeWriter::Own(w),
                    Err(_) => BridgeWriter::Missing,
                };
            }
            match &mut self.bridge {
                BridgeWriter::OnControl => &mut self.control,
                BridgeWriter::Own(w) => w,
                BridgeWriter::Accepted(_) | BridgeWriter::Missing => {
                    return Err(LinkError::NoBridgeStream);
                }
            }
        } else {
            &mut self.control
        };
        w.send(octets).await
    }

    /// Finishes the streams (QUIC FIN, TLS close_notify); errors do not
    /// matter any more.
    pub async fn shutdown(&mut self) {
        if let BridgeWriter::Own(w) = &mut self.bridge {
            let _ = w.shutdown().await;
        }
        let _ = self.control.shutdown().await;
    }
}
