//! NPAMP-CC-JSONRPC §10 clauses 1–8 as recorded exchanges between an edge
//! and an origin, through the real record layer (sealed Bridge frames,
//! deframed and opened on the other side).
//!
//! edge: client text → scan → Correlator → write_payload → seal
//! origin: open → decode → check_inbound → upstream → reply payload → seal
//! edge: open → decode → check_inbound → Correlator::complete → client

use npamp_gateway::bridge::{
    self, BridgeMessage, ContentType, Effect, MessageKind, ProtocolId, SafetyLabel, TransportError,
};
use npamp_gateway::jsonrpc::carriage::{
    self, BatchJoin, Inbound, check_inbound, id_of, transport_error_response, write_payload,
    write_transport_error,
};
use npamp_gateway::jsonrpc::{
    Begin, CorrelationMode, Correlator, EffectTable, IdKind, Kind, Labeler, Limits, SafetyPolicy,
    Scanned, scan,
};
use npamp_gateway::record::{RecvState, SendState, Suite, TrafficKeys};
use npamp_gateway::wire::{ChannelId, Deframer, Flags, FrameType};

/// One direction of a Bridge channel: sealed frames on a byte stream.
struct Link {
    send: SendState,
    recv: RecvState,
    wire: Vec<u8>,
}

impl Link {
    fn new(key: u8) -> Self {
        let keys = || TrafficKeys::new(Suite::AES_256_GCM, &[key; 32], &[key; 12]).expect("keys");
        Self {
            send: SendState::new(keys()),
            recv: RecvState::new(keys()),
            wire: Vec::new(),
        }
    }

    fn send(&mut self, frame_type: FrameType, payload: &[u8]) {
        self.send
            .seal_into(
                &mut self.wire,
                Flags::NONE,
                frame_type,
                ChannelId::BRIDGE,
                |o| o.extend_from_slice(payload),
            )
            .expect("seal");
    }

    /// Every frame on the wire, opened: (frame type, plaintext).
    fn receive_all(&mut self) -> Vec<(FrameType, Vec<u8>)> {
        let mut wire = std::mem::take(&mut self.wire);
        let mut out = Vec::new();
        let mut rest = &mut wire[..];
        while let Some(span) = Deframer::default().span(rest).expect("deframe") {
            let (frame, tail) = rest.split_at_mut(span.len);
            let pt = self.recv.open(&span.header, frame).expect("open");
            out.push((span.header.frame_type, pt.to_vec()));
            rest = tail;
        }
        assert!(rest.is_empty());
        out
    }
}

/// What the origin's upstream does with a request.
enum Upstream {
    Replies(&'static str),
    Unreachable,
    Silent,
}

struct Pair {
    protocol: ProtocolId,
    to_origin: Link,
    to_edge: Link,
    correlator: Correlator<&'static str>,
    labeler: Labeler,
    limits: Limits,
    /// Frames the origin saw.
    seen_at_origin: Vec<Seen>,
}

impl Pair {
    fn new(mode: CorrelationMode) -> Self {
        Self {
            protocol: ProtocolId::MCP,
            to_origin: Link::new(1),
            to_edge: Link::new(2),
            correlator: Correlator::new(mode, 64),
            labeler: Labeler::new(ProtocolId::MCP, EffectTable::mcp()),
            limits: Limits::default(),
            seen_at_origin: Vec::new(),
        }
    }

    /// Edge: carries one client message; returns false if it was held back.
    fn edge_send(&mut self, client: &'static str, text: &str) -> bool {
        let Ok(Scanned::Single(kind)) = scan(text.as_bytes(), &self.limits) else {
            panic!("test sends single valid messages: {text}");
        };
        let corr = match &kind {
            Kind::Request { id, .. } => {
                let token = &text.as_bytes()[id.token.clone()];
                match self.correlator.begin(token, id.kind, client) {
                    Begin::Assigned(c) => c.to_vec(),
                    Begin::HoldBack => return false,
                    Begin::Full => panic!("full"),
                }
            }
            _ => Vec::new(),
        };
        let method = match &kind {
            Kind::Request { method, .. } | Kind::Notification { method } => {
                carriage::method_of(text.as_bytes(), method)
                    .expect("method")
                    .into_owned()
            }
            _ => String::new(),
        };
        let label = self.labeler.label(&method, text.as_bytes());
        let mut payload = Vec::new();
        let ft = write_payload(
            &mut payload,
            self.protocol,
            text.as_bytes(),
            &kind,
            &corr,
            Some(SafetyLabel {
                effect: label.effect,
                scope: &label.scope,
            }),
        )
        .expect("payload");
        self.to_origin.send(ft, &payload);
        true
    }

