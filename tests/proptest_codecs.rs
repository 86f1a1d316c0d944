//! Property tests for the protocol core's codecs: round trips, an independent
//! oracle for the Bridge envelope, chunking invariance of the deframer, and
//! tamper → reject for sealed frames.

use npamp_gateway::bridge::{
    BridgeEnvelope, BridgeMessage, ContentType, Effect, Extension, MessageKind, ProtocolId,
    SafetyLabel, frame_type_for_kind,
};
use npamp_gateway::record::{Suite, TrafficKeys};
use npamp_gateway::wire::{
    ChannelId, Deframer, Flags, FrameType, HEADER_LEN, Header, Tlv, TlvReader, TlvType,
};
use proptest::prelude::*;

fn arb_header() -> impl Strategy<Value = Header> {
    (
        0u8..16,
        any::<u16>(),
        any::<u16>(),
        any::<u64>(),
        any::<u32>(),
    )
        .prop_map(|(flags, frame_type, channel, seq, payload_len)| {
            Header::new(
                Flags::from_bits(flags).expect("nibble"),
                FrameType(frame_type),
                ChannelId(channel),
                seq,
                payload_len,
            )
        })
}

fn arb_suite() -> impl Strategy<Value = Suite> {
    prop_oneof![Just(Suite::AES_256_GCM), Just(Suite::CHACHA20_POLY1305)]
}

/// An owned Bridge message that the encoder must accept.
#[derive(Debug, Clone)]
struct OwnedMessage {
    kind: u8,
    protocol_id: u8,
    content_type: u8,
    flags: u8,
    corr: Vec<u8>,
    method: String,
    safety: Option<(Effect, String)>,
    foreign: Vec<u8>,
}

impl OwnedMessage {
    fn borrow(&self) -> BridgeMessage<'_> {
        let kind = MessageKind(self.kind);
        BridgeMessage {
            frame_type: frame_type_for_kind(kind).expect("known kind"),
            envelope: BridgeEnvelope {
                protocol_id: ProtocolId(self.protocol_id),
                message_kind: kind,
                content_type: ContentType(self.content_type),
                flags: self.flags,
                correlation_id: &self.corr,
                method: &self.method,
            },
            safety: self.safety.as_ref().map(|(effect, scope)| SafetyLabel {
                effect: *effect,
                scope,
            }),
            extension: None,
            foreign: &self.foreign,
        }
    }
}

fn arb_effect() -> impl Strategy<Value = Effect> {
    prop_oneof![
        Just(Effect::ReadOnly),
        Just(Effect::IdempotentWrite),
        Just(Effect::NonIdempotentWrite),
        Just(Effect::Destructive),
    ]
}

fn arb_message() -> impl Strategy<Value = OwnedMessage> {
    (
        1u8..=6,
        1u8..=255,
        any::<u8>(),
        any::<u8>(),
        proptest::collection::vec(any::<u8>(), 1..=255),
        "[a-z/_.]{0,40}|\\PC{0,20}",
        proptest::option::of((arb_effect(), "\\PC{0,30}")),
        // A foreign message never starts with 0x00 0x13 (it would read as a label).
        "[\\[{ ]\\PC{0,200}",
    )
        .prop_filter("fields fit their one-octet lengths", |t| {
            t.5.len() <= 255 && t.6.as_ref().is_none_or(|(_, s)| s.len() <= 255)
        })
        .prop_map(
            |(kind, protocol_id, content_type, flags, mut corr, method, safety, foreign)| {
                if kind == MessageKind::NOTIFICATION.0 {
                    corr.clear();
                }
                OwnedMessage {
                    kind,
                    protocol_id,
                    content_type,
                    flags,
                    corr,
                    method,
                    safety,
                    foreign: foreign.into_bytes(),
                }
            },
        )
}

