//! A child process speaking JSON-RPC on its stdio (`--upstream-cmd`), one
//! message per line or in LSP's framing (`--framing`): one process per
//! association, started when the association opens and ended politely when
//! it closes.

use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use futures_util::FutureExt;
use tokio::io::AsyncBufReadExt;
use tracing::{debug, info, warn};

use bytes::Bytes;

use super::mcp_revision::{self, Member, Revision};
use super::process::{Stop, UpstreamChild};
use super::{Address, Delivery, Env, Kind};
use crate::bridge::ProtocolId;
use crate::framing::MessageReader;
use crate::gateway::outbox::Inbox;
use crate::gateway::session::{SESSION_OVER, Session};
use crate::lines::LineSkipped;

/// A program and its arguments, for every protocol but MCP (whose stdio
/// servers are [`super::mcp_stdio`]).
pub struct Command;

impl Kind for Command {
    fn name(&self) -> &'static str {
        "command"
    }

    fn parse(&self, _url: &str) -> Option<Result<Address, String>> {
        None
    }

    fn takes(&self, address: &Address, protocol: ProtocolId) -> bool {
        matches!(address, Address::Command(_)) && protocol != ProtocolId::MCP
    }

    fn delivery(&self) -> Delivery {
        Delivery::Session(|address, env, session, rx| match address {
            Address::Command(argv) => run(argv, env, session, rx).boxed(),
            _ => std::future::ready("not a command".to_owned()).boxed(),
        })
    }
}
/// A child process speaking JSON-RPC on stdio.
pub async fn run(argv: &[String], env: &Env, session: &Session, rx: &mut Inbox) -> String {
    let ctx = &env.ctx;
    let Some((program, args)) = argv.split_first() else {
        return "empty upstream command".into();
    };
    // An MCP server: what it speaks, asked before its session's child
    // starts, by a child of the gateway's own.
    let member = match ctx.protocol == ProtocolId::MCP {
        true => Some(ask_member(argv, env).await),
        false => None,
    };
    let _running = match room_for_one(env) {
        Ok(room) => room,
        Err(why) => return why,
    };
    let (mut child, mut stdin, stdout, stderr) = match UpstreamChild::spawn(program, args) {
        Ok(c) => c,
        Err(e) => {
            return format!(
                "cannot start {}: {e}",
                crate::gateway::redact::program(argv)
            );
        }
    };
    let pid = child.id();
    info!(pid, command = %crate::gateway::redact::program(argv), "upstream process started");
    debug!(pid, argv = ?argv, "upstream process arguments");
    let messages = ctx.message_reader(stdout);
    session.local_up();
    log_stderr(stderr, pid);
    // A request its era cannot take is answered here ([`mcp_revision`]).
    let refusal = |text: &[u8]| member.as_ref().and_then(|m| m.refusal(text));
    let here: Option<super::AnswerHere<'_>> = member.is_some().then_some(&refusal);
    let io = (&mut stdin, messages);
    match carry(ctx, (session, rx), &mut child, io, here).await {
        Ended::Failed(why) => {
            child.stop(Stop::Kill);
            why
        }
        Ended::Stop(why) => {
            // The association is over (or a language server did not heed
            // `exit`), the child is fine: let it exit on its own, as MCP's
            // stdio shutdown asks (stdin closed, then SIGTERM, then
            // SIGKILL).
            drop(stdin);
            stop_child(&mut child, pid).await;
            why
        }
    }
}

/// How a child's session ended.
enum Ended {
    /// It failed: the child is killed.
    Failed(String),
    /// It is over: the child is stopped politely.
    Stop(String),
}

