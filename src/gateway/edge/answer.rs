//! Answering a message a client gave the edge to carry over the pool, as
//! an HTTP client is answered and as the library's [`Client`] answers: a
//! request's reply or why it failed, nothing for a notification, a batch's
//! answers joined in one array. The HTTP ingress and the library's client
//! share it.
//!
//! [`Client`]: crate::gateway::Client

use std::sync::Arc;

use bytes::Bytes;

use super::Edge;
use crate::gateway::metrics::{Ingress, ReplyClass};
use crate::jsonrpc::carriage::{BatchJoin, id_of, local_error, scan_error_response};
use crate::jsonrpc::{Element, Kind as Message, ScanError};
use crate::relay::{Attached, Failure, Interim, Reply};

/// What carrying one message over the edge came to.
pub enum Answer {
    Reply(Bytes),
    /// The upstream refused the credential the edge forwarded: its reply
    /// (a JSON-RPC error the origin made) and its challenge
    /// ([`crate::bridge::Extension::Challenge`]).
    Challenged(Bytes, Bytes),
    /// An HTTP request for the upstream's authorization endpoints: the
    /// origin's reply, and the upstream's answer
    /// ([`crate::bridge::Extension::HttpResponse`]).
    Passed(Bytes, Bytes),
    /// The failure and the request's id token (to answer with).
    Failed(Failure, Option<Bytes>),
    /// A notification: nothing to answer.
    None,
}

/// Carries one message, `attached` beside it: a request waits for its
/// reply, a notification is sent; a response is not for the edge to carry.
pub async fn answer_one(
    edge: &Arc<Edge>,
    text: Bytes,
    kind: Message,
    attached: Option<Attached>,
) -> Answer {
    answer_streamed(edge, text, kind, attached, None).await
}

/// [`answer_one`], what the origin streams before a request's reply going
/// to `interim`.
pub async fn answer_streamed(
    edge: &Arc<Edge>,
    text: Bytes,
    kind: Message,
    attached: Option<Attached>,
    interim: Option<Interim>,
) -> Answer {
    let ctx = &edge.ctx;
    match &kind {
        Message::Request { id, .. } => {
            let id_token = text.slice(id.token.clone());
            match edge.call(text, kind, attached, interim).await {
                Reply::Message {
                    text,
                    attached: Some(Attached::Challenge(challenge)),
                    ..
                } => Answer::Challenged(text, challenge),
                Reply::Message {
                    text,
                    attached: Some(Attached::HttpResponse(response)),
                    ..
                } => Answer::Passed(text, response),
                Reply::Message { text, .. } => Answer::Reply(text),
                Reply::Failed(f) => Answer::Failed(f, Some(id_token)),
            }
        }
        Message::Notification { .. } => match edge.notify(text, kind, attached).await {
            Ok(()) => Answer::None,
            Err(f) => {
                ctx.metrics.notification(Ingress::HTTP);
                Answer::Failed(f, None)
            }
        },
        Message::Success { .. } | Message::Error { .. } => {
            ctx.metrics.reply(ReplyClass::Invalid);
            let id = id_of(&kind).map(|i| &text[i.token.clone()]);
            Answer::Reply(
                local_error(
                    id,
                    -32600,
                    "Invalid Request",
                    Some("\"the HTTP ingress accepts requests and notifications, not responses\""),
                )
                .into(),
            )
        }
    }
}

/// A batch's elements carried at once, their answers joined in one array
/// (`None`: notifications only, nothing to answer).
pub async fn answer_batch(
    edge: &Arc<Edge>,
    body: &Bytes,
    elements: Vec<Element>,
    attached: Option<Attached>,
) -> Option<Bytes> {
    let ctx = &edge.ctx;
    let answers = futures_util::future::join_all(elements.into_iter().map(|e| {
        let start = e.range.start;
        let elem = body.slice(e.range);
        let attached = attached.clone();
        async move {
            match e.kind {
                Ok(kind) => match answer_one(edge, elem, kind.relative_to(start), attached).await {
                    // A batch's answer has one status: the reply alone.
                    Answer::Reply(text) | Answer::Challenged(text, _) | Answer::Passed(text, _) => {
                        Some(text)
                    }
                    Answer::Failed(f, id) => Some(f.response(id.as_deref()).into()),
                    Answer::None => None,
                },
                Err(invalid) => {
                    ctx.metrics.reply(ReplyClass::Invalid);
                    Some(scan_error_response(&ScanError::Invalid(invalid)).into())
                }
            }
        }
    }))
    .await;
    let mut join = BatchJoin::with_capacity(body.len());
    for a in answers.iter().flatten() {
        join.push(a);
    }
    join.finish().map(Bytes::from)
}
