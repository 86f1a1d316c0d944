//! Two associations joined in memory with a virtual clock: keepalive, key
//! update, close, and every receive rule, deterministically.

use std::time::{Duration, Instant};

use super::*;
use crate::handshake::{Client, ClientRandom, Config, Identity, Server, ServerKem, Trust};
use crate::wire::Deframer;

fn established_pair() -> (Established, Established) {
    let random = ClientRandom {
        mlkem_seed: [1; 64],
        x25519: [2; 32],
    };
    let id = |b| Identity::from_seed(&[b; 32]).unwrap();
    let (mut client, hello) =
        Client::start(Config::default(), id(3), Trust::InsecureAcceptAny, &random).unwrap();
    let mut server = Server::new(Config::default(), id(4), Trust::InsecureAcceptAny);
    let share = server.handle_client_hello(&hello).unwrap().to_vec();
    let kem = ServerKem::encapsulate(&share, &[5; 32], &[6; 32]).unwrap();
    let flight = server.respond(&kem).unwrap();
    let (span, _) = Deframer::default().deframe(&flight).unwrap().unwrap();
    let sh_len = span.octets.len();
    client.handle_server_hello(&flight[..sh_len]).unwrap();
    let (auth, c) = client.handle_server_auth(&flight[sh_len..]).unwrap();
    let s = server.handle_client_auth(&auth).unwrap();
    (c, s)
}

pub(super) fn pair(config: AssocConfig) -> (Association, Association) {
    let (c, s) = established_pair();
    (
        Association::new(Role::Client, c, config).unwrap(),
        Association::new(Role::Server, s, config).unwrap(),
    )
}

/// Delivers every frame in `wire` to `to`; returns the events (owned) and
/// the replies it queued.
fn deliver(
    to: &mut Association,
    wire: &mut Vec<u8>,
    now: Instant,
) -> (Vec<String>, Vec<u8>, Option<AssocError>) {
    let mut events = Vec::new();
    let mut replies = Vec::new();
    let mut buf = std::mem::take(wire);
    let mut rest = &mut buf[..];
    while let Ok(Some(span)) = Deframer::default().span(rest) {
        let (frame, tail) = rest.split_at_mut(span.len);
        match to.handle(&span.header, frame, now, &mut replies) {
            Ok(e) => events.push(format!("{e:?}")),
            Err(e) => return (events, replies, Some(e)),
        }
        rest = tail;
    }
    (events, replies, None)
}

/// Seals one BRIDGE_NOTIFY whose payload is the single octet `b`.
fn notify(from: &mut Association, wire: &mut Vec<u8>, b: u8) {
    from.seal(wire, ChannelId::BRIDGE, crate::bridge::BRIDGE_NOTIFY, |o| {
        o.push(b)
    })
    .unwrap();
}

#[test]
fn ping_pong_measures_rtt_on_the_virtual_clock() {
    let (mut a, mut b) = pair(AssocConfig::default());
    let t0 = Instant::now();
    let mut wire = Vec::new();
    a.ping(&mut wire, t0).unwrap();
    let (ev, mut pong, err) = deliver(&mut b, &mut wire, t0);
    assert!(err.is_none() && ev == ["None"]);
    let (ev, _, _) = deliver(&mut a, &mut pong, t0 + Duration::from_millis(7));
    assert_eq!(
        ev,
        [format!(
            "{:?}",
            Event::Pong {
                rtt: Duration::from_millis(7)
            }
        )]
    );
}

#[test]
fn key_update_happens_before_the_budget_runs_out() {
    let (mut a, mut b) = pair(AssocConfig {
        key_update_after_frames: 3,
    });
    let now = Instant::now();
    let mut wire = Vec::new();
    for i in 0..10u8 {
        notify(&mut a, &mut wire, i);
    }
    // Bridge payloads here are not envelopes; the association only routes them.
    let (ev, acks, err) = deliver(&mut b, &mut wire, now);
    assert!(err.is_none(), "{err:?}");
    assert_eq!(ev.iter().filter(|e| e.starts_with("Bridge")).count(), 10);
    assert_eq!(a.counters().key_updates_sent, 3);
    assert_eq!(b.counters().key_updates_received, 3);
    assert!(!acks.is_empty());
}

#[test]
fn close_is_acknowledged_and_forged_close_is_dropped() {
    let (mut a, mut b) = pair(AssocConfig::default());
    let now = Instant::now();
    let mut wire = Vec::new();
    a.close(&mut wire, 7).unwrap();
    let mut forged = wire.clone();
    let last = forged.len() - 1;
    forged[last] ^= 1;
    let (ev, _, err) = deliver(&mut b, &mut forged, now);
    assert!(err.is_none());
    assert_eq!(ev, [format!("{:?}", Event::Dropped(Drop::ForgedClose))]);
    assert_eq!(b.counters().dropped_forged_close, 1);
    let (ev, mut ack, _) = deliver(&mut b, &mut wire, now);
    assert_eq!(ev, [format!("{:?}", Event::Closed { code: 7 })]);
    assert!(b.is_closed());
    let (ev, _, _) = deliver(&mut a, &mut ack, now);
    assert_eq!(ev, ["CloseAcked"]);
    assert_eq!(
        a.seal(
            &mut Vec::new(),
            ChannelId::BRIDGE,
            crate::bridge::BRIDGE_NOTIFY,
            |_| {}
        )
        .unwrap_err(),
        AssocError::Closed
    );
}

#[test]
fn replayed_or_tampered_frames_are_fatal_unknown_channels_dropped() {
    let now = Instant::now();
    let (mut a, mut b) = pair(AssocConfig::default());
    let mut wire = Vec::new();
    notify(&mut a, &mut wire, 1);
    let mut replay = wire.clone();
    assert!(deliver(&mut b, &mut wire, now).2.is_none());
    let (_, _, err) = deliver(&mut b, &mut replay, now);
    assert!(
        matches!(
            err,
            Some(AssocError::Record(RecordError::OutOfSequence {
                expected: 1,
                got: 0
            }))
        ),
        "{err:?}"
    );

    let (mut a, mut b) = pair(AssocConfig::default());
    let mut wire = Vec::new();
    notify(&mut a, &mut wire, 1);
    let last = wire.len() - 1;
    wire[last] ^= 0x80;
    assert!(matches!(
        deliver(&mut b, &mut wire, now).2,
        Some(AssocError::Tampered { .. })
    ));

    // A frame on a channel that was never enabled: dropped, counted, not fatal.
    let (_, mut b) = pair(AssocConfig::default());
    let h = Header::new(Flags::ENC, FrameType(0x0100), ChannelId::MEMORY, 0, 16);
    let mut wire = h.encode().unwrap().to_vec();
    wire.extend_from_slice(&[0; 16]);
    let (ev, _, err) = deliver(&mut b, &mut wire, now);
    assert!(err.is_none());
    assert_eq!(
        ev,
        [format!(
            "{:?}",
            Event::Dropped(Drop::UnknownChannel(ChannelId::MEMORY))
        )]
    );
    assert_eq!(b.counters().dropped_unknown_channel, 1);
}
