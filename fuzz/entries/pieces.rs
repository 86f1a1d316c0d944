//! Shared by the targets that read a stream: the input handed to a reader
//! in pieces of sizes the fuzzer chose.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, ReadBuf};

/// A stream reader's input as the `lines` and `lsp` targets read it: its
/// first octet says how many after it are the pieces' sizes, the rest is
/// the stream, and the first size (plus one) is the reader's limit.
pub struct Split<'a> {
    pub sizes: &'a [u8],
    pub data: &'a [u8],
    pub max: usize,
}

impl<'a> Split<'a> {
    pub fn of(input: &'a [u8]) -> Option<Self> {
        let (&head, rest) = input.split_first()?;
        let (sizes, data) = rest.split_at(usize::from(head).min(rest.len()));
        let max = 1 + usize::from(sizes.first().copied().unwrap_or(64));
        Some(Self { sizes, data, max })
    }
}

/// Hands out the input in pieces of the sizes the fuzzer chose.
pub struct Pieces<'a> {
    pub data: &'a [u8],
    pub sizes: &'a [u8],
}

impl AsyncRead for Pieces<'_> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let size = match self.sizes.split_first() {
            Some((&s, rest)) => {
                self.sizes = rest;
                usize::from(s).max(1)
            }
            None => self.data.len(),
        };
        let n = size.min(self.data.len()).min(buf.remaining());
        buf.put_slice(&self.data[..n]);
        self.data = &self.data[n..];
        Poll::Ready(Ok(()))
    }
}
