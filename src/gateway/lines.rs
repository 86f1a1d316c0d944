//! Newline-delimited JSON-RPC (TCP ingress, stdio, child processes): one
//! message per line, bounded in length.

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// Reads lines of at most `max` octets; a longer line is an error (the
/// peer is not speaking line-delimited JSON-RPC, or is hostile).
pub struct LineReader<R> {
    inner: R,
    buf: BytesMut,
    max: usize,
    /// Octets of `buf` already searched for a newline.
    searched: usize,
}

impl<R: AsyncRead + Unpin> LineReader<R> {
    pub fn new(inner: R, max: usize) -> Self {
        Self {
            inner,
            buf: BytesMut::with_capacity(8 << 10),
            max,
            searched: 0,
        }
    }

    /// The next non-empty line without its terminator (`\n` or `\r\n`);
    /// `None` at the end of the stream. A last line without a newline counts.
    pub async fn next(&mut self) -> std::io::Result<Option<Bytes>> {
        loop {
            if let Some(i) = self.buf[self.searched..].iter().position(|&b| b == b'\n') {
                let end = self.searched + i;
                if end > self.max {
                    return Err(too_long(self.max));
                }
                let mut line = self.buf.split_to(end + 1);
                self.searched = 0;
                line.truncate(end);
                if line.last() == Some(&b'\r') {
                    line.truncate(end - 1);
                }
                if line.iter().all(u8::is_ascii_whitespace) {
                    continue;
                }
                return Ok(Some(line.freeze()));
            }
            self.searched = self.buf.len();
            if self.buf.len() > self.max {
                return Err(too_long(self.max));
            }
            self.buf.reserve(8 << 10);
            if self.inner.read_buf(&mut self.buf).await? == 0 {
                if self.buf.iter().all(u8::is_ascii_whitespace) {
                    return Ok(None);
                }
                self.searched = 0;
                return Ok(Some(self.buf.split().freeze()));
            }
        }
    }
}

fn too_long(max: usize) -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::InvalidData,
        format!("line longer than the limit of {max} octets"),
    )
}

/// Writes one message and its newline. JSON allows raw line breaks only as
/// whitespace between tokens (inside strings they must be escaped), so a
/// message with line breaks is written with spaces in their place: the
/// framing needs it, the meaning is unchanged.
pub async fn write_line<W: AsyncWrite + Unpin>(w: &mut W, text: &[u8]) -> std::io::Result<()> {
    if text.iter().any(|&b| b == b'\n' || b == b'\r') {
        let flat: Vec<u8> = text
            .iter()
            .map(|&b| if b == b'\n' || b == b'\r' { b' ' } else { b })
            .collect();
        w.write_all(&flat).await?;
    } else {
        w.write_all(text).await?;
    }
    w.write_all(b"\n").await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn splits_lines_skips_blank_ones_and_bounds_length() {
        let input: &[u8] = b"{\"a\":1}\r\n\n  \n{\"b\":2}\n{\"c\":3}";
        let mut r = LineReader::new(input, 64);
        assert_eq!(r.next().await.unwrap().as_deref(), Some(&b"{\"a\":1}"[..]));
        assert_eq!(r.next().await.unwrap().as_deref(), Some(&b"{\"b\":2}"[..]));
        assert_eq!(r.next().await.unwrap().as_deref(), Some(&b"{\"c\":3}"[..]));
        assert_eq!(r.next().await.unwrap(), None);

        let long = [b'x'; 100];
        let mut r = LineReader::new(&long[..], 64);
        assert!(r.next().await.is_err());
        let mut with_newline = [b'x'; 100];
        with_newline[99] = b'\n';
        let mut r = LineReader::new(&with_newline[..], 64);
        assert!(
            r.next().await.is_err(),
            "a whole over-long line in one read"
        );
    }

    #[tokio::test]
    async fn line_breaks_between_tokens_become_spaces() {
        let mut out = Vec::new();
        write_line(&mut out, b"{\n  \"a\": 1\r\n}").await.unwrap();
        assert_eq!(out, b"{   \"a\": 1  }\n");
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["a"], 1);
    }
}
