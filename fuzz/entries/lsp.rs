//! LSP's `Content-Length` framing (the TCP ingress, `connect`'s stdio,
//! child processes and sockets under `--framing lsp | auto`) over arbitrary
//! bytes arriving in arbitrary pieces: the header parser never panics and
//! never claims more than it was given or than `MAX_HEADER_BLOCK`; the
//! reader returns the same messages, skips and lost framing whether the
//! bytes come in the fuzzer's pieces or all at once; and what it read,
//! written again, reads back the same.

use super::pieces::{Pieces, Split};
use npamp_gateway::lines::LineSkipped;
use npamp_gateway::lsp::{
    FramingLost, Head, LspReader, MAX_HEADER_BLOCK, parse_head, write_message,
};

/// What one read returned, comparably.
#[derive(Debug, PartialEq, Eq)]
enum Got {
    Message(Vec<u8>),
    Skipped(usize),
    Lost(String),
    Failed(String),
}

async fn read_all(reader: &mut LspReader<Pieces<'_>>) -> Vec<Got> {
    let mut got = Vec::new();
    // Every read takes a message, a skip or the end: bounded by the input.
    loop {
        match reader.next().await {
            Ok(Some(m)) => got.push(Got::Message(m.to_vec())),
            Ok(None) => return got,
            Err(e) => {
                if let Some(s) = LineSkipped::of(&e) {
                    got.push(Got::Skipped(s.len));
                    continue;
                }
                got.push(match FramingLost::of(&e) {
                    Some(lost) => Got::Lost(lost.to_string()),
                    None => Got::Failed(e.to_string()),
                });
                return got;
            }
        }
    }
}

/// One input, as the fuzzer hands it over.
pub fn run(input: &[u8]) {
    let Some(Split { sizes, data, max }) = Split::of(input) else {
        return;
    };

    match parse_head(data) {
        Ok(Head::Message { header_len, .. }) => {
            assert!(header_len <= data.len() && header_len <= MAX_HEADER_BLOCK);
            assert_eq!(data[header_len - 1], b'\n');
        }
        Ok(Head::Partial) => assert!(data.len() <= MAX_HEADER_BLOCK),
        Err(_) => {}
    }

    let Ok(rt) = tokio::runtime::Builder::new_current_thread().build() else {
        return;
    };
    rt.block_on(async {
        let mut pieces = LspReader::new(Pieces { data, sizes }, max);
        let mut whole = LspReader::new(Pieces { data, sizes: &[] }, max);
        let got = read_all(&mut pieces).await;
        assert_eq!(got, read_all(&mut whole).await, "limit {max}");
        assert!(!got.iter().any(|g| matches!(g, Got::Failed(_))), "{got:?}");

        let messages: Vec<&Vec<u8>> = got
            .iter()
            .filter_map(|g| match g {
                Got::Message(m) => Some(m),
                _ => None,
            })
            .collect();
        let mut framed = Vec::new();
        for m in &messages {
            write_message(&mut framed, m).await.expect("a Vec takes it");
        }
        let mut again = LspReader::new(
            Pieces {
                data: &framed,
                sizes,
            },
            max,
        );
        let reread = read_all(&mut again).await;
        let want: Vec<Got> = messages
            .into_iter()
            .map(|m| Got::Message(m.clone()))
            .collect();
        assert_eq!(reread, want);
    });
}
