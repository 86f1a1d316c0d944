//! Two associations joined in memory with a virtual clock: keepalive, key
//! update, close, and every receive rule, deterministically.

use std::time::{Duration, Instant};

use super::*;
use crate::handshake::{Client, ClientRandom, Config, Identity, Server, ServerKem, Trust};
use crate::wire::{Deframer, HEADER_LEN};

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

pub(in crate::assoc) fn pair(config: AssocConfig) -> (Association, Association) {
    pair_at(config, Instant::now())
}

/// A pair created at `t0` (the virtual clock's zero).
fn pair_at(config: AssocConfig, t0: Instant) -> (Association, Association) {
    let (c, s) = established_pair();
    (
        Association::new(Role::Client, c, config, t0).unwrap(),
        Association::new(Role::Server, s, config, t0).unwrap(),
    )
}

/// Everything `from` has queued, all channels, in the order handed over
/// (Control first).
fn sent(from: &mut Association) -> Vec<u8> {
    let (control, bridge) = sent_by_channel(from);
    [control, bridge].concat()
}

/// What `from` has queued, by channel: (Control, Bridge).
fn sent_by_channel(from: &mut Association) -> (Vec<u8>, Vec<u8>) {
    let (mut control, mut bridge) = (Vec::new(), Vec::new());
    let mut spare = Vec::new();
    while let Some(channel) = from.poll_transmit(&mut spare) {
        match channel {
            ChannelId::CONTROL => control.extend_from_slice(&spare),
            ChannelId::BRIDGE => bridge.extend_from_slice(&spare),
            other => panic!("octets queued on {other:?}"),
        }
    }
    (control, bridge)
}

/// Delivers every frame in `wire` to `to`; returns the events (owned) and
/// the replies it queued.
fn deliver(
    to: &mut Association,
    wire: &mut Vec<u8>,
    now: Instant,
) -> (Vec<String>, Vec<u8>, Option<AssocError>) {
    let mut events = Vec::new();
    let mut buf = std::mem::take(wire);
    let mut rest = &mut buf[..];
    while let Ok(Some(span)) = Deframer::default().span(rest) {
        let (frame, tail) = rest.split_at_mut(span.len);
        match to.handle(&span.header, frame, now) {
            Ok(e) => events.push(format!("{e:?}")),
            Err(e) => return (events, sent(to), Some(e)),
        }
        rest = tail;
    }
    (events, sent(to), None)
}

/// Seals one BRIDGE_NOTIFY whose payload is the single octet `b`.
fn notify(from: &mut Association, b: u8) {
    from.seal(ChannelId::BRIDGE, crate::bridge::BRIDGE_NOTIFY, |o| {
        o.push(b)
    })
    .unwrap();
}

