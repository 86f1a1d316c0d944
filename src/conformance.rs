//! The operations of the N-PAMP conformance corpus, as one dispatcher.
//!
//! Shared by the data-driven conformance test (`tests/conformance.rs`) and the
//! black-box adapter (`examples/conformance_adapter.rs`, contract in the
//! corpus's `harness/INSTRUCTIONS.md`), so both grade exactly the same code.
//! Inputs and outputs are the corpus's JSON objects; byte fields are lowercase
//! hex. Nothing here panics on any input.

use serde_json::{Map, Value, json};

use crate::bridge::{self, BridgeEnvelope, BridgeMessage, ContentType, Effect, SafetyLabel};
use crate::record::{
    Direction, HashAlg, Kem, KeyIv, Profile, Secret, Suite, TAG_LEN, TrafficKeys, hkdf_expand,
    hkdf_expand_label, nonce,
};
use crate::wire::{self, ChannelId, Flags, FrameType, HEADER_LEN, Header};

/// The answer to one operation.
#[derive(Clone, Debug, PartialEq)]
pub enum Outcome {
    /// Success, with the operation's output fields.
    Out(Value),
    /// The input was rejected (the expected answer to an `invalid` case).
    Error(String),
    /// This implementation does not cover the operation.
    Skipped(String),
}

impl Outcome {
    /// The adapter-contract JSON: `{"out":…}`, `{"error":…}` or `{"skipped":…}`.
    pub fn to_json(&self) -> Value {
        match self {
            Self::Out(v) => json!({ "out": v }),
            Self::Error(e) => json!({ "error": e }),
            Self::Skipped(s) => json!({ "skipped": s }),
        }
    }
}

/// The operations this crate implements; every other corpus op is skipped.
pub const IMPLEMENTED_OPS: &[&str] = &[
    "header.encode",
    "header.decode",
    "crc32c",
    "tlv.encode",
    "tlv.decode",
    "aead.seal",
    "aead.open",
    "hkdf.expand",
    "hkdf.expand_label",
    "keys.derive_traffic",
    "nonce.derive",
    "frame.seal",
    "frame.open",
    "profile.check",
    "bridge.envelope.encode",
    "bridge.envelope.decode",
    "bridge.correlate",
];

/// Runs one corpus operation.
pub fn run_op(op: &str, input: &Value) -> Outcome {
    let Some(input) = input.as_object() else {
        return Outcome::Error("`in` must be a JSON object".into());
    };
    let result = match op {
        "header.encode" => header_encode(input),
        "header.decode" => header_decode(input),
        "crc32c" => crc(input),
        "tlv.encode" => tlv_encode(input),
        "tlv.decode" => tlv_decode(input),
        "aead.seal" => aead_seal(input),
        "aead.open" => aead_open(input),
        "hkdf.expand" => hkdf_expand_op(input),
        "hkdf.expand_label" => hkdf_expand_label_op(input),
        "keys.derive_traffic" => derive_traffic(input),
        "nonce.derive" => nonce_derive(input),
        "frame.seal" => frame_seal(input),
        "frame.open" => frame_open(input),
        "profile.check" => profile_check(input),
        "bridge.envelope.encode" => envelope_encode(input),
        "bridge.envelope.decode" => envelope_decode(input),
        "bridge.correlate" => correlate(input),
        other => {
            return Outcome::Skipped(format!(
                "operation `{other}` is not implemented by npamp-gateway"
            ));
        }
    };
    match result {
        Ok(v) => Outcome::Out(v),
        Err(e) => Outcome::Error(e),
    }
}

type Input = Map<String, Value>;
type OpResult = Result<Value, String>;

fn field<'a>(input: &'a Input, name: &str) -> Result<&'a Value, String> {
    input
        .get(name)
        .ok_or_else(|| format!("missing field `{name}`"))
}

fn hex_field(input: &Input, name: &str) -> Result<Vec<u8>, String> {
    let s = field(input, name)?
        .as_str()
        .ok_or_else(|| format!("field `{name}` must be a hex string"))?;
    hex::decode(s).map_err(|e| format!("field `{name}`: {e}"))
}

fn str_field<'a>(input: &'a Input, name: &str) -> Result<&'a str, String> {
    field(input, name)?
        .as_str()
        .ok_or_else(|| format!("field `{name}` must be a string"))
}

/// An unsigned integer given as a JSON number or a decimal string.
fn uint_field(input: &Input, name: &str) -> Result<u64, String> {
    let v = field(input, name)?;
    v.as_u64()
        .or_else(|| v.as_str().and_then(|s| s.parse().ok()))
        .ok_or_else(|| format!("field `{name}` must be an unsigned integer"))
}

