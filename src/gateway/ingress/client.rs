//! The loop every session client runs (WebSocket, TCP, stdio): its
//! messages go to the peer over an association of its own, and what comes
//! back goes out through its outbox.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tracing::debug;

use std::sync::atomic::Ordering::Relaxed;

use super::Ingress;
use super::limit::{ClientKey, Limiter};
use crate::framing::{Decided, MessageReader, write_message};
use crate::gateway::context::Ctx;
use crate::gateway::edge::Edge;
use crate::gateway::metrics::{Metrics, ReplyClass};
use crate::gateway::outbox::{Inbox, Outbox};
use crate::gateway::session::Session;
use crate::gateway::stall::{Moved, wrote};
use crate::jsonrpc::carriage::{
    BatchJoin, id_of, local_error, scan_error_response, scan_error_response_to,
};
use crate::jsonrpc::{Kind, ScanError, Scanned, request_id, scan};
use crate::lines::LineSkipped;
use crate::lsp::FramingLost;
use crate::relay::Failure;

/// A stream of messages from a client.
pub trait MessageSource: Send {
    fn next_message(&mut self) -> impl Future<Output = std::io::Result<Option<Bytes>>> + Send;
}

impl<R: AsyncRead + Unpin + Send> MessageSource for MessageReader<R> {
    async fn next_message(&mut self) -> std::io::Result<Option<Bytes>> {
        self.next().await
    }
}

/// The answer to a message over `--max-body`: -32600, with the request's id
/// when its head shows it (else `null`, as for any request whose id cannot
/// be read). An LSP editor would drop an answer with no id of its, and the
/// message it lost is most likely a notification (a whole file opened or
/// changed): it is told with `window/showMessage` instead, which it shows
/// its user.
fn too_large(ctx: &Ctx, skipped: &LineSkipped) -> Vec<u8> {
    let id = request_id(&skipped.head).map(|id| &skipped.head[id.token]);
    if id.is_none() && ctx.protocol == crate::bridge::ProtocolId::LSP_EXPERIMENTAL {
        let message = format!(
            "npamp-gateway: a message of {} octets, over --max-body ({}), was not delivered: the language server has not seen it (a document opened or changed?)",
            skipped.len, skipped.max
        );
        let show = serde_json::json!({"jsonrpc": "2.0", "method": "window/showMessage",
            "params": {"type": 1, "message": message}});
        return show.to_string().into_bytes();
    }
    let f = ScanError::TooLarge {
        len: skipped.len,
        limit: skipped.max,
    };
    scan_error_response_to(id, &f)
}

/// Writes messages for a stream client, in the framing it spoke, until the
/// queue closes; a client that takes no octet of them for `stall` (by
/// `moved`, which the socket under `w` marks) is given up (the queue is
/// dropped, which ends its session).
pub async fn write_messages<W: AsyncWrite + Unpin>(
    mut w: W,
    framing: Decided,
    moved: Arc<Moved>,
    mut rx: Inbox,
    stall: Duration,
    metrics: Arc<Metrics>,
) {
    while let Some(text) = rx.recv().await {
        let write = async {
            write_message(&mut w, framing.get(), &text).await?;
            if rx.is_empty() {
                w.flush().await?;
            }
            Ok::<_, std::io::Error>(())
        };
        if !wrote(stall, &moved, &metrics, write).await {
            return;
        }
    }
    let _ = w.flush().await;
    let _ = w.shutdown().await;
}