/// Carries a session between the association and the child's stdio until
/// one of them ends. A language server (`--protocol lsp`) exits after LSP's
/// `exit`; one that has not within [`CHILD_EXIT_GRACE`] is stopped as
/// when its association ends.
async fn carry<W, R>(
    ctx: &crate::gateway::context::Ctx,
    (session, rx): (&Session, &mut Inbox),
    child: &mut UpstreamChild,
    (stdin, mut messages): (&mut W, MessageReader<R>),
    here: Option<super::AnswerHere<'_>>,
) -> Ended
where
    W: tokio::io::AsyncWrite + Unpin,
    R: tokio::io::AsyncRead + Unpin,
{
    let framing = messages.decided();
    let lsp = ctx.protocol == ProtocolId::LSP_EXPERIMENTAL;
    let here = here.map(|h| (session, h));
    let write = async {
        let last = |m: &[u8]| lsp && is_exit(m, ctx);
        match super::write_messages(ctx, "its stdin", &framing, (rx, stdin), last, here).await {
            super::Written::Failed(why) => Ended::Failed(why),
            super::Written::Closed => Ended::Stop(SESSION_OVER.to_owned()),
            super::Written::Last => {
                tokio::time::sleep(CHILD_EXIT_GRACE).await;
                Ended::Stop(format!(
                    "the language server did not exit within {CHILD_EXIT_GRACE:?} of `exit`"
                ))
            }
        }
    };
    let read = async {
        // One reply too large for --max-body is dropped, not a reason to
        // restart the upstream (and lose its other requests and state):
        // the request it answers is told so when the reply's head names
        // it, else it times out.
        loop {
            match messages.next().await {
                Ok(Some(line)) => session.on_local_message(line).await,
                Ok(None) => return "the upstream closed its stdout".to_owned(),
                Err(e) => match LineSkipped::of(&e) {
                    Some(s) => session.local_message_too_large(&s.head, s.len).await,
                    None => return format!("reading the upstream's stdout: {e}"),
                },
            }
        }
    };
    tokio::select! {
        w = write => w,
        r = read => Ended::Failed(r),
        status = child.wait() => Ended::Failed(match status {
            Ok(s) => format!("the upstream process exited ({s})"),
            Err(e) => format!("waiting for the upstream process: {e}"),
        }),
        _ = session.assoc().ended() => Ended::Stop(SESSION_OVER.to_owned()),
    }
}

/// The member `argv`, asked what it speaks by its first session
/// ([`mcp_revision`]), whose answer every session waits for as long as a
/// connection may take.
async fn ask_member(argv: &[String], env: &Env) -> std::sync::Arc<Member> {
    let (command, ctx, children) = (argv.to_vec(), env.ctx.clone(), env.children.clone());
    let ask = move || {
        let (argv, ctx, children) = (command.clone(), ctx.clone(), children.clone());
        async move { ask_child(&argv, &ctx, children).await }
    };
    let shown = crate::gateway::redact::program(argv).to_string();
    let wait = env.ctx.limits.upstream_connect_timeout;
    let member = Address::Command(argv.to_vec());
    env.revisions.join(&member, (ask, shown), wait).await
}

/// What the MCP server `argv` speaks ([`mcp_revision`]), asked of a child
/// of the gateway's own: `server/discover`, and where that says the session
/// era, `initialize`, for its version; no answer within the request timeout
/// says the session era too (the spec's "does not respond within a
/// reasonable timeout"). The child is then stopped as MCP's stdio shutdown
/// asks. `None`: no room for one more process (`--max-upstream-processes`),
/// no start, or a child that ended or took nothing before it answered.
async fn ask_child(
    argv: &[String],
    ctx: &crate::gateway::context::Ctx,
    children: std::sync::Arc<tokio::sync::Semaphore>,
) -> Option<Revision> {
    let _room = children.try_acquire_owned().ok()?;
    let (program, args) = argv.split_first()?;
    let (mut child, mut stdin, stdout, stderr) = UpstreamChild::spawn(program, args).ok()?;
    let pid = child.id();
    log_stderr(stderr, pid);
    let mut messages = ctx.message_reader(stdout);
    let deadline = tokio::time::Instant::now() + ctx.limits.request_timeout;
    let io = (&mut stdin, &mut messages);
    let discover = ask(
        ctx,
        io,
        mcp_revision::discover_request(),
        mcp_revision::DISCOVER_ID,
    );
    let found = match tokio::time::timeout_at(deadline, discover).await {
        Ok(Some(answer)) => Some(mcp_revision::read_discover(&answer)),
        // It ended, or took nothing: it says nothing.
        Ok(None) => None,
        // It is there and does not answer: the session era.
        Err(_) => Some(Revision::Sessions { version: None }),
    };
    let Some(found) = found else {
        child.stop(Stop::Kill);
        let _ = child.wait().await;
        return None;
    };
    let found = match found {
        Revision::Sessions { .. } => {
            let io = (&mut stdin, &mut messages);
            let init = ask(
                ctx,
                io,
                mcp_revision::initialize_request(),
                mcp_revision::INITIALIZE_ID,
            );
            let answer = tokio::time::timeout_at(deadline, init).await.ok().flatten();
            let version = answer.as_deref().and_then(mcp_revision::read_initialize);
            Revision::Sessions { version }
        }
        stateless => stateless,
    };
    drop(stdin);
    stop_child(&mut child, pid).await;
    Some(found)
}

