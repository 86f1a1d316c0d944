//! The HTTP answers an HTTP ingress gives: a JSON body, an event stream
//! (MCP), or a status alone.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body_util::{Either, Full};
use hyper::body::Frame;
use hyper::{Response, StatusCode};
use tokio::sync::mpsc;

use crate::gateway::stall::Serving;
use crate::sse::event;

/// An HTTP body that is an event stream: each message received becomes one
/// event; the stream ends when every sender is gone.
#[derive(Debug)]
pub struct EventBody {
    /// Sent first: a message taken off the queue already, or the events a
    /// resumed stream replays.
    first: VecDeque<Bytes>,
    rx: mpsc::Receiver<Bytes>,
    /// What is sent and received is written as events already (a resumable
    /// stream's, with their ids); else each is one message to write.
    framed: bool,
    /// The octets queued in `rx`, which the sender counts and this takes
    /// off as it hands each message to hyper.
    counted: Option<std::sync::Arc<std::sync::atomic::AtomicUsize>>,
}

impl hyper::body::Body for EventBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        let write = |m: Bytes, framed: bool| match framed {
            true => m,
            false => event(&m),
        };
        let framed = self.framed;
        if let Some(m) = self.first.pop_front() {
            return Poll::Ready(Some(Ok(Frame::data(write(m, framed)))));
        }
        let counted = self.counted.clone();
        self.rx.poll_recv(cx).map(|m| {
            m.map(|m| {
                if let Some(c) = &counted {
                    c.fetch_sub(m.len(), std::sync::atomic::Ordering::Relaxed);
                }
                Ok(Frame::data(write(m, framed)))
            })
        })
    }
}

/// An HTTP ingress's answer: one body, or an event stream (MCP).
pub type HttpResponse = Response<Either<Full<Bytes>, EventBody>>;

/// An answer's body that keeps its request in service (the connection is
/// not idle, [`crate::gateway::stall::idle`]) until it is dropped: when
/// hyper has written its last octet, or given it up.
#[derive(Debug)]
pub struct Served<B> {
    body: B,
    _serving: Serving,
}

impl<B> Served<B> {
    pub fn new(body: B, serving: Serving) -> Self {
        Self {
            body,
            _serving: serving,
        }
    }
}

impl<B: hyper::body::Body + Unpin> hyper::body::Body for Served<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<B::Data>, B::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.body.size_hint()
    }
}

/// `status` with a JSON body.
pub fn json_response(status: u16, body: impl Into<Bytes>) -> HttpResponse {
    let mut r = Response::new(Either::Left(Full::new(body.into())));
    *r.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_GATEWAY);
    r.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/json"),
    );
    r
}

/// 200 with an event stream of events written already: `first`, then what
/// `rx` receives (a resumable stream's, [`super::replay`]).
pub fn framed_event_response(
    first: VecDeque<Bytes>,
    rx: tokio::sync::mpsc::Receiver<Bytes>,
) -> HttpResponse {
    event_body(EventBody {
        first,
        rx,
        framed: true,
        counted: None,
    })
}

/// 200 with an event stream of `first`, then what `rx` receives, each one
/// message, for a queue whose octets the sender counts in
/// `counted` (the body takes off what it hands on).
pub fn event_response_counted(
    first: Option<Bytes>,
    rx: tokio::sync::mpsc::Receiver<Bytes>,
    counted: std::sync::Arc<std::sync::atomic::AtomicUsize>,
) -> HttpResponse {
    event_body(EventBody {
        first: first.into_iter().collect(),
        rx,
        framed: false,
        counted: Some(counted),
    })
}

fn event_body(body: EventBody) -> HttpResponse {
    let mut r = Response::new(Either::Right(body));
    let h = r.headers_mut();
    h.insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("text/event-stream"),
    );
    h.insert(
        hyper::header::CACHE_CONTROL,
        hyper::header::HeaderValue::from_static("no-cache"),
    );
    r
}

/// `status` with `{"error": why}`: an HTTP-level refusal (not JSON-RPC).
pub fn status_only(status: StatusCode, why: &str) -> HttpResponse {
    let body = serde_json::json!({ "error": why }).to_string();
    json_response(status.as_u16(), body)
}

/// A status with no body.
pub fn empty_response(status: StatusCode) -> HttpResponse {
    let mut r = Response::new(Either::Left(Full::new(Bytes::new())));
    *r.status_mut() = status;
    r
}
