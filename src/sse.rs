//! A decoder for `text/event-stream` (Server-Sent Events, the WHATWG HTML
//! standard, §9.2 "Server-sent events"), as MCP's Streamable HTTP transport
//! uses it to carry JSON-RPC messages: each event's `data` is one message.
//!
//! Sans-IO: [`SseDecoder::push`] takes the octets as they arrive, cut
//! anywhere, and returns the events they complete. Lines end with CRLF, LF
//! or CR; a line starting with `:` is a comment; `data` fields are joined
//! with LF; `event` and unknown fields are ignored (MCP's events are all of
//! the default type). `id` and `retry` are kept as the standard keeps them,
//! for a client that resumes a stream ([`SseDecoder::last_event_id`],
//! [`SseDecoder::retry`]). An event without data is no event,
//! and an event not ended by a blank line before the stream ends is dropped,
//! as the standard says. One event's data, with the line being read, is
//! bounded: a stream that exceeds it is an error, and the decoder takes no
//! more.
//!
//! [`event`] writes one message as an event, as a server (the gateway's MCP
//! ingress) sends it; [`SseDecoder`] reads them, as a client (the gateway's
//! MCP upstream, or a load generator) does.

use bytes::{Bytes, BytesMut};

/// One message as an event of the default type (`event: message`); a line
/// break in it starts another `data` line, so any octets survive.
pub fn event(message: &[u8]) -> Bytes {
    event_with_id(None, message)
}

/// [`event`] with an `id` field first (`None`: none), which a client that
/// loses the stream sends back as `Last-Event-ID`. The id must hold no line
/// break (the gateway's own ids are digits and `-`).
pub fn event_with_id(id: Option<&str>, message: &[u8]) -> Bytes {
    let mut event = Vec::with_capacity(message.len() + 48);
    if let Some(id) = id {
        debug_assert!(!id.contains(['\n', '\r']));
        event.extend_from_slice(b"id: ");
        event.extend_from_slice(id.as_bytes());
        event.push(b'\n');
    }
    event.extend_from_slice(b"event: message\n");
    for line in message.split(|&b| b == b'\n') {
        event.extend_from_slice(b"data: ");
        event.extend_from_slice(line.strip_suffix(b"\r").unwrap_or(line));
        event.push(b'\n');
    }
    event.push(b'\n');
    Bytes::from(event)
}

/// An event with an id and empty data, no message: how a server primes a
/// stream for resumability (MCP 2025-11-25), so that a client that loses
/// it before any message may still resume it.
pub fn priming(id: &str) -> Bytes {
    debug_assert!(!id.contains(['\n', '\r']));
    Bytes::from(format!("id: {id}\ndata: \n\n"))
}

/// Whether an event's data carries a message at all. An event with an id
/// and empty data is how an MCP server primes a stream for resumability
/// (MCP 2025-11-25; the TypeScript SDK's servers send one first on every
/// stream): no message, and no fault, so it is skipped without a word.
pub fn carries_a_message(data: &[u8]) -> bool {
    data.iter().any(|b| !b.is_ascii_whitespace())
}

/// A stream that cannot be decoded further.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SseError {
    #[error("an event of the upstream's event stream is over {max} octets")]
    TooLarge { max: usize },
}

/// The state between two pushes of one event stream.
#[derive(Debug)]
pub struct SseDecoder {
    /// The line being read (without its end).
    line: BytesMut,
    /// The data of the event being read, each line followed by LF.
    data: BytesMut,
    /// The previous push ended with CR: an LF starting this one belongs to
    /// that line end.
    after_cr: bool,
    /// No octet seen yet (a leading byte order mark is dropped).
    at_start: bool,
    max: usize,
    failed: bool,
    /// The `id` of the event being read, as the last `id` field set it.
    id_buffer: Bytes,
    /// The last event id: the buffer as it was when an event ended.
    last_id: Bytes,
    /// The reconnection time the stream asked for, in milliseconds.
    retry: Option<u64>,
}

const BOM: &[u8] = b"\xEF\xBB\xBF";

impl SseDecoder {
    /// A decoder whose events (and lines) may be at most `max_event` octets.
    pub fn new(max_event: usize) -> Self {
        Self {
            line: BytesMut::new(),
            data: BytesMut::new(),
            after_cr: false,
            at_start: true,
            max: max_event,
            failed: false,
            id_buffer: Bytes::new(),
            last_id: Bytes::new(),
            retry: None,
        }
    }

