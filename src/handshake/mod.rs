//! The N-PAMP 1.5-RTT handshake (handshake binding, `spec/10_handshake_binding.md`),
//! Standard profile: X25519MLKEM768, Ed25519, SHA-256, AES-256-GCM or
//! ChaCha20-Poly1305.
//!
//! ```text
//!  client ── CLIENT_HELLO  (ProfileOffer, KEMOffer, SigOffer, AEADOffer, KEMShare) ──▶ server
//!  client ◀── SERVER_HELLO (ProfileSelect, KEMSelect, SigSelect, AEADSelect, KEMCiphertext)
//!  client ◀── SERVER_AUTH  sealed(IdentityKey, CertVerify, Finished)
//!  client ── CLIENT_AUTH   sealed(IdentityKey, CertVerify, Finished) ──────────────────▶ server
//! ```
//!
//! Sans-IO: [`Client`] and [`Server`] take frame octets and return frame
//! octets and, at the end, an [`Established`] association secret. They never
//! read a clock or an RNG: randomness comes in as [`ClientRandom`] /
//! [`ServerKem`], so tests are deterministic (the handshake-flow KAT is
//! reproduced byte for byte). Timeouts are the driver's.

mod auth;
mod kem;
pub mod mlkem;
mod transcript;

pub use auth::{
    CLIENT_CONTEXT, ED25519_SCHEME, Identity, SERVER_CONTEXT, finished_mac, signing_input,
    verify_finished,
};
pub use kem::{ClientKem, KEM_CIPHERTEXT_LEN, KEM_SHARE_LEN, SHARED_SECRET_LEN, ServerKem};
pub use transcript::Transcript;

use crate::record::{
    Direction, HashAlg, Kem, Profile, RecordError, Secret, Suite, TrafficKeys, hkdf_extract,
};
use crate::wire::{ChannelId, Flags, FrameType, HEADER_LEN, Header, Tlv, TlvType, WireError};

pub const CLIENT_HELLO: FrameType = FrameType(0x0100);
pub const SERVER_HELLO: FrameType = FrameType(0x0101);
pub const SERVER_AUTH: FrameType = FrameType(0x0102);
pub const CLIENT_AUTH: FrameType = FrameType(0x0103);

/// Why a handshake failed. Every variant ends the handshake.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum HandshakeError {
    #[error("frame: {0}")]
    Wire(#[from] WireError),
    #[error("record layer: {0}")]
    Record(#[from] RecordError),
    #[error("expected {expected:?}, got frame type {got:?} on channel {channel:?}")]
    UnexpectedFrame {
        expected: FrameType,
        got: FrameType,
        channel: ChannelId,
    },
    #[error("{frame} must carry TLVs {expected}, in this order")]
    BadLayout {
        frame: &'static str,
        expected: &'static str,
    },
    #[error("{what} must be {expected} octets, got {got}")]
    BadLength {
        what: &'static str,
        expected: usize,
        got: usize,
    },
    #[error("no common {0} with the peer")]
    NoCommon(&'static str),
    #[error("the peer selected a {0} the client did not offer")]
    NotOffered(&'static str),
    #[error("peer CertVerify signature does not verify")]
    BadSignature,
    #[error("peer Finished MAC does not verify")]
    BadFinished,
    #[error("peer identity {0} is not among the pinned keys")]
    UntrustedPeer(String),
    #[error("crypto failure: {0}")]
    Crypto(&'static str),
    #[error("handshake already finished or failed")]
    Done,
}

/// Which peer identities a side accepts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Trust {
    /// Only these Ed25519 public keys.
    Pinned(Vec<[u8; 32]>),
    /// Any key: for tests and explicitly insecure deployments only.
    InsecureAcceptAny,
}

impl Trust {
    fn check(&self, key: &[u8; 32]) -> Result<(), HandshakeError> {
        match self {
            Self::InsecureAcceptAny => Ok(()),
            Self::Pinned(keys) if keys.contains(key) => Ok(()),
            Self::Pinned(_) => Err(HandshakeError::UntrustedPeer(hex::encode(key))),
        }
    }
}

/// What a side offers or accepts. Only the Standard profile is implemented
/// (X25519MLKEM1024 and ML-DSA-87 are not).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    /// Suites in preference order.
    pub suites: Vec<Suite>,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            suites: vec![Suite::AES_256_GCM, Suite::CHACHA20_POLY1305],
        }
    }
}

