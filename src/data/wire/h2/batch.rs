//! Writes batched per scheduler pass: an I/O wrapper for a connection that many tasks feed
//! (an HTTP/2 connection of the fast path's, to a backend or from a client, whose streams are
//! each served by their own task).
//! The first write of a burst waits until the runtime has run the other tasks that were ready
//! (`tokio::task::yield_now`, which the scheduler wakes only once its run queue is empty or at
//! its periodic check), so the frames those tasks queue meanwhile go out in the same send;
//! the rest of the burst, up to the flush that ends it, goes straight through.
//!
//! Why: tokio runs a task woken by the running one next (its LIFO slot), so a stream task that
//! queues a request wakes the connection task, which then sends that one request before the
//! next stream task has run: one `sendto` per request. On loopback each send also carries the
//! receiver's wakeup: sends were a third of switchyard's CPU under gRPC load
//! (docs/performance-notebook.md). Reads are untouched. Knows nothing of HTTP/2.
//! Client connections are wrapped too since they are the fast path's own (`conn`'s server
//! role): with `h2`'s, inside Pingora, it had not lowered a gRPC call's CPU; with the fast
//! path's, system calls per call went from 0.75 to 0.72 (docs/performance-notebook.md).

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// The pending yield of a burst's first write.
type Yield = Pin<Box<dyn Future<Output = ()> + Send + Sync>>;

/// `io`, whose writes wait for the other ready tasks once per burst (see the module).
pub struct Batched<T> {
    io: T,
    /// The burst's wait is over: writes go through until the next flush.
    open: bool,
    waiting: Option<Yield>,
}

impl<T> Batched<T> {
    pub fn new(io: T) -> Batched<T> {
        Batched {
            io,
            open: false,
            waiting: None,
        }
    }

    /// Ready once the other ready tasks have run, for the burst's first write.
    fn poll_open(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        if !self.open {
            let waiting = self
                .waiting
                .get_or_insert_with(|| Box::pin(tokio::task::yield_now()));
            ready!(waiting.as_mut().poll(cx));
            self.waiting = None;
            self.open = true;
        }
        Poll::Ready(())
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Batched<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Batched<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        ready!(this.poll_open(cx));
        Pin::new(&mut this.io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        ready!(this.poll_open(cx));
        Pin::new(&mut this.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        // `h2` flushes on every poll of its connection, also when it wrote nothing (a poll for
        // a read): with no write since the last flush there is nothing to gather, so no wait.
        // After writes, the flush (over TLS it may still send records) ends the burst.
        let this = self.get_mut();
        let flushed = ready!(Pin::new(&mut this.io).poll_flush(cx));
        this.open = false;
        Poll::Ready(flushed)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};
    use tokio::io::AsyncWriteExt;

    /// A sink that records each write it was given.
    #[derive(Clone, Default)]
    struct Sink(Arc<Mutex<Vec<Vec<u8>>>>);

    impl AsyncWrite for Sink {
        fn poll_write(
            self: Pin<&mut Self>,
            _: &mut Context<'_>,
            buf: &[u8],
        ) -> Poll<io::Result<usize>> {
            self.0.lock().unwrap().push(buf.to_vec());
            Poll::Ready(Ok(buf.len()))
        }

        fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }

        fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }
    }

    /// The first write of a burst waits for the tasks that were ready to run; its later
    /// writes do not; the next burst waits again; a flush with nothing written does not wait.
    #[tokio::test(flavor = "current_thread")]
    async fn a_burst_waits_once_for_the_other_ready_tasks() {
        let sink = Sink::default();
        let mut io = Batched::new(sink.clone());
        let ran = Arc::new(Mutex::new(Vec::new()));
        let other = Arc::clone(&ran);
        // Ready before the burst starts: it runs before the first write lands.
        let task = tokio::spawn(async move { other.lock().unwrap().push("other task") });
        io.write_all(b"a").await.unwrap();
        ran.lock().unwrap().push("first write");
        io.write_all(b"b").await.unwrap();
        io.flush().await.unwrap();
        task.await.unwrap();
        assert_eq!(*ran.lock().unwrap(), ["other task", "first write"]);
        assert_eq!(*sink.0.lock().unwrap(), [b"a".to_vec(), b"b".to_vec()]);

        // A new burst waits again.
        let other = Arc::clone(&ran);
        let task = tokio::spawn(async move { other.lock().unwrap().push("another task") });
        io.write_all(b"c").await.unwrap();
        ran.lock().unwrap().push("next burst");
        task.await.unwrap();
        assert_eq!(ran.lock().unwrap()[2..], ["another task", "next burst"]);
        io.flush().await.unwrap();

        let other = Arc::clone(&ran);
        let task = tokio::spawn(async move { other.lock().unwrap().push("a third task") });
        io.flush().await.unwrap();
        ran.lock().unwrap().push("bare flush");
        task.await.unwrap();
        assert_eq!(ran.lock().unwrap()[4..], ["bare flush", "a third task"]);
    }
}
