//! End-to-end checks of the raw TCP frontends (`--tcp-services`): real sockets on 127.0.0.1,
//! a switchyard subprocess, echo backends (the common [`Backend`] as a TCP echo). Every wait is
//! bounded.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::*;
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

const IO_TIMEOUT: Duration = Duration::from_secs(5);

/// A TCP backend that greets every connection with `<name>\n`, then echoes every byte, and
/// closes its side only after the client closed its own ([`Behaviour::TcpEcho`]).
async fn echo(name: &str) -> Backend {
    Backend::builder(name)
        .behaviour(Behaviour::TcpEcho)
        .start()
        .await
}

/// A connected client that has read the backend's greeting.
struct Conn {
    backend: String,
    reader: BufReader<TcpStream>,
}

impl Conn {
    async fn open(port: u16) -> Result<Conn, String> {
        let fut = async {
            let s = TcpStream::connect(("127.0.0.1", port))
                .await
                .map_err(|e| format!("connect: {e}"))?;
            let mut reader = BufReader::new(s);
            let mut line = String::new();
            reader
                .read_line(&mut line)
                .await
                .map_err(|e| format!("greeting: {e}"))?;
            if line.is_empty() {
                return Err("closed before the greeting".to_string());
            }
            Ok(Conn {
                backend: line.trim().to_string(),
                reader,
            })
        };
        tokio::time::timeout(IO_TIMEOUT, fut)
            .await
            .map_err(|_| "timeout".to_string())?
    }

    /// Sends `msg` and reads the same number of bytes back.
    async fn echo(&mut self, msg: &str) -> Result<String, String> {
        let fut = async {
            self.reader
                .get_mut()
                .write_all(msg.as_bytes())
                .await
                .map_err(|e| format!("write: {e}"))?;
            let mut buf = vec![0u8; msg.len()];
            self.reader
                .read_exact(&mut buf)
                .await
                .map_err(|e| format!("read: {e}"))?;
            Ok(String::from_utf8_lossy(&buf).into_owned())
        };
        tokio::time::timeout(IO_TIMEOUT, fut)
            .await
            .map_err(|_| "timeout".to_string())?
    }
}

fn refused(port: u16) -> bool {
    std::net::TcpStream::connect_timeout(
        &std::net::SocketAddr::from(([127, 0, 0, 1], port)),
        Duration::from_secs(1),
    )
    .is_err()
}

fn tcp_objs(port: u16, backends: &[&Backend]) -> Vec<Value> {
    let mut objs = vec![svc("db", port).into()];
    objs.extend(backends.iter().map(|b| slice("db", "", b.port)));
    objs
}

fn http_objs(web: &Backend) -> Vec<Value> {
    let mut objs = vec![svc("web", 80).into()];
    objs.extend(slices("web", &[web]));
    objs
}

