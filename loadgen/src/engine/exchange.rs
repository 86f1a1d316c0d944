//! Request/response targets: one request in flight per connection, its
//! reply read back on the same exchange (plain HTTP, MCP over Streamable
//! HTTP, N-PAMP straight to a gateway's association port), and how a reply
//! settles the requests of its send.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use npamp_gateway::gateway::Client;
use serde_json::Value;

use super::{Job, Lane, Outcome, Source};
use crate::http::{HttpConn, HttpTarget};
use crate::mix::Expect;

/// How one exchange ended.
pub(super) enum Answer {
    /// A reply body, with the HTTP status where it was not a plain 200.
    Reply { body: Bytes, status: Option<u16> },
    /// No reply: the connection failed, the session was refused, ...
    Failed(String),
    /// No reply within the run's timeout.
    TimedOut,
    /// Answered and counted already (an HTTP status to notifications).
    Counted,
}

/// One connection of a request/response target.
pub(super) trait Exchange: Send {
    /// Sends `request` (the job's text) and waits for what answers it.
    fn exchange(
        &mut self,
        request: &Bytes,
        job: &Job,
        run: &Lane,
    ) -> impl Future<Output = Answer> + Send;

    /// Ends the connection politely, after its last job.
    fn close(&mut self) -> impl Future<Output = ()> + Send {
        async {}
    }
}

/// Drives one connection: each job of `source` exchanged and settled, until
/// the source is done. A connection that could not be set up fails every
/// job with the reason.
pub(super) async fn worker(conn: Result<impl Exchange, String>, mut source: Source, run: Lane) {
    let mut conn = match conn {
        Ok(c) => c,
        Err(why) => return source.fail_every_job(&run, &why).await,
    };
    while let Some(mut job) = source.next(&run).await {
        let request = Bytes::from(std::mem::take(&mut job.send.text));
        match conn.exchange(&request, &job, &run).await {
            Answer::Reply { body, status } => settle(&run, &job, &request, &body, status),
            Answer::Failed(why) => fail_all(&run, &job, &why),
            Answer::TimedOut => {
                let mut s = run.stats();
                for e in &job.send.expects {
                    s.complete(*e, job.intended, Outcome::Timeout);
                }
            }
            Answer::Counted => {}
        }
    }
    conn.close().await;
}

/// Plain JSON-RPC over HTTP, or (`mcp`) an MCP session over
/// Streamable HTTP (initialize first, a new session when the server ends
/// one, DELETE at the end).
pub(super) struct Http {
    conn: HttpConn,
    mcp: bool,
    session_open: bool,
}

impl Http {
    pub(super) fn connect(target: &HttpTarget, mcp: bool, worker: usize) -> Result<Self, String> {
        Ok(Self {
            conn: HttpConn::new(target, mcp, worker)?,
            mcp,
            session_open: !mcp,
        })
    }
}

impl Exchange for Http {
    async fn exchange(&mut self, request: &Bytes, job: &Job, run: &Lane) -> Answer {
        if !self.session_open {
            match tokio::time::timeout(run.timeout, self.conn.open_mcp_session()).await {
                Ok(Ok(())) => self.session_open = true,
                Ok(Err(why)) => return Answer::Failed(why),
                Err(_) => {
                    self.conn.reset();
                    return Answer::Failed("MCP initialize: no answer in time".into());
                }
            }
        }
        match tokio::time::timeout(run.timeout, self.conn.send(request.clone())).await {
            // The server ended the MCP session: a new one for what follows.
            Ok(Ok(r)) if self.mcp && r.status == 404 => {
                self.session_open = false;
                Answer::Failed("MCP session ended by the server (HTTP 404)".into())
            }
            Ok(Ok(r)) => {
                // 202 is how MCP acknowledges notifications.
                let status =
                    (r.status != 200 && !(self.mcp && r.status == 202)).then_some(r.status);
                if let Some(code) = status
                    && job.send.expects.is_empty()
                    && code != 204
                {
                    *run.stats().http_status.entry(code).or_default() += 1;
                    return Answer::Counted;
                }
                Answer::Reply {
                    body: r.reply(),
                    status,
                }
            }
            Ok(Err(why)) => Answer::Failed(why),
            Err(_) => {
                // The connection is stuck on this request: a new one for the next.
                self.conn.reset();
                Answer::TimedOut
            }
        }
    }

    async fn close(&mut self) {
        if self.mcp && self.session_open {
            let _ = tokio::time::timeout(Duration::from_secs(1), self.conn.end_mcp_session()).await;
        }
    }
}

/// Bridge frames through a [`Client`]'s associations, with no client
/// protocol around them: what it answers is what an edge's HTTP client
/// would get (a batch's replies in one array).
pub(super) struct Npamp(pub Arc<Client>);

impl Exchange for Npamp {
    async fn exchange(&mut self, text: &Bytes, _: &Job, _: &Lane) -> Answer {
        let body = self.0.call(text.clone()).await.unwrap_or_default();
        Answer::Reply { body, status: None }
    }
}

