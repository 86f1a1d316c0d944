//! Newline-delimited JSON-RPC for the mock's TCP and stdio sessions: one
//! message per line.

use bytes::Bytes;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};

/// Reads the lines of a stream, each at most `max` octets.
pub struct LineReader<R> {
    inner: BufReader<R>,
    line: Vec<u8>,
    max: usize,
}

impl<R: AsyncRead + Unpin> LineReader<R> {
    pub fn new(inner: R, max: usize) -> Self {
        Self {
            inner: BufReader::new(inner),
            line: Vec::new(),
            max,
        }
    }

    /// The next line that is not blank, without its `\n` or `\r\n`; `None`
    /// at the end of the stream (a last line without a newline counts). A
    /// line over the limit is an error: the peer is not speaking
    /// line-delimited JSON-RPC.
    pub async fn next(&mut self) -> std::io::Result<Option<Bytes>> {
        loop {
            self.line.clear();
            // One octet over the limit is enough to know it is over.
            let limit = u64::try_from(self.max)
                .unwrap_or(u64::MAX)
                .saturating_add(1);
            let n = (&mut self.inner)
                .take(limit)
                .read_until(b'\n', &mut self.line)
                .await?;
            if n == 0 {
                return Ok(None);
            }
            let text = self.line.strip_suffix(b"\n").unwrap_or(&self.line);
            let text = text.strip_suffix(b"\r").unwrap_or(text);
            if text.len() > self.max {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    format!("a line over {} octets", self.max),
                ));
            }
            if !text.iter().all(u8::is_ascii_whitespace) {
                return Ok(Some(Bytes::copy_from_slice(text)));
            }
        }
    }
}

/// Writes one message as one line. The mock's messages are compact
/// `serde_json` output, which has no line break in it (JSON escapes them in
/// strings), so the line is the message.
pub async fn write_line<W: AsyncWrite + Unpin>(w: &mut W, message: &[u8]) -> std::io::Result<()> {
    debug_assert!(!message.contains(&b'\n'), "a message with a line break");
    w.write_all(message).await?;
    w.write_all(b"\n").await
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn lines(input: &[u8], max: usize) -> (Vec<Bytes>, Option<std::io::Error>) {
        let mut r = LineReader::new(input, max);
        let mut got = Vec::new();
        loop {
            match r.next().await {
                Ok(Some(l)) => got.push(l),
                Ok(None) => return (got, None),
                Err(e) => return (got, Some(e)),
            }
        }
    }

    #[tokio::test]
    async fn splits_on_newlines_skips_blank_lines_and_keeps_a_last_line() {
        let (got, err) = lines(b"{\"a\":1}\r\n\n  \n{\"b\":2}\n{\"c\":3}", 64).await;
        assert!(err.is_none());
        assert_eq!(got, vec![&b"{\"a\":1}"[..], b"{\"b\":2}", b"{\"c\":3}"]);
    }

    #[tokio::test]
    async fn a_line_at_the_limit_passes_and_one_over_it_is_an_error() {
        let (got, err) = lines(b"12345\n123456\nnever", 5).await;
        assert_eq!(got, vec![&b"12345"[..]]);
        let err = err.expect("the second line is over the limit");
        assert_eq!(err.kind(), std::io::ErrorKind::InvalidData);
    }

    #[tokio::test]
    async fn what_is_written_reads_back_line_by_line() {
        let mut out = Vec::new();
        write_line(&mut out, br#"{"a":1}"#).await.unwrap();
        write_line(&mut out, b"{}").await.unwrap();
        let (got, err) = lines(&out, 64).await;
        assert!(err.is_none());
        assert_eq!(got, vec![&br#"{"a":1}"#[..], b"{}"]);
    }
}
