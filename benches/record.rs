//! Record layer: sealing and opening a Bridge frame against the bare AEAD call
//! of the same crypto backend, in the same group, at 64 B – 16 KiB.
//!
//! `bridge_frame_seal` is the hot path of the edge: envelope + foreign message
//! written into a reused buffer, header + CRC32C, in-place AES-256-GCM, tag.
//! `bare_aead_seal` is `seal_in_place_separate_tag` on the same number of
//! octets: the floor the framing is measured against.
//!
//! The size is the frame's payload: the plaintext the AEAD seals, envelope
//! plus foreign message, so both sides encrypt exactly the same octets and the
//! ratio is the cost of framing alone.
//!
//! `aead_backends/*` compares AES-256-GCM sealing and opening in aws-lc-rs and ring at
//! small-frame sizes (the backend choice).

use std::hint::black_box;

use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use npamp_gateway::bridge::{
    BRIDGE_REQUEST, BridgeEnvelope, BridgeMessage, ContentType, MessageKind, ProtocolId,
};
use npamp_gateway::record::{Suite, TrafficKeys, nonce};
use npamp_gateway::wire::{ChannelId, Deframer, Flags};

const SIZES: [usize; 4] = [64, 256, 1024, 16 * 1024];

fn keys() -> TrafficKeys {
    TrafficKeys::new(Suite::AES_256_GCM, &[0x42; 32], &[0x24; 12]).expect("keys")
}

/// A JSON-RPC request sized so that envelope + request = `payload_size` octets.
fn foreign(payload_size: usize) -> Vec<u8> {
    let envelope_len = message(b"").encoded_len();
    let mut m = br#"{"jsonrpc":"2.0","id":7,"method":"eth_call","params":[""#.to_vec();
    m.resize(payload_size - envelope_len - 3, b'a');
    m.extend_from_slice(b"\"]}");
    m
}

fn message(foreign: &[u8]) -> BridgeMessage<'_> {
    BridgeMessage {
        frame_type: BRIDGE_REQUEST,
        envelope: BridgeEnvelope {
            protocol_id: ProtocolId(0x10),
            message_kind: MessageKind::REQUEST,
            content_type: ContentType::JSON,
            flags: 0,
            correlation_id: b"\x00\x00\x00\x00\x00\x00\x00\x07",
            method: "eth_call",
        },
        safety: None,
        extension: None,
        foreign,
    }
}

fn seal(c: &mut Criterion) {
    let keys = keys();
    for size in SIZES {
        let mut group = c.benchmark_group(format!("seal/{size}B"));
        group.throughput(Throughput::Bytes(size as u64));
        let payload = foreign(size);
        let msg = message(&payload);
        assert_eq!(msg.encoded_len(), size);

        let mut buf = vec![0xA5; size];
        let aad = [0u8; 21];
        let mut seq = 0u64;
        group.bench_function("bare_aead_seal", |b| {
            b.iter(|| {
                seq += 1;
                let tag = keys.seal_in_place(nonce(keys.iv(), seq), &aad, &mut buf);
                black_box(tag)
            })
        });

        let mut out = Vec::with_capacity(size + 256);
        let mut seq = 0u64;
        group.bench_function("bridge_frame_seal", |b| {
            b.iter(|| {
                out.clear();
                seq += 1;
                let header = keys.seal_frame_into(
                    &mut out,
                    Flags::NONE,
                    BRIDGE_REQUEST,
                    ChannelId::BRIDGE,
                    seq,
                    |o| {
                        let _ = black_box(&msg).encode_into(o);
                    },
                );
                black_box(header)
            })
        });
        group.finish();
    }
}

