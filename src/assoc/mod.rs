//! The N-PAMP association after the handshake (sans-IO): per-(channel,
//! direction) sequence numbers and traffic keys, PING/PONG with RTT,
//! authenticated CLOSE/CLOSE_ACK, KEY_UPDATE before a send budget runs out,
//! and the receive rules: unknown channels dropped and counted, a forged
//! CLOSE dropped and counted, any other tampered, replayed or reordered frame
//! fatal.
//!
//! ```text
//!  frame octets ──Association::handle──▶ Event (Bridge payload | Pong | Closed | ...) + frames to send
//!  Association::seal / ping / close ──▶ frames to send
//! ```
//!
//! The async drivers (`transport`) only move these octets; time comes in as
//! an `Instant` argument.

pub mod driver;
pub mod stats;
pub mod transport;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use crate::handshake::Established;
use crate::record::{Direction, RecordError, RecvState, SendState};
use crate::wire::{ChannelId, Flags, FrameType, Header, Tlv, TlvType, tlv::decode_one};

/// Channels this implementation enables ("advertises"): Control and Bridge.
pub const CHANNELS: [ChannelId; 2] = [ChannelId::CONTROL, ChannelId::BRIDGE];

/// Tunables of an association.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AssocConfig {
    /// Frames one (channel, direction) may send under one key before a
    /// KEY_UPDATE. Default 2^24, well inside AES-GCM's usage limit.
    pub key_update_after_frames: u64,
}

impl Default for AssocConfig {
    fn default() -> Self {
        Self {
            key_update_after_frames: 1 << 24,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    Client,
    Server,
}

/// Why an association ended with an error.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AssocError {
    #[error("record layer: {0}")]
    Record(#[from] RecordError),
    #[error("frame on channel {channel:?} failed authentication (type {frame_type:?})")]
    Tampered {
        channel: ChannelId,
        frame_type: FrameType,
    },
    #[error("malformed {0} frame")]
    Malformed(&'static str),
    #[error("the association is closed")]
    Closed,
}

/// Why a frame was dropped without closing the association.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Drop {
    UnknownChannel(ChannelId),
    ForgedClose,
    UnknownFrameType(FrameType),
}

/// What an inbound frame meant.
#[derive(Debug, PartialEq, Eq)]
pub enum Event<'a> {
    /// Nothing for the caller (a PING answered, a KEY_UPDATE applied, ...).
    None,
    /// A Bridge-channel operation frame and its plaintext.
    Bridge {
        frame_type: FrameType,
        payload: &'a [u8],
    },
    /// The answer to a [`Association::ping`].
    Pong {
        rtt: Duration,
    },
    /// The peer closed the association (a CLOSE_ACK was queued).
    Closed {
        code: u16,
    },
    /// The peer acknowledged our CLOSE.
    CloseAcked,
    Dropped(Drop),
}

/// Counters for metrics and tests.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    pub frames_in: u64,
    pub frames_out: u64,
    pub dropped_unknown_channel: u64,
    pub dropped_forged_close: u64,
    pub dropped_unknown_frame_type: u64,
    pub key_updates_sent: u64,
    pub key_updates_received: u64,
}

struct Channel {
    id: ChannelId,
    send: SendState,
    recv: RecvState,
    send_epoch: u64,
    recv_epoch: u64,
}

/// One established N-PAMP association.
pub struct Association {
    established: Established,
    send_dir: Direction,
    recv_dir: Direction,
    channels: Vec<Channel>,
    config: AssocConfig,
    pings: HashMap<u64, Instant>,
    next_ping: u64,
    counters: Counters,
    closed: bool,
}

impl std::fmt::Debug for Association {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Association")
            .field("peer", &hex::encode(self.established.peer_identity))
            .field("counters", &self.counters)
            .finish_non_exhaustive()
    }
}

