//! The idle timeout: a stream wrapper that stamps every byte read or written, and a future that
//! completes once the stream has moved nothing for a given time. The connection task drops the
//! connection (closing the socket) when it completes: it catches what the header and body
//! timeouts do not, such as a client that stopped reading its answer.

use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Instant;

/// When a stream last moved a byte, in milliseconds since `start`, and how many of its requests
/// the broker is still handling (a connection waiting for its answer is not idle: a release
/// waiting on a slow MSS, a submission while the writer is busy).
#[derive(Clone)]
pub struct Activity {
    start: Instant,
    last_ms: Arc<AtomicU64>,
    handling: Arc<AtomicUsize>,
}

/// Held while a request is being handled; dropping it counts as activity.
pub struct Handling(Activity);

impl Drop for Handling {
    fn drop(&mut self) {
        self.0.stamp();
        self.0.handling.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Activity {
    pub fn new() -> Activity {
        Activity {
            start: Instant::now(),
            last_ms: Arc::new(AtomicU64::new(0)),
            handling: Arc::new(AtomicUsize::new(0)),
        }
    }

    fn stamp(&self) {
        let ms = u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last_ms.store(ms, Ordering::Relaxed);
    }

    /// The connection is busy until the guard is dropped.
    pub fn handling(&self) -> Handling {
        self.handling.fetch_add(1, Ordering::Relaxed);
        Handling(self.clone())
    }

    /// Completes once nothing has moved for `limit` while no request was being handled.
    pub async fn idle_for(&self, limit: Duration) {
        loop {
            if self.handling.load(Ordering::Relaxed) > 0 {
                self.stamp();
            }
            let last = Duration::from_millis(self.last_ms.load(Ordering::Relaxed));
            let deadline = self.start + last + limit;
            if Instant::now() >= deadline {
                return;
            }
            tokio::time::sleep_until(deadline).await;
        }
    }
}

/// A stream that reports its reads and writes to an `Activity`.
pub struct Tracked<S> {
    inner: S,
    activity: Activity,
}

impl<S> Tracked<S> {
    pub fn new(inner: S, activity: Activity) -> Tracked<S> {
        Tracked { inner, activity }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Tracked<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        if buf.filled().len() > before {
            self.activity.stamp();
        }
        polled
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Tracked<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write(cx, buf);
        if matches!(polled, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.stamp();
        }
        polled
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        if matches!(polled, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.stamp();
        }
        polled
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncWriteExt;

    /// Timers never fire early, so "not before the last byte + limit" holds on any machine.
    #[tokio::test]
    async fn idle_for_counts_from_the_last_byte() {
        let limit = Duration::from_millis(300);
        let activity = Activity::new();
        let (a, _b) = tokio::io::duplex(64);
        let mut tracked = Tracked::new(a, activity.clone());
        tracked.write_all(b"x").await.unwrap();
        let write_again = async {
            tokio::time::sleep(Duration::from_millis(200)).await;
            tracked.write_all(b"y").await.unwrap();
            Instant::now()
        };
        let (last_byte, idle_at) = tokio::join!(write_again, async {
            activity.idle_for(limit).await;
            Instant::now()
        });
        assert!(idle_at >= last_byte + limit - Duration::from_millis(2));
        assert!(idle_at < last_byte + limit + Duration::from_secs(5));
    }

    /// A request being handled keeps the connection from going idle, however long it takes;
    /// the limit counts from when its handling ended.
    #[tokio::test]
    async fn a_request_being_handled_is_not_idle() {
        let limit = Duration::from_millis(100);
        let activity = Activity::new();
        let guard = activity.handling();
        let handled = async {
            tokio::time::sleep(limit * 4).await;
            drop(guard);
            Instant::now()
        };
        let (done, idle_at) = tokio::join!(handled, async {
            activity.idle_for(limit).await;
            Instant::now()
        });
        assert!(idle_at >= done + limit - Duration::from_millis(2));
    }
}