/// Serves one session client: its messages go to the peer over an
/// association of its own (established at the first message); what comes
/// back goes to `tx`. Returns when the client is done and its outstanding
/// requests are answered, or the association is gone. A client silent for
/// `--idle-timeout` with nothing outstanding is closed, but for stdio's:
/// `connect`'s one client is the program that started it (an editor, an
/// MCP host), and closing it would end the process under it.
pub async fn stream_client<S: MessageSource>(
    mut source: S,
    tx: Outbox,
    edge: Arc<Edge>,
    ingress: Ingress,
    client: Option<super::Admitted>,
) {
    let ctx = edge.ctx.clone();
    let idle = match ingress {
        Ingress::STDIO => Duration::MAX,
        _ => ctx.limits.idle_timeout,
    };
    let mut session: Option<Session> = None;
    loop {
        let ended = async {
            match &session {
                Some(s) => s.assoc().ended().await,
                None => std::future::pending().await,
            }
        };
        let next = tokio::select! {
            m = tokio::time::timeout(idle, source.next_message()) => m,
            _ = ended => {
                debug!("association ended: closing the client connection");
                return;
            }
            _ = tx.closed() => {
                // The writer gave up on the client (it stopped reading):
                // nothing sent from now on could reach it. Its connection
                // goes at once; the association closes on its own time.
                if let Some(s) = session {
                    tokio::spawn(async move { s.close().await });
                }
                return;
            }
        };
        let text = match next {
            Ok(Ok(Some(text))) => text,
            Ok(Ok(None)) => break,
            Ok(Err(e)) => {
                if read_failed(&ctx, &e, &tx).await {
                    continue;
                }
                break;
            }
            Err(_) => {
                if session.as_ref().is_some_and(|s| s.outstanding() > 0) {
                    continue;
                }
                debug!("idle client: closing");
                break;
            }
        };
        if let Some(f) = client.as_ref().and_then(|c| refusal(&ctx, c, &text)) {
            answer_all(&text, &f, &tx, &edge).await;
            continue;
        }
        ctx.captured(&text);
        if session.is_none() {
            match edge.session(ingress, tx.clone()).await {
                Ok(s) => session = Some(s),
                Err(f) => {
                    answer_all(&text, &f, &tx, &edge).await;
                    continue;
                }
            }
        }
        if let Some(s) = &session {
            s.on_local_message(text).await;
        }
    }
    if let Some(s) = session {
        done_sending(&ctx, s).await;
    }
}

/// Why `client`'s message `text` is refused before it is carried, if it
/// is: over its rate limit, or a scope its token lacks.
fn refusal(ctx: &Ctx, client: &super::Admitted, text: &Bytes) -> Option<Failure> {
    // Scanned once, and only where a limit or a rule asks.
    let scanned = std::cell::OnceCell::new();
    let scanned = || scanned.get_or_init(|| scan(text, &ctx.scan));
    let count = || match scanned() {
        Ok(Scanned::Batch(elements)) => elements.len(),
        _ => 1,
    };
    if let Some(f) = over_rate_limit(ctx, client.key, text.len(), count) {
        return Some(f);
    }
    if client.expired() {
        ctx.metrics.unauthorized.fetch_add(1, Relaxed);
        return Some(Failure::Forbidden(
            "unauthorized: the access token this connection was opened with has expired: connect again with a new one".into(),
        ));
    }
    if client.held == super::Held::ALL {
        return None;
    }
    let message = scanned().as_ref().ok()?;
    client.lacks(ctx, text, message).map(|(_, f)| f)
}