/// The envelope decoder written again from NPAMP-BRIDGE §4/§7 (and this
/// gateway's extension, `docs/decisions.md` §9 and §10) in the most literal way, as
/// an oracle: (kind, protocol, content, flags, corr, method, safety,
/// extension, foreign) or None for a rejection.
type OracleOut<'a> = (
    u8,
    u8,
    u8,
    u8,
    &'a [u8],
    &'a [u8],
    Option<(u8, &'a [u8])>,
    Option<(u16, &'a [u8])>,
    &'a [u8],
);

fn oracle(frame_type: u16, p: &[u8]) -> Option<OracleOut<'_>> {
    let kind_of_type = match frame_type {
        0x0100 => 1,
        0x0101 => 2,
        0x0102 => 4,
        0x0103 => 3,
        0x0104 => 5,
        0x0105 => 6,
        _ => return None,
    };
    if p.len() < 4 || p[0] != 0x00 || p[1] != 0x10 {
        return None;
    }
    let len = u16::from_be_bytes([p[2], p[3]]) as usize;
    if p.len() < 4 + len {
        return None;
    }
    let v = &p[4..4 + len];
    if v.len() < 5 {
        return None;
    }
    let corr_len = v[4] as usize;
    if v.len() < 5 + corr_len + 1 {
        return None;
    }
    let corr = &v[5..5 + corr_len];
    let method_len = v[5 + corr_len] as usize;
    if v.len() != 6 + corr_len + method_len {
        return None;
    }
    let method = &v[6 + corr_len..];
    std::str::from_utf8(method).ok()?;
    if v[0] == 0 || v[1] != kind_of_type {
        return None;
    }
    if (kind_of_type == 3) != corr.is_empty() {
        return None;
    }
    let mut rest = &p[4 + len..];
    let mut safety = None;
    if rest.len() >= 2 && rest[0] == 0x00 && rest[1] == 0x13 {
        if rest.len() < 4 {
            return None;
        }
        let l = u16::from_be_bytes([rest[2], rest[3]]) as usize;
        if rest.len() < 4 + l || l < 2 {
            return None;
        }
        let lv = &rest[4..4 + l];
        if lv[0] > 3 || lv.len() != 2 + lv[1] as usize {
            return None;
        }
        std::str::from_utf8(&lv[2..]).ok()?;
        safety = Some((lv[0], &lv[2..]));
        rest = &rest[4 + l..];
    }
    let mut extension = None;
    if rest.first().is_some_and(|b| b & 0x80 != 0) {
        if rest.len() < 4 {
            return None;
        }
        let t = u16::from_be_bytes([rest[0], rest[1]]);
        let l = u16::from_be_bytes([rest[2], rest[3]]) as usize;
        if !(0xF0A1..=0xF0A5).contains(&t) || rest.len() < 4 + l {
            return None;
        }
        extension = Some((t, &rest[4..4 + l]));
        rest = &rest[4 + l..];
    }
    Some((
        v[1], v[0], v[2], v[3], corr, method, safety, extension, rest,
    ))
}

fn decode_as_tuple(frame_type: u16, p: &[u8]) -> Option<OracleOut<'_>> {
    let m = BridgeMessage::decode(FrameType(frame_type), p).ok()?;
    let e = m.envelope;
    Some((
        e.message_kind.0,
        e.protocol_id.0,
        e.content_type.0,
        e.flags,
        e.correlation_id,
        e.method.as_bytes(),
        m.safety.map(|s| (s.effect as u8, s.scope.as_bytes())),
        m.extension.map(|e| match e {
            Extension::Authorization(v) => (0xF0A1, v),
            Extension::Challenge(v) => (0xF0A2, v),
            Extension::HttpRequest(v) => (0xF0A3, v),
            Extension::HttpResponse(v) => (0xF0A4, v),
            Extension::Cancel(v) => (0xF0A5, v),
        }),
        m.foreign,
    ))
}

