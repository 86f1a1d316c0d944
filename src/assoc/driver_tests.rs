//! The driver over an in-memory stream (everything on it, as over TLS).

use std::sync::Mutex as StdMutex;

use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};

use super::*;
use crate::assoc::AssocConfig;
use crate::assoc::binding::Stream;
use crate::bridge::BRIDGE_NOTIFY;
use crate::wire::{Deframer, HEADER_LEN};

/// What a sink saw: payloads in order, then how the association ended;
/// each payload as kept ([`Payload::keep`]), and whether keeping it handed
/// on the frame's own allocation or copied it.
#[derive(Default)]
struct Seen {
    payloads: Vec<Vec<u8>>,
    kept: Vec<(Bytes, bool)>,
    ended: Option<End>,
}

struct Recorder(Arc<StdMutex<Seen>>);

impl BridgeSink for Recorder {
    async fn frame(&mut self, _: FrameType, payload: Payload<'_>) {
        let mut seen = self.0.lock().expect("seen");
        assert!(seen.ended.is_none(), "a frame after the end");
        seen.payloads.push(payload.to_vec());
        let at = payload.octets().as_ptr();
        let kept = payload.keep(0..seen.payloads[seen.payloads.len() - 1].len());
        // The payload's own octets, handed on; or a copy of them.
        let handed_on = kept.as_ptr() == at;
        seen.kept.push((kept, handed_on));
    }
    fn ended(&mut self, why: &End) {
        self.0.lock().expect("seen").ended = Some(why.clone());
    }
}

/// The server half of a pair runs on the driver over one in-memory
/// stream (everything on it, as over TLS); the test is the client.
fn driven() -> (Association, DuplexStream, AssocHandle, Arc<StdMutex<Seen>>) {
    driven_with(AssocConfig::default())
}

fn driven_with(
    config: AssocConfig,
) -> (Association, DuplexStream, AssocHandle, Arc<StdMutex<Seen>>) {
    let (client, server) = crate::assoc::association::tests::pair(config);
    let (ours, theirs) = tokio::io::duplex(1 << 20);
    let (r, w) = tokio::io::split(theirs);
    let seen = Arc::new(StdMutex::new(Seen::default()));
    let sink = Recorder(seen.clone());
    let handle = spawn(
        server,
        Binding::Tls(Stream::new(FrameReader::new(Box::new(r)), Box::new(w))),
        Arc::new(AssocStats::default()),
        |_| sink,
    );
    (client, ours, handle, seen)
}

/// Appends everything `client` has queued to `wire` (as over TLS, every
/// channel on the one stream, in the order sealed).
fn flush(client: &mut Association, wire: &mut Vec<u8>) {
    let mut run = Vec::new();
    while client.poll_transmit(&mut run).is_some() {
        wire.extend_from_slice(&run);
    }
}

fn notify(client: &mut Association, wire: &mut Vec<u8>, i: u16) {
    client
        .seal(ChannelId::BRIDGE, BRIDGE_NOTIFY, |o| {
            o.extend_from_slice(&i.to_be_bytes())
        })
        .expect("seal");
    flush(client, wire);
}

/// Reads frames from the driver until one of `frame_type` arrives.
async fn await_frame(stream: &mut DuplexStream, frame_type: FrameType) {
    let mut buf = Vec::new();
    loop {
        let mut at = 0;
        while let Some((frame, len)) = Deframer::default().deframe(&buf[at..]).expect("frame") {
            if frame.header.frame_type == frame_type {
                return;
            }
            at += len;
        }
        read_more(stream, &mut buf).await;
    }
}

/// Appends what the driver writes next to `buf`.
async fn read_more(stream: &mut DuplexStream, buf: &mut Vec<u8>) {
    let mut chunk = [0u8; 4096];
    let n = tokio::time::timeout(Duration::from_secs(5), stream.read(&mut chunk))
        .await
        .expect("the driver writes")
        .expect("read");
    assert!(n > 0, "the driver closed the stream");
    buf.extend_from_slice(&chunk[..n]);
}

#[tokio::test]
async fn frames_of_one_write_reach_the_sink_in_order_around_control_frames() {
    let (mut client, mut stream, handle, seen) = driven();
    // More Bridge frames than one pass holds, a PING in the middle, more
    // Bridge frames, then CLOSE, all in one write.
    let mut wire = Vec::new();
    for i in 0..(FRAMES_PER_PASS as u16 * 3 + 5) {
        notify(&mut client, &mut wire, i);
    }
    client.ping(Instant::now()).expect("ping");
    flush(&mut client, &mut wire);
    for i in 1000..1010 {
        notify(&mut client, &mut wire, i);
    }
    client.close(7).expect("close");
    flush(&mut client, &mut wire);
    stream.write_all(&wire).await.expect("write");
    await_frame(&mut stream, FrameType::CLOSE_ACK).await;
    handle.ended().await;

    let seen = seen.lock().expect("seen");
    let expected: Vec<Vec<u8>> = (0..(FRAMES_PER_PASS as u16 * 3 + 5))
        .chain(1000..1010)
        .map(|i| i.to_be_bytes().to_vec())
        .collect();
    assert_eq!(seen.payloads, expected);
    assert_eq!(seen.ended, Some(End::PeerClosed(7)));
    assert_eq!(handle.end(), Some(End::PeerClosed(7)));
}