#[tokio::test]
async fn tcp_service_appears_is_balanced_and_goes_away() {
    let web = Backend::start("web").await;
    let (e1, e2) = (echo("echo-1").await, echo("echo-2").await);
    let port = free_port();
    let tcp_flag = format!("db:{port}");
    let sy = switchyard(http_objs(&web))
        .args(&["--tcp-services", &tcp_flag])
        .start()
        .await;
    assert!(refused(port), "no db Service yet, so nothing listens");

    // The Service appears: the port opens.
    let mut objs = http_objs(&web);
    objs.extend(tcp_objs(port, &[&e1, &e2]));
    sy.rewrite(&objs);
    assert!(
        eventually(Duration::from_secs(10), || async {
            Conn::open(port).await.is_ok()
        })
        .await,
        "TCP port {port} never opened; stderr:\n{}",
        sy.stderr()
    );

    // Raw echo works and round-robin alternates.
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    for i in 0..6 {
        let mut c = Conn::open(port).await.unwrap();
        let msg = format!("hello {i}\n");
        assert_eq!(c.echo(&msg).await.unwrap(), msg);
        *seen.entry(c.backend).or_default() += 1;
    }
    assert_eq!(seen.len(), 2, "both endpoints serve: {seen:?}");
    assert!(seen.values().all(|&n| n == 3), "round-robin: {seen:?}");

    // A half-close reaches the backend, and its answer still comes back.
    let mut c = Conn::open(port).await.unwrap();
    c.reader.get_mut().write_all(b"last words").await.unwrap();
    c.reader.get_mut().shutdown().await.unwrap();
    let mut rest = String::new();
    tokio::time::timeout(IO_TIMEOUT, c.reader.read_to_string(&mut rest))
        .await
        .expect("the backend closes after our FIN")
        .unwrap();
    assert_eq!(rest, "last words");

    // HTTP traffic during the removal sees no error, on a kept-alive connection too; a TCP
    // connection open during the removal is not cut either.
    let mut open_tcp = Conn::open(port).await.unwrap();
    assert_eq!(open_tcp.echo("before\n").await.unwrap(), "before\n");
    let mut kept = OneConn::open(sy.http_port).await;
    assert_eq!(kept.get("/web", &[]).await.unwrap().status, 200);
    sy.rewrite(&http_objs(&web));
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut closed = false;
    let mut requests = 0;
    while Instant::now() < deadline {
        let r = kept
            .get("/web", &[])
            .await
            .expect("kept-alive HTTP connection");
        assert_eq!(r.status, 200);
        assert_eq!(sy.get("/web").await.status, 200);
        requests += 2;
        if refused(port) {
            closed = true;
            break;
        }
        // The poll interval of this bounded wait for the close (with traffic between polls).
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        closed,
        "TCP port {port} still open after the Service went away"
    );
    assert!(requests >= 2);
    assert_eq!(kept.get("/web", &[]).await.unwrap().status, 200);
    assert_eq!(
        open_tcp.echo("after\n").await.unwrap(),
        "after\n",
        "an established connection outlives its listener"
    );

    // The Service comes back: the port opens again at once.
    sy.rewrite(&objs);
    assert!(
        eventually(Duration::from_secs(10), || async {
            Conn::open(port).await.is_ok()
        })
        .await,
        "TCP port {port} did not reopen; stderr:\n{}",
        sy.stderr()
    );
    assert!(!sy.stderr().contains("cannot listen"), "{}", sy.stderr());
}

#[tokio::test]
async fn an_in_flight_stream_survives_ten_table_swaps() {
    let web = Backend::start("web").await;
    let e1 = echo("echo-1").await;
    let port = free_port();
    let tcp_flag = format!("db:{port}");
    let mut objs = http_objs(&web);
    objs.extend(tcp_objs(port, &[&e1]));
    let sy = switchyard(objs.clone())
        .args(&["--tcp-services", &tcp_flag])
        .start()
        .await;
    assert!(
        eventually(Duration::from_secs(10), || async {
            Conn::open(port).await.is_ok()
        })
        .await,
        "TCP port never opened; stderr:\n{}",
        sy.stderr()
    );
    let mut stream = Conn::open(port).await.unwrap();
    assert_eq!(stream.echo("before\n").await.unwrap(), "before\n");
    for i in 0..10 {
        // Each edit adds a Service; seeing its route proves the table was swapped.
        let name = format!("swap-{i}");
        objs.push(svc(&name, 80).into());
        objs.extend(slices(&name, &[&web]));
        sy.rewrite(&objs);
        let path = format!("/{name}");
        assert!(
            eventually(Duration::from_secs(10), || async {
                sy.get(&path).await.status == 200
            })
            .await,
            "swap {i} never applied"
        );
        let msg = format!("after swap {i}\n");
        assert_eq!(
            stream.echo(&msg).await.unwrap(),
            msg,
            "stream cut by swap {i}"
        );
    }
    // New connections still work too.
    let mut fresh = Conn::open(port).await.unwrap();
    assert_eq!(fresh.echo("fresh\n").await.unwrap(), "fresh\n");
}

