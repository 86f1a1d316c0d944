//! A WebSocket upstream (`ws://`, `wss://`): one connection per
//! association, each JSON-RPC message a frame.

use std::time::Duration;

use bytes::Bytes;
use futures_util::{FutureExt, SinkExt, StreamExt};
use tracing::info;

use super::{Address, Delivery, Env, Kind};
use crate::bridge::ProtocolId;
use crate::gateway::outbox::Inbox;
use crate::gateway::session::{SESSION_OVER, Session};

/// `ws://`, `wss://`, for every protocol.
pub struct WebSocket;

impl Kind for WebSocket {
    fn name(&self) -> &'static str {
        "websocket"
    }

    fn parse(&self, url: &str) -> Option<Result<Address, String>> {
        let uri = super::uri_of(url, &["ws", "wss"])?;
        Some(uri.map(|_| Address::Url(url.to_owned())))
    }

    fn takes(&self, address: &Address, _: ProtocolId) -> bool {
        matches!(address, Address::Url(_))
    }

    fn takes_headers(&self) -> bool {
        true
    }

    fn delivery(&self) -> Delivery {
        Delivery::Session(|address, env, session, rx| match address {
            Address::Url(url) => run(url, env, session, rx).boxed(),
            _ => std::future::ready("not a WebSocket URL".to_owned()).boxed(),
        })
    }
}

/// A WebSocket upstream: one connection per association.
async fn run(url: &str, env: &Env, session: &Session, rx: &mut Inbox) -> String {
    let ctx = &env.ctx;
    use tokio_tungstenite::tungstenite::Message;
    let shown = crate::gateway::redact::PublicUrl::of(url);
    let connect = crate::gateway::context::ws_connect(
        url,
        ctx.limits.max_body,
        env.tls.clone(),
        &env.headers,
    );
    let within = ctx.limits.upstream_connect_timeout;
    let ws = match tokio::time::timeout(within, connect).await {
        Ok(Ok(ws)) => ws,
        Ok(Err(e)) => return format!("cannot connect to {shown}: {e}"),
        Err(_) => {
            return format!(
                "cannot connect to {shown}: no answer within {within:?} (--upstream-connect-timeout)"
            );
        }
    };
    info!(url = %shown, "upstream WebSocket connected");
    session.local_up();
    let (mut tx, mut stream) = ws.split();
    let why = {
        let write = async {
            while let Some(text) = rx.recv().await {
                // The carried octets are UTF-8 JSON (the scanner checked).
                let msg = match std::str::from_utf8(&text) {
                    Ok(_) => Message::Text(unsafe_free_utf8(text)),
                    Err(_) => Message::Binary(text),
                };
                if let Err(why) = super::write_within(ctx, "the WebSocket", tx.send(msg)).await {
                    return Some(why);
                }
            }
            None
        };
        let read = async {
            while let Some(msg) = stream.next().await {
                match msg {
                    Ok(Message::Text(t)) => session.on_local_message(Bytes::from(t)).await,
                    Ok(Message::Binary(b)) => session.on_local_message(b).await,
                    Ok(Message::Close(_)) => {
                        return "the upstream closed the WebSocket".to_owned();
                    }
                    Ok(_) => {}
                    Err(e) => return format!("reading the upstream WebSocket: {e}"),
                }
            }
            "the upstream WebSocket ended".to_owned()
        };
        tokio::select! {
            w = write => w,
            r = read => Some(r),
            _ = session.assoc().ended() => None,
        }
    };
    match why {
        Some(why) => why,
        None => {
            // The association is over: close the WebSocket with a Close
            // frame (RFC 6455 §7), briefly, rather than just dropping it.
            use tokio_tungstenite::tungstenite::protocol::{CloseFrame, frame::coding::CloseCode};
            let close = Message::Close(Some(CloseFrame {
                code: CloseCode::Away,
                reason: "the N-PAMP association ended".into(),
            }));
            let _ = tokio::time::timeout(UPSTREAM_CLOSE_WAIT, async {
                tx.send(close).await?;
                tx.close().await
            })
            .await;
            SESSION_OVER.to_owned()
        }
    }
}

/// How long closing an upstream WebSocket may take.
const UPSTREAM_CLOSE_WAIT: Duration = Duration::from_secs(1);

/// Text-frame payload from octets already known to be UTF-8.
fn unsafe_free_utf8(b: Bytes) -> tokio_tungstenite::tungstenite::Utf8Bytes {
    tokio_tungstenite::tungstenite::Utf8Bytes::try_from(b).unwrap_or_default()
}
