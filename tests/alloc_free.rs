//! The receive path of the protocol core does not allocate: header decode,
//! deframing, opening a sealed frame in place and decoding its Bridge
//! envelope. A counting global allocator proves it, and counts what keeping
//! a received message costs (allocations and octets allocated).

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use npamp_gateway::bridge::{
    BRIDGE_REQUEST, BridgeEnvelope, BridgeMessage, ContentType, Effect, MessageKind, ProtocolId,
    SafetyLabel,
};
use npamp_gateway::record::{Suite, TAG_LEN, TrafficKeys};
use npamp_gateway::wire::{ChannelId, Deframer, Flags, HEADER_LEN, Header};

struct Counting;

thread_local! {
    static ALLOCATIONS: Cell<usize> = const { Cell::new(0) };
    static ALLOCATED: Cell<usize> = const { Cell::new(0) };
}

// SAFETY: forwards to the system allocator; only counts calls on this thread.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.with(|n| n.set(n.get() + 1));
        ALLOCATED.with(|n| n.set(n.get() + layout.size()));
        // SAFETY: same contract as our caller's.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as our caller's.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.with(|n| n.set(n.get() + 1));
        ALLOCATED.with(|n| n.set(n.get() + new_size));
        // SAFETY: same contract as our caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// `f`'s result, and the allocations and octets allocated on this thread
/// while it ran.
fn allocated_during<R>(f: impl FnOnce() -> R) -> (R, usize, usize) {
    let (before, octets) = (ALLOCATIONS.with(Cell::get), ALLOCATED.with(Cell::get));
    let r = f();
    let n = ALLOCATIONS.with(Cell::get) - before;
    (r, n, ALLOCATED.with(Cell::get) - octets)
}

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
        extension: None,
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
/// reply at the edge (small messages lie in the association reader's shared
/// buffer, and are copied when kept: see the next test).
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
        lasting: None,
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
            origin.handle_peer(now, &wire[..], |octets| {
                receive(msg.frame_type(), octets, protocol, &limits)
            });
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
                    edge.handle_peer(now, &wire[..], |octets| {
                        receive(msg.frame_type(), octets, protocol, &limits)
                    });
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

/// What keeping a received message costs, through the association's
/// reader: a small one (in the reader's shared buffer) is copied, one
/// allocation of exactly its octets; a large one is read into an
/// allocation of its own (the frame's header and ciphertext, its tag read
/// apart, so the plaintext and the message last in it end it), and kept by
/// giving the payload up (`Payload::own`, `Payload::keep`): the frame's
/// allocation, advanced to the message, and nothing more (no copy, no
/// `bytes` reference count).
#[test]
fn a_large_message_is_kept_without_a_copy() {
    use futures_util::FutureExt;
    use npamp_gateway::assoc::frames::Taken;
    use npamp_gateway::assoc::{FrameReader, Payload};

    let keys = TrafficKeys::new(Suite::AES_256_GCM, &[1; 32], &[2; 12]).expect("keys");
    let small = vec![b'x'; 200];
    let large = [vec![b'y'; 16 << 10], vec![b'z'; 64 << 10]];
    let (mut stream, mut ends) = (Vec::new(), Vec::new());
    // The first message warms the reader (its first read fills and grows
    // the starting buffer); the others are counted.
    for (seq, foreign) in [&small, &small, &large[0], &large[1]]
        .into_iter()
        .enumerate()
    {
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
            safety: None,
            extension: None,
            foreign,
        };
        keys.seal_frame_into(
            &mut stream,
            Flags::NONE,
            BRIDGE_REQUEST,
            ChannelId::BRIDGE,
            seq as u64,
            |o| msg.encode_into(o).expect("encode"),
        )
        .expect("seal");
        ends.push(stream.len());
    }
    // A large frame's allocation holds all of it but the tag.
    let large_frames = [ends[2] - ends[1] - TAG_LEN, ends[3] - ends[2] - TAG_LEN];
    let mut reader = FrameReader::authenticated(Box::new(std::io::Cursor::new(stream)), 1 << 20);
    // Reads, opens, decodes and keeps the next message as the exchange does.
    let mut next = || {
        let filled = reader.fill().now_or_never().expect("in memory");
        assert!(filled.expect("fill"));
        let span = reader.peek().expect("peek").expect("a frame");
        let taken = reader.take(&span);
        let frame = reader.sealed(&taken);
        let base = frame.octets().as_ptr() as usize;
        let pt = keys.open_sealed(&span.header, frame).expect("open");
        let at = pt.as_ptr() as usize - base..pt.as_ptr() as usize - base + pt.len();
        let own = reader.take_own();
        let own_len = own.len();
        let payload = match &taken {
            Taken::Shared(frame) => {
                Payload::shared(reader.octets(frame.start + at.start..frame.start + at.end))
            }
            Taken::Own => Payload::own(own, at),
        };
        let octets = payload.as_ptr_range();
        let octets = octets.start as usize..octets.end as usize;
        let msg = BridgeMessage::decode(BRIDGE_REQUEST, &payload).expect("decode");
        // Where the message lies; the borrows of the payload end here.
        let start = msg.foreign.as_ptr() as usize - octets.start;
        let part = start..start + msg.foreign.len();
        let kept = payload.keep(part);
        let handed_on = own_len > 0 && octets.contains(&(kept.as_ptr() as usize));
        (kept, handed_on, own_len)
    };
    assert_eq!(next().0, small);
    let ((kept, handed_on, _), allocs, octets) = allocated_during(&mut next);
    assert_eq!(kept, small);
    assert!(!handed_on);
    assert_eq!(
        (allocs, octets),
        (1, small.len()),
        "the small one: one copy"
    );
    for (message, frame_len) in large.iter().zip(large_frames) {
        let ((kept, handed_on, frame), allocs, octets) = allocated_during(&mut next);
        assert_eq!(&kept, message);
        assert!(handed_on, "a large one is its frame's own allocation");
        assert_eq!(frame, frame_len);
        assert_eq!(
            (allocs, octets),
            (1, frame),
            "a {}-octet message: its frame's allocation only (no copy, no reference count)",
            message.len()
        );
    }
}