#[test]
fn ping_pong_measures_rtt_on_the_virtual_clock() {
    let (mut a, mut b) = pair(AssocConfig::default());
    let t0 = Instant::now();
    a.ping(t0).unwrap();
    let (ev, mut pong, err) = deliver(&mut b, &mut sent(&mut a), t0);
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
fn queued_octets_are_handed_over_per_channel_control_first_without_copies() {
    let (mut a, mut b) = pair(AssocConfig::default());
    let now = Instant::now();
    notify(&mut a, 1);
    a.ping(now).unwrap();
    notify(&mut a, 2);
    assert!(a.queued(ChannelId::BRIDGE) > 0 && a.queued(ChannelId::CONTROL) > 0);
    let mut spare = Vec::with_capacity(4096);
    let spare_at = spare.as_ptr();
    assert_eq!(a.poll_transmit(&mut spare), Some(ChannelId::CONTROL));
    let mut control = spare.clone();
    let mut bridge = Vec::new();
    assert_eq!(a.poll_transmit(&mut bridge), Some(ChannelId::BRIDGE));
    // The spare buffer became the Control queue: the next Control frame is
    // sealed into it, not into a new allocation.
    a.ping(now).unwrap();
    assert_eq!(a.poll_transmit(&mut spare), Some(ChannelId::CONTROL));
    assert_eq!(spare.as_ptr(), spare_at);
    control.extend_from_slice(&spare);
    assert_eq!(a.poll_transmit(&mut spare), None);
    assert_eq!(
        a.queued(ChannelId::CONTROL) + a.queued(ChannelId::BRIDGE),
        0
    );
    let (ev, _, err) = deliver(&mut b, &mut control, now);
    assert!(err.is_none() && ev == ["None", "None"], "{ev:?}");
    let (ev, _, err) = deliver(&mut b, &mut bridge, now);
    assert!(err.is_none(), "{err:?}");
    assert_eq!(ev.iter().filter(|e| e.starts_with("Bridge")).count(), 2);
}

#[test]
fn key_update_happens_before_the_budget_runs_out() {
    let (mut a, mut b) = pair(AssocConfig {
        key_update_after_frames: 3,
        ..AssocConfig::default()
    });
    let now = Instant::now();
    for i in 0..10u8 {
        notify(&mut a, i);
    }
    // Bridge payloads here are not envelopes; the association only routes them.
    let (ev, acks, err) = deliver(&mut b, &mut sent(&mut a), now);
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
    let send = |a: &mut Association| {
        a.seal(ChannelId::BRIDGE, crate::bridge::BRIDGE_NOTIFY, |o| {
            o.extend_from_slice(&[7; 400])
        })
        .unwrap();
    };
    // 400 + 400 + 400 octets: the third frame still fits the budget as it
    // stood (800 < 1000); the fourth finds it spent and goes under a new key.
    for _ in 0..3 {
        send(&mut a);
    }
    assert_eq!(a.counters().key_updates_sent, 0);
    send(&mut a);
    assert_eq!(a.counters().key_updates_sent, 1);
    let (ev, _, err) = deliver(&mut b, &mut sent(&mut a), now);
    assert!(err.is_none(), "{err:?}");
    assert_eq!(ev.iter().filter(|e| e.starts_with("Bridge")).count(), 4);
    assert_eq!(b.counters().key_updates_received, 1);
}

#[test]
fn keys_used_longer_than_the_time_budget_are_updated_on_timeout() {
    let t0 = Instant::now();
    let (mut a, mut b) = pair_at(
        AssocConfig {
            key_update_after: Duration::from_secs(60),
            keepalive_after: Duration::from_secs(3600),
            peer_timeout: Duration::from_secs(7200),
            ..AssocConfig::default()
        },
        t0,
    );
    let at = |s| t0 + Duration::from_secs(s);
    // Nothing sealed yet: no key to retire, however old, and no deadline for one.
    assert_eq!(a.poll_timeout(), Some(at(3600)));
    let (mut idle, _) = pair_at(*a.config(), t0);
    idle.handle_timeout(at(120)).unwrap();
    assert_eq!(sent_by_channel(&mut idle), (Vec::new(), Vec::new()));
    notify(&mut a, 1);
    let (ev, _, err) = deliver(&mut b, &mut sent(&mut a), t0);
    assert!(err.is_none() && ev.len() == 1);
    // The Bridge key is in use (since t0, when it was installed); the
    // Control key is not.
    assert_eq!(a.poll_timeout(), Some(at(60)));
    assert_eq!(a.handle_timeout(at(59)).unwrap(), Liveness::Alive);
    assert_eq!(sent_by_channel(&mut a), (Vec::new(), Vec::new()), "not yet");
    a.handle_timeout(at(60)).unwrap();
    let (control, mut bridge) = sent_by_channel(&mut a);
    assert!(control.is_empty(), "the Control key protected nothing");
    assert_eq!(a.counters().key_updates_sent, 1);
    notify(&mut a, 2);
    bridge.extend_from_slice(&sent(&mut a));
    let (ev, _, err) = deliver(&mut b, &mut bridge, at(60));
    assert!(err.is_none(), "{err:?}");
    assert_eq!(ev.iter().filter(|e| e.starts_with("Bridge")).count(), 1);
    assert_eq!(b.counters().key_updates_received, 1);
    // The new key dates from t0 + 60 s: the next update is due 60 s later.
    assert_eq!(a.poll_timeout(), Some(at(120)));
    a.handle_timeout(at(119)).unwrap();
    assert_eq!(a.counters().key_updates_sent, 1);
}

#[test]
fn silence_brings_a_keepalive_ping_then_gives_up() {
    let config = AssocConfig {
        keepalive_after: Duration::from_secs(15),
        peer_timeout: Duration::from_secs(45),
        ..AssocConfig::default()
    };
    let t0 = Instant::now();
    let at = |s| t0 + Duration::from_secs(s);
    let (mut a, mut b) = pair_at(config, t0);
    assert_eq!(a.poll_timeout(), Some(at(15)));
    assert_eq!(a.handle_timeout(at(14)).unwrap(), Liveness::Alive);
    assert!(sent(&mut a).is_empty());
    a.handle_timeout(at(15)).unwrap();
    let (ev, pong, err) = deliver(&mut b, &mut sent(&mut a), at(15));
    assert!(err.is_none() && ev == ["None"], "{ev:?}");
    // One PING per keepalive period while the silence lasts.
    assert_eq!(a.poll_timeout(), Some(at(30)));
    a.handle_timeout(at(20)).unwrap();
    assert!(sent(&mut a).is_empty());
    a.handle_timeout(at(30)).unwrap();
    assert!(!sent(&mut a).is_empty());
    assert_eq!(a.poll_timeout(), Some(at(45)));
    assert_eq!(
        a.handle_timeout(at(45)).unwrap(),
        Liveness::Silent(Duration::from_secs(45))
    );
    // Had the PONG been heard, all would be well: silence counts from it.
    let (mut a, mut b) = pair_at(config, t0);
    a.handle_timeout(at(15)).unwrap();
    let (_, mut pong2, _) = deliver(&mut b, &mut sent(&mut a), at(15));
    let (ev, _, _) = deliver(&mut a, &mut pong2, at(16));
    assert!(ev[0].starts_with("Pong"), "{ev:?}");
    assert_eq!(a.poll_timeout(), Some(at(31)));
    assert_eq!(a.handle_timeout(at(45)).unwrap(), Liveness::Alive);
    assert_eq!(
        a.poll_timeout(),
        Some(at(60)),
        "the next PING, 15 s after this one"
    );
    assert!(!pong.is_empty());
}

#[test]
fn time_spent_delivering_is_not_the_peers_silence() {
    let t0 = Instant::now();
    let at = |s| t0 + Duration::from_secs(s);
    let (mut a, _) = pair_at(
        AssocConfig {
            keepalive_after: Duration::from_secs(15),
            peer_timeout: Duration::from_secs(45),
            ..AssocConfig::default()
        },
        t0,
    );
    // The caller was busy handing frames on until t0 + 40 s.
    a.reading_again(at(40));
    assert_eq!(a.poll_timeout(), Some(at(55)));
    assert_eq!(a.handle_timeout(at(50)).unwrap(), Liveness::Alive);
    // Time never runs backwards for the association.
    a.reading_again(at(10));
    assert_eq!(a.poll_timeout(), Some(at(55)));
}

#[test]
fn a_closed_association_has_no_deadline() {
    let (mut a, _) = pair(AssocConfig::default());
    assert!(a.poll_timeout().is_some());
    a.close(0).unwrap();
    assert_eq!(a.poll_timeout(), None);
}

#[test]
fn close_is_acknowledged_and_forged_close_is_dropped() {
    let (mut a, mut b) = pair(AssocConfig::default());
    let now = Instant::now();
    a.close(7).unwrap();
    let mut wire = sent(&mut a);
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
        a.seal(ChannelId::BRIDGE, crate::bridge::BRIDGE_NOTIFY, |_| {})
            .unwrap_err(),
        AssocError::Closed
    );
}

