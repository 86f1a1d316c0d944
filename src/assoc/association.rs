//! The N-PAMP association after the handshake (sans-IO): per-(channel,
//! direction) sequence numbers and traffic keys, PING/PONG with RTT,
//! authenticated CLOSE/CLOSE_ACK, KEY_UPDATE before a send budget runs out,
//! and the receive rules: unknown channels dropped and counted, a forged
//! CLOSE dropped and counted, any other tampered, replayed or reordered frame
//! fatal.
//!
//! ```text
//!  frame octets ──handle(now)──▶ Event (Bridge payload | Pong | Closed | ...)
//!  seal / ping / close ─────────▶ ┐
//!  replies to handle ───────────▶ ├─ octets queued per channel ──poll_transmit──▶ the caller writes them
//!  handle_timeout(now) ─────────▶ ┘   (KEY_UPDATE, keepalive PING)
//!  poll_timeout() ──▶ when handle_timeout next has something to do
//! ```
//!
//! In the quinn-proto style: the association never touches a socket or a
//! clock. Time comes in as an `Instant` argument, and the driver
//! ([`super::driver`]) sleeps until [`Association::poll_timeout`] and writes
//! what [`Association::poll_transmit`] hands it to the stream that carries
//! the channel ([`super::binding`]).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use crate::handshake::Established;
use crate::record::{Direction, RecordError, RecvState, Sealed, SendState, TAG_LEN};
use crate::wire::{ChannelId, Flags, FrameType, Header, Tlv, TlvType, tlv::decode_one};

/// Channels this implementation enables ("advertises"): Control and Bridge.
pub const CHANNELS: [ChannelId; 2] = [ChannelId::CONTROL, ChannelId::BRIDGE];

/// Tunables of an association.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AssocConfig {
    /// Frames one (channel, direction) may send under one key before a
    /// KEY_UPDATE. Default 2^24, well inside AES-GCM's usage limit.
    pub key_update_after_frames: u64,
    /// Plaintext octets one (channel, direction) may protect under one key
    /// before a KEY_UPDATE. Default 2^36 (64 GiB): under TLS 1.3's AES-GCM
    /// budget of 2^24.5 full records (about 2^38.5 octets, RFC 8446 §5.5),
    /// which the frame budget alone would not keep with large frames.
    pub key_update_after_bytes: u64,
    /// How long one (channel, direction) may use one key, once it has
    /// protected anything (draft §9, "Forward Secrecy and Key Update": bounds
    /// on elapsed time, frames and bytes). Default one hour.
    pub key_update_after: Duration,
    /// Silence from the peer after which a PING is sent. Default 15 s.
    pub keepalive_after: Duration,
    /// Silence from the peer after which the association is given up (the
    /// PINGs went unanswered). Default 45 s.
    pub peer_timeout: Duration,
    /// Largest frame payload accepted from the peer once it is
    /// authenticated, checked before the payload is buffered (before the
    /// handshake completes, [`super::HANDSHAKE_MAX_PAYLOAD`] applies).
    /// Default [`crate::wire::DEFAULT_MAX_PAYLOAD_LEN`] (1 MiB + 64 KiB).
    pub max_payload_len: u32,
}

impl Default for AssocConfig {
    fn default() -> Self {
        Self {
            key_update_after_frames: 1 << 24,
            key_update_after_bytes: 1 << 36,
            key_update_after: Duration::from_secs(3600),
            keepalive_after: Duration::from_secs(15),
            peer_timeout: Duration::from_secs(45),
            max_payload_len: crate::wire::DEFAULT_MAX_PAYLOAD_LEN,
        }
    }
}