/// The client's randomness: the ML-KEM seed `d ‖ z` and the X25519 private
/// key, from a CSPRNG.
pub struct ClientRandom {
    pub mlkem_seed: [u8; 64],
    pub x25519: [u8; 32],
}

/// The result of a handshake: the negotiated parameters, the peer's
/// identity, and the master secret application keys descend from.
pub struct Established {
    pub profile: Profile,
    pub suite: Suite,
    pub peer_identity: [u8; 32],
    master: Secret,
}

impl std::fmt::Debug for Established {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Established")
            .field("profile", &self.profile)
            .field("suite", &self.suite)
            .field("peer_identity", &hex::encode(self.peer_identity))
            .finish_non_exhaustive()
    }
}

impl Established {
    /// Application traffic keys for (direction, epoch, channel) (binding §5).
    pub fn traffic_keys(
        &self,
        dir: Direction,
        epoch: u64,
        channel: ChannelId,
    ) -> Result<TrafficKeys, RecordError> {
        TrafficKeys::derive(&self.master, dir, epoch, self.suite, channel)
    }

    pub fn master_secret(&self) -> &Secret {
        &self.master
    }
}

const HASH: HashAlg = HashAlg::Sha256;

/// The handshake secrets of binding §5.
struct Schedule {
    handshake_secret: Secret,
    client_hs: Secret,
    server_hs: Secret,
}

impl Schedule {
    fn new(shared_secret: &[u8], th_kem: &[u8]) -> Result<Self, HandshakeError> {
        let handshake_secret = hkdf_extract(HASH, b"", shared_secret);
        Ok(Self {
            client_hs: handshake_secret.expand_label(b"c hs", th_kem)?,
            server_hs: handshake_secret.expand_label(b"s hs", th_kem)?,
            handshake_secret,
        })
    }

    fn keys(&self, dir: Direction, suite: Suite) -> Result<TrafficKeys, HandshakeError> {
        let parent = match dir {
            Direction::ClientToServer => &self.client_hs,
            Direction::ServerToClient => &self.server_hs,
        };
        Ok(TrafficKeys::derive(
            parent,
            dir,
            0,
            suite,
            ChannelId::CONTROL,
        )?)
    }

    fn finished_key(&self, dir: Direction) -> Result<Secret, HandshakeError> {
        let parent = match dir {
            Direction::ClientToServer => &self.client_hs,
            Direction::ServerToClient => &self.server_hs,
        };
        Ok(parent.expand_label(b"finished", b"")?)
    }

    fn master(&self, th_ccv: &[u8]) -> Result<Secret, HandshakeError> {
        Ok(self.handshake_secret.expand_label(b"master", th_ccv)?)
    }
}

/// A cleartext handshake frame: header then TLVs.
fn cleartext_frame(
    frame_type: FrameType,
    tlvs: &[(TlvType, &[u8])],
) -> Result<Vec<u8>, HandshakeError> {
    let mut body = Vec::new();
    for (t, v) in tlvs {
        Tlv {
            tlv_type: *t,
            value: v,
        }
        .encode_into(&mut body)?;
    }
    let len = u32::try_from(body.len()).map_err(|_| HandshakeError::Crypto("frame too long"))?;
    let mut frame = Header::new(Flags::NONE, frame_type, ChannelId::CONTROL, 0, len)
        .encode()?
        .to_vec();
    frame.extend_from_slice(&body);
    Ok(frame)
}

