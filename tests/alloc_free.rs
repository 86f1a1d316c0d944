//! The receive path of the protocol core does not allocate: header decode,
//! deframing, opening a sealed frame in place and decoding its Bridge
//! envelope. A counting global allocator proves it.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use npamp_gateway::bridge::{
    BRIDGE_REQUEST, BridgeEnvelope, BridgeMessage, ContentType, Effect, MessageKind, ProtocolId,
    SafetyLabel,
};
use npamp_gateway::record::{Suite, TrafficKeys};
use npamp_gateway::wire::{ChannelId, Deframer, Flags, HEADER_LEN, Header};

struct Counting;

thread_local! {
    static ALLOCATIONS: Cell<usize> = const { Cell::new(0) };
}

// SAFETY: forwards to the system allocator; only counts calls on this thread.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.with(|n| n.set(n.get() + 1));
        // SAFETY: same contract as our caller's.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as our caller's.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.with(|n| n.set(n.get() + 1));
        // SAFETY: same contract as our caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn allocations_during<R>(f: impl FnOnce() -> R) -> (R, usize) {
    let before = ALLOCATIONS.with(Cell::get);
    let r = f();
    (r, ALLOCATIONS.with(Cell::get) - before)
}

#[test]
fn receive_path_does_not_allocate() {
    let keys = TrafficKeys::new(Suite::AES_256_GCM, &[1; 32], &[2; 12]).expect("keys");
    let foreign = br#"{"jsonrpc":"2.0","id":1,"method":"tools/call"}"#;
    let msg = BridgeMessage {
        frame_type: BRIDGE_REQUEST,
        envelope: BridgeEnvelope {
            protocol_id: ProtocolId::MCP,
            message_kind: MessageKind::REQUEST,
            content_type: ContentType::JSON,
            flags: 0,
            correlation_id: b"c-1",
            method: "tools/call",
        },
        safety: Some(SafetyLabel {
            effect: Effect::ReadOnly,
            scope: "",
        }),
        foreign,
    };
    let mut stream = Vec::with_capacity(1024);
    for seq in 0..3 {
        keys.seal_frame_into(
            &mut stream,
            Flags::NONE,
            BRIDGE_REQUEST,
            ChannelId::BRIDGE,
            seq,
            |o| msg.encode_into(o).expect("encode"),
        )
        .expect("seal");
    }
    let deframer = Deframer::default();

    let (carried, allocs) = allocations_during(|| {
        let header_octets: &[u8; HEADER_LEN] = stream[..HEADER_LEN].try_into().expect("36 octets");
        let _ = Header::decode(header_octets).expect("header");
        let mut rest = &mut stream[..];
        let mut carried = 0;
        while let Ok(Some(span)) = deframer.span(rest) {
            let (frame, tail) = rest.split_at_mut(span.len);
            let pt = keys
                .open_frame_with_header(&span.header, frame)
                .expect("open");
            let m = BridgeMessage::decode(span.header.frame_type, pt).expect("decode");
            carried += usize::from(m.foreign == foreign);
            rest = tail;
        }
        carried
    });
    assert_eq!(carried, 3);
    assert_eq!(allocs, 0, "the receive path allocated {allocs} times");
}

#[test]
fn sealing_into_a_reused_buffer_does_not_allocate() {
    let keys = TrafficKeys::new(Suite::CHACHA20_POLY1305, &[1; 32], &[2; 12]).expect("keys");
    let mut out = Vec::with_capacity(4096);
    let (_, allocs) = allocations_during(|| {
        for seq in 0..16 {
            out.clear();
            keys.seal_frame_into(
                &mut out,
                Flags::NONE,
                BRIDGE_REQUEST,
                ChannelId::BRIDGE,
                seq,
                |o| o.extend_from_slice(&[0x5A; 1000]),
            )
            .expect("seal");
        }
    });
    assert_eq!(allocs, 0, "sealing allocated {allocs} times");
}