fn keepalive_config() -> AssocConfig {
    AssocConfig {
        keepalive_after: Duration::from_millis(60),
        peer_timeout: Duration::from_millis(300),
        ..AssocConfig::default()
    }
}

#[tokio::test]
async fn a_silent_peer_is_pinged_then_given_up() {
    // The peer timeout counts from the driver's start: the clock starts
    // before it does.
    let started = Instant::now();
    let (_client, mut stream, handle, seen) = driven_with(keepalive_config());
    await_frame(&mut stream, FrameType::PING).await;
    tokio::time::timeout(Duration::from_secs(5), handle.ended())
        .await
        .expect("the association ends");
    assert!(started.elapsed() >= Duration::from_millis(300));
    let why = seen.lock().expect("seen").ended.clone();
    assert!(
        matches!(&why, Some(End::Error(e)) if matches!(*e.error, LinkError::PeerSilent(_))),
        "{why:?}"
    );
}

#[tokio::test]
async fn a_peer_that_answers_pings_stays() {
    let (mut client, mut stream, handle, _) = driven_with(keepalive_config());
    // Answer every PING for three peer timeouts, sending nothing else.
    let until = Instant::now() + Duration::from_millis(900);
    let (mut buf, mut chunk, mut pings) = (Vec::new(), [0u8; 4096], 0);
    while Instant::now() < until {
        let Ok(read) =
            tokio::time::timeout(Duration::from_millis(50), stream.read(&mut chunk)).await
        else {
            continue;
        };
        let n = read.expect("read");
        assert!(n > 0, "the driver closed the stream");
        buf.extend_from_slice(&chunk[..n]);
        let mut replies = Vec::new();
        while let Some(span) = Deframer::default().span(&buf).expect("frame") {
            let mut frame = buf.drain(..span.len).collect::<Vec<u8>>();
            pings += usize::from(span.header.frame_type == FrameType::PING);
            client
                .handle(&span.header, &mut frame, Instant::now())
                .expect("handle");
            flush(&mut client, &mut replies);
        }
        stream.write_all(&replies).await.expect("write");
    }
    assert!(pings >= 3, "{pings} PINGs");
    assert!(handle.is_open(), "{:?}", handle.end());
}

#[tokio::test]
async fn frames_before_a_tampered_one_are_delivered_and_nothing_after() {
    let (mut client, mut stream, handle, seen) = driven();
    let mut wire = Vec::new();
    for i in 0..5 {
        notify(&mut client, &mut wire, i);
    }
    let tampered = wire.len() + HEADER_LEN;
    for i in 5..10 {
        notify(&mut client, &mut wire, i);
    }
    wire[tampered] ^= 1;
    stream.write_all(&wire).await.expect("write");
    tokio::time::timeout(Duration::from_secs(5), handle.ended())
        .await
        .expect("the association ends");

    let seen = seen.lock().expect("seen");
    let expected: Vec<Vec<u8>> = (0u16..5).map(|i| i.to_be_bytes().to_vec()).collect();
    assert_eq!(seen.payloads, expected);
    assert!(
        matches!(&seen.ended, Some(End::Error(e)) if e.class == crate::assoc::ErrorClass::Tampered),
        "{:?}",
        seen.ended
    );
}

/// An in-memory stream's write half that counts the writes made on it.
struct CountingWriter {
    inner: tokio::io::WriteHalf<DuplexStream>,
    writes: Arc<std::sync::atomic::AtomicUsize>,
}

impl tokio::io::AsyncWrite for CountingWriter {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        // Counted before the octets can reach the reader, which may run on
        // another thread (the test's), and taken back if nothing went.
        self.writes.fetch_add(1, Ordering::SeqCst);
        let polled = std::pin::Pin::new(&mut self.inner).poll_write(cx, buf);
        if !matches!(polled, std::task::Poll::Ready(Ok(n)) if n > 0) {
            self.writes.fetch_sub(1, Ordering::SeqCst);
        }
        polled
    }
    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_flush(cx)
    }
    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// Bridge frames that several tasks seal in one round of a worker leave
