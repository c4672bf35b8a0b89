//! The tokio wrappers (feature `tokio`): `AsyncTcpListener` and `AsyncTcpStream` between two
//! hosts joined by an in-memory link, on a multi-threaded runtime. Every test has an overall
//! timeout, so a lost waker fails instead of hanging.
#![cfg(feature = "tokio")]

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use shallow_os::{link, AsyncTcpListener, AsyncTcpStream, Host};
use shallow_tcp::Stack;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const A: Ipv4Addr = Ipv4Addr::new(10, 3, 0, 1);
const B: Ipv4Addr = Ipv4Addr::new(10, 3, 0, 2);

fn hosts() -> (Host, Host) {
    let (la, lb) = link::pair().unwrap();
    let mut a = Stack::new(7);
    a.add_address(IpAddr::V4(A));
    let mut b = Stack::new(8);
    b.add_address(IpAddr::V4(B));
    (Host::start(a, la).unwrap(), Host::start(b, lb).unwrap())
}

fn pattern(n: usize, salt: u8) -> Vec<u8> {
    (0..n).map(|i| (i % 251) as u8 ^ salt).collect()
}

/// An async echo server and 8 concurrent async clients, each sending 512 KB and reading the
/// echo back at the same time (a reader and a writer task per client): every byte returns,
/// then EOF after `shutdown`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn echo_many_clients() {
    let (ha, hb) = hosts();
    let addr = SocketAddr::new(IpAddr::V4(B), 7);
    let l = AsyncTcpListener::bind(&hb, addr).unwrap();
    let server = tokio::spawn(async move {
        for _ in 0..8 {
            let (s, _) = l.accept().await.unwrap();
            tokio::spawn(async move {
                let (mut r, mut w) = tokio::io::split(s);
                tokio::io::copy(&mut r, &mut w).await.unwrap();
                w.shutdown().await.unwrap();
            });
        }
    });
    let run = async {
        let mut clients = Vec::new();
        for i in 0..8u8 {
            let ha = ha.clone();
            clients.push(tokio::spawn(async move {
                let s = AsyncTcpStream::connect(&ha, addr).await.unwrap();
                let (mut r, mut w) = tokio::io::split(s);
                let data = pattern(512 * 1024, i);
                let expect = data.clone();
                let wr = tokio::spawn(async move {
                    w.write_all(&data).await.unwrap();
                    w.shutdown().await.unwrap();
                });
                let mut back = Vec::new();
                r.read_to_end(&mut back).await.unwrap();
                wr.await.unwrap();
                assert!(back == expect, "client {i}: echo differs");
            }));
        }
        for c in clients {
            c.await.unwrap();
        }
        server.await.unwrap();
    };
    tokio::time::timeout(Duration::from_secs(60), run)
        .await
        .expect("lost wake-up: echo did not finish");
    assert!(
        ha.stats()
            .task_wakeups
            .load(std::sync::atomic::Ordering::Relaxed)
            > 0
    );
}

/// An async connect to a port with no listener fails with ECONNREFUSED.
#[tokio::test]
async fn connect_refused() {
    let (ha, _hb) = hosts();
    let r = tokio::time::timeout(
        Duration::from_secs(30),
        AsyncTcpStream::connect(&ha, SocketAddr::new(IpAddr::V4(B), 9)),
    )
    .await
    .expect("connect hung");
    assert_eq!(r.unwrap_err().kind(), std::io::ErrorKind::ConnectionRefused);
}