impl Association {
    pub fn new(
        role: Role,
        established: Established,
        config: AssocConfig,
    ) -> Result<Self, AssocError> {
        let (send_dir, recv_dir) = match role {
            Role::Client => (Direction::ClientToServer, Direction::ServerToClient),
            Role::Server => (Direction::ServerToClient, Direction::ClientToServer),
        };
        let mut channels = Vec::with_capacity(CHANNELS.len());
        for id in CHANNELS {
            channels.push(Channel {
                id,
                send: SendState::new(established.traffic_keys(send_dir, 0, id)?),
                recv: RecvState::new(established.traffic_keys(recv_dir, 0, id)?),
                send_epoch: 0,
                recv_epoch: 0,
            });
        }
        Ok(Self {
            established,
            send_dir,
            recv_dir,
            channels,
            config,
            pings: HashMap::new(),
            next_ping: 0,
            counters: Counters::default(),
            closed: false,
        })
    }

    pub fn peer_identity(&self) -> &[u8; 32] {
        &self.established.peer_identity
    }

    pub fn counters(&self) -> Counters {
        self.counters
    }

    pub fn is_closed(&self) -> bool {
        self.closed
    }

    fn channel_index(&self, id: ChannelId) -> Option<usize> {
        self.channels.iter().position(|c| c.id == id)
    }

    /// Seals one frame on `channel` into `out` (appending), updating keys
    /// first when the channel's send budget is spent.
    pub fn seal(
        &mut self,
        out: &mut Vec<u8>,
        channel: ChannelId,
        frame_type: FrameType,
        write: impl FnOnce(&mut Vec<u8>),
    ) -> Result<Header, AssocError> {
        if self.closed {
            return Err(AssocError::Closed);
        }
        let i = self
            .channel_index(channel)
            .ok_or(AssocError::Malformed("channel not enabled"))?;
        if self.channels[i].send.next_seq() >= self.config.key_update_after_frames {
            self.key_update(out, i)?;
        }
        let header =
            self.channels[i]
                .send
                .seal_into(out, Flags::NONE, frame_type, channel, write)?;
        self.counters.frames_out += 1;
        Ok(header)
    }

    /// KEY_UPDATE (carrying the new epoch as a KeyUpdateMarker) as the last
    /// frame under the old key, then the new epoch's key with sequence 0.
    fn key_update(&mut self, out: &mut Vec<u8>, i: usize) -> Result<(), AssocError> {
        let c = &mut self.channels[i];
        let epoch = c.send_epoch + 1;
        let marker = epoch.to_be_bytes();
        c.send
            .seal_into(out, Flags::NONE, FrameType::KEY_UPDATE, c.id, |o| {
                // A fixed 8-octet value always encodes.
                let _ = Tlv {
                    tlv_type: TlvType::KEY_UPDATE_MARKER,
                    value: &marker,
                }
                .encode_into(o);
            })?;
        let keys = self.established.traffic_keys(self.send_dir, epoch, c.id)?;
        c.send.rekey(keys);
        c.send_epoch = epoch;
        self.counters.frames_out += 1;
        self.counters.key_updates_sent += 1;
        Ok(())
    }

    /// Queues a PING on the Control channel; the matching PONG reports the RTT.
    pub fn ping(&mut self, out: &mut Vec<u8>, now: Instant) -> Result<u64, AssocError> {
        self.next_ping += 1;
        let id = self.next_ping;
        self.seal(out, ChannelId::CONTROL, FrameType::PING, |o| {
            o.extend_from_slice(&id.to_be_bytes())
        })?;
        self.pings.insert(id, now);
        Ok(id)
    }

    /// Queues an authenticated CLOSE; the association accepts no more sends.
    pub fn close(&mut self, out: &mut Vec<u8>, code: u16) -> Result<(), AssocError> {
        self.seal(out, ChannelId::CONTROL, FrameType::CLOSE, |o| {
            o.extend_from_slice(&code.to_be_bytes())
        })?;
        self.closed = true;
        Ok(())
    }