/// What [`Association::handle_timeout`] found about the peer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Liveness {
    /// Heard from recently, or a PING is on its way.
    Alive,
    /// Nothing heard for this long, past [`AssocConfig::peer_timeout`].
    Silent(Duration),
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
    /// Plaintext octets sealed under the current send key.
    sent_bytes: u64,
    /// When the current send key was installed (as far as the association
    /// knew the time then: see [`Association::clock`]).
    send_key_since: Instant,
    /// Sealed octets of this channel not yet handed to the caller
    /// ([`Association::poll_transmit`]).
    queued: Vec<u8>,
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
    /// When the last keepalive PING went out.
    last_keepalive: Option<Instant>,
    /// Since when the peer has been silent while the caller was ready to
    /// read: the arrival of the last frame, or the caller's word
    /// ([`Association::reading_again`]).
    quiet_since: Instant,
    /// The latest time the association was given (at creation, by `handle`
    /// or `tick`); sealing takes no clock, so a key installed while sealing
    /// dates from this.
    clock: Instant,
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
    /// An association over the keys of `established`, created at `now`.
    pub fn new(
        role: Role,
        established: Established,
        config: AssocConfig,
        now: Instant,
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
                sent_bytes: 0,
                send_key_since: now,
                queued: Vec::new(),
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
            last_keepalive: None,
            quiet_since: now,
            clock: now,
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

    pub fn config(&self) -> &AssocConfig {
        &self.config
    }

    fn channel_index(&self, id: ChannelId) -> Option<usize> {
        self.channels.iter().position(|c| c.id == id)
    }

    /// Seals one frame on `channel` whose payload `write` appends, and
    /// queues it for [`Association::poll_transmit`]; updates the channel's
    /// keys first when its send budget (frames or octets) is spent.
    pub fn seal(
        &mut self,
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
        let c = &self.channels[i];
        if c.send.next_seq() >= self.config.key_update_after_frames
            || c.sent_bytes >= self.config.key_update_after_bytes
        {
            self.key_update(i)?;
        }
        let c = &mut self.channels[i];
        let header = c
            .send
            .seal_into(&mut c.queued, Flags::NONE, frame_type, c.id, write)?;
        c.sent_bytes += u64::from(header.payload_len).saturating_sub(TAG_LEN as u64);
        self.counters.frames_out += 1;
        Ok(header)
    }

    /// Hands over the octets queued for one channel (Control before
    /// Bridge): they are swapped into `spare`, whose buffer the channel
    /// queues into from then on (no copy; no allocation once both buffers
    /// have grown). `spare` is cleared first. `None`: nothing is queued.
    pub fn poll_transmit(&mut self, spare: &mut Vec<u8>) -> Option<ChannelId> {
        let c = self.channels.iter_mut().find(|c| !c.queued.is_empty())?;
        spare.clear();
        std::mem::swap(&mut c.queued, spare);
        Some(c.id)
    }

    /// Octets queued on `channel` and not yet handed over.
    pub fn queued(&self, channel: ChannelId) -> usize {
        self.channel_index(channel)
            .map_or(0, |i| self.channels[i].queued.len())
    }

    /// The caller is ready to read again at `now`: the peer's silence is
    /// counted from here (time the caller spent delivering what arrived is
    /// not the peer's silence).
    pub fn reading_again(&mut self, now: Instant) {
        self.quiet_since = self.quiet_since.max(now);
        self.clock = self.clock.max(now);
    }

    /// When [`Association::handle_timeout`] next has something to do: a
    /// keepalive PING, giving up a silent peer, or a time-based key update.
    /// `None` once closed. Handling a frame, [`Association::reading_again`]
    /// and a timeout move it; so does the first frame sealed under a new key
    /// (its key-update deadline starts then), which only ever matters for
    /// [`AssocConfig::key_update_after`], far beyond the keepalive deadline
    /// a driver wakes at anyway.
    pub fn poll_timeout(&self) -> Option<Instant> {
        if self.closed {
            return None;
        }
        let ka = self.config.keepalive_after;
        let ping_from = match self.last_keepalive {
            Some(at) => at.max(self.quiet_since),
            None => self.quiet_since,
        };
        let key_updates = self
            .channels
            .iter()
            .filter(|c| c.send.next_seq() > 0)
            .filter_map(|c| c.send_key_since.checked_add(self.config.key_update_after));
        [
            self.quiet_since.checked_add(self.config.peer_timeout),
            ping_from.checked_add(ka),
        ]
        .into_iter()
        .flatten()
        .chain(key_updates)
        .min()
    }

    /// What the passing of time asks for, at or after
    /// [`Association::poll_timeout`] (calling it early does no harm).
    /// Updates the keys of channels whose send key is older than
    /// [`AssocConfig::key_update_after`] (a KEY_UPDATE queued on the
    /// channel itself), queues a keepalive PING after
    /// [`AssocConfig::keepalive_after`] of silence, and reports
    /// [`Liveness::Silent`] after [`AssocConfig::peer_timeout`].
    pub fn handle_timeout(&mut self, now: Instant) -> Result<Liveness, AssocError> {
        self.clock = self.clock.max(now);
        if self.closed {
            return Ok(Liveness::Alive);
        }
        for i in 0..self.channels.len() {
            let c = &self.channels[i];
            // A key that protected nothing has nothing to retire.
            if c.send.next_seq() > 0
                && now.saturating_duration_since(c.send_key_since) >= self.config.key_update_after
            {
                self.key_update(i)?;
            }
        }
        let silent = now.saturating_duration_since(self.quiet_since);
        if silent >= self.config.peer_timeout {
            return Ok(Liveness::Silent(silent));
        }
        let ping_due = self
            .last_keepalive
            .is_none_or(|at| now.saturating_duration_since(at) >= self.config.keepalive_after);
        if silent >= self.config.keepalive_after && ping_due {
            self.ping(now)?;
            self.last_keepalive = Some(now);
        }
        Ok(Liveness::Alive)
    }

    /// KEY_UPDATE (carrying the new epoch as a KeyUpdateMarker) as the last
    /// frame under the old key, then the new epoch's key with sequence 0.
    fn key_update(&mut self, i: usize) -> Result<(), AssocError> {
        let c = &mut self.channels[i];
        let epoch = c.send_epoch + 1;
        let marker = epoch.to_be_bytes();
        c.send.seal_into(
            &mut c.queued,
            Flags::NONE,
            FrameType::KEY_UPDATE,
            c.id,
            |o| {
                // A fixed 8-octet value always encodes.
                let _ = Tlv {
                    tlv_type: TlvType::KEY_UPDATE_MARKER,
                    value: &marker,
                }
                .encode_into(o);
            },
        )?;
        let keys = self.established.traffic_keys(self.send_dir, epoch, c.id)?;
        c.send.rekey(keys);
        c.send_epoch = epoch;
        c.sent_bytes = 0;
        c.send_key_since = self.clock;
        self.counters.frames_out += 1;
        self.counters.key_updates_sent += 1;
        Ok(())
    }

    /// Queues a PING on the Control channel; the matching PONG reports the RTT.
    pub fn ping(&mut self, now: Instant) -> Result<u64, AssocError> {
        self.ping_on(ChannelId::CONTROL, now)
    }

    /// A PING on `channel` (over QUIC, one on the Bridge channel is what
    /// opens the Bridge stream before there is anything else to send).
    pub fn ping_on(&mut self, channel: ChannelId, now: Instant) -> Result<u64, AssocError> {
        self.next_ping += 1;
        let id = self.next_ping;
        self.seal(channel, FrameType::PING, |o| {
            o.extend_from_slice(&id.to_be_bytes())
        })?;
        self.pings.insert(id, now);
        Ok(id)
    }

    /// Queues an authenticated CLOSE; the association accepts no more sends.
    pub fn close(&mut self, code: u16) -> Result<(), AssocError> {
        self.seal(ChannelId::CONTROL, FrameType::CLOSE, |o| {
            o.extend_from_slice(&code.to_be_bytes())
        })?;
        self.closed = true;
        Ok(())
    }

    /// Handles one whole inbound frame (header already decoded by the
    /// deframer) that arrived at `now`, opening it in place; replies are
    /// queued for [`Association::poll_transmit`].
    pub fn handle<'f>(
        &mut self,
        header: &Header,
        frame: &'f mut [u8],
        now: Instant,
    ) -> Result<Event<'f>, AssocError> {
        self.handle_sealed(header, Sealed::Whole(frame), now)
    }

    /// [`Association::handle`] for a frame read whole or with its tag apart
    /// (a large frame in an allocation of its own): the same rules either
    /// way.
    pub fn handle_sealed<'f>(
        &mut self,
        header: &Header,
        frame: Sealed<'f>,
        now: Instant,
    ) -> Result<Event<'f>, AssocError> {
        self.clock = self.clock.max(now);
        self.quiet_since = self.quiet_since.max(now);
        self.counters.frames_in += 1;
        let Some(i) = self.channel_index(header.channel) else {
            self.counters.dropped_unknown_channel += 1;
            return Ok(Event::Dropped(Drop::UnknownChannel(header.channel)));
        };
        let payload = match self.channels[i].recv.open_sealed(header, frame) {
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
                self.seal(header.channel, FrameType::PONG, |o| {
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
                    self.seal(ChannelId::CONTROL, FrameType::CLOSE_ACK, |_| {})?;
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
                self.seal(header.channel, FrameType::KEY_UPDATE_ACK, |o| {
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
#[path = "association_tests.rs"]
pub(super) mod tests;
