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

/// One request's round trip through the exchange of both gateways (an
/// edge's HTTP pool and a stateless origin), with the scans, the Bridge
/// payloads written and read back, and the correlation: at most three
/// allocations per request. Today 2.0 (14.0 before correlation ids and id
/// tokens were kept inline): a copy of the request at the origin and of the
/// reply at the edge (the association reader's buffer is not yet handed on
/// as `Bytes`).
#[test]
fn an_exchange_round_trip_allocates_at_most_three_times() {
    use std::sync::Arc;
    use std::time::Instant;

    use bytes::Bytes;
    use npamp_gateway::jsonrpc::{EffectTable, Labeler, Limits, scan};
    use npamp_gateway::relay::{
        Action, Config, Exchange, Role, Shared, ToServe, Unobserved, receive,
    };

    let protocol = ProtocolId::JSONRPC_EXPERIMENTAL;
    let config = |role: Role| Config {
        role,
        request_timeout: std::time::Duration::from_secs(30),
        stall_timeout: std::time::Duration::from_secs(10),
        max_outstanding: 1024,
        max_incoming: 1024,
        budget: usize::MAX,
        local_name: "upstream".into(),
        labeler: Arc::new(Labeler::new(protocol, EffectTable::for_protocol(protocol))),
        gate: None,
        shared: Arc::new(Shared::unlimited()),
        observer: Arc::new(Unobserved),
    };
    let mut edge: Exchange<u32> = Exchange::new(config(Role::EdgePool));
    let mut origin: Exchange<()> = Exchange::new(config(Role::OriginStateless));
    let limits = Limits::default();
    let request = Bytes::from_static(
        br#"{"jsonrpc":"2.0","id":7,"method":"eth_getBalance","params":["0x407d73d8a49eeb85d32cf465507dd71d507100c1","latest"]}"#,
    );
    let reply = Bytes::from_static(br#"{"jsonrpc":"2.0","id":7,"result":"0x0234c8a3397aab58"}"#);
    let mut wire = Vec::with_capacity(1024);
    let mut answered = 0u32;
    let mut round_trip = |i: u32, wire: &mut Vec<u8>| {
        let now = Instant::now();
        let scanned = scan(&request, &limits);
        edge.handle_local(now, request.clone(), scanned, Some(i));
        while let Some(a) = edge.poll_action() {
            let Action::Send(msg) = a else {
                panic!("the edge sends");
            };
            wire.clear();
            msg.write(wire, protocol);
            origin.handle_peer(now, receive(msg.frame_type(), wire, protocol, &limits));
        }
        while let Some(a) = origin.poll_action() {
            match a {
                Action::Serve(ToServe {
                    corr: Some(corr), ..
                }) => {
                    let Ok(npamp_gateway::jsonrpc::Scanned::Single(kind)) = scan(&reply, &limits)
                    else {
                        panic!("the reply scans");
                    };
                    origin.served(now, &corr, Ok((reply.clone(), kind)));
                }
                Action::Send(msg) => {
                    wire.clear();
                    msg.write(wire, protocol);
                    edge.handle_peer(now, receive(msg.frame_type(), wire, protocol, &limits));
                }
                other => panic!("{other:?}"),
            }
        }
        while let Some(a) = edge.poll_action() {
            assert!(matches!(a, Action::Answer(t, _) if t == i), "{a:?}");
            answered += 1;
        }
    };
    for i in 0..200 {
        round_trip(i, &mut wire);
    }
    const N: u32 = 1000;
    let ((), n) = allocations_during(|| {
        for i in 0..N {
            round_trip(i, &mut wire);
        }
    });
    assert_eq!(answered, 200 + N);
    let per_request = n as f64 / f64::from(N);
    assert!(
        per_request <= 3.0,
        "{per_request:.2} allocations per request"
    );
}
