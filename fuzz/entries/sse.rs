//! The event-stream decoder (an MCP upstream's Streamable HTTP replies)
//! over arbitrary bytes cut into arbitrary pieces: never panics, decodes
//! the same events whatever the cuts, and, when it stays within its bound,
//! exactly the events of a plain whole-input reading of the standard
//! (lines end with CRLF, LF or CR; `data` lines joined with LF; an event
//! ends at a blank line and needs data). No event is over the bound.

use npamp_gateway::sse::SseDecoder;

/// The standard read plainly, all input at once, without a bound.
fn reference(mut data: &[u8]) -> Vec<Vec<u8>> {
    if let Some(rest) = data.strip_prefix(b"\xEF\xBB\xBF") {
        data = rest;
    }
    let mut lines = Vec::new();
    let mut start = 0;
    let mut i = 0;
    while i < data.len() {
        match data[i] {
            b'\n' => {
                lines.push(&data[start..i]);
                start = i + 1;
            }
            b'\r' => {
                lines.push(&data[start..i]);
                if data.get(i + 1) == Some(&b'\n') {
                    i += 1;
                }
                start = i + 1;
            }
            _ => {}
        }
        i += 1;
    }
    // What follows the last line end is an unfinished line: no event.
    let mut events = Vec::new();
    let mut buf: Option<Vec<u8>> = None;
    for line in lines {
        if line.is_empty() {
            if let Some(d) = buf.take() {
                events.push(d);
            }
            continue;
        }
        if line[0] == b':' {
            continue;
        }
        let (name, value) = match line.iter().position(|&b| b == b':') {
            Some(c) => {
                let v = &line[c + 1..];
                (&line[..c], v.strip_prefix(b" ").unwrap_or(v))
            }
            None => (line, &b""[..]),
        };
        if name == b"data" {
            let d = buf.get_or_insert_with(Vec::new);
            d.extend_from_slice(value);
            d.push(b'\n');
        }
    }
    events
        .into_iter()
        .map(|mut d| {
            d.pop();
            d
        })
        .collect()
}

/// Decodes `data` in the given pieces: the events, and whether it failed.
fn decode(data: &[u8], sizes: &[u8], max: usize) -> (Vec<Vec<u8>>, bool) {
    let mut d = SseDecoder::new(max);
    let mut events = Vec::new();
    let mut rest = data;
    let mut sizes = sizes.iter();
    while !rest.is_empty() {
        let n = sizes.next().map_or(rest.len(), |&s| usize::from(s).max(1));
        let (piece, tail) = rest.split_at(n.min(rest.len()));
        rest = tail;
        let mut evs = Vec::new();
        let failed = d.push(piece, &mut evs).is_err();
        events.extend(evs.into_iter().map(|e| e.to_vec()));
        if failed {
            return (events, true);
        }
    }
    (events, false)
}

/// One input, as the fuzzer hands it over.
pub fn run(input: &[u8]) {
    let Some((&m, input)) = input.split_first() else {
        return;
    };
    let Some((&k, input)) = input.split_first() else {
        return;
    };
    let max = usize::from(m).max(1) * 4;
    let k = usize::from(k % 16).min(input.len());
    let (sizes, data) = input.split_at(k);
    let (whole, whole_failed) = decode(data, &[], max);
    let (cut, cut_failed) = decode(data, sizes, max);
    assert_eq!(whole_failed, cut_failed, "failing depends on the cuts");
    assert_eq!(whole, cut, "events depend on the cuts");
    assert!(
        whole.iter().all(|e| e.len() <= max),
        "an event over the bound"
    );
    if !whole_failed {
        assert_eq!(whole, reference(data), "events differ from the standard's");
    }
}