    /// The id of the last event ended, for `Last-Event-ID` when the stream
    /// is resumed (empty: none, or an `id` that reset it).
    pub fn last_event_id(&self) -> &Bytes {
        &self.last_id
    }

    /// How long to wait before resuming, as the stream's last `retry`
    /// asked (`None`: it did not).
    pub fn retry(&self) -> Option<std::time::Duration> {
        self.retry.map(std::time::Duration::from_millis)
    }

    /// Feeds the next octets of the stream; appends the data of every event
    /// they complete to `events`, in order. On an error, the events
    /// completed before it are there too.
    pub fn push(&mut self, mut chunk: &[u8], events: &mut Vec<Bytes>) -> Result<(), SseError> {
        if self.failed {
            return Err(SseError::TooLarge { max: self.max });
        }
        // An empty chunk (an empty body frame) changes nothing: above all
        // not a CR just seen, whose LF may come in the next one.
        if chunk.is_empty() {
            return Ok(());
        }
        if self.at_start {
            // The BOM may itself arrive cut: wait for three octets.
            let have = self.line.len() + chunk.len();
            if have < BOM.len() && BOM.starts_with(&[&self.line[..], chunk].concat()) {
                self.line.extend_from_slice(chunk);
                return Ok(());
            }
            self.at_start = false;
            let mut head = std::mem::take(&mut self.line);
            head.extend_from_slice(chunk);
            let rest = head.strip_prefix(BOM).unwrap_or(&head).to_vec();
            return self.scan(&rest, events);
        }
        if self.after_cr && chunk.first() == Some(&b'\n') {
            chunk = &chunk[1..];
        }
        self.after_cr = false;
        self.scan(chunk, events)
    }

    fn scan(&mut self, mut chunk: &[u8], events: &mut Vec<Bytes>) -> Result<(), SseError> {
        while let Some(end) = chunk.iter().position(|&b| b == b'\n' || b == b'\r') {
            self.grow(end)?;
            self.line.extend_from_slice(&chunk[..end]);
            let line = self.line.split().freeze();
            self.field(&line, events)?;
            let cr = chunk[end] == b'\r';
            chunk = &chunk[end + 1..];
            if cr {
                match chunk.first() {
                    Some(b'\n') => chunk = &chunk[1..],
                    None => self.after_cr = true,
                    Some(_) => {}
                }
            }
        }
        self.grow(chunk.len())?;
        self.line.extend_from_slice(chunk);
        Ok(())
    }

    /// Checks that `more` octets of line still fit the bound.
    fn grow(&mut self, more: usize) -> Result<(), SseError> {
        if self.line.len() + self.data.len() + more > self.max {
            self.failed = true;
            self.line.clear();
            self.data.clear();
            return Err(SseError::TooLarge { max: self.max });
        }
        Ok(())
    }

