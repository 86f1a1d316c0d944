//! A stream socket to a JSON-RPC server, one connection per association:
//! a Unix domain socket (`unix:///path/geth.ipc`, as geth's IPC endpoint
//! speaks JSON values back to back) or TCP (`tcp://HOST:PORT`, a language
//! server's `--tcp` port, a line-delimited JSON-RPC service).
//!
//! What is written is framed by `--framing`: a line per message, or LSP's
//! headers (`auto`: the protocol's own until the server has spoken, then
//! the server's). What is read is JSON values back to back (with or without
//! anything between them, which lines are too), or LSP-framed messages
//! (`auto`: whichever the server's first octets show).

use bytes::BytesMut;
use futures_util::FutureExt;
use tokio::io::{AsyncRead, AsyncWrite};
use tracing::info;

use super::{Address, Delivery, Env, Kind};
use crate::bridge::ProtocolId;
use crate::framing::{Decided, Framing, find};
use crate::gateway::json_stream::ValueReader;
use crate::gateway::outbox::Inbox;
use crate::gateway::session::{SESSION_OVER, Session};
use crate::lines::LineSkipped;
use crate::lsp::LspReader;

/// `unix:///PATH`.
pub struct Ipc;

impl Kind for Ipc {
    fn name(&self) -> &'static str {
        "ipc"
    }

    fn parse(&self, url: &str) -> Option<Result<Address, String>> {
        let path = std::path::PathBuf::from(url.strip_prefix("unix://")?);
        Some(match path.is_absolute() {
            true => Ok(Address::Path(path)),
            false => Err(format!(
                "bad URL {url:?}: expected unix:///PATH, an absolute path (unix:///run/geth.ipc)"
            )),
        })
    }

    fn takes(&self, address: &Address, _: ProtocolId) -> bool {
        matches!(address, Address::Path(_))
    }

    fn delivery(&self) -> Delivery {
        Delivery::Session(|address, env, session, rx| match address {
            Address::Path(path) => unix(path, env, session, rx).boxed(),
            _ => std::future::ready("not a path".to_owned()).boxed(),
        })
    }
}

/// `tcp://HOST:PORT`.
pub struct Tcp;

impl Kind for Tcp {
    fn name(&self) -> &'static str {
        "tcp"
    }

    fn parse(&self, url: &str) -> Option<Result<Address, String>> {
        let (scheme, rest) = url.split_once("://")?;
        if !scheme.eq_ignore_ascii_case("tcp") {
            return None;
        }
        let bad = |why: &str| {
            Err(format!(
                "bad URL {url:?}: {why}, as in tcp://127.0.0.1:2087"
            ))
        };
        Some(match rest.rsplit_once(':') {
            _ if rest.contains('/') => bad("expected HOST:PORT and no path"),
            Some((host, port)) if !host.is_empty() && port.parse::<u16>().is_ok_and(|p| p > 0) => {
                Ok(Address::Tcp(rest.to_owned()))
            }
            _ => bad("expected HOST:PORT"),
        })
    }

    fn takes(&self, address: &Address, _: ProtocolId) -> bool {
        matches!(address, Address::Tcp(_))
    }

    fn delivery(&self) -> Delivery {
        Delivery::Session(|address, env, session, rx| match address {
            Address::Tcp(host_port) => tcp(host_port, env, session, rx).boxed(),
            _ => std::future::ready("not a TCP address".to_owned()).boxed(),
        })
    }
}

async fn unix(path: &std::path::Path, env: &Env, session: &Session, rx: &mut Inbox) -> String {
    #[cfg(unix)]
    {
        let stream = match tokio::net::UnixStream::connect(path).await {
            Ok(s) => s,
            Err(e) => return format!("cannot connect to unix://{}: {e}", path.display()),
        };
        info!(path = %path.display(), "upstream socket connected");
        let (read, write) = stream.into_split();
        run(read, write, env, session, rx).await
    }
    #[cfg(not(unix))]
    {
        let _ = (session, rx, env);
        format!(
            "unix://{}: Unix domain sockets need a Unix system",
            path.display()
        )
    }
}

async fn tcp(host_port: &str, env: &Env, session: &Session, rx: &mut Inbox) -> String {
    let connect = tokio::net::TcpStream::connect(host_port);
    let stream = match tokio::time::timeout(env.ctx.limits.upstream_connect_timeout, connect).await
    {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => return format!("cannot connect to tcp://{host_port}: {e}"),
        Err(_) => {
            return format!(
                "cannot connect to tcp://{host_port} within {:?} (--upstream-connect-timeout)",
                env.ctx.limits.upstream_connect_timeout
            );
        }
    };
    let _ = stream.set_nodelay(true);
    info!(%host_port, "upstream socket connected");
    let (read, write) = stream.into_split();
    run(read, write, env, session, rx).await
}

/// One session on a connected socket, until it fails or the association
/// ends.
async fn run<R, W>(read: R, mut write: W, env: &Env, session: &Session, rx: &mut Inbox) -> String
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let ctx = &env.ctx;
    session.local_up();
    let framing = Decided::new(ctx.framing, ctx.first_framing());
    let writing = super::write_messages(
        ctx,
        "its socket",
        &framing,
        (rx, &mut write),
        |_| false,
        None,
    );
    let reading = async {
        let mut replies = Replies::new(read, ctx.framing, ctx.limits.max_body, &framing).await?;
        loop {
            match replies.next().await {
                Ok(Some(value)) => session.on_local_message(value).await,
                Ok(None) => return Ok("the upstream closed its socket".to_owned()),
                Err(e) => match LineSkipped::of(&e) {
                    Some(s) => session.local_message_too_large(&s.head, s.len).await,
                    None => return Err(e),
                },
            }
        }
    };
    tokio::select! {
        w = writing => match w {
            super::Written::Failed(why) => why,
            super::Written::Closed | super::Written::Last => SESSION_OVER.to_owned(),
        },
        r = reading => r.unwrap_or_else(|e: std::io::Error| format!("reading the upstream's socket: {e}")),
        _ = session.assoc().ended() => SESSION_OVER.to_owned(),
    }
}

/// What a socket server sends: JSON values back to back, or LSP-framed
/// messages.
enum Replies<R> {
    Values(ValueReader<R>),
    Lsp(LspReader<R>),
}

impl<R: AsyncRead + Unpin> Replies<R> {
    /// The reader of `read` in `framing`, found from the server's first
    /// octets for `auto` (and told to `decided`, which the writer follows).
    async fn new(
        mut read: R,
        framing: Framing,
        max: usize,
        decided: &Decided,
    ) -> std::io::Result<Self> {
        let mut buf = BytesMut::with_capacity(8 << 10);
        let framing = match framing {
            Framing::Auto => find(&mut read, &mut buf, None).await?,
            set => set,
        };
        decided.found(framing);
        Ok(match framing {
            Framing::Lsp => Self::Lsp(LspReader::after(read, max, buf)),
            Framing::Lines | Framing::Auto => Self::Values(ValueReader::after(read, max, buf)),
        })
    }

    async fn next(&mut self) -> std::io::Result<Option<bytes::Bytes>> {
        match self {
            Self::Values(r) => r.next().await,
            Self::Lsp(r) => r.next().await,
        }
    }
}
