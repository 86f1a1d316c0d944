//! JSON values back to back on a stream, as geth's IPC endpoint speaks
//! them: `{…}{…}[…]`, with or without whitespace (a newline, say) between.
//! Each value is found by its brackets (strings and their escapes skipped),
//! not parsed; what is inside is the scanner's business downstream.

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt};

/// Reads one value at a time, each at most `max` octets.
pub struct ValueReader<R> {
    inner: R,
    buf: BytesMut,
    max: usize,
    scan: Scan,
}

/// Where the search for the end of the value at the head of the buffer
/// stands, so that no octet is looked at twice.
#[derive(Default)]
struct Scan {
    /// Octets of the buffer looked at.
    at: usize,
    /// Open brackets.
    depth: usize,
    in_string: bool,
    escaped: bool,
    /// Where the value began (after leading whitespace).
    start: Option<usize>,
}

fn invalid(message: String) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, message)
}

impl<R: AsyncRead + Unpin> ValueReader<R> {
    pub fn new(inner: R, max: usize) -> Self {
        Self::after(inner, max, BytesMut::with_capacity(8 << 10))
    }

    /// A reader of `inner` whose first octets were read already, into `read`.
    pub fn after(inner: R, max: usize, read: BytesMut) -> Self {
        Self {
            inner,
            buf: read,
            max,
            scan: Scan::default(),
        }
    }

    /// The next value; `None` at the end of the stream between values. A
    /// value longer than `max`, or one that is not an object or an array,
    /// is an error.
    pub async fn next(&mut self) -> std::io::Result<Option<Bytes>> {
        loop {
            if let Some(end) = self.find_end()? {
                let start = self.scan.start.unwrap_or(0);
                if end - start > self.max {
                    return Err(invalid(format!(
                        "a value of {} octets, over the limit of {}",
                        end - start,
                        self.max
                    )));
                }
                let mut value = self.buf.split_to(end);
                let _ = value.split_to(start);
                self.scan = Scan::default();
                return Ok(Some(value.freeze()));
            }
            let held = self.scan.start.map_or(0, |s| self.buf.len() - s);
            if held > self.max {
                return Err(invalid(format!(
                    "a value of more than {} octets (the limit)",
                    self.max
                )));
            }
            if self.buf.capacity() - self.buf.len() < 4096 {
                self.buf.reserve(8 << 10);
            }
            if self.inner.read_buf(&mut self.buf).await? == 0 {
                return match self.scan.start {
                    None => Ok(None),
                    Some(_) => Err(invalid("the stream ended inside a value".into())),
                };
            }
        }
    }

    /// The end (exclusive) of the value at the head of the buffer, once all
    /// of it is there.
    fn find_end(&mut self) -> std::io::Result<Option<usize>> {
        let s = &mut self.scan;
        while s.at < self.buf.len() {
            let c = self.buf[s.at];
            s.at += 1;
            if s.start.is_none() {
                match c {
                    b' ' | b'\t' | b'\r' | b'\n' => continue,
                    b'{' | b'[' => {
                        s.start = Some(s.at - 1);
                        s.depth = 1;
                        continue;
                    }
                    other => {
                        return Err(invalid(format!(
                            "expected a JSON object or array, found {:?}",
                            char::from(other)
                        )));
                    }
                }
            }
            if s.in_string {
                match (s.escaped, c) {
                    (true, _) => s.escaped = false,
                    (false, b'\\') => s.escaped = true,
                    (false, b'"') => s.in_string = false,
                    _ => {}
                }
                continue;
            }
            match c {
                b'"' => s.in_string = true,
                b'{' | b'[' => s.depth += 1,
                b'}' | b']' => {
                    s.depth -= 1;
                    if s.depth == 0 {
                        return Ok(Some(s.at));
                    }
                }
                _ => {}
            }
        }
        // Whitespace only: drop it, so it is not held.
        if s.start.is_none() {
            self.buf.clear();
            s.at = 0;
        }
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Reads `chunks` (written one at a time) into values.
    async fn values(chunks: &[&[u8]], max: usize) -> std::io::Result<Vec<String>> {
        let (mut writer, reader) = tokio::io::duplex(1 << 20);
        let data: Vec<Vec<u8>> = chunks.iter().map(|c| c.to_vec()).collect();
        tokio::spawn(async move {
            use tokio::io::AsyncWriteExt;
            for c in data {
                let _ = writer.write_all(&c).await;
                tokio::task::yield_now().await;
            }
        });
        let mut r = ValueReader::new(reader, max);
        let mut out = Vec::new();
        while let Some(v) = r.next().await? {
            out.push(String::from_utf8(v.to_vec()).expect("utf-8"));
        }
        Ok(out)
    }

    #[tokio::test]
    async fn values_back_to_back_split_anywhere() {
        let got = values(
            &[
                br#"{"id":1,"result":"}"}{"id":2,"#,
                br#""result":[1,{"a":"\"]"}]}"#,
                b"\n  [{\"id\":3}]\r\n",
            ],
            1024,
        )
        .await
        .unwrap();
        assert_eq!(
            got,
            [
                r#"{"id":1,"result":"}"}"#,
                r#"{"id":2,"result":[1,{"a":"\"]"}]}"#,
                r#"[{"id":3}]"#,
            ]
        );
    }

    #[tokio::test]
    async fn bad_streams_are_errors() {
        let e = values(&[b"{\"id\":1}42"], 1024).await.unwrap_err();
        assert!(e.to_string().contains("found '4'"), "{e}");
        let e = values(&[b"{\"id\":"], 1024).await.unwrap_err();
        assert!(e.to_string().contains("ended inside a value"), "{e}");
        let big = format!("{{\"pad\":\"{}\"}}", "x".repeat(5000));
        let e = values(&[big.as_bytes()], 1024).await.unwrap_err();
        assert!(e.to_string().contains("the limit"), "{e}");
        assert!(values(&[b"  \n"], 8).await.unwrap().is_empty());
    }
}