#[tokio::test]
async fn a_failed_connect_is_retried_on_another_endpoint() {
    let live = echo("live").await;
    // An endpoint nothing listens on: every connect to it is refused.
    let dead = DeadPort::new();
    let dead_port = dead.port;
    let port = free_port();
    let tcp_flag = format!("db:{port}");
    let mut objs = vec![svc("db", port).into()];
    objs.push(slice("db", "", live.port));
    objs.push(slice("db", "", dead_port));
    let sy = switchyard(objs)
        .args(&["--tcp-services", &tcp_flag])
        .start()
        .await;
    assert!(
        eventually(Duration::from_secs(10), || async {
            Conn::open(port).await.is_ok()
        })
        .await,
        "TCP port never opened; stderr:\n{}",
        sy.stderr()
    );
    for i in 0..6 {
        let mut c = Conn::open(port)
            .await
            .unwrap_or_else(|e| panic!("connection {i}: {e}"));
        assert_eq!(c.backend, "live");
        assert_eq!(c.echo("x").await.unwrap(), "x");
    }
}

#[tokio::test]
async fn client_ip_affinity_pins_tcp_connections() {
    let (e1, e2) = (echo("echo-1").await, echo("echo-2").await);
    let port = free_port();
    let tcp_flag = format!("db:{port}");
    let mut objs = vec![svc("db", port).client_ip_affinity().into()];
    objs.extend([slice("db", "", e1.port), slice("db", "", e2.port)]);
    let sy = switchyard(objs)
        .args(&["--tcp-services", &tcp_flag])
        .start()
        .await;
    assert!(
        eventually(Duration::from_secs(10), || async {
            Conn::open(port).await.is_ok()
        })
        .await,
        "TCP port never opened; stderr:\n{}",
        sy.stderr()
    );
    let first = Conn::open(port).await.unwrap().backend;
    for _ in 0..6 {
        assert_eq!(Conn::open(port).await.unwrap().backend, first);
    }
}

#[tokio::test]
async fn a_port_that_cannot_be_bound_is_a_warning_and_the_rest_works() {
    let web = Backend::start("web").await;
    let e1 = echo("echo-1").await;
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let taken_port = taken.local_addr().unwrap().port();
    let port = free_port();
    let tcp_flag = format!("db:{port},busy:{taken_port}");
    let mut objs = http_objs(&web);
    objs.extend(tcp_objs(port, &[&e1]));
    objs.push(svc("busy", taken_port).into());
    objs.push(slice("busy", "", e1.port));
    let sy = switchyard(objs)
        .args(&["--tcp-services", &tcp_flag])
        .start()
        .await;
    assert!(
        eventually(Duration::from_secs(10), || async {
            Conn::open(port).await.is_ok()
        })
        .await,
        "TCP port never opened; stderr:\n{}",
        sy.stderr()
    );
    assert!(
        eventually(Duration::from_secs(5), || async {
            sy.stderr().contains("default/busy")
        })
        .await,
        "no warning naming the service; stderr:\n{}",
        sy.stderr()
    );
    assert_eq!(sy.get("/web").await.status, 200);
    let mut c = Conn::open(port).await.unwrap();
    assert_eq!(c.echo("ok").await.unwrap(), "ok");
    drop(taken);
}

#[tokio::test]
async fn idle_tcp_connections_time_out() {
    let e1 = echo("echo-1").await;
    let port = free_port();
    let tcp_flag = format!("db:{port}");
    let sy = switchyard(tcp_objs(port, &[&e1]))
        .args(&["--tcp-services", &tcp_flag, "--tunnel-timeout", "1"])
        .start()
        .await;
    assert!(
        eventually(Duration::from_secs(10), || async {
            Conn::open(port).await.is_ok()
        })
        .await,
        "TCP port never opened; stderr:\n{}",
        sy.stderr()
    );
    let mut c = Conn::open(port).await.unwrap();
    let started = Instant::now();
    let mut buf = Vec::new();
    let n = tokio::time::timeout(Duration::from_secs(5), c.reader.read_to_end(&mut buf))
        .await
        .expect("an idle connection is closed within the tunnel timeout")
        .unwrap_or(0);
    assert_eq!(n, 0, "nothing was sent, nothing comes back");
    assert!(started.elapsed() >= Duration::from_millis(800));
}