/// Reads a frame's header and checks type and channel.
fn expect_frame(frame: &[u8], expected: FrameType) -> Result<Header, HandshakeError> {
    let header = Header::decode_prefix(frame)?.ok_or(HandshakeError::BadLength {
        what: "frame",
        expected: HEADER_LEN,
        got: frame.len(),
    })?;
    if header.frame_type != expected || header.channel != ChannelId::CONTROL {
        return Err(HandshakeError::UnexpectedFrame {
            expected,
            got: header.frame_type,
            channel: header.channel,
        });
    }
    if frame.len() != HEADER_LEN + header.payload_len as usize {
        return Err(HandshakeError::BadLength {
            what: "frame",
            expected: HEADER_LEN + header.payload_len as usize,
            got: frame.len(),
        });
    }
    Ok(header)
}

/// A TLV's value and its whole encoding (for the transcript).
type ValueAndTlv<'a> = (&'a [u8], &'a [u8]);

/// Splits a TLV sequence into exactly the given types, in order.
fn exact_tlvs<'a, const N: usize>(
    body: &'a [u8],
    types: [TlvType; N],
    frame: &'static str,
    expected: &'static str,
) -> Result<[ValueAndTlv<'a>; N], HandshakeError> {
    let layout = || HandshakeError::BadLayout { frame, expected };
    let mut out = [(&[][..], &[][..]); N];
    let mut rest = body;
    for (slot, want) in out.iter_mut().zip(types) {
        let (tlv, tail) = Tlv::parse(rest).map_err(|_| layout())?;
        if tlv.tlv_type != want {
            return Err(layout());
        }
        *slot = (tlv.value, &rest[..rest.len() - tail.len()]);
        rest = tail;
    }
    if !rest.is_empty() {
        return Err(layout());
    }
    Ok(out)
}

fn u16s(value: &[u8]) -> impl Iterator<Item = u16> + '_ {
    value
        .chunks_exact(2)
        .map(|c| u16::from_be_bytes([c[0], c[1]]))
}

fn one_u16(value: &[u8], what: &'static str) -> Result<u16, HandshakeError> {
    match value {
        [a, b] => Ok(u16::from_be_bytes([*a, *b])),
        _ => Err(HandshakeError::BadLength {
            what,
            expected: 2,
            got: value.len(),
        }),
    }
}

/// Builds and seals an AUTH frame (IdentityKey, CertVerify, Finished) and
/// absorbs it into the transcript. Returns the frame and the transcript hash
/// through CertVerify (TH_sCV / TH_cCV).
fn auth_frame(
    transcript: &mut Transcript,
    frame_type: FrameType,
    identity: &Identity,
    context: &[u8],
    finished_key: &Secret,
    keys: &TrafficKeys,
) -> Result<(Vec<u8>, [u8; 32]), HandshakeError> {
    let mut plaintext = Vec::with_capacity(160);
    transcript.add_frame_type(frame_type);
    let id_tlv = encode_tlv(TlvType::IDENTITY_KEY, identity.public_key())?;
    transcript.add_tlv(&id_tlv);
    let signature = identity.sign(&signing_input(context, &transcript.hash()));
    let mut cv_value = ED25519_SCHEME.to_be_bytes().to_vec();
    cv_value.extend_from_slice(&signature);
    let cv_tlv = encode_tlv(TlvType::CERT_VERIFY, &cv_value)?;
    transcript.add_tlv(&cv_tlv);
    let th_cv = transcript.hash();
    let mac = finished_mac(finished_key, &th_cv);
    let fin_tlv = encode_tlv(TlvType::FINISHED, &mac)?;
    transcript.add_tlv(&fin_tlv);
    for t in [&id_tlv, &cv_tlv, &fin_tlv] {
        plaintext.extend_from_slice(t);
    }
    let mut frame = Vec::with_capacity(HEADER_LEN + plaintext.len() + 16);
    keys.seal_frame_into(
        &mut frame,
        Flags::NONE,
        frame_type,
        ChannelId::CONTROL,
        0,
        |o| o.extend_from_slice(&plaintext),
    )?;
    Ok((frame, th_cv))
}

fn encode_tlv(t: TlvType, value: &[u8]) -> Result<Vec<u8>, HandshakeError> {
    let mut out = Vec::with_capacity(4 + value.len());
    Tlv { tlv_type: t, value }.encode_into(&mut out)?;
    Ok(out)
}