/// Feeds `stream` to the deframer in the given chunk sizes, as a socket
/// reader would, and returns every frame's (seq, payload).
fn deframe_chunked(stream: &[u8], chunks: &[usize]) -> Result<Vec<(u64, Vec<u8>)>, String> {
    let d = Deframer::default();
    let mut buf = Vec::new();
    let mut frames = Vec::new();
    let mut fed = 0;
    let mut sizes = chunks.iter().cycle();
    while fed < stream.len() {
        let n = (*sizes.next().expect("cycle"))
            .max(1)
            .min(stream.len() - fed);
        buf.extend_from_slice(&stream[fed..fed + n]);
        fed += n;
        loop {
            match d.deframe(&buf) {
                Ok(Some((frame, used))) => {
                    frames.push((frame.header.seq, frame.payload().to_vec()));
                    buf.drain(..used);
                }
                Ok(None) => break,
                Err(e) => return Err(e.to_string()),
            }
        }
    }
    if !buf.is_empty() {
        return Err(format!("{} octets left over", buf.len()));
    }
    Ok(frames)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn header_roundtrip(h in arb_header()) {
        let octets = h.encode().expect("encode");
        prop_assert_eq!(Header::decode(&octets), Ok(h));
    }

    #[test]
    fn header_decode_accepts_only_what_it_would_encode(octets in proptest::array::uniform32(any::<u8>()), tail in proptest::array::uniform4(any::<u8>())) {
        let mut buf = [0u8; HEADER_LEN];
        buf[..32].copy_from_slice(&octets);
        buf[32..].copy_from_slice(&tail);
        if let Ok(h) = Header::decode(&buf) {
            prop_assert_eq!(h.encode().expect("re-encode"), buf);
        }
    }

    #[test]
    fn header_decode_rejects_any_single_bit_flip(h in arb_header(), bit in 0usize..HEADER_LEN * 8) {
        let mut octets = h.encode().expect("encode");
        octets[bit / 8] ^= 1 << (bit % 8);
        prop_assert!(Header::decode(&octets).is_err());
    }

    #[test]
    fn tlv_roundtrip(t in any::<u16>(), value in proptest::collection::vec(any::<u8>(), 0..600)) {
        let mut out = Vec::new();
        Tlv { tlv_type: TlvType(t), value: &value }.encode_into(&mut out).expect("encode");
        let (tlv, rest) = Tlv::parse(&out).expect("parse");
        prop_assert_eq!(tlv.tlv_type, TlvType(t));
        prop_assert_eq!(tlv.value, &value[..]);
        prop_assert!(rest.is_empty());
    }

    #[test]
    fn tlv_reader_never_panics_and_yields_only_known(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
        for tlv in TlvReader::new(&bytes).flatten() {
            prop_assert!(tlv.tlv_type.is_known());
        }
    }

    #[test]
    fn envelope_roundtrip(m in arb_message()) {
        let m = m.clone();
        let msg = m.borrow();
        let mut out = Vec::new();
        msg.encode_into(&mut out).expect("encode");
        prop_assert_eq!(out.len(), msg.encoded_len());
        prop_assert_eq!(BridgeMessage::decode(msg.frame_type, &out), Ok(msg));
    }

    #[test]
    fn envelope_decode_agrees_with_oracle_on_mutations(
        m in arb_message(),
        edits in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..4),
        cut in any::<prop::sample::Index>(),
        frame_type in 0x00FEu16..0x0107,
    ) {
        let mut out = Vec::new();
        m.borrow().encode_into(&mut out).expect("encode");
        for (at, byte) in edits {
            let i = at.index(out.len());
            out[i] = byte;
        }
        out.truncate(cut.index(out.len() + 1));
        prop_assert_eq!(decode_as_tuple(frame_type, &out), oracle(frame_type, &out));
    }

    #[test]
    fn seal_then_open(
        suite in arb_suite(),
        key in proptest::array::uniform32(any::<u8>()),
        iv in proptest::array::uniform12(any::<u8>()),
        seq in any::<u64>(),
        pt in proptest::collection::vec(any::<u8>(), 0..2000),
    ) {
        let keys = TrafficKeys::new(suite, &key, &iv).expect("keys");
        let mut frame = Vec::new();
        keys.seal_frame_into(&mut frame, Flags::NONE, FrameType(0x0101), ChannelId::BRIDGE, seq, |o| o.extend_from_slice(&pt)).expect("seal");
        let (h, opened) = keys.open_frame(&mut frame).expect("open");
        prop_assert_eq!(h.seq, seq);
        prop_assert_eq!(opened, &pt[..]);
    }

    #[test]
    fn tampered_frames_are_rejected(
        suite in arb_suite(),
        pt in proptest::collection::vec(any::<u8>(), 0..300),
        at in any::<prop::sample::Index>(),
        mask in 1u8..,
    ) {
        let keys = TrafficKeys::new(suite, &[3; 32], &[4; 12]).expect("keys");
        let mut frame = Vec::new();
        keys.seal_frame_into(&mut frame, Flags::NONE, FrameType(0x0100), ChannelId::BRIDGE, 9, |o| o.extend_from_slice(&pt)).expect("seal");
        let i = at.index(frame.len());
        frame[i] ^= mask;
        // Reserved octets 25-35 are outside the AAD, but the header check refuses them.
        prop_assert!(keys.open_frame(&mut frame).is_err(), "tamper at octet {} accepted", i);
    }

    #[test]
    fn deframing_is_chunking_invariant(
        payloads in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..200), 1..12),
        chunks in proptest::collection::vec(1usize..97, 1..20),
    ) {
        let mut stream = Vec::new();
        for (seq, p) in payloads.iter().enumerate() {
            let h = Header::new(Flags::ENC, FrameType(0x0101), ChannelId::BRIDGE, seq as u64, p.len() as u32);
            stream.extend_from_slice(&h.encode().expect("encode"));
            stream.extend_from_slice(p);
        }
        let whole = deframe_chunked(&stream, &[stream.len()]).expect("one chunk");
        let expected: Vec<_> = payloads.iter().cloned().enumerate().map(|(s, p)| (s as u64, p)).collect();
        prop_assert_eq!(&whole, &expected);
        prop_assert_eq!(deframe_chunked(&stream, &chunks).expect("chunked"), expected);
    }
}