#[test]
fn replayed_or_tampered_frames_are_fatal_unknown_channels_dropped() {
    let now = Instant::now();
    let (mut a, mut b) = pair(AssocConfig::default());
    notify(&mut a, 1);
    let mut wire = sent(&mut a);
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
    notify(&mut a, 1);
    let mut wire = sent(&mut a);
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

/// `frame` handed to `to` with its tag apart, as a large frame read into
/// an allocation of its own is.
fn handle_split(to: &mut Association, frame: &[u8], now: Instant) -> Result<String, AssocError> {
    let header = Header::decode_prefix(frame).unwrap().unwrap();
    let (rest, tag) = frame.split_at(frame.len() - TAG_LEN);
    let mut rest = rest.to_vec();
    let tag = tag.try_into().unwrap();
    let event = to.handle_sealed(&header, Sealed::Split(&mut rest, tag), now)?;
    Ok(format!("{event:?}"))
}

#[test]
fn frames_with_their_tag_apart_follow_the_same_rules() {
    let now = Instant::now();
    let (mut a, mut b) = pair(AssocConfig::default());
    // A Bridge payload, then one whole frame between split ones: one
    // sequence.
    for octet in 1..=3 {
        notify(&mut a, octet);
    }
    let wire = sent(&mut a);
    let frames: Vec<&[u8]> = wire.chunks(HEADER_LEN + 1 + TAG_LEN).collect();
    let bridge = |b: u8| {
        format!(
            "{:?}",
            Event::Bridge {
                frame_type: crate::bridge::BRIDGE_NOTIFY,
                payload: &[b]
            }
        )
    };
    assert_eq!(handle_split(&mut b, frames[0], now).unwrap(), bridge(1));
    let (ev, _, err) = deliver(&mut b, &mut frames[1].to_vec(), now);
    assert!(err.is_none());
    assert_eq!(ev, [bridge(2)]);
    // A replay: refused before decryption.
    assert!(matches!(
        handle_split(&mut b, frames[0], now),
        Err(AssocError::Record(RecordError::OutOfSequence { .. }))
    ));
    // A tampered tag: fatal, as in a whole frame.
    let mut tampered = frames[2].to_vec();
    let last = tampered.len() - 1;
    tampered[last] ^= 1;
    assert!(matches!(
        handle_split(&mut b, &tampered, now),
        Err(AssocError::Tampered { .. })
    ));
    assert_eq!(handle_split(&mut b, frames[2], now).unwrap(), bridge(3));

    // A forged CLOSE: dropped and counted; the real one closes.
    let (mut a, mut b) = pair(AssocConfig::default());
    a.close(7).unwrap();
    let wire = sent(&mut a);
    let mut forged = wire.clone();
    forged[HEADER_LEN] ^= 1;
    assert_eq!(
        handle_split(&mut b, &forged, now).unwrap(),
        format!("{:?}", Event::Dropped(Drop::ForgedClose))
    );
    assert_eq!(
        handle_split(&mut b, &wire, now).unwrap(),
        format!("{:?}", Event::Closed { code: 7 })
    );
}