/// Opens an AUTH frame and checks it against the transcript: identity
/// trusted, CertVerify over the transcript through the identity, Finished
/// over the transcript through CertVerify. Returns the peer's key and the
/// transcript hash through its CertVerify.
fn verify_auth_frame(
    transcript: &mut Transcript,
    frame: &[u8],
    frame_type: FrameType,
    context: &[u8],
    finished_key: &Secret,
    keys: &TrafficKeys,
    trust: &Trust,
) -> Result<([u8; 32], [u8; 32]), HandshakeError> {
    let header = expect_frame(frame, frame_type)?;
    let mut buf = frame.to_vec();
    let plaintext = keys.open_frame_with_header(&header, &mut buf)?;
    let name = if frame_type == SERVER_AUTH {
        "SERVER_AUTH"
    } else {
        "CLIENT_AUTH"
    };
    let [(id, id_tlv), (cv, cv_tlv), (fin, fin_tlv)] = exact_tlvs(
        plaintext,
        [
            TlvType::IDENTITY_KEY,
            TlvType::CERT_VERIFY,
            TlvType::FINISHED,
        ],
        name,
        "IdentityKey, CertVerify, Finished",
    )?;
    let peer: [u8; 32] = id.try_into().map_err(|_| HandshakeError::BadLength {
        what: "IdentityKey",
        expected: 32,
        got: id.len(),
    })?;
    trust.check(&peer)?;
    transcript.add_frame_type(frame_type);
    transcript.add_tlv(id_tlv);
    let scheme = one_u16(cv.get(..2).unwrap_or_default(), "CertVerify scheme")?;
    if scheme != ED25519_SCHEME {
        return Err(HandshakeError::NotOffered("signature scheme"));
    }
    auth::verify(&peer, &signing_input(context, &transcript.hash()), &cv[2..])?;
    transcript.add_tlv(cv_tlv);
    let th_cv = transcript.hash();
    verify_finished(finished_key, &th_cv, fin)?;
    transcript.add_tlv(fin_tlv);
    Ok((peer, th_cv))
}

enum ClientState {
    AwaitServerHello(ClientKem),
    AwaitServerAuth { schedule: Schedule, suite: Suite },
    Done,
}

/// The client side of the handshake.
pub struct Client {
    identity: Identity,
    trust: Trust,
    config: Config,
    transcript: Transcript,
    state: ClientState,
}

impl Client {
    /// Starts a handshake; returns the client and the CLIENT_HELLO frame.
    pub fn start(
        config: Config,
        identity: Identity,
        trust: Trust,
        random: &ClientRandom,
    ) -> Result<(Self, Vec<u8>), HandshakeError> {
        let kem = ClientKem::new(&random.mlkem_seed, &random.x25519)?;
        let suites: Vec<u8> = config
            .suites
            .iter()
            .flat_map(|s| s.0.to_be_bytes())
            .collect();
        let tlvs: [(TlvType, &[u8]); 5] = [
            (TlvType::PROFILE_OFFER, &[Profile::Standard.code()]),
            (TlvType::KEM_OFFER, &Kem::X25519_MLKEM768.0.to_be_bytes()),
            (TlvType::SIG_OFFER, &ED25519_SCHEME.to_be_bytes()),
            (TlvType::AEAD_OFFER, &suites),
            (TlvType::KEM_SHARE, kem.share()),
        ];
        let frame = cleartext_frame(CLIENT_HELLO, &tlvs)?;
        let mut transcript = Transcript::new();
        transcript.add_frame(&frame);
        Ok((
            Self {
                identity,
                trust,
                config,
                transcript,
                state: ClientState::AwaitServerHello(kem),
            },
            frame,
        ))
    }