/// Writes `text` to the child and reads what it says until the answer to
/// id `id` (what comes before it is for nobody). `None`: it took nothing,
/// or ended first. Else it waits as long as its caller does.
async fn ask<W, R>(
    ctx: &crate::gateway::context::Ctx,
    (stdin, messages): (&mut W, &mut MessageReader<R>),
    text: Bytes,
    id: &str,
) -> Option<Bytes>
where
    W: tokio::io::AsyncWrite + Unpin,
    R: tokio::io::AsyncRead + Unpin,
{
    use tokio::io::AsyncWriteExt;
    let framing = messages.decided();
    let write = async {
        crate::framing::write_message(stdin, framing.get(), &text).await?;
        stdin.flush().await
    };
    tokio::time::timeout(ctx.limits.stall_timeout, write)
        .await
        .ok()?
        .ok()?;
    loop {
        let text = messages.next().await.ok()??;
        if mcp_revision::answers(&text, id) {
            return Some(text);
        }
    }
}

/// Logs what a child writes on its stderr, line by line (target
/// `upstream`).
fn log_stderr<R>(stderr: R, pid: u32)
where
    R: tokio::io::AsyncRead + Unpin + Send + 'static,
{
    tokio::spawn(async move {
        let mut lines = tokio::io::BufReader::new(stderr).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            info!(target: "upstream", pid, "{line}");
        }
    });
}

/// Whether `text` is LSP's `exit` notification (a few dozen octets: only a
/// short message is scanned to know).
fn is_exit(text: &[u8], ctx: &crate::gateway::context::Ctx) -> bool {
    use crate::jsonrpc::carriage::method_of;
    use crate::jsonrpc::{Kind, Scanned, scan};
    text.len() < 256
        && matches!(
            scan(text, &ctx.scan),
            Ok(Scanned::Single(Kind::Notification { method }))
                if method_of(text, &method).as_deref() == Some("exit")
        )
}

/// Room for one more process under `--max-upstream-processes`: each
/// association has its own, so a flood of associations (MCP clients
/// initializing) cannot start one each without end.
fn room_for_one(env: &Env) -> Result<tokio::sync::OwnedSemaphorePermit, String> {
    let ctx = &env.ctx;
    env.children.clone().try_acquire_owned().map_err(|_| {
        ctx.metrics.upstream_processes_refused.fetch_add(1, Relaxed);
        format!(
            "{} upstream processes run already (--max-upstream-processes): none started for this association",
            ctx.limits.max_upstream_processes
        )
    })
}

/// How long an upstream child gets to exit after its stdin closes, and again
/// after SIGTERM, before it is killed.
const CHILD_EXIT_GRACE: Duration = Duration::from_secs(2);

/// Waits for a child whose stdin was closed to exit; SIGTERM after
/// [`CHILD_EXIT_GRACE`], SIGKILL after another.
async fn stop_child(child: &mut UpstreamChild, pid: u32) {
    let exited = async |child: &mut UpstreamChild| {
        tokio::time::timeout(CHILD_EXIT_GRACE, child.wait())
            .await
            .is_ok()
    };
    if exited(child).await {
        debug!(pid, "upstream process exited after its stdin closed");
        return;
    }
    if cfg!(unix) {
        child.stop(Stop::Terminate);
        if exited(child).await {
            info!(pid, "upstream process exited on SIGTERM");
            return;
        }
    }
    warn!(pid, "upstream process did not exit; killing it");
    child.stop(Stop::Kill);
    let _ = child.wait().await;
}