fn open(c: &mut Criterion) {
    let keys = keys();
    let deframer = Deframer::default();
    for size in SIZES {
        let mut group = c.benchmark_group(format!("open/{size}B"));
        group.throughput(Throughput::Bytes(size as u64));
        let payload = foreign(size);

        let aad = [0u8; 21];
        let mut sealed = vec![0xA5; size];
        let tag = keys
            .seal_in_place(nonce(keys.iv(), 1), &aad, &mut sealed)
            .expect("seal");
        sealed.extend_from_slice(&tag);
        group.bench_function("bare_aead_open", |b| {
            b.iter_batched_ref(
                || sealed.clone(),
                |buf| black_box(keys.open_in_place(nonce(keys.iv(), 1), &aad, buf).is_ok()),
                BatchSize::SmallInput,
            )
        });

        let mut frame = Vec::new();
        let msg = message(&payload);
        keys.seal_frame_into(
            &mut frame,
            Flags::NONE,
            BRIDGE_REQUEST,
            ChannelId::BRIDGE,
            1,
            |o| {
                let _ = msg.encode_into(o);
            },
        )
        .expect("seal frame");
        group.bench_function("bridge_frame_deframe_open_decode", |b| {
            b.iter_batched_ref(
                || frame.clone(),
                |buf| {
                    let Ok(Some(span)) = deframer.span(buf) else {
                        return false;
                    };
                    let Ok(pt) = keys.open_frame_with_header(&span.header, &mut buf[..span.len])
                    else {
                        return false;
                    };
                    black_box(BridgeMessage::decode(span.header.frame_type, pt).is_ok())
                },
                BatchSize::SmallInput,
            )
        });
        group.finish();
    }
}

/// The AEAD backend choice: AES-256-GCM sealing and opening in aws-lc-rs (what the record
/// layer uses) against ring (already in the build through quinn), same key,
/// nonces and AAD, at sizes around a small Bridge frame, including one that
/// is not a whole number of 16-octet blocks (282 B: the association bench's
/// 256 B foreign message plus its envelope). Per-call overhead, not octets,
/// dominates at these sizes.
fn aead_backends(c: &mut Criterion) {
    let key = [0x42u8; 32];
    let aad = [0u8; 21];
    let aws = aws_lc_rs::aead::LessSafeKey::new(
        aws_lc_rs::aead::UnboundKey::new(&aws_lc_rs::aead::AES_256_GCM, &key).expect("key"),
    );
    let ring = ring::aead::LessSafeKey::new(
        ring::aead::UnboundKey::new(&ring::aead::AES_256_GCM, &key).expect("key"),
    );
    for size in [256usize, 282, 288, 1024] {
        let mut group = c.benchmark_group(format!("aead_backends/{size}B"));
        group.throughput(Throughput::Bytes(size as u64));
        let mut buf = vec![0xA5; size];
        let mut seq = 0u64;
        group.bench_function("aws_lc_rs_seal", |b| {
            b.iter(|| {
                seq += 1;
                let n = aws_lc_rs::aead::Nonce::assume_unique_for_key(nonce(&[0x24; 12], seq));
                black_box(aws.seal_in_place_separate_tag(
                    n,
                    aws_lc_rs::aead::Aad::from(&aad),
                    &mut buf,
                ))
                .is_ok()
            })
        });
        let mut seq = 0u64;
        group.bench_function("ring_seal", |b| {
            b.iter(|| {
                seq += 1;
                let n = ring::aead::Nonce::assume_unique_for_key(nonce(&[0x24; 12], seq));
                black_box(ring.seal_in_place_separate_tag(n, ring::aead::Aad::from(&aad), &mut buf))
                    .is_ok()
            })
        });
        let mut sealed = vec![0xA5; size];
        let n = aws_lc_rs::aead::Nonce::assume_unique_for_key(nonce(&[0x24; 12], 1));
        let tag = aws
            .seal_in_place_separate_tag(n, aws_lc_rs::aead::Aad::from(&aad), &mut sealed)
            .expect("seal");
        sealed.extend_from_slice(tag.as_ref());
        group.bench_function("aws_lc_rs_open", |b| {
            b.iter_batched_ref(
                || sealed.clone(),
                |buf| {
                    let n = aws_lc_rs::aead::Nonce::assume_unique_for_key(nonce(&[0x24; 12], 1));
                    black_box(aws.open_in_place(n, aws_lc_rs::aead::Aad::from(&aad), buf)).is_ok()
                },
                BatchSize::SmallInput,
            )
        });
        group.bench_function("ring_open", |b| {
            b.iter_batched_ref(
                || sealed.clone(),
                |buf| {
                    let n = ring::aead::Nonce::assume_unique_for_key(nonce(&[0x24; 12], 1));
                    black_box(ring.open_in_place(n, ring::aead::Aad::from(&aad), buf)).is_ok()
                },
                BatchSize::SmallInput,
            )
        });
        group.finish();
    }
}

criterion_group!(benches, seal, open, aead_backends);
criterion_main!(benches);