    /// Origin: delivers every frame to the upstream and sends back replies.
    fn origin_run(&mut self, upstream: &dyn Fn(&str) -> Upstream) {
        for (ft, pt) in self.to_origin.receive_all() {
            let msg = BridgeMessage::decode(ft, &pt).expect("bridge decode");
            self.seen_at_origin.push((
                ft,
                msg.envelope.content_type.0,
                msg.envelope.correlation_id.to_vec(),
                msg.envelope.method.to_owned(),
                msg.safety.map(|s| s.effect),
                msg.foreign.to_vec(),
            ));
            let Inbound::JsonRpc {
                kind,
                text,
                correlation_id,
                ..
            } = check_inbound(&msg, &self.limits).expect("origin accepts")
            else {
                panic!("a request is not a transport error");
            };
            let reply = upstream(std::str::from_utf8(text).expect("utf8"));
            if matches!(kind, Kind::Notification { .. }) {
                continue; // §7: no reply, whatever the upstream did
            }
            let mut payload = Vec::new();
            match reply {
                Upstream::Replies(r) => {
                    let Ok(Scanned::Single(rk)) = scan(r.as_bytes(), &self.limits) else {
                        panic!("upstream reply invalid");
                    };
                    let ft = write_payload(
                        &mut payload,
                        self.protocol,
                        r.as_bytes(),
                        &rk,
                        correlation_id,
                        None,
                    )
                    .expect("reply payload");
                    self.to_edge.send(ft, &payload);
                }
                Upstream::Unreachable => {
                    write_transport_error(
                        &mut payload,
                        self.protocol,
                        correlation_id,
                        TransportError::NOT_DELIVERED,
                        "upstream refused the connection",
                    )
                    .expect("transport error");
                    self.to_edge.send(bridge::BRIDGE_ERROR, &payload);
                }
                Upstream::Silent => {}
            }
        }
    }

    /// Edge: every reply, matched to its client: (client, text for the client).
    fn edge_receive(&mut self) -> Vec<(&'static str, Vec<u8>)> {
        let mut out = Vec::new();
        for (ft, pt) in self.to_edge.receive_all() {
            let msg = BridgeMessage::decode(ft, &pt).expect("bridge decode");
            match check_inbound(&msg, &self.limits).expect("edge accepts") {
                Inbound::JsonRpc {
                    kind,
                    text,
                    correlation_id,
                    ..
                } => {
                    let id = id_of(&kind).expect("reply has an id");
                    let token = &text[id.token.clone()];
                    let client = self
                        .correlator
                        .complete(
                            correlation_id,
                            token,
                            id.kind,
                            matches!(kind, Kind::Error { .. }),
                        )
                        .expect("reply correlates");
                    out.push((client, text.to_vec()));
                }
                Inbound::TransportError {
                    code,
                    detail,
                    correlation_id,
                } => {
                    let token = self
                        .correlator
                        .id_token(correlation_id)
                        .expect("known")
                        .to_vec();
                    let client = self
                        .correlator
                        .abandon(correlation_id)
                        .expect("outstanding");
                    let text = transport_error_response(
                        Some(&token),
                        code,
                        &String::from_utf8_lossy(detail),
                    );
                    out.push((client, text));
                }
            }
        }
        out
    }
}

/// (frame type, envelope content_type, correlation_id, method, safety, foreign)
type Seen = (FrameType, u8, Vec<u8>, String, Option<Effect>, Vec<u8>);

const REQ: &str = r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"x"}}"#;

