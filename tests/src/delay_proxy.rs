//! A TCP proxy on 127.0.0.1 that holds every chunk of bytes for a fixed
//! time before passing it on, each way: the database of `bench_scale_out
//! --db-delay-ms`, as if it were on another host (a round trip costs twice
//! the one-way delay). Bytes keep their order; a chunk is held from when it
//! was read, so the delay adds to each round trip once, not once per chunk
//! in flight.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::time::Instant;

pub struct DelayProxy {
    port: u16,
    accepting: tokio::task::JoinHandle<()>,
}

impl DelayProxy {
    /// Listens on a free port of 127.0.0.1 and forwards each connection to
    /// `target`, every chunk held `one_way` in each direction.
    pub async fn start(target: SocketAddr, one_way: Duration) -> DelayProxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("delay proxy: bind 127.0.0.1:0");
        let port = listener.local_addr().expect("delay proxy: its address").port();
        let accepting = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let Ok(server) = TcpStream::connect(target).await else { return };
                    let _ = (client.set_nodelay(true), server.set_nodelay(true));
                    let ((client_r, client_w), (server_r, server_w)) = (client.into_split(), server.into_split());
                    tokio::join!(delayed(client_r, server_w, one_way), delayed(server_r, client_w, one_way));
                });
            }
        });
        DelayProxy { port, accepting }
    }

    pub fn port(&self) -> u16 {
        self.port
    }
}

impl Drop for DelayProxy {
    fn drop(&mut self) {
        self.accepting.abort();
    }
}

/// Copies `from` to `to`, each chunk written `delay` after it was read; the
/// end of `from` ends `to` once the chunks before it are written.
async fn delayed(mut from: OwnedReadHalf, mut to: OwnedWriteHalf, delay: Duration) {
    let (held, mut due) = mpsc::unbounded_channel::<(Instant, Vec<u8>)>();
    let reading = async move {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = from.read(&mut buf).await.unwrap_or(0);
            // An empty chunk stands for the end.
            if held.send((Instant::now() + delay, buf[..n].to_vec())).is_err() || n == 0 {
                return;
            }
        }
    };
    let writing = async move {
        while let Some((at, chunk)) = due.recv().await {
            tokio::time::sleep_until(at).await;
            if chunk.is_empty() || to.write_all(&chunk).await.is_err() {
                break;
            }
        }
        let _ = to.shutdown().await;
    };
    tokio::join!(reading, writing);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_round_trip_through_the_proxy_takes_twice_the_delay_and_bytes_keep_their_order() {
        let echo = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let target = echo.local_addr().unwrap();
        tokio::spawn(async move {
            let (mut s, _) = echo.accept().await.unwrap();
            let mut buf = [0u8; 1024];
            loop {
                let n = s.read(&mut buf).await.unwrap();
                if n == 0 || s.write_all(&buf[..n]).await.is_err() {
                    return;
                }
            }
        });
        let proxy = DelayProxy::start(target, Duration::from_millis(40)).await;
        let mut c = TcpStream::connect(("127.0.0.1", proxy.port())).await.unwrap();
        let started = std::time::Instant::now();
        c.write_all(b"one ").await.unwrap();
        c.write_all(b"two").await.unwrap();
        let mut got = Vec::new();
        while got.len() < 7 {
            let mut buf = [0u8; 16];
            let n = c.read(&mut buf).await.unwrap();
            assert!(n > 0, "the proxy closed the connection early");
            got.extend_from_slice(&buf[..n]);
        }
        assert_eq!(got, b"one two");
        // A lower bound only: the proxy holds each way at least its delay.
        assert!(started.elapsed() >= Duration::from_millis(80), "round trip took {:?}", started.elapsed());
    }
}
