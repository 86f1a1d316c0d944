//! The reader of JSON values back to back (an IPC upstream's socket, geth
//! style) over arbitrary bytes arriving in arbitrary pieces: never panics,
//! never returns a value over the limit, and returns exactly the values an
//! oracle splitting the whole input at once returns (each an object or an
//! array whose brackets balance outside strings), until the first error.

use super::pieces::Pieces;
use npamp_gateway::gateway::json_stream::ValueReader;

/// The values of `data` split at once: a plain bracket count, outside
/// strings. `None` where the reader must fail.
fn oracle(data: &[u8]) -> (Vec<&[u8]>, bool) {
    let mut out = Vec::new();
    let mut i = 0;
    while i < data.len() {
        if matches!(data[i], b' ' | b'\t' | b'\r' | b'\n') {
            i += 1;
            continue;
        }
        if !matches!(data[i], b'{' | b'[') {
            return (out, true);
        }
        let (start, mut depth, mut in_string, mut escaped) = (i, 0usize, false, false);
        let mut end = None;
        for (j, &c) in data.iter().enumerate().skip(i) {
            if in_string {
                match (escaped, c) {
                    (true, _) => escaped = false,
                    (false, b'\\') => escaped = true,
                    (false, b'"') => in_string = false,
                    _ => {}
                }
            } else {
                match c {
                    b'"' => in_string = true,
                    b'{' | b'[' => depth += 1,
                    b'}' | b']' => {
                        depth -= 1;
                        if depth == 0 {
                            end = Some(j + 1);
                            break;
                        }
                    }
                    _ => {}
                }
            }
        }
        match end {
            Some(e) => {
                out.push(&data[start..e]);
                i = e;
            }
            None => return (out, true),
        }
    }
    (out, false)
}

/// One input, as the fuzzer hands it over.
pub fn run(input: &[u8]) {
    let Some((&split, rest)) = input.split_first() else {
        return;
    };
    let (sizes, data) = rest.split_at(usize::from(split).min(rest.len()));
    let max = 64;
    let Ok(rt) = tokio::runtime::Builder::new_current_thread().build() else {
        return;
    };
    rt.block_on(async {
        let (want, fails) = oracle(data);
        let mut r = ValueReader::new(Pieces { data, sizes }, max);
        let mut got = Vec::new();
        let end = loop {
            match r.next().await {
                Ok(Some(v)) => {
                    assert!(v.len() <= max, "a value over the limit");
                    got.push(v);
                }
                Ok(None) => break Ok(()),
                Err(e) => break Err(e),
            }
        };
        // Up to the first value over the limit, the reader and the oracle
        // agree; after it the reader has stopped.
        let within: Vec<&[u8]> = want
            .iter()
            .take_while(|v| v.len() <= max)
            .copied()
            .collect();
        let over = within.len() < want.len();
        let got: Vec<&[u8]> = got.iter().map(|v| v.as_ref()).collect();
        assert_eq!(got, within);
        assert_eq!(end.is_err(), fails || over, "{end:?}");
    });
}