/// A port another process holds is not opened, said once, and retried: switchyard takes it
/// once it is free, and serves it. (The harness's `Switchyard::listens` tells switchyard's own
/// listener from the other process's, which `listening` cannot.)
#[tokio::test]
async fn a_port_taken_by_another_process_is_retried_until_free() {
    let web = Backend::start("web").await;
    let e = echo("echo").await;
    let holder = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = holder.local_addr().unwrap().port();
    let mut objs = http_objs(&web);
    objs.extend(tcp_objs(port, &[&e]));
    let sy = switchyard(objs)
        .args(&["--tcp-services", &format!("db:{port}")])
        .start()
        .await;
    assert!(
        eventually(Duration::from_secs(10), || async {
            sy.stderr().contains("cannot listen for a TCP frontend")
        })
        .await,
        "no warning; stderr:\n{}",
        sy.stderr()
    );
    assert!(
        listening(port) && !sy.listens(port),
        "the other process holds it"
    );
    drop(holder);
    // Retried every 5 s.
    assert!(
        eventually(Duration::from_secs(10), || async { sy.listens(port) }).await,
        "never taken once free; stderr:\n{}",
        sy.stderr()
    );
    let mut c = Conn::open(port).await.unwrap();
    assert_eq!(c.backend, "echo");
    assert_eq!(c.echo("hi\n").await.unwrap(), "hi\n");
    let warned = sy
        .stderr()
        .matches("cannot listen for a TCP frontend")
        .count();
    assert_eq!(warned, 1, "said once per episode:\n{}", sy.stderr());
}

/// Time on CPU (nanoseconds, `/proc/PID/task/TID/schedstat`) of each of `pid`'s threads named
/// `name` (as the kernel keeps it: cut to 15 bytes).
fn thread_cpu(pid: u32, name: &str) -> Vec<u64> {
    let mut ns = Vec::new();
    for task in std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .flatten()
    {
        let comm = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
        if comm.trim_end() != name {
            continue;
        }
        let stat = std::fs::read_to_string(task.path().join("schedstat")).unwrap_or_default();
        ns.push(
            stat.split_whitespace()
                .next()
                .and_then(|n| n.parse().ok())
                .unwrap_or(0),
        );
    }
    ns
}

/// The threads of Pingora's service "tcp frontends" (`BG ` for a background service).
const TCP_THREADS: &str = "BG tcp frontend";

/// Without work stealing (Pingora's per-thread runtimes) the TCP connections are spread over
/// the service's threads, not all kept on the thread that accepts them: with two threads and
/// sixteen busy connections, both threads relay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tcp_connections_spread_over_threads_without_work_stealing() {
    let web = Backend::start("web").await;
    let e = echo("echo").await;
    let port = free_port();
    let mut objs = http_objs(&web);
    objs.extend(tcp_objs(port, &[&e]));
    let sy = switchyard(objs)
        .args(&["--tcp-services", &format!("db:{port}")])
        .args(&["--threads", "2", "--work-stealing", "false"])
        .start()
        .await;
    assert!(
        eventually(Duration::from_secs(10), || async { sy.listens(port) }).await,
        "never listened; stderr:\n{}",
        sy.stderr()
    );
    let pid = sy.child.id();
    let before = thread_cpu(pid, TCP_THREADS);
    assert_eq!(before.len(), 2, "two threads");
    let mut relays = tokio::task::JoinSet::new();
    for _ in 0..16 {
        relays.spawn(async move {
            let mut c = Conn::open(port).await.unwrap();
            let chunk = "x".repeat(64 * 1024);
            for _ in 0..64 {
                assert_eq!(c.echo(&chunk).await.unwrap().len(), chunk.len());
            }
        });
    }
    while let Some(done) = relays.join_next().await {
        done.unwrap();
    }
    // Each thread's share of the relaying: with the connections placed at random, about half;
    // all on one thread, the other's is its start-up alone (well under 1 %).
    let after = thread_cpu(pid, TCP_THREADS);
    let used: Vec<u64> = after.iter().zip(&before).map(|(a, b)| a - b).collect();
    let total: u64 = used.iter().sum();
    assert!(
        used.iter().all(|&t| t * 20 >= total),
        "each thread relayed at least 5 % (ns on CPU per thread: {used:?}); stderr:\n{}",
        sy.stderr()
    );
}
