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
        Association::new(Role::Client, c, config, Instant::now()).unwrap(),
        Association::new(Role::Server, s, config, Instant::now()).unwrap(),
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
        ..AssocConfig::default()
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
fn key_update_after_the_byte_budget() {
    let (mut a, mut b) = pair(AssocConfig {
        key_update_after_bytes: 1000,
        ..AssocConfig::default()
    });
    let now = Instant::now();
    let mut wire = Vec::new();
    let send = |a: &mut Association, wire: &mut Vec<u8>| {
        a.seal(wire, ChannelId::BRIDGE, crate::bridge::BRIDGE_NOTIFY, |o| {
            o.extend_from_slice(&[7; 400])
        })
        .unwrap();
    };
    // 400 + 400 + 400 octets: the third frame still fits the budget as it
    // stood (800 < 1000); the fourth finds it spent and goes under a new key.
    for _ in 0..3 {
        send(&mut a, &mut wire);
    }
    assert_eq!(a.counters().key_updates_sent, 0);
    send(&mut a, &mut wire);
    assert_eq!(a.counters().key_updates_sent, 1);
    let (ev, _, err) = deliver(&mut b, &mut wire, now);
    assert!(err.is_none(), "{err:?}");
    assert_eq!(ev.iter().filter(|e| e.starts_with("Bridge")).count(), 4);
    assert_eq!(b.counters().key_updates_received, 1);
}

#[test]
fn keys_used_longer_than_the_time_budget_are_updated_by_tick() {
    let (mut a, mut b) = pair(AssocConfig {
        key_update_after: Duration::from_secs(60),
        ..AssocConfig::default()
    });
    let t0 = Instant::now();
    let (mut control, mut bridge) = (Vec::new(), Vec::new());
    // Nothing sealed yet: no key to retire, however old.
    a.tick(
        t0 + Duration::from_secs(120),
        t0 + Duration::from_secs(120),
        &mut control,
        &mut bridge,
    )
    .unwrap();
    assert!(control.is_empty() && bridge.is_empty());
    notify(&mut a, &mut bridge, 1);
    let (ev, _, err) = deliver(&mut b, &mut bridge, t0);
    assert!(err.is_none() && ev.len() == 1);
    // The Bridge key is in use, the Control key is not.
    let t1 = t0 + Duration::from_secs(59);
    assert_eq!(
        a.tick(t1, t1, &mut control, &mut bridge).unwrap(),
        Liveness::Alive
    );
    assert!(control.is_empty() && bridge.is_empty(), "not yet");
    let t2 = t0 + Duration::from_secs(60);
    a.tick(t2, t2, &mut control, &mut bridge).unwrap();
    assert!(control.is_empty(), "the Control key protected nothing");
    assert_eq!(a.counters().key_updates_sent, 1);
    notify(&mut a, &mut bridge, 2);
    let (ev, _, err) = deliver(&mut b, &mut bridge, t2);
    assert!(err.is_none(), "{err:?}");
    assert_eq!(ev.iter().filter(|e| e.starts_with("Bridge")).count(), 1);
    assert_eq!(b.counters().key_updates_received, 1);
    // The new key dates from t2: the next update is due at t2 + 60 s.
    let t3 = t2 + Duration::from_secs(59);
    a.tick(t3, t3, &mut control, &mut bridge).unwrap();
    assert_eq!(a.counters().key_updates_sent, 1);
}

#[test]
fn silence_brings_a_keepalive_ping_then_gives_up() {
    let (mut a, mut b) = pair(AssocConfig {
        keepalive_after: Duration::from_secs(15),
        peer_timeout: Duration::from_secs(45),
        ..AssocConfig::default()
    });
    let t0 = Instant::now();
    let (mut control, mut bridge) = (Vec::new(), Vec::new());
    let at = |s| t0 + Duration::from_secs(s);
    assert_eq!(
        a.tick(at(14), t0, &mut control, &mut bridge).unwrap(),
        Liveness::Alive
    );
    assert!(control.is_empty());
    a.tick(at(15), t0, &mut control, &mut bridge).unwrap();
    let (ev, mut pong, err) = deliver(&mut b, &mut control, at(15));
    assert!(err.is_none() && ev == ["None"], "{ev:?}");
    // One PING per keepalive period while the silence lasts.
    a.tick(at(20), t0, &mut control, &mut bridge).unwrap();
    assert!(control.is_empty());
    a.tick(at(30), t0, &mut control, &mut bridge).unwrap();
    assert!(!control.is_empty());
    assert_eq!(
        a.tick(at(45), t0, &mut control, &mut bridge).unwrap(),
        Liveness::Silent(Duration::from_secs(45))
    );
    // Had the PONG been heard (the caller's quiet_since moves), all is well.
    let (ev, _, _) = deliver(&mut a, &mut pong, at(16));
    assert!(ev[0].starts_with("Pong"), "{ev:?}");
    assert_eq!(
        a.tick(at(45), at(16), &mut control, &mut bridge).unwrap(),
        Liveness::Alive
    );
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
