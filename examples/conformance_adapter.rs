//! Black-box conformance adapter (`harness/INSTRUCTIONS.md` of the N-PAMP
//! corpus): reads `u32 LE length ‖ JSON {op, in}` requests on stdin until it
//! closes and answers each with `u32 LE length ‖ JSON {out}|{error}|{skipped}`.
//!
//! ```sh
//! cargo build --release --example conformance_adapter
//! npamp-conform run --testee target/release/examples/conformance_adapter
//! ```
//!
//! It never panics on bad input: an unreadable request gets an `error`
//! answer; only a broken stdin/stdout pipe ends it.

use std::io::{self, BufWriter, Read, Write};

use npamp_gateway::conformance::{Outcome, run_op};
use serde_json::Value;

/// Requests larger than this are refused (and skipped over) rather than buffered.
const MAX_REQUEST_LEN: usize = 64 << 20;

fn main() -> io::Result<()> {
    let mut stdin = io::stdin().lock();
    let mut stdout = BufWriter::new(io::stdout().lock());
    let mut len_buf = [0u8; 4];
    loop {
        match stdin.read_exact(&mut len_buf) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(()),
            Err(e) => return Err(e),
        }
        let len = u32::from_le_bytes(len_buf) as usize;
        let outcome = if len > MAX_REQUEST_LEN {
            io::copy(&mut (&mut stdin).take(len as u64), &mut io::sink())?;
            Outcome::Error(format!("request of {len} octets exceeds {MAX_REQUEST_LEN}"))
        } else {
            let mut body = vec![0u8; len];
            stdin.read_exact(&mut body)?;
            answer(&body)
        };
        let reply = outcome.to_json().to_string();
        let reply_len = u32::try_from(reply.len()).unwrap_or(u32::MAX);
        stdout.write_all(&reply_len.to_le_bytes())?;
        stdout.write_all(reply.as_bytes())?;
        stdout.flush()?;
    }
}

fn answer(body: &[u8]) -> Outcome {
    let request: Value = match serde_json::from_slice(body) {
        Ok(v) => v,
        Err(e) => return Outcome::Error(format!("request is not JSON: {e}")),
    };
    match (request.get("op").and_then(Value::as_str), request.get("in")) {
        (Some(op), Some(input)) => run_op(op, input),
        _ => Outcome::Error("request needs a string `op` and an object `in`".into()),
    }
}