    /// SERVER_HELLO: checks the selections against the offer and derives the
    /// handshake keys. Returns nothing to send.
    pub fn handle_server_hello(&mut self, frame: &[u8]) -> Result<(), HandshakeError> {
        let ClientState::AwaitServerHello(kem) =
            std::mem::replace(&mut self.state, ClientState::Done)
        else {
            return Err(HandshakeError::Done);
        };
        expect_frame(frame, SERVER_HELLO)?;
        let [(profile, _), (kem_sel, _), (sig, _), (aead, _), (ct, _)] = exact_tlvs(
            &frame[HEADER_LEN..],
            [
                TlvType::PROFILE_SELECT,
                TlvType::KEM_SELECT,
                TlvType::SIG_SELECT,
                TlvType::AEAD_SELECT,
                TlvType::KEM_CIPHERTEXT,
            ],
            "SERVER_HELLO",
            "ProfileSelect, KEMSelect, SigSelect, AEADSelect, KEMCiphertext",
        )?;
        if profile != [Profile::Standard.code()] {
            return Err(HandshakeError::NotOffered("profile"));
        }
        if one_u16(kem_sel, "KEMSelect")? != Kem::X25519_MLKEM768.0 {
            return Err(HandshakeError::NotOffered("KEM"));
        }
        if one_u16(sig, "SigSelect")? != ED25519_SCHEME {
            return Err(HandshakeError::NotOffered("signature scheme"));
        }
        let suite = Suite(one_u16(aead, "AEADSelect")?);
        if !self.config.suites.contains(&suite) {
            return Err(HandshakeError::NotOffered("AEAD suite"));
        }
        self.transcript.add_frame(frame);
        let shared = kem.decapsulate(ct)?;
        let schedule = Schedule::new(&shared[..], &self.transcript.hash())?;
        self.state = ClientState::AwaitServerAuth { schedule, suite };
        Ok(())
    }

    /// SERVER_AUTH: verifies the server, then returns CLIENT_AUTH and the
    /// established association.
    pub fn handle_server_auth(
        &mut self,
        frame: &[u8],
    ) -> Result<(Vec<u8>, Established), HandshakeError> {
        let ClientState::AwaitServerAuth { schedule, suite } =
            std::mem::replace(&mut self.state, ClientState::Done)
        else {
            return Err(HandshakeError::Done);
        };
        let (peer, _) = verify_auth_frame(
            &mut self.transcript,
            frame,
            SERVER_AUTH,
            SERVER_CONTEXT,
            &schedule.finished_key(Direction::ServerToClient)?,
            &schedule.keys(Direction::ServerToClient, suite)?,
            &self.trust,
        )?;
        let (reply, th_ccv) = auth_frame(
            &mut self.transcript,
            CLIENT_AUTH,
            &self.identity,
            CLIENT_CONTEXT,
            &schedule.finished_key(Direction::ClientToServer)?,
            &schedule.keys(Direction::ClientToServer, suite)?,
        )?;
        Ok((
            reply,
            Established {
                profile: Profile::Standard,
                suite,
                peer_identity: peer,
                master: schedule.master(&th_ccv)?,
            },
        ))
    }
}

enum ServerState {
    AwaitClientHello,
    Respond { share: Vec<u8>, suite: Suite },
    AwaitClientAuth { schedule: Schedule, suite: Suite },
    Done,
}

/// The server side of the handshake.
pub struct Server {
    identity: Identity,
    trust: Trust,
    config: Config,
    transcript: Transcript,
    state: ServerState,
}

impl Server {
    pub fn new(config: Config, identity: Identity, trust: Trust) -> Self {
        Self {
            identity,
            trust,
            config,
            transcript: Transcript::new(),
            state: ServerState::AwaitClientHello,
        }
    }

