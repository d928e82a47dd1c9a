//! The connector wrapper that times each new connection (DNS through the policy's resolver,
//! TCP, TLS) and tags it, so the first attempt sent over it can report how long opening it
//! took (`AttemptTiming::connect`); attempts over a reused connection report none.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use hyper::rt::{Read, ReadBufCursor, Write};
use hyper_util::client::legacy::connect::{Connected, Connection};
use outboxkit_core::system::Stopwatch;

/// How long a connection took to open, claimed by the first response read over it.
/// (Set by the client in every response's extensions for that connection.)
#[derive(Clone, Debug)]
pub(crate) struct ConnectStamp {
    took: Duration,
    claimed: Arc<AtomicBool>,
}

impl ConnectStamp {
    /// The connect time for the first caller, `None` for every later one (a reused
    /// connection cost this attempt nothing to open).
    pub(crate) fn claim(&self) -> Option<Duration> {
        (!self.claimed.swap(true, Ordering::Relaxed)).then_some(self.took)
    }
}

/// A connector that times the connections of the one it wraps.
#[derive(Clone, Debug)]
pub(crate) struct Timed<C>(pub(crate) C);

/// A connection with its [`ConnectStamp`].
#[derive(Debug)]
pub(crate) struct TimedIo<T> {
    io: T,
    stamp: ConnectStamp,
}

type BoxFuture<T, E> = Pin<Box<dyn Future<Output = Result<T, E>> + Send>>;

impl<C> tower_service::Service<http::Uri> for Timed<C>
where
    C: tower_service::Service<http::Uri>,
    C::Future: Send + 'static,
{
    type Response = TimedIo<C::Response>;
    type Error = C::Error;
    type Future = BoxFuture<Self::Response, C::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), C::Error>> {
        self.0.poll_ready(cx)
    }

    fn call(&mut self, uri: http::Uri) -> Self::Future {
        let watch = Stopwatch::start();
        let connecting = self.0.call(uri);
        Box::pin(async move {
            let io = connecting.await?;
            Ok(TimedIo {
                io,
                stamp: ConnectStamp {
                    took: watch.elapsed(),
                    claimed: Arc::new(AtomicBool::new(false)),
                },
            })
        })
    }
}

impl<T: Connection> Connection for TimedIo<T> {
    fn connected(&self) -> Connected {
        self.io.connected().extra(self.stamp.clone())
    }
}

impl<T: Read + Unpin> Read for TimedIo<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: ReadBufCursor<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl<T: Write + Unpin> Write for TimedIo<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_first_claim_gets_the_connect_time() {
        let stamp = ConnectStamp {
            took: Duration::from_millis(3),
            claimed: Arc::new(AtomicBool::new(false)),
        };
        let shared = stamp.clone();
        assert_eq!(stamp.claim(), Some(Duration::from_millis(3)));
        assert_eq!(shared.claim(), None, "a clone shares the claim");
        assert_eq!(stamp.claim(), None);
    }
}
