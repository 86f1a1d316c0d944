//! Which stream carries which channel: the one place that knows, for each
//! transport (`docs/quic-binding.md`).
//!
//! - TCP + TLS 1.3, the spec's fallback: every channel on the one stream.
//! - QUIC: the Control channel on the first bidirectional stream (the
//!   handshake runs on it); the Bridge channel on a bidirectional stream of
//!   its own, opened by the client once the association is established and
//!   announced by a PING on it, accepted by the server when it arrives.

use tokio::io::AsyncWriteExt;
use tokio::sync::oneshot;

use super::addr::Scheme;
use super::error::LinkError;
use super::frames::{BoxWrite, FrameReader};
use crate::wire::ChannelId;

/// One stream's two halves: whole frames in, octets out.
pub struct Stream {
    pub reader: FrameReader,
    pub writer: BoxWrite,
}

impl Stream {
    pub fn new(reader: FrameReader, writer: BoxWrite) -> Self {
        Self { reader, writer }
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
        bridge: Option<Stream>,
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
            Self::Quic { bridge, .. } => bridge.as_mut(),
        }
    }

    /// Client side: opens the QUIC Bridge stream, its frames up to
    /// `max_payload` octets (nothing to do over TLS).
    pub async fn open_bridge(&mut self, max_payload: u32) -> Result<(), LinkError> {
        if let Self::Quic { conn, bridge, .. } = self
            && bridge.is_none()
        {
            let (w, r) = conn.open_bi().await?;
            *bridge = Some(Stream::new(
                FrameReader::authenticated(Box::new(r), max_payload),
                Box::new(w),
            ));
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
    accept: Option<oneshot::Sender<BoxWrite>>,
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
            let _ = tx.send(Box::new(w));
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
    Own(BoxWrite),
    /// QUIC server: the stream the reader accepts, once it has.
    Accepted(oneshot::Receiver<BoxWrite>),
    /// The reader ended without accepting one.
    Missing,
}

/// The writing side of a running association.
pub(super) struct Writers {
    control: BoxWrite,
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
        w.write_all(octets).await?;
        w.flush().await?;
        Ok(())
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