    /// CLIENT_HELLO: negotiates (Standard profile, X25519MLKEM768, Ed25519,
    /// the first of the server's suites the client offers). Returns the
    /// client's KEMShare, to encapsulate to ([`ServerKem::encapsulate`]).
    pub fn handle_client_hello(&mut self, frame: &[u8]) -> Result<&[u8], HandshakeError> {
        if !matches!(self.state, ServerState::AwaitClientHello) {
            return Err(HandshakeError::Done);
        }
        self.state = ServerState::Done;
        expect_frame(frame, CLIENT_HELLO)?;
        let [(profiles, _), (kems, _), (sigs, _), (aeads, _), (share, _)] = exact_tlvs(
            &frame[HEADER_LEN..],
            [
                TlvType::PROFILE_OFFER,
                TlvType::KEM_OFFER,
                TlvType::SIG_OFFER,
                TlvType::AEAD_OFFER,
                TlvType::KEM_SHARE,
            ],
            "CLIENT_HELLO",
            "ProfileOffer, KEMOffer, SigOffer, AEADOffer, KEMShare",
        )?;
        if !profiles.contains(&Profile::Standard.code()) {
            return Err(HandshakeError::NoCommon("profile"));
        }
        if !u16s(kems).any(|k| k == Kem::X25519_MLKEM768.0) {
            return Err(HandshakeError::NoCommon("KEM"));
        }
        if !u16s(sigs).any(|s| s == ED25519_SCHEME) {
            return Err(HandshakeError::NoCommon("signature scheme"));
        }
        let suite = self
            .config
            .suites
            .iter()
            .copied()
            .find(|s| u16s(aeads).any(|a| a == s.0))
            .ok_or(HandshakeError::NoCommon("AEAD suite"))?;
        if share.len() != KEM_SHARE_LEN {
            return Err(HandshakeError::BadLength {
                what: "KEMShare",
                expected: KEM_SHARE_LEN,
                got: share.len(),
            });
        }
        self.transcript.add_frame(frame);
        self.state = ServerState::Respond {
            share: share.to_vec(),
            suite,
        };
        match &self.state {
            ServerState::Respond { share, .. } => Ok(share),
            _ => Err(HandshakeError::Done),
        }
    }

    /// Sends SERVER_HELLO and SERVER_AUTH (concatenated, one write) using the
    /// encapsulation to the client's share.
    pub fn respond(&mut self, kem: &ServerKem) -> Result<Vec<u8>, HandshakeError> {
        let ServerState::Respond { suite, .. } =
            std::mem::replace(&mut self.state, ServerState::Done)
        else {
            return Err(HandshakeError::Done);
        };
        let tlvs: [(TlvType, &[u8]); 5] = [
            (TlvType::PROFILE_SELECT, &[Profile::Standard.code()]),
            (TlvType::KEM_SELECT, &Kem::X25519_MLKEM768.0.to_be_bytes()),
            (TlvType::SIG_SELECT, &ED25519_SCHEME.to_be_bytes()),
            (TlvType::AEAD_SELECT, &suite.0.to_be_bytes()),
            (TlvType::KEM_CIPHERTEXT, &kem.ciphertext),
        ];
        let mut out = cleartext_frame(SERVER_HELLO, &tlvs)?;
        self.transcript.add_frame(&out);
        let schedule = Schedule::new(&kem.shared_secret[..], &self.transcript.hash())?;
        let (auth, _) = auth_frame(
            &mut self.transcript,
            SERVER_AUTH,
            &self.identity,
            SERVER_CONTEXT,
            &schedule.finished_key(Direction::ServerToClient)?,
            &schedule.keys(Direction::ServerToClient, suite)?,
        )?;
        out.extend_from_slice(&auth);
        self.state = ServerState::AwaitClientAuth { schedule, suite };
        Ok(out)
    }

    /// CLIENT_AUTH: verifies the client; the association is established.
    pub fn handle_client_auth(&mut self, frame: &[u8]) -> Result<Established, HandshakeError> {
        let ServerState::AwaitClientAuth { schedule, suite } =
            std::mem::replace(&mut self.state, ServerState::Done)
        else {
            return Err(HandshakeError::Done);
        };
        let (peer, th_ccv) = verify_auth_frame(
            &mut self.transcript,
            frame,
            CLIENT_AUTH,
            CLIENT_CONTEXT,
            &schedule.finished_key(Direction::ClientToServer)?,
            &schedule.keys(Direction::ClientToServer, suite)?,
            &self.trust,
        )?;
        Ok(Established {
            profile: Profile::Standard,
            suite,
            peer_identity: peer,
            master: schedule.master(&th_ccv)?,
        })
    }
}