    /// Handles one whole inbound frame (header already decoded by the
    /// deframer), opening it in place; replies go to `out`.
    pub fn handle<'f>(
        &mut self,
        header: &Header,
        frame: &'f mut [u8],
        now: Instant,
        out: &mut Vec<u8>,
    ) -> Result<Event<'f>, AssocError> {
        self.counters.frames_in += 1;
        let Some(i) = self.channel_index(header.channel) else {
            self.counters.dropped_unknown_channel += 1;
            return Ok(Event::Dropped(Drop::UnknownChannel(header.channel)));
        };
        let payload = match self.channels[i].recv.open(header, frame) {
            Ok(p) => p,
            Err(RecordError::Open) if header.frame_type == FrameType::CLOSE => {
                self.counters.dropped_forged_close += 1;
                return Ok(Event::Dropped(Drop::ForgedClose));
            }
            Err(RecordError::Open) => {
                return Err(AssocError::Tampered {
                    channel: header.channel,
                    frame_type: header.frame_type,
                });
            }
            Err(e) => return Err(e.into()),
        };
        match header.frame_type {
            FrameType::PING => {
                let echo: [u8; 8] = payload
                    .try_into()
                    .map_err(|_| AssocError::Malformed("PING"))?;
                self.seal(out, header.channel, FrameType::PONG, |o| {
                    o.extend_from_slice(&echo)
                })?;
                Ok(Event::None)
            }
            FrameType::PONG => {
                let id: [u8; 8] = payload
                    .try_into()
                    .map_err(|_| AssocError::Malformed("PONG"))?;
                match self.pings.remove(&u64::from_be_bytes(id)) {
                    Some(sent) => Ok(Event::Pong {
                        rtt: now.saturating_duration_since(sent),
                    }),
                    None => Ok(Event::None),
                }
            }
            FrameType::CLOSE => {
                let code = match *payload {
                    [a, b] => u16::from_be_bytes([a, b]),
                    _ => 0,
                };
                if !self.closed {
                    self.seal(out, ChannelId::CONTROL, FrameType::CLOSE_ACK, |_| {})?;
                    self.closed = true;
                }
                Ok(Event::Closed { code })
            }
            FrameType::CLOSE_ACK => Ok(Event::CloseAcked),
            FrameType::KEY_UPDATE => {
                let tlv = decode_one(payload).map_err(|_| AssocError::Malformed("KEY_UPDATE"))?;
                let epoch: [u8; 8] = tlv
                    .value
                    .try_into()
                    .map_err(|_| AssocError::Malformed("KEY_UPDATE"))?;
                let epoch = u64::from_be_bytes(epoch);
                let c = &mut self.channels[i];
                if tlv.tlv_type != TlvType::KEY_UPDATE_MARKER || epoch != c.recv_epoch + 1 {
                    return Err(AssocError::Malformed("KEY_UPDATE"));
                }
                let keys = self.established.traffic_keys(self.recv_dir, epoch, c.id)?;
                c.recv.rekey(keys);
                c.recv_epoch = epoch;
                self.counters.key_updates_received += 1;
                self.seal(out, header.channel, FrameType::KEY_UPDATE_ACK, |o| {
                    o.extend_from_slice(&epoch.to_be_bytes())
                })?;
                Ok(Event::None)
            }
            FrameType::KEY_UPDATE_ACK => Ok(Event::None),
            t if header.channel == ChannelId::BRIDGE
                && crate::bridge::kind_for_frame_type(t).is_some() =>
            {
                Ok(Event::Bridge {
                    frame_type: t,
                    payload,
                })
            }
            t => {
                self.counters.dropped_unknown_frame_type += 1;
                Ok(Event::Dropped(Drop::UnknownFrameType(t)))
            }
        }
    }
}

#[cfg(test)]
mod tests;