    /// One complete line.
    fn field(&mut self, line: &[u8], events: &mut Vec<Bytes>) -> Result<(), SseError> {
        if line.is_empty() {
            // The standard sets the last event id as an event ends, with
            // data or without (a priming event has none).
            self.last_id = self.id_buffer.clone();
            if !self.data.is_empty() {
                // Every data line was followed by LF: drop the last.
                self.data.truncate(self.data.len() - 1);
                events.push(self.data.split().freeze());
            }
            return Ok(());
        }
        if line[0] == b':' {
            return Ok(());
        }
        let (name, value) = match line.iter().position(|&b| b == b':') {
            Some(i) => {
                let v = &line[i + 1..];
                (&line[..i], v.strip_prefix(b" ").unwrap_or(v))
            }
            None => (line, &b""[..]),
        };
        match name {
            b"data" => {
                self.grow(value.len() + 1)?;
                self.data.extend_from_slice(value);
                self.data.extend_from_slice(b"\n");
            }
            // An id with a NUL in it is ignored, as the standard says.
            b"id" if !value.contains(&0) => self.id_buffer = Bytes::copy_from_slice(value),
            b"retry" if !value.is_empty() && value.iter().all(u8::is_ascii_digit) => {
                // Digits past what a u64 holds: as long as it can be.
                let ms = std::str::from_utf8(value).ok().and_then(|v| v.parse().ok());
                self.retry = Some(ms.unwrap_or(u64::MAX));
            }
            _ => {}
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(input: &[u8]) -> Vec<Bytes> {
        push(&mut SseDecoder::new(1 << 20), input).expect("decodes")
    }

    fn push(d: &mut SseDecoder, input: &[u8]) -> Result<Vec<Bytes>, SseError> {
        let mut events = Vec::new();
        d.push(input, &mut events).map(|()| events)
    }

    #[test]
    fn the_last_event_id_and_the_retry_are_kept_for_resuming() {
        let mut d = SseDecoder::new(1 << 20);
        assert_eq!(
            push(&mut d, b"id: e-1\nretry: 500\ndata:\n\n").expect("ok"),
            [""]
        );
        assert_eq!(&d.last_event_id()[..], b"e-1");
        assert_eq!(d.retry(), Some(std::time::Duration::from_millis(500)));
        // The id counts once its event ends; a retry that is not digits is
        // ignored.
        push(&mut d, b"retry: 1x\nid: e-2\ndata: {}\n").expect("ok");
        assert_eq!(&d.last_event_id()[..], b"e-1");
        push(&mut d, b"\n").expect("ok");
        assert_eq!(&d.last_event_id()[..], b"e-2");
        assert_eq!(d.retry(), Some(std::time::Duration::from_millis(500)));
        // It persists over events without one; an empty one resets it; one
        // with a NUL is ignored.
        push(&mut d, b"data: 1\n\n").expect("ok");
        assert_eq!(&d.last_event_id()[..], b"e-2");
        push(&mut d, b"id: a\0b\ndata: 2\n\n").expect("ok");
        assert_eq!(&d.last_event_id()[..], b"e-2");
        push(&mut d, b"id\ndata: 3\n\n").expect("ok");
        assert!(d.last_event_id().is_empty());
    }

    #[test]
    fn an_encoded_event_decodes_to_its_message() {
        for m in [
            &b"{\"a\":1}"[..],
            b"",
            b"two\nlines",
            b"crlf\r\nlines",
            b"\n",
        ] {
            let want = Bytes::from(String::from_utf8_lossy(m).replace("\r\n", "\n"));
            assert_eq!(all(&event(m)), vec![want]);
        }
    }

    #[test]
    fn an_event_with_an_id_gives_it_back_as_the_last_event_id() {
        let mut d = SseDecoder::new(1 << 20);
        let mut stream = priming("7-0").to_vec();
        stream.extend_from_slice(&event_with_id(Some("7-1"), b"{\"a\":1}"));
        let got = push(&mut d, &stream).expect("ok");
        assert_eq!(got.len(), 2);
        assert!(!carries_a_message(&got[0]));
        assert_eq!(&got[1][..], b"{\"a\":1}");
        assert_eq!(&d.last_event_id()[..], b"7-1");
    }

    #[test]
    fn priming_events_carry_no_message() {
        let got = all(b"id: 0\ndata:\n\nretry: 1000\n\nid: 1\ndata: {}\n\n");
        // The retry hint is no event; the priming one is, with empty data.
        assert_eq!(got.len(), 2);
        assert!(!carries_a_message(&got[0]));
        assert!(carries_a_message(&got[1]));
        assert!(!carries_a_message(b" \n "));
    }

    #[test]
    fn events_end_at_blank_lines_and_join_data_lines() {
        let got = all(b"event: message\ndata: {\"a\":1}\n\ndata: x\ndata:y\n\n");
        assert_eq!(got, vec![Bytes::from("{\"a\":1}"), Bytes::from("x\ny")]);
    }

    #[test]
    fn every_line_end_is_one() {
        assert_eq!(all(b"data: a\r\n\r\ndata: b\r\rdata: c\n\n").len(), 3);
    }

    #[test]
    fn comments_other_fields_and_empty_events_give_nothing() {
        assert!(all(b": ping\n\nid: 7\nretry: 100\n\nevent: x\n\n").is_empty());
    }

    #[test]
    fn one_space_after_the_colon_is_dropped_and_only_one() {
        assert_eq!(all(b"data:  two\n\n"), vec![Bytes::from(" two")]);
        assert_eq!(all(b"data\n\n"), vec![Bytes::from("")]);
    }

    #[test]
    fn an_unterminated_event_is_not_dispatched() {
        assert!(all(b"data: cut").is_empty());
        assert!(all(b"data: cut\n").is_empty());
    }

    #[test]
    fn a_leading_bom_is_dropped_even_when_cut() {
        let mut d = SseDecoder::new(1024);
        let mut got = Vec::new();
        for chunk in [&b"\xEF"[..], b"\xBB", b"\xBFdata: 1\n", b"\n"] {
            got.extend(push(&mut d, chunk).expect("decodes"));
        }
        assert_eq!(got, vec![Bytes::from("1")]);
    }

    #[test]
    fn a_crlf_cut_between_pushes_is_one_line_end() {
        let mut d = SseDecoder::new(1024);
        let mut got = push(&mut d, b"data: a\r").expect("decodes");
        got.extend(push(&mut d, b"\n\r").expect("decodes"));
        got.extend(push(&mut d, b"\ndata: b\n\n").expect("decodes"));
        assert_eq!(got, vec![Bytes::from("a"), Bytes::from("b")]);
    }

    #[test]
    fn an_event_over_the_bound_fails_the_stream() {
        let mut d = SseDecoder::new(16);
        assert_eq!(
            push(&mut d, b"data: 0123456789\n\n").map(|e| e.len()),
            Ok(1)
        );
        // The event before the one over the bound is kept.
        let mut events = Vec::new();
        let err = d.push(
            b"data: a\n\ndata: 0123456789\ndata: 0123456789\n\n",
            &mut events,
        );
        assert_eq!(err, Err(SseError::TooLarge { max: 16 }));
        assert_eq!(events, vec![Bytes::from("a")]);
        assert!(
            push(&mut d, b"data: x\n\n").is_err(),
            "a failed decoder takes no more"
        );
        // A line without its end counts too.
        assert!(push(&mut SseDecoder::new(8), &[b'a'; 9]).is_err());
    }

    #[test]
    fn a_crlf_split_by_an_empty_chunk_is_one_line_end() {
        // Found by the property test below: CR, an empty chunk, then LF
        // used to end an empty line too, cutting the event in two.
        let mut d = SseDecoder::new(1 << 10);
        let mut events = Vec::new();
        for chunk in [&b"data: \r"[..], b"", b"\ndata: x\n\n"] {
            d.push(chunk, &mut events).expect("decodes");
        }
        assert_eq!(events, [Bytes::from_static(b"\nx")]);
    }

    use proptest::prelude::*;

    /// One event as a server may write it: its data lines, and whether a
    /// comment, an `event:` and an `id:` line come with it.
    fn written_event() -> impl Strategy<Value = (Vec<String>, bool, bool, bool)> {
        (
            prop::collection::vec("[^\r\n]{0,12}", 0..4),
            any::<bool>(),
            any::<bool>(),
            any::<bool>(),
        )
    }

    proptest! {
        /// Events written with any line ends, comments and other fields,
        /// then cut anywhere, decode to exactly their data.
        #[test]
        fn written_events_decode_to_their_data_whatever_the_cuts(
            events in prop::collection::vec(written_event(), 0..6),
            ends in prop::collection::vec(0usize..3, 64),
            cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..6),
            bom in any::<bool>(),
        ) {
            let mut text = Vec::new();
            if bom {
                text.extend_from_slice(BOM);
            }
            let mut end = ends.iter().cycle();
            let mut line = |text: &mut Vec<u8>, l: &[u8]| {
                text.extend_from_slice(l);
                let mut e = [&b"\n"[..], b"\r", b"\r\n"][*end.next().unwrap_or(&0)];
                // After a CR, an LF would end the same line, not an empty one.
                if l.is_empty() && text.len() >= 2 && text[text.len() - 1] == b'\r' {
                    e = b"\r";
                }
                text.extend_from_slice(e);
            };
            let mut want = Vec::new();
            for (data, comment, name, id) in &events {
                if *comment {
                    line(&mut text, b": keep-alive");
                }
                if *name {
                    line(&mut text, b"event: message");
                }
                for d in data {
                    // "data:" then the value, with the one optional space.
                    let sep: &[u8] = if d.starts_with(' ') || d.len() % 2 == 0 { b"data: " } else { b"data:" };
                    line(&mut text, &[sep, d.as_bytes()].concat());
                }
                if *id {
                    line(&mut text, b"id: 1");
                }
                line(&mut text, b"");
                if !data.is_empty() {
                    want.push(Bytes::from(data.join("\n")));
                }
            }
            let mut at: Vec<usize> = cuts.iter().map(|i| i.index(text.len() + 1)).collect();
            at.sort_unstable();
            let mut d = SseDecoder::new(1 << 16);
            let mut got = Vec::new();
            let mut from = 0;
            for to in at.into_iter().chain([text.len()]) {
                d.push(&text[from..to], &mut got).expect("decodes");
                from = to;
            }
            prop_assert_eq!(got, want);
        }
    }
}
