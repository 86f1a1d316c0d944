//! The newline-delimited JSON-RPC reader (TCP ingress, stdio, child
//! processes) over arbitrary bytes arriving in arbitrary pieces: never
//! panics, and returns exactly the lines a plain split returns (`\n` or
//! `\r\n`, blank lines skipped), or an error once a line is over the limit.
//! The skipping reader (an upstream's stdout) returns the same lines with
//! each over-long one reported as skipped, with its length, in its place.

use super::pieces::{Pieces, Split};
use npamp_gateway::lines::{LineReader, LineSkipped};

fn expected(data: &[u8], max: usize) -> (Vec<&[u8]>, bool) {
    let mut lines = Vec::new();
    let mut pieces: Vec<&[u8]> = data.split(|&b| b == b'\n').collect();
    // A trailing newline leaves an empty last piece; no newline leaves the
    // unterminated last line, which counts.
    let last = pieces.pop().unwrap_or_default();
    for p in pieces {
        if p.len() > max {
            return (lines, true);
        }
        let p = p.strip_suffix(b"\r").unwrap_or(p);
        if !p.iter().all(u8::is_ascii_whitespace) {
            lines.push(p);
        }
    }
    if last.len() > max {
        return (lines, true);
    }
    if !last.iter().all(u8::is_ascii_whitespace) {
        lines.push(last);
    }
    (lines, false)
}

/// What the skipping reader must return: `Ok(line)` or `Err(length)`.
fn expected_skipping(data: &[u8], max: usize) -> Vec<Result<&[u8], usize>> {
    let mut out = Vec::new();
    let mut pieces: Vec<&[u8]> = data.split(|&b| b == b'\n').collect();
    // The unterminated last line keeps a trailing `\r` (as `expected`).
    let last = pieces.pop().unwrap_or_default();
    let terminated = pieces.into_iter().map(|p| (p, true));
    for (p, terminated) in terminated.chain(std::iter::once((last, false))) {
        if p.len() > max {
            out.push(Err(p.len()));
            continue;
        }
        let p = if terminated {
            p.strip_suffix(b"\r").unwrap_or(p)
        } else {
            p
        };
        if !p.iter().all(u8::is_ascii_whitespace) {
            out.push(Ok(p));
        }
    }
    out
}

/// One input, as the fuzzer hands it over.
pub fn run(input: &[u8]) {
    let Some(Split { sizes, data, max }) = Split::of(input) else {
        return;
    };
    let Ok(rt) = tokio::runtime::Builder::new_current_thread().build() else {
        return;
    };
    let (want, too_long) = expected(data, max);
    rt.block_on(async {
        let mut reader = LineReader::new(Pieces { data, sizes }, max);
        let mut got = Vec::new();
        let mut failed = false;
        loop {
            match reader.next().await {
                Ok(Some(line)) => got.push(line),
                Ok(None) => break,
                Err(_) => {
                    failed = true;
                    break;
                }
            }
        }
        assert_eq!(failed, too_long, "limit {max}");
        assert_eq!(got.len(), want.len());
        for (g, w) in got.iter().zip(&want) {
            assert_eq!(&g[..], *w);
        }

        let mut reader = LineReader::skipping_long_lines(Pieces { data, sizes }, max);
        let mut got = Vec::new();
        loop {
            match reader.next().await {
                Ok(Some(line)) => got.push(Ok(line)),
                Ok(None) => break,
                Err(e) => {
                    let skipped = LineSkipped::of(&e).expect("a skipping reader only skips");
                    assert_eq!(skipped.max, max);
                    got.push(Err(skipped.len));
                }
            }
        }
        let want = expected_skipping(data, max);
        assert_eq!(got.len(), want.len(), "limit {max}");
        for (g, w) in got.iter().zip(&want) {
            match (g, w) {
                (Ok(g), Ok(w)) => assert_eq!(&g[..], *w),
                (Err(g), Err(w)) => assert_eq!(g, w),
                _ => panic!("{g:?} where {w:?} was due (limit {max})"),
            }
        }
    });
}