/// The client is done sending: its outstanding requests still get their
/// replies (bounded by the request timeout), then the association closes.
async fn done_sending(ctx: &Ctx, s: Session) {
    let deadline = Instant::now() + ctx.limits.request_timeout + Duration::from_secs(1);
    while s.outstanding() > 0 && Instant::now() < deadline && s.assoc().is_open() {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    s.close().await;
}

/// Why a message of `len` octets from `key` is refused under its rate
/// limit (`--rate-limit`, `--rate-limit-octets`; `count`: the requests and
/// notifications in it, asked only where a limit is set), if it is:
/// counted, with the failure to answer with. HTTP and session clients
/// alike.
pub fn over_rate_limit(
    ctx: &Ctx,
    key: ClientKey,
    len: usize,
    count: impl FnOnce() -> usize,
) -> Option<Failure> {
    let live = ctx.live();
    admit(ctx, live.limiter.as_ref()?, key, count(), len).err()
}

/// A session client's message could not be read: `true` when its
/// connection carries on (a line or LSP message over `--max-body`, skipped
/// whole, the client told why, with the request's id when the message's
/// head shows it), `false` when it is done (told why, where it sent
/// something too large or lost its LSP framing).
async fn read_failed(ctx: &Ctx, e: &std::io::Error, tx: &Outbox) -> bool {
    if let Some(skipped) = LineSkipped::of(e) {
        ctx.metrics.reply(ReplyClass::Invalid);
        let _ = tx.send(too_large(ctx, skipped).into()).await;
        return true;
    }
    if let Some(lost) = FramingLost::of(e) {
        // Nothing after this can be told apart: the client is told why,
        // with a null id (no request can be named), and its connection
        // closes once that is written.
        ctx.metrics.reply(ReplyClass::Invalid);
        debug!(error = %lost, "client stream's framing lost: closing it");
        let why = serde_json::Value::String(lost.to_string()).to_string();
        let answer = local_error(None, -32700, "Parse error", Some(&why));
        let _ = tx.send(answer.into()).await;
        return false;
    }
    if e.kind() == std::io::ErrorKind::UnexpectedEof {
        // A TLS client gone without close_notify: it is gone.
        debug!(error = %e, "client connection ended");
    } else {
        static FAILED: crate::gateway::quiet::Every = crate::gateway::quiet::Every::new();
        crate::gateway::quiet::warn_every!(
            FAILED,
            error = %e,
            "client connection failed (one line per 5 s at most)"
        );
    }
    if e.kind() == std::io::ErrorKind::InvalidData {
        let f = ScanError::TooLarge {
            len: ctx.limits.max_body + 1,
            limit: ctx.limits.max_body,
        };
        let _ = tx.send(scan_error_response(&f).into()).await;
    }
    false
}

/// Takes `count` messages of `len` octets in all from `key`'s rate limit,
/// or refuses them (counted) with the failure to answer with.
fn admit(
    ctx: &Ctx,
    limiter: &Limiter,
    key: ClientKey,
    count: usize,
    len: usize,
) -> Result<(), Failure> {
    let l = limiter.limit();
    if l.requests.is_some() && count as f64 > l.burst + 1e-9 {
        // More at once than the bucket ever holds: no wait would admit it,
        // so a Retry-After would be a lie.
        ctx.metrics.rate_limited.fetch_add(count as u64, Relaxed);
        return Err(Failure::Invalid(format!(
            "a batch of {count} requests is more than this client's rate limit lets through at once ({} requests, --rate-limit-burst): it is never admitted; send at most {} a batch",
            l.burst,
            l.burst.floor()
        )));
    }
    let Err(after) = limiter.check(key, count, len) else {
        return Ok(());
    };
    ctx.metrics.rate_limited.fetch_add(count as u64, Relaxed);
    let what = match (l.requests, l.octets) {
        (Some(r), Some(o)) => format!("{r} requests and {o} octets per second"),
        (Some(r), None) => format!("{r} requests per second"),
        (None, Some(o)) => format!("{o} octets per second"),
        (None, None) => "no limit".to_owned(),
    };
    Err(Failure::RateLimited(
        format!(
            "over this client's rate limit ({what}): retry after {:.3} s",
            after.0.as_secs_f64()
        ),
        after.0,
    ))
}

/// Without an association, every request in `text` gets `f`.
async fn answer_all(text: &Bytes, f: &Failure, tx: &Outbox, edge: &Edge) {
    let m = &edge.ctx.metrics;
    let answer = match scan(text, &edge.ctx.scan) {
        Err(e) => {
            m.reply(ReplyClass::Invalid);
            Some(scan_error_response(&e))
        }
        Ok(Scanned::Single(kind)) => id_of(&kind)
            .filter(|_| matches!(kind, Kind::Request { .. }))
            .map(|id| {
                m.reply(f.class());
                f.response(Some(&text[id.token.clone()]))
            }),
        Ok(Scanned::Batch(elements)) => {
            let mut join = BatchJoin::default();
            for e in elements {
                match e.kind {
                    Ok(Kind::Request { id, .. }) => {
                        m.reply(f.class());
                        join.push(&f.response(Some(&text[id.token])));
                    }
                    Ok(_) => {}
                    Err(invalid) => join.push(&scan_error_response(&ScanError::Invalid(invalid))),
                }
            }
            join.finish()
        }
    };
    if let Some(a) = answer {
        let _ = tx.send(a.into()).await;
    }
}
