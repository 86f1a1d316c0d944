//! Shared by the targets that read a stream: the input handed to a reader
//! in pieces of sizes the fuzzer chose.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, ReadBuf};

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
