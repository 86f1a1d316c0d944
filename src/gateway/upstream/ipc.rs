//! A Unix domain socket speaking JSON-RPC values back to back, as geth's
//! IPC endpoint does (`unix:///path/geth.ipc`): one connection per
//! association.

use futures_util::FutureExt;
use tracing::info;

use super::{Address, Delivery, Env, Kind};
use crate::bridge::ProtocolId;
use crate::gateway::outbox::Inbox;
use crate::gateway::session::{SESSION_OVER, Session};

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
            Address::Path(path) => run(path, env, session, rx).boxed(),
            _ => std::future::ready("not a path".to_owned()).boxed(),
        })
    }
}

/// A Unix domain socket speaking JSON-RPC values back to back (geth's IPC):
/// each request goes out as one value and a newline (whitespace between
/// values, which such a server skips); replies and notifications are read
/// as values, with or without anything between them.
async fn run(path: &std::path::Path, env: &Env, session: &Session, rx: &mut Inbox) -> String {
    let ctx = &env.ctx;
    #[cfg(unix)]
    {
        let stream = match tokio::net::UnixStream::connect(path).await {
            Ok(s) => s,
            Err(e) => return format!("cannot connect to unix://{}: {e}", path.display()),
        };
        info!(path = %path.display(), "upstream socket connected");
        session.local_up();
        let (read, mut write) = stream.into_split();
        let writing = super::write_lines(ctx, "its socket", rx, &mut write);
        let reading = async {
            let mut values =
                crate::gateway::json_stream::ValueReader::new(read, ctx.limits.max_body);
            loop {
                match values.next().await {
                    Ok(Some(value)) => session.on_local_message(value).await,
                    Ok(None) => return "the upstream closed its socket".to_owned(),
                    Err(e) => return format!("reading the upstream's socket: {e}"),
                }
            }
        };
        tokio::select! {
            w = writing => w.unwrap_or_else(|| SESSION_OVER.to_owned()),
            r = reading => r,
            _ = session.assoc().ended() => SESSION_OVER.to_owned(),
        }
    }
    #[cfg(not(unix))]
    {
        let _ = (session, rx, ctx);
        format!(
            "unix://{}: Unix domain sockets need a Unix system",
            path.display()
        )
    }
}