fn narrow<T: TryFrom<u64>>(input: &Input, name: &str) -> Result<T, String> {
    let v = uint_field(input, name)?;
    T::try_from(v).map_err(|_| format!("field `{name}` value {v} is out of range"))
}

fn suite_field(input: &Input) -> Result<Suite, String> {
    let v = field(input, "suite")?;
    let suite = match v {
        Value::String(name) => Suite::from_name(name),
        _ => v.as_u64().and_then(|n| u16::try_from(n).ok()).map(Suite),
    };
    suite.ok_or_else(|| format!("unknown AEAD suite {v}"))
}

fn hash_field(input: &Input) -> Result<HashAlg, String> {
    let name = str_field(input, "hash")?;
    HashAlg::from_name(name).ok_or_else(|| format!("unknown hash `{name}`"))
}

fn header_from_fields(input: &Input, payload_len: u32) -> Result<Header, String> {
    let flags = Flags::from_bits(narrow(input, "flags")?).ok_or("flags must fit 4 bits")?;
    Ok(Header {
        version: narrow(input, "ver")?,
        flags,
        frame_type: FrameType(narrow(input, "frameType")?),
        channel: ChannelId(narrow(input, "channel")?),
        seq: uint_field(input, "seq")?,
        payload_len,
    })
}

fn header_encode(input: &Input) -> OpResult {
    if let Some(magic) = input.get("magic")
        && magic.as_str() != Some("NPAM")
    {
        return Err(format!("magic must be \"NPAM\", got {magic}"));
    }
    let header = header_from_fields(input, narrow(input, "payloadLength")?)?;
    let octets = header.encode().map_err(|e| e.to_string())?;
    Ok(json!({ "frame": hex::encode(octets) }))
}

fn header_decode(input: &Input) -> OpResult {
    let frame = hex_field(input, "frame")?;
    let octets = frame
        .first_chunk::<HEADER_LEN>()
        .ok_or_else(|| format!("frame of {} octets is shorter than the header", frame.len()))?;
    let h = Header::decode(octets).map_err(|e| e.to_string())?;
    Ok(json!({
        "magic": "NPAM",
        "ver": h.version,
        "flags": h.flags.bits(),
        "frameType": h.frame_type.0,
        "channel": h.channel.0,
        "seq": h.seq,
        "payloadLength": h.payload_len,
        "crc32c": hex::encode(&octets[21..25]),
        "reservedZero": true,
    }))
}

fn crc(input: &Input) -> OpResult {
    let octets = hex_field(input, "octets")?;
    Ok(json!({ "crc32c": hex::encode(wire::crc32c(&octets).to_be_bytes()) }))
}

fn tlv_encode(input: &Input) -> OpResult {
    let tlv = wire::Tlv {
        tlv_type: wire::TlvType(narrow(input, "type")?),
        value: &hex_field(input, "value")?,
    };
    let mut out = Vec::new();
    tlv.encode_into(&mut out).map_err(|e| e.to_string())?;
    Ok(json!({ "tlv": hex::encode(out) }))
}

fn tlv_decode(input: &Input) -> OpResult {
    let octets = hex_field(input, "tlv")?;
    let tlv = wire::tlv::decode_one(&octets).map_err(|e| e.to_string())?;
    Ok(json!({
        "type": tlv.tlv_type.0,
        "length": tlv.value.len(),
        "value": hex::encode(tlv.value),
    }))
}

fn nonce_field(input: &Input) -> Result<[u8; 12], String> {
    let n = hex_field(input, "nonce")?;
    n.as_slice()
        .try_into()
        .map_err(|_| format!("nonce must be 12 octets, got {}", n.len()))
}

fn aead_keys(input: &Input, iv: &[u8]) -> Result<TrafficKeys, String> {
    TrafficKeys::new(suite_field(input)?, &hex_field(input, "key")?, iv).map_err(|e| e.to_string())
}

fn aead_seal(input: &Input) -> OpResult {
    let keys = aead_keys(input, &[0; 12])?;
    let mut data = hex_field(input, "pt")?;
    let tag = keys
        .seal_in_place(nonce_field(input)?, &hex_field(input, "aad")?, &mut data)
        .map_err(|e| e.to_string())?;
    data.extend_from_slice(&tag);
    Ok(json!({ "sealed": hex::encode(data) }))
}

