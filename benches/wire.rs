//! Wire codec: header encode/decode, deframing a stream of frames, TLV walk
//! and BridgeEnvelope decode. Throughput in frames (elements).

use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use npamp_gateway::bridge::{
    BRIDGE_REQUEST, BridgeEnvelope, BridgeMessage, ContentType, Effect, MessageKind, ProtocolId,
    SafetyLabel,
};
use npamp_gateway::wire::{ChannelId, Deframer, Flags, FrameType, HEADER_LEN, Header};

fn header(c: &mut Criterion) {
    let mut group = c.benchmark_group("header");
    group.throughput(Throughput::Elements(1));
    let h = Header::new(Flags::ENC, BRIDGE_REQUEST, ChannelId::BRIDGE, 1 << 40, 300);
    let mut out = [0u8; HEADER_LEN];
    group.bench_function("encode", |b| {
        b.iter(|| black_box(&h).write(&mut out).map(|()| out[24]))
    });
    let octets = h.encode().expect("encode");
    group.bench_function("decode", |b| b.iter(|| Header::decode(black_box(&octets))));
    // The copy-free floor: reading the same fields without CRC or checks.
    group.bench_function("baseline_read_fields_no_checks", |b| {
        b.iter(|| {
            let o = black_box(&octets);
            (
                u16::from_be_bytes([o[5], o[6]]),
                u64::from_be_bytes([o[9], o[10], o[11], o[12], o[13], o[14], o[15], o[16]]),
                u32::from_be_bytes([o[17], o[18], o[19], o[20]]),
            )
        })
    });
    group.finish();
}

fn deframe(c: &mut Criterion) {
    const FRAMES: usize = 64;
    let mut stream = Vec::new();
    for seq in 0..FRAMES as u64 {
        let h = Header::new(Flags::ENC, FrameType(0x0101), ChannelId::BRIDGE, seq, 272);
        stream.extend_from_slice(&h.encode().expect("encode"));
        stream.resize(stream.len() + 272, 0xAB);
    }
    let d = Deframer::default();
    let mut group = c.benchmark_group("deframe");
    group.throughput(Throughput::Elements(FRAMES as u64));
    group.bench_function("64_frames_of_256B", |b| {
        b.iter(|| {
            let mut buf = black_box(&stream[..]);
            let mut n = 0;
            while let Ok(Some((_, used))) = d.deframe(buf) {
                buf = &buf[used..];
                n += 1;
            }
            n
        })
    });
    group.finish();
}

fn envelope(c: &mut Criterion) {
    let foreign = br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x"}}"#;
    let msg = BridgeMessage {
        frame_type: BRIDGE_REQUEST,
        envelope: BridgeEnvelope {
            protocol_id: ProtocolId::MCP,
            message_kind: MessageKind::REQUEST,
            content_type: ContentType::JSON,
            flags: 0,
            correlation_id: b"\x01\x02\x03\x04\x05\x06\x07\x08",
            method: "tools/call",
        },
        safety: Some(SafetyLabel {
            effect: Effect::NonIdempotentWrite,
            scope: "fs:/tmp",
        }),
        extension: None,
        foreign,
    };
    let mut payload = Vec::new();
    msg.encode_into(&mut payload).expect("encode");
    let mut group = c.benchmark_group("bridge_envelope");
    group.throughput(Throughput::Elements(1));
    group.bench_function("decode", |b| {
        b.iter(|| BridgeMessage::decode(BRIDGE_REQUEST, black_box(&payload)).is_ok())
    });
    let mut out = Vec::with_capacity(256);
    group.bench_function("encode", |b| {
        b.iter(|| {
            out.clear();
            black_box(&msg).encode_into(&mut out).map(|()| out.len())
        })
    });
    group.finish();
}

criterion_group!(benches, header, deframe, envelope);
criterion_main!(benches);