/// in one write, not one write each: tokio would run the woken writer
/// straight after the first sender, and the writer yields to the others.
#[tokio::test(flavor = "multi_thread", worker_threads = 1)]
async fn frames_sealed_in_one_round_share_a_write() {
    const SENDERS: u16 = 16;
    let (_client, server) = crate::assoc::association::tests::pair(AssocConfig::default());
    let (mut ours, theirs) = tokio::io::duplex(1 << 20);
    let (r, w) = tokio::io::split(theirs);
    let writes = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let writer = CountingWriter {
        inner: w,
        writes: writes.clone(),
    };
    let handle = spawn(
        server,
        Binding::Tls(Stream::new(FrameReader::new(Box::new(r)), Box::new(writer))),
        Arc::new(AssocStats::default()),
        |_| Recorder(Arc::default()),
    );
    // The senders wake together on the one worker, as the tasks of the
    // requests that one poll of the I/O driver finds ready do.
    let go = Arc::new(tokio::sync::Notify::new());
    let sending = tokio::spawn(async move {
        let senders: Vec<_> = (0..SENDERS)
            .map(|i| {
                let (handle, go) = (handle.clone(), go.clone());
                tokio::spawn(async move {
                    go.notified().await;
                    handle
                        .send(BRIDGE_NOTIFY, |o| o.extend_from_slice(&i.to_be_bytes()))
                        .await
                })
            })
            .collect();
        // The one worker runs every sender to its wait before it looks at
        // the timer that ends this sleep.
        tokio::time::sleep(Duration::from_millis(10)).await;
        go.notify_waiters();
        for sender in senders {
            sender.await.expect("sender").expect("sent");
        }
    });
    sending.await.expect("senders");

    let (mut buf, mut frames) = (Vec::new(), 0);
    while frames < usize::from(SENDERS) {
        read_more(&mut ours, &mut buf).await;
        while let Some(span) = Deframer::default().span(&buf).expect("frame") {
            buf.drain(..span.len);
            frames += 1;
        }
    }
    let writes = writes.load(Ordering::SeqCst);
    // Without the yield: one write for each of the first frames (three
    // writes in all, as tokio 1.54 schedules them).
    assert_eq!(writes, 1, "{writes} writes for {SENDERS} frames");
}

/// Senders that find the queue full ([`PENDING_LIMIT`]) wait for the writer
/// to drain it, and every one of them gets through: 16 MiB from 8 senders
/// on two workers, read slowly through a 16 KiB pipe.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn senders_that_find_the_queue_full_wait_and_all_get_through() {
    const SENDERS: usize = 8;
    const EACH: usize = 256;
    const PAYLOAD: usize = 8 << 10;
    let (_client, server) = crate::assoc::association::tests::pair(AssocConfig::default());
    let (mut ours, theirs) = tokio::io::duplex(16 << 10);
    let (r, w) = tokio::io::split(theirs);
    let handle = spawn(
        server,
        Binding::Tls(Stream::new(FrameReader::new(Box::new(r)), Box::new(w))),
        Arc::new(AssocStats::default()),
        |_| Recorder(Arc::default()),
    );
    let senders: Vec<_> = (0..SENDERS)
        .map(|_| {
            let handle = handle.clone();
            tokio::spawn(async move {
                for _ in 0..EACH {
                    handle
                        .send(BRIDGE_NOTIFY, |o| o.resize(o.len() + PAYLOAD, 7))
                        .await?;
                }
                Ok::<_, Gone>(())
            })
        })
        .collect();
    let reading = async {
        let (mut buf, mut frames, mut chunk) = (Vec::new(), 0, vec![0u8; 4096]);
        while frames < SENDERS * EACH {
            let n = ours.read(&mut chunk).await.expect("read");
            assert!(n > 0, "the driver closed the stream");
            buf.extend_from_slice(&chunk[..n]);
            while let Some(span) = Deframer::default().span(&buf).expect("frame") {
                buf.drain(..span.len);
                frames += 1;
            }
            // Slower than the senders: the queue fills.
            tokio::task::yield_now().await;
        }
        frames
    };
    let frames = tokio::time::timeout(Duration::from_secs(30), reading)
        .await
        .expect("a sender waiting for room was never woken");
    // More than the queue holds went through it, and every frame arrived.
    const { assert!(SENDERS * EACH * PAYLOAD > 8 * PENDING_LIMIT) };
    assert_eq!(frames, SENDERS * EACH);
    for sender in senders {
        sender.await.expect("sender").expect("sent");
    }
}

#[tokio::test]
async fn large_payloads_are_kept_without_a_copy_and_small_ones_are_copied() {
    let (mut client, mut stream, handle, seen) = driven();
    // Small, large, small, large, small: one write (this reader takes
    // frames up to 64 KiB).
    let lens = [2usize, 20_000, 300, 60_000, 2];
    let mut wire = Vec::new();
    for (i, &len) in lens.iter().enumerate() {
        client
            .seal(ChannelId::BRIDGE, BRIDGE_NOTIFY, |o| {
                o.resize(o.len() + len, i as u8)
            })
            .expect("seal");
        flush(&mut client, &mut wire);
    }
    client.close(7).expect("close");
    flush(&mut client, &mut wire);
    stream.write_all(&wire).await.expect("write");
    await_frame(&mut stream, FrameType::CLOSE_ACK).await;
    handle.ended().await;

    let seen = seen.lock().expect("seen");
    assert_eq!(seen.payloads.len(), lens.len());
    for (i, ((kept, sliced), &len)) in seen.kept.iter().zip(&lens).enumerate() {
        // Still whole after the reader moved on (kept, not borrowed).
        assert_eq!(&kept[..], &vec![i as u8; len][..]);
        // A small payload lies in the reader's shared buffer: copied, so
        // it never holds that buffer alive. A large one lies in an
        // allocation of its own (the frame: 36 octets more, its tag read
        // apart), which is handed on.
        assert_eq!(*sliced, len >= super::super::payload::OWN_FRAME, "{len}");
    }
}