fn aead_open(input: &Input) -> OpResult {
    let keys = aead_keys(input, &[0; 12])?;
    let mut data = hex_field(input, "sealed")?;
    let pt = keys
        .open_in_place(nonce_field(input)?, &hex_field(input, "aad")?, &mut data)
        .map_err(|e| e.to_string())?;
    Ok(json!({ "pt": hex::encode(pt) }))
}

fn hkdf_expand_op(input: &Input) -> OpResult {
    let hash = hash_field(input)?;
    let len: usize = narrow(input, "length")?;
    if len > hash.max_expand_len() {
        return Err(format!("length {len} exceeds 255 x HashLen"));
    }
    let mut okm = vec![0u8; len];
    hkdf_expand(
        hash,
        &hex_field(input, "prk")?,
        &[&hex_field(input, "info")?],
        &mut okm,
    )
    .map_err(|e| e.to_string())?;
    Ok(json!({ "okm": hex::encode(okm) }))
}

fn hkdf_expand_label_op(input: &Input) -> OpResult {
    let hash = hash_field(input)?;
    let len: usize = narrow(input, "length")?;
    if len > hash.max_expand_len() {
        return Err(format!(
            "length {len} exceeds 255 x HashLen = {}",
            hash.max_expand_len()
        ));
    }
    let mut out = vec![0u8; len];
    hkdf_expand_label(
        hash,
        &hex_field(input, "secret")?,
        str_field(input, "label")?.as_bytes(),
        &hex_field(input, "context")?,
        &mut out,
    )
    .map_err(|e| e.to_string())?;
    Ok(json!({ "out": hex::encode(out) }))
}

fn profile_field(input: &Input) -> Result<Profile, String> {
    let name = str_field(input, "profile")?;
    Profile::from_name(name).ok_or_else(|| format!("unknown profile `{name}`"))
}

fn derive_traffic(input: &Input) -> OpResult {
    let profile = profile_field(input)?;
    let master = Secret::from_slice(profile.kdf_hash(), &hex_field(input, "master")?)
        .map_err(|e| e.to_string())?;
    let dir = Direction::from_octet(narrow(input, "dir")?).ok_or("dir must be 0 or 1")?;
    let secret = crate::record::derive_traffic_secret(
        &master,
        dir,
        uint_field(input, "epoch")?,
        suite_field(input)?,
        ChannelId(narrow(input, "channel")?),
    )
    .map_err(|e| e.to_string())?;
    let KeyIv { key, iv } = KeyIv::derive(&secret).map_err(|e| e.to_string())?;
    Ok(json!({ "key": hex::encode(&key[..]), "iv": hex::encode(&iv[..]) }))
}

fn iv_field(input: &Input) -> Result<[u8; 12], String> {
    let iv = hex_field(input, "iv")?;
    iv.as_slice()
        .try_into()
        .map_err(|_| format!("iv must be exactly 12 octets, got {}", iv.len()))
}

fn nonce_derive(input: &Input) -> OpResult {
    let n = nonce(&iv_field(input)?, uint_field(input, "seq")?);
    Ok(json!({ "nonce": hex::encode(n) }))
}

/// The corpus's `frame.seal`/`frame.open` cases bind a header whose Payload
/// Length is the *plaintext* length, whereas on the wire (handshake-flow KAT,
/// worked example §3) it is the sealed length, plaintext + tag. The ops
/// therefore build that header and use the bare AEAD with the same AAD
/// (header octets 0–20) and nonce (IV ⊕ seq) as [`TrafficKeys::seal_frame`];
/// see `docs/decisions.md`.
fn corpus_frame_aad(input: &Input, plaintext_len: usize) -> Result<[u8; 21], String> {
    let payload_len = u32::try_from(plaintext_len).map_err(|_| "payload too long")?;
    let header = header_from_fields(input, payload_len)?;
    if header.version != wire::VERSION {
        return Err(format!("version {} is not 2", header.version));
    }
    let octets = header.encode().map_err(|e| e.to_string())?;
    let mut aad = [0u8; wire::PREFIX_LEN];
    aad.copy_from_slice(&octets[..wire::PREFIX_LEN]);
    Ok(aad)
}

fn frame_seal(input: &Input) -> OpResult {
    let keys = aead_keys(input, &iv_field(input)?)?;
    let mut data = hex_field(input, "pt")?;
    let aad = corpus_frame_aad(input, data.len())?;
    let tag = keys
        .seal_in_place(nonce(keys.iv(), uint_field(input, "seq")?), &aad, &mut data)
        .map_err(|e| e.to_string())?;
    data.extend_from_slice(&tag);
    Ok(json!({ "sealed": hex::encode(data) }))
}