/// Every request of `job` failed at the transport, for `what`.
pub(super) fn fail_all(run: &Lane, job: &Job, what: &str) {
    let mut s = run.stats();
    for e in &job.send.expects {
        s.complete(*e, job.intended, Outcome::Transport(what.to_owned()));
    }
}

/// Classifies one JSON-RPC reply object against the request it answers.
pub(super) fn classify(v: &Value, status: Option<u16>) -> Outcome {
    match v.get("error") {
        Some(err) => Outcome::Error {
            code: err.get("code").and_then(Value::as_i64).unwrap_or(0),
            status,
        },
        None => Outcome::Ok,
    }
}

pub(super) fn reply_id(v: &Value) -> Option<u64> {
    v.get("id").and_then(Value::as_u64)
}

/// The common case, found with the gateway's scanner instead of building a
/// JSON value: one success reply carrying the one request's id.
fn own_success(job: &Job, body: &[u8]) -> Option<Expect> {
    use npamp_gateway::jsonrpc::{IdKind, Kind, Limits, Scanned, scan};
    let [e] = job.send.expects.as_slice() else {
        return None;
    };
    if job.send.batch {
        return None;
    }
    match scan(body, &Limits::default()) {
        Ok(Scanned::Single(Kind::Success { id })) if id.kind == IdKind::Number => {
            let token = std::str::from_utf8(body.get(id.token)?).ok()?;
            (token.parse::<u64>().ok()? == e.id).then_some(*e)
        }
        _ => None,
    }
}

/// Whether reply `v` carries, as its result, the params of the request
/// with id `id` in `request` (one object or a batch).
fn echoes(request: &[u8], id: u64, v: &Value) -> bool {
    let Ok(sent) = serde_json::from_slice::<Value>(request) else {
        return false;
    };
    let own = |o: &Value| o.get("id").and_then(Value::as_u64) == Some(id);
    let params = match &sent {
        Value::Array(elements) => elements.iter().find(|o| own(o)),
        o => Some(o).filter(|o| own(o)),
    }
    .and_then(|o| o.get("params"));
    params.is_some() && params == v.get("result")
}

/// Matches the objects of a reply (one, or a batch array) to what the send
/// expected.
fn settle(run: &Lane, job: &Job, request: &[u8], body: &[u8], status: Option<u16>) {
    let verifies = |e: &Expect| run.verify_echo.get(e.message).copied().unwrap_or(false);
    // With `verify_echo`, a success is judged against its request's params.
    let judge = |e: &Expect, v: &Value| match classify(v, status) {
        Outcome::Ok if verifies(e) && !echoes(request, e.id, v) => Outcome::WrongResult,
        outcome => outcome,
    };
    if status.is_none()
        && let Some(e) = own_success(job, body).filter(|e| !verifies(e))
    {
        run.stats().complete(e, job.intended, Outcome::Ok);
        return;
    }
    let mut s = run.stats();
    let expects = &job.send.expects;
    if expects.is_empty() {
        // Notifications only: nothing may come back.
        if !body.iter().all(u8::is_ascii_whitespace) {
            s.unmatched(None);
        }
        return;
    }
    let parsed: Result<Value, _> = serde_json::from_slice(body);
    let objects = match parsed {
        Ok(Value::Array(a)) if job.send.batch => a,
        Ok(v @ Value::Object(_)) if !job.send.batch || v.get("id") == Some(&Value::Null) => {
            // A batch answered with one error object (the whole batch was
            // refused) answers every element.
            if job.send.batch {
                let outcome = classify(&v, status);
                for e in expects {
                    s.complete(*e, job.intended, outcome.clone());
                }
                return;
            }
            vec![v]
        }
        _ => {
            let what = match status {
                Some(code) => format!("HTTP {code} without a JSON-RPC reply"),
                None => "a reply that is not JSON-RPC".to_owned(),
            };
            for e in expects {
                s.complete(*e, job.intended, Outcome::Transport(what.clone()));
            }
            return;
        }
    };
    let mut open: Vec<Option<Expect>> = expects.iter().copied().map(Some).collect();
    for v in &objects {
        let id = reply_id(v);
        match open
            .iter_mut()
            .find(|e| e.is_some_and(|e| Some(e.id) == id))
        {
            Some(slot) => {
                if let Some(e) = slot.take() {
                    s.complete(e, job.intended, judge(&e, v));
                }
            }
            None => {
                if id.is_none() && v.get("error").is_some() {
                    // An error that could not name its request: it answers one.
                    if let Some(slot) = open.iter_mut().find(|e| e.is_some())
                        && let Some(e) = slot.take()
                    {
                        s.complete(e, job.intended, classify(v, status));
                        continue;
                    }
                }
                s.unmatched(id);
            }
        }
    }
    for e in open.into_iter().flatten() {
        s.complete(e, job.intended, Outcome::Lost);
    }
}