#[test]
fn clause_1_2_3_request_and_success_carried_octet_for_octet() {
    let mut p = Pair::new(CorrelationMode::Canonical);
    let reply = r#"{"jsonrpc": "2.0", "result": {"content": [], "isError": false}, "id": 7}"#;
    assert!(p.edge_send("A", REQ));
    p.origin_run(&|_| Upstream::Replies(reply));
    let (ft, ct, corr, method, _, foreign) = &p.seen_at_origin[0];
    assert_eq!(*ft, bridge::BRIDGE_REQUEST);
    assert_eq!(*ct, ContentType::JSON.0);
    assert_eq!(
        corr.as_slice(),
        b"7",
        "canonical correlation_id is the raw id token"
    );
    assert_eq!(method, "tools/call");
    assert_eq!(foreign.as_slice(), REQ.as_bytes());
    let got = p.edge_receive();
    assert_eq!(got, vec![("A", reply.as_bytes().to_vec())]);
    assert!(p.correlator.is_empty());
}

#[test]
fn clause_4_foreign_error_with_data_is_verbatim() {
    let mut p = Pair::new(CorrelationMode::Canonical);
    let reply = r#"{"jsonrpc":"2.0","error":{"code":-32602,"message":"Invalid params","data":{"field":"name","why":"missing"}},"id":7}"#;
    p.edge_send("A", REQ);
    p.origin_run(&|_| Upstream::Replies(reply));
    let got = p.edge_receive();
    assert_eq!(got, vec![("A", reply.as_bytes().to_vec())]);
}

#[test]
fn clause_5_undelivered_request_is_a_transport_error_not_a_fabricated_reply() {
    let mut p = Pair::new(CorrelationMode::Canonical);
    p.edge_send("A", REQ);
    p.origin_run(&|_| Upstream::Unreachable);
    let raw = &p.to_edge.wire.clone();
    assert!(!raw.is_empty());
    let got = p.edge_receive();
    assert_eq!(got.len(), 1);
    let v: serde_json::Value = serde_json::from_slice(&got[0].1).expect("edge error is JSON");
    assert_eq!(v["id"], 7);
    assert_eq!(v["error"]["code"], -32004);
    assert_eq!(v["error"]["data"]["npamp_error"], "NotDelivered");
    assert!(v.get("result").is_none());
}