fn frame_open(input: &Input) -> OpResult {
    let keys = aead_keys(input, &iv_field(input)?)?;
    let mut data = hex_field(input, "sealed")?;
    let plaintext_len = data
        .len()
        .checked_sub(TAG_LEN)
        .ok_or("sealed payload is shorter than the AEAD tag")?;
    let aad = corpus_frame_aad(input, plaintext_len)?;
    let pt = keys
        .open_in_place(nonce(keys.iv(), uint_field(input, "seq")?), &aad, &mut data)
        .map_err(|e| e.to_string())?;
    Ok(json!({ "pt": hex::encode(pt) }))
}

fn profile_check(input: &Input) -> OpResult {
    let profile = profile_field(input)?;
    let name = str_field(input, "kem")?;
    let kem = Kem::from_name(name).ok_or_else(|| format!("unknown KEM `{name}`"))?;
    if profile.accepts_kem(kem) {
        Ok(json!({}))
    } else {
        Err(format!("profile {profile:?} does not accept {name}"))
    }
}

fn envelope_encode(input: &Input) -> OpResult {
    let fields = field(input, "fields")?
        .as_object()
        .ok_or("`fields` must be an object")?;
    let frame_type = FrameType(narrow(fields, "frameType")?);
    let corr = hex_field(fields, "corr")?;
    let foreign = hex_field(fields, "foreign")?;
    let safety = match fields.get("safety") {
        None | Some(Value::Null) => None,
        Some(Value::Object(label)) => Some(SafetyLabel {
            effect: Effect::from_octet(narrow(label, "effect")?).ok_or("unknown effect")?,
            scope: str_field(label, "scope")?,
        }),
        Some(other) => return Err(format!("`safety` must be an object or null, got {other}")),
    };
    let message = BridgeMessage {
        frame_type,
        envelope: BridgeEnvelope {
            protocol_id: bridge::ProtocolId(narrow(fields, "protocol_id")?),
            message_kind: bridge::MessageKind(narrow(fields, "message_kind")?),
            content_type: ContentType(narrow(fields, "content_type")?),
            flags: narrow(fields, "flags")?,
            correlation_id: &corr,
            method: str_field(fields, "method")?,
        },
        safety,
        extension: None,
        foreign: &foreign,
    };
    let mut out = Vec::new();
    message.encode_into(&mut out).map_err(|e| e.to_string())?;
    Ok(json!({ "payload": hex::encode(out) }))
}

fn decode_message<'a>(
    input: &Input,
    type_field: &str,
    payload: &'a [u8],
) -> Result<BridgeMessage<'a>, String> {
    BridgeMessage::decode(FrameType(narrow(input, type_field)?), payload).map_err(|e| e.to_string())
}

fn envelope_decode(input: &Input) -> OpResult {
    let payload = hex_field(input, "payload")?;
    let m = decode_message(input, "frameType", &payload)?;
    let e = &m.envelope;
    Ok(json!({
        "protocol_id": e.protocol_id.0,
        "message_kind": e.message_kind.0,
        "content_type": e.content_type.0,
        "flags": e.flags,
        "final": e.is_final(),
        "corr": hex::encode(e.correlation_id),
        "method": e.method,
        "safety": m.safety.map(|s| json!({ "effect": s.effect as u8, "scope": s.scope })),
        "foreign": hex::encode(m.foreign),
    }))
}

fn correlate(input: &Input) -> OpResult {
    let request = hex_field(input, "requestPayload")?;
    let reply = hex_field(input, "replyPayload")?;
    let request = decode_message(input, "requestFrameType", &request)?;
    let reply = decode_message(input, "replyFrameType", &reply)?;
    Ok(json!({ "match": bridge::correlates(&request, &reply) }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_ops_are_skipped() {
        assert!(matches!(
            run_op("memory.body.decode", &json!({})),
            Outcome::Skipped(_)
        ));
    }

    #[test]
    fn bad_inputs_are_errors_not_panics() {
        for op in IMPLEMENTED_OPS {
            for input in [
                json!(null),
                json!({}),
                json!({"frame": "zz", "suite": 99, "hash": "md5", "length": u64::MAX}),
                json!({"key": "00", "nonce": "00", "iv": "00", "suite": "AES-256-GCM",
                       "aad": "", "pt": "", "sealed": "", "fields": []}),
            ] {
                assert!(
                    matches!(run_op(op, &input), Outcome::Error(_)),
                    "{op} accepted {input}"
                );
            }
        }
    }
}