#[test]
fn clause_6_notification_has_no_correlation_and_no_reply() {
    let mut p = Pair::new(CorrelationMode::Canonical);
    let note = r#"{"jsonrpc":"2.0","method":"notifications/progress","params":{"progress":1}}"#;
    p.edge_send("A", note);
    // Even an upstream that answers does not produce a Bridge reply.
    p.origin_run(&|_| Upstream::Replies(r#"{"jsonrpc":"2.0","result":1,"id":1}"#));
    let (ft, _, corr, method, _, foreign) = &p.seen_at_origin[0];
    assert_eq!(*ft, bridge::BRIDGE_NOTIFY);
    assert!(corr.is_empty());
    assert_eq!(method, "notifications/progress");
    assert_eq!(foreign.as_slice(), note.as_bytes());
    assert!(p.edge_receive().is_empty());
}

#[test]
fn clause_7_null_and_undetermined_ids_and_same_id_from_two_clients() {
    // Null id: a unique opaque correlation_id, the null carried verbatim.
    let mut p = Pair::new(CorrelationMode::Canonical);
    let null_req = r#"{"jsonrpc":"2.0","id":null,"method":"ping"}"#;
    p.edge_send("A", null_req);
    p.edge_send("B", null_req);
    p.origin_run(&|_| Upstream::Replies(r#"{"jsonrpc":"2.0","result":{},"id":null}"#));
    assert_ne!(p.seen_at_origin[0].2, p.seen_at_origin[1].2);
    assert!(!p.seen_at_origin[0].2.is_empty());
    let got = p.edge_receive();
    assert_eq!(got.iter().map(|g| g.0).collect::<Vec<_>>(), vec!["A", "B"]);

    // Undetermined id: the upstream could not read the request and answers with id null.
    let mut p = Pair::new(CorrelationMode::Canonical);
    p.edge_send("A", REQ);
    let parse_error =
        r#"{"jsonrpc":"2.0","error":{"code":-32700,"message":"Parse error"},"id":null}"#;
    p.origin_run(&|_| Upstream::Replies(parse_error));
    assert_eq!(
        p.edge_receive(),
        vec![("A", parse_error.as_bytes().to_vec())]
    );

    // Same id, one session: the second is held back until the first is answered.
    let mut p = Pair::new(CorrelationMode::Canonical);
    assert!(p.edge_send("A", REQ));
    assert!(!p.edge_send("A", REQ));

    // Same id, shared association: opaque ids, never cross-wired.
    let mut p = Pair::new(CorrelationMode::Opaque);
    assert!(p.edge_send("A", REQ));
    assert!(p.edge_send("B", REQ));
    p.origin_run(&|_| Upstream::Silent);
    let (a, b) = (p.seen_at_origin[0].2.clone(), p.seen_at_origin[1].2.clone());
    assert_ne!(a, b);
    // Replies arrive in the opposite order and still reach the right client.
    let reply = r#"{"jsonrpc":"2.0","result":"r","id":7}"#;
    let Ok(Scanned::Single(rk)) = scan(reply.as_bytes(), &Limits::default()) else {
        panic!()
    };
    for corr in [&b, &a] {
        let mut payload = Vec::new();
        let ft = write_payload(
            &mut payload,
            ProtocolId::MCP,
            reply.as_bytes(),
            &rk,
            corr,
            None,
        )
        .expect("payload");
        p.to_edge.send(ft, &payload);
    }
    let got = p.edge_receive();
    assert_eq!(got.iter().map(|g| g.0).collect::<Vec<_>>(), vec!["B", "A"]);
}

#[test]
fn clause_8_safety_label_carried_and_fail_safe() {
    let mut p = Pair::new(CorrelationMode::Canonical);
    p.labeler.tools_mut().insert("x", Effect::IdempotentWrite);
    p.edge_send("A", REQ);
    p.edge_send("A", r#"{"jsonrpc":"2.0","id":8,"method":"tools/list"}"#);
    p.origin_run(&|_| Upstream::Silent);
    assert_eq!(p.seen_at_origin[0].4, Some(Effect::IdempotentWrite));
    assert_eq!(p.seen_at_origin[1].4, Some(Effect::ReadOnly));

    // A receiver refusing destructive effects: an unlabelled tools/call is destructive.
    let policy = SafetyPolicy::allow_all().refuse(Effect::Destructive);
    let table = EffectTable::mcp();
    assert_eq!(
        policy.check(None, "tools/call", &table),
        Err(TransportError::SAFETY_POLICY)
    );
    assert_eq!(
        policy.check(p.seen_at_origin[0].4, "tools/call", &table),
        Ok(())
    );
}

#[test]
fn receiver_rejects_contradictory_carriage() {
    fn decode_check(ft: FrameType, payload: &[u8]) -> Result<(), carriage::CarriageError> {
        let m = BridgeMessage::decode(ft, payload).expect("envelope ok");
        check_inbound(&m, &Limits::default()).map(drop)
    }
    let encode = |ft: FrameType,
                  kind: MessageKind,
                  corr: &[u8],
                  method: &str,
                  ct: ContentType,
                  foreign: &[u8]| {
        let mut out = Vec::new();
        BridgeMessage {
            frame_type: ft,
            envelope: bridge::BridgeEnvelope {
                protocol_id: ProtocolId::MCP,
                message_kind: kind,
                content_type: ct,
                flags: 0,
                correlation_id: corr,
                method,
            },
            safety: None,
            extension: None,
            foreign,
        }
        .encode_into(&mut out)
        .expect("encode");
        out
    };
    use carriage::CarriageError as E;
    let req = REQ.as_bytes();
    let bad_version = br#"{"jsonrpc":"1.0","id":7,"method":"tools/call"}"#;
    let success = br#"{"jsonrpc":"2.0","result":1,"id":7}"#;
    let batch = format!("[{REQ}]");
    let request = (bridge::BRIDGE_REQUEST, MessageKind::REQUEST);
    let notify = (bridge::BRIDGE_NOTIFY, MessageKind::NOTIFICATION);
    let error = (bridge::BRIDGE_ERROR, MessageKind::ERROR);
    type Case<'a> = (
        &'static str,
        (FrameType, MessageKind),
        &'a [u8],
        &'a str,
        ContentType,
        &'a [u8],
        fn(&E) -> bool,
    );
    let cases: [Case<'_>; 6] = [
        (
            "envelope method differs from the object's",
            request,
            b"7",
            "tools/list",
            ContentType::JSON,
            req,
            |e| matches!(e, E::MethodMismatch { .. }),
        ),
        (
            "jsonrpc is not 2.0",
            request,
            b"7",
            "tools/call",
            ContentType::JSON,
            bad_version,
            |e| matches!(e, E::Foreign(_)),
        ),
        (
            "a notify that carries an id",
            notify,
            b"",
            "tools/call",
            ContentType::JSON,
            req,
            |e| matches!(e, E::KindMismatch { .. }),
        ),
        (
            "a success response under BRIDGE_ERROR",
            error,
            b"7",
            "",
            ContentType::JSON,
            success,
            |e| matches!(e, E::KindMismatch { .. }),
        ),
        (
            "not application/json",
            request,
            b"7",
            "tools/call",
            ContentType::CBOR,
            req,
            |e| matches!(e, E::ContentType(2)),
        ),
        (
            "a batch inside one frame",
            request,
            b"7",
            "tools/call",
            ContentType::JSON,
            batch.as_bytes(),
            |e| matches!(e, E::BatchInFrame),
        ),
    ];
    for (what, (ft, kind), corr, method, ct, foreign, expected) in cases {
        let payload = encode(ft, kind, corr, method, ct, foreign);
        match decode_check(ft, &payload) {
            Err(e) if expected(&e) => {
                assert_eq!(e.transport_error(), TransportError::ENVELOPE_MALFORMED)
            }
            other => panic!("{what}: got {other:?}"),
        }
    }
}

#[test]
fn batch_split_and_join_keep_each_reply_untouched() {
    let batch = r#"[{"jsonrpc":"2.0","method":"sum","params":[1,2,4],"id":"1"},{"jsonrpc":"2.0","method":"notify_hello","params":[7]},{"foo":"boo"},{"jsonrpc":"2.0","method":"get_data","id":"9"}]"#;
    let Ok(Scanned::Batch(elements)) = scan(batch.as_bytes(), &Limits::default()) else {
        panic!()
    };
    let mut p = Pair::new(CorrelationMode::Canonical);
    let mut join = BatchJoin::default();
    let mut local = Vec::new();
    for el in &elements {
        let text: &'static str = Box::leak(batch[el.range.clone()].to_owned().into_boxed_str());
        match &el.kind {
            Ok(_) => assert!(p.edge_send("A", text)),
            Err(_) => local.push(carriage::local_error(None, -32600, "Invalid Request", None)),
        }
    }
    p.origin_run(&|req| {
        Upstream::Replies(if req.contains("\"sum\"") {
            r#"{"jsonrpc": "2.0", "result": 7, "id": "1"}"#
        } else {
            r#"{"jsonrpc":"2.0","result":["hello",5],"id":"9"}"#
        })
    });
    let replies = p.edge_receive();
    assert_eq!(replies.len(), 2, "the notification gets no element");
    for (_, r) in &replies {
        join.push(r);
    }
    for l in &local {
        join.push(l);
    }
    let joined = join.finish().expect("some replies");
    let v: serde_json::Value = serde_json::from_slice(&joined).expect("joined array is JSON");
    assert_eq!(v.as_array().map(Vec::len), Some(3));
    let text = String::from_utf8(joined).expect("utf8");
    assert!(
        text.contains(r#"{"jsonrpc": "2.0", "result": 7, "id": "1"}"#),
        "octets kept: {text}"
    );
    assert_eq!(
        BatchJoin::default().finish(),
        None,
        "all-notification batch: nothing"
    );
    assert!(matches!(scan(b"[]", &Limits::default()), Err(e) if e.jsonrpc_code() == -32600));
    let _ = IdKind::Null;
}

/// The transport-error object as another implementation reads it: a
/// decoder written from the layout in NPAMP-BRIDGE §4 and the reference
/// implementation's `DecodeBridgeTransportError` (code u8 ‖ msg_len u8 ‖
/// msg, nothing after), not from our encoder. The payload is walked octet
/// by octet: TLV type and length, the envelope's fields, then the object.
#[test]
fn a_transport_error_reads_as_the_reference_layout() {
    struct Read<'a> {
        kind: u8,
        content_type: u8,
        correlation: &'a [u8],
        code: u8,
        message: &'a [u8],
    }
    fn read(payload: &[u8]) -> Read<'_> {
        // BridgeEnvelope TLV: type 0x0010, u16 length, then its value.
        assert_eq!(&payload[..2], &[0x00, 0x10], "BridgeEnvelope TLV first");
        let len = usize::from(u16::from_be_bytes([payload[2], payload[3]]));
        let value = &payload[4..4 + len];
        let (kind, content_type) = (value[1], value[2]);
        let corr_len = usize::from(value[4]);
        let correlation = &value[5..5 + corr_len];
        let method_len = usize::from(value[5 + corr_len]);
        assert_eq!(
            5 + corr_len + 1 + method_len,
            len,
            "nothing else in the envelope"
        );
        // No SafetyLabel on an error: the object follows at once.
        let object = &payload[4 + len..];
        let (code, msg_len) = (object[0], usize::from(object[1]));
        assert_eq!(
            object.len(),
            2 + msg_len,
            "the reference refuses trailing octets"
        );
        Read {
            kind,
            content_type,
            correlation,
            code,
            message: &object[2..],
        }
    }
    let mut out = Vec::new();
    write_transport_error(
        &mut out,
        ProtocolId::MCP,
        b"c-17",
        TransportError::NOT_DELIVERED,
        "upstream http://127.0.0.1:8545: connection refused",
    )
    .expect("writes");
    let r = read(&out);
    assert_eq!(r.kind, 0x04, "message_kind error");
    assert_ne!(
        r.content_type, 0x01,
        "never JSON: a foreign error object would be"
    );
    assert_eq!(r.correlation, b"c-17");
    assert_eq!(r.code, 4, "NotDelivered");
    assert_eq!(
        r.message,
        b"upstream http://127.0.0.1:8545: connection refused"
    );

    // A detail past 255 octets is cut to fit msg_len, still UTF-8.
    let long = format!("upstream said: {}", "ü".repeat(300));
    out.clear();
    write_transport_error(
        &mut out,
        ProtocolId::MCP,
        b"c",
        TransportError::NOT_DELIVERED,
        &long,
    )
    .expect("writes");
    let r = read(&out);
    assert!(r.message.len() <= 255);
    let text = std::str::from_utf8(r.message).expect("UTF-8");
    assert!(
        text.starts_with("upstream said: üü") && text.ends_with('…'),
        "{text}"
    );

    // What the reference sends (content_type CBOR, its object layout) is
    // read as a transport error, not as a malformed foreign message.
    let mut theirs = Vec::new();
    bridge::write_envelope(
        &mut theirs,
        bridge::BRIDGE_ERROR,
        &bridge::BridgeEnvelope {
            protocol_id: ProtocolId::MCP,
            message_kind: MessageKind::ERROR,
            content_type: ContentType::CBOR,
            flags: 0,
            correlation_id: b"c-9",
            method: "",
        },
        None,
    )
    .expect("envelope");
    theirs.extend_from_slice(b"\x04\x0bunreachable");
    let msg = BridgeMessage::decode(bridge::BRIDGE_ERROR, &theirs).expect("decodes");
    match check_inbound(&msg, &Limits::default()).expect("carried") {
        Inbound::TransportError {
            code,
            detail,
            correlation_id,
        } => {
            assert_eq!(code, TransportError::NOT_DELIVERED);
            assert_eq!(detail, b"unreachable");
            assert_eq!(correlation_id, b"c-9");
        }
        other => panic!("read as {other:?}"),
    }
}
