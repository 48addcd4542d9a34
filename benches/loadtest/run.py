#!/usr/bin/env python3
"""Side-by-side load benchmark: switchyard against HAProxy 2.6, same machine, same run.

Question: does switchyard do at least as much work per CPU as HAProxy configured the way the
original service-loadbalancer template configured it, and keep tail latency as low?

What runs: three nginx backends (one worker, `return 200 "ok"`) on 127.0.0.1; then, interleaved
(A B A B ...), HAProxy with haproxy.cfg (keep-alive both sides, forwardfor, roundrobin, the /svc
prefix strip, the template's `check inter 5`) and switchyard in offline mode with manifests.yaml
(the same routing), a fresh proxy process for each scenario. A direct run against one backend
gives the ceiling. The proxy is pinned to core 0, load generator and backends to core 1. Only
127.0.0.1 is used; every loop is bounded; every process started is stopped, also on Ctrl-C.

Scenarios: keep-alive (wrk -c64), Connection: close (wrk, a new client connection per request),
fixed rate (h2load --rps, latency at equal, unsaturated load), the same two wrk runs over TLS
(ECDSA P-256, full handshakes in the Connection: close case), HTTP keep-alive through a raw
TCP frontend (L4 throughput for small messages), and the HTTP/2, gRPC and TLS-to-backend
scenarios below. Per run: requests/s, p50/p99/p99.9 latency, proxy CPU seconds per 100k
requests (from /proc), proxy peak RSS (VmHWM). The table printed at the end holds medians over
the repetitions and switchyard/HAProxy ratios.

"keep-alive under 100 table swaps/s" (switchyard only; it brings the plain keep-alive scenario
along, which is its baseline): the same wrk keep-alive run while the routing table is rebuilt
and swapped about 100 times a second. switchyard watches fake_api.py (a list + watch fake of
the Kubernetes API, on the load core) through a kubeconfig, with the hidden test flag
`--watch-max-wait 10ms` so that nearly every API change is its own swap;
fake_api.py adds or removes one endpoint of `svc` every 10 ms (one always stays ready).
Reported: failed requests, p99 and its ratio to the no-swap keep-alive run of the same
repetition (`p99_vs_no_swap`, median of the per-repetition ratios), API changes made and swaps
observed (`switchyard_table_swaps_total` before and after the run). The swap run's proxy CPU
includes the watch (JSON decoding of events) and the rebuilds; the baseline's source is the
manifest file. HAProxy has no counterpart (changing its servers takes a reload or its runtime
API), so its column stays empty.

HTTP/2, gRPC and TLS to backends (issues #14 and #17), both proxies in the same interleaved
runs: h2load over TLS with ALPN h2 (`HTTP/2 TLS`: 16 connections with 1, 10 or 100 streams in
flight each, and a fixed 500 req/s for latency) and h2c with prior knowledge (same stream counts,
and one connection with 100 streams in flight) to the nginx backends over HTTP/1. HAProxy takes
them on their own frontends (`alpn h2,http/1.1` and `proto h2`) with `http-reuse always`;
switchyard on its TLS port (ALPN h2) and its HTTP port (which takes h2c by the connection
preface). `gRPC unary`: h2load posting one length-prefixed protobuf message (`content-type:
application/grpc`, `te: trailers`) over h2c to examples/grpc_bench_backend.rs (tonic's codec
over hyper, one thread, three ports), which
switchyard reaches as a Service port with `appProtocol: grpc` and HAProxy with `server ... proto
h2`. `HTTPS to backends`: wrk keep-alive as in `keep-alive`, to nginx listening with TLS (a CA
made in the temporary directory; switchyard: `appProtocol: https` and `--backend-ca-file`;
HAProxy: `ssl verify required ca-file`), connections reused; its `cpu_vs_keep_alive` is its CPU
per request over the plain keep-alive run's, same proxy and repetition (it brings `keep-alive`
along). `HTTPS to backends (fixed 5k req/s)` is the same at the rate of `fixed 5k req/s`, read
against that run: at saturation the proxy's wakeups carry as many requests as the load core
(shared by the load generator and the TLS backends) lets queue up, which is not the same with
plain and TLS backends; at one fixed rate both proxies do the same work per wakeup. Before each measured run one request of the same kind is checked (HTTP/2 really
negotiated; a gRPC answer ending with `grpc-status: 0`, since h2load only counts HTTP statuses).
The health checks of these new backends run every 5 s on both proxies (the template's 5 ms
would be TLS handshakes or HTTP/2 connections for HAProxy). The direct ceiling is also measured
for gRPC (h2load to the backend) and TLS backends (wrk to one nginx over TLS).

Gateway API kinds (issue #39), switchyard configured through the Gateway `bench` in
manifests.yaml (GatewayClass, Gateway, GRPCRoute, TLSRoute, UDPRoute, Services and
EndpointSlices of the same local backends): `GRPCRoute gRPC unary` is the gRPC scenario above
routed by a GRPCRoute (host grpc.bench, exact method) against HAProxy's h2c frontend with the
same host and path rule; `TLSRoute passthrough new connections` drives a Gateway TLS listener
(Passthrough) against HAProxy `mode tcp` routing by `req.ssl_sni`, each connection a full
handshake with an nginx TLS backend and one request (loadgen.py tls-new: wrk and h2load cannot
send a server name other than the URL's, and h2load 1.52 reconnects past its -D when the server
closes); `UDPRoute datagrams` drives a Gateway UDP listener against nginx 1.22's `stream` UDP
proxy (the rival's column says HAProxy in the table: HAProxy 2.6 has no UDP proxy), 64 flows with
one datagram in flight each, answered by nginx `return` backends (loadgen.py udp); `UDPRoute idle
flows` opens 5,000 flows and reads the proxy's RSS (master and workers) before and while they
are held, per flow. For these the proxy's CPU is that of the process and its children (nginx's
worker). "req/s" is connections a second for TLS and datagram round trips (one relayed each way)
for UDP.

`--charts DIR` writes PNGs of the medians (rate and CPU per request side by side, the
switchyard/HAProxy ratios, latency percentiles) with matplotlib, or says in one line that it is
missing; `--json FILE` keeps every run's figures, and `--replot FILE --charts DIR` draws the
charts again from them. The load average is printed at the start and the end, and heads the
table.

`--threads N` (issue #14 §5, more than one core): both proxies run N threads (switchyard
`--threads N`, HAProxy `nbthread N`), wrk runs N threads, and nothing is pinned: the proxy, the
load generator and the backends share every core. Besides the proxy's own CPU per request,
`box_cpu_per_100k` is the whole machine's busy CPU time per 100k requests (/proc/stat: every
process, so load generator and backends too); read the proxies against each other in the same
run, and against a `--threads 1` run for the cost of the second thread.

Usage: python3 benches/loadtest/run.py [--reps 3] [--duration 8] [--switchyard PATH] [--only NAMES]
       [--charts DIR] [--json FILE];  python3 benches/loadtest/run.py --replot FILE --charts DIR
Needs: haproxy, nginx with its stream module (libnginx-mod-stream), wrk (not for the Gateway API
scenarios), h2load (nghttp2-client), taskset, curl, openssl; a release build of
switchyard (`cargo build --release`) and, for gRPC, of examples/grpc_bench_backend.rs
(`cargo build --release --example grpc_bench_backend`), which it builds if missing; matplotlib
for `--charts` (`pip install matplotlib`).
"""

import argparse
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
BACKEND_PORTS = [18081, 18082, 18083]
# The same nginx servers behind TLS (certificate signed by a CA made in the temporary directory).
TLS_BACKEND_PORTS = [18084, 18085, 18086]
# examples/grpc_bench_backend.rs: one process, h2c, one unary method.
GRPC_PORTS = [18087, 18088, 18089]
HAPROXY_PORT = 18090
# HAProxy's HTTP/2 frontends (switchyard takes h2c on its HTTP port and h2 on its TLS port).
HAPROXY_H2C_PORT = 18094
HAPROXY_H2_PORT = 18095
SWITCHYARD_PORT = 18091
# Gateway API scenarios (issue #39): a TLS listener in Passthrough mode and a UDP listener on
# ports of their own (HAProxy's `mode tcp` frontend and nginx's `stream` UDP proxy take the
# same ports, one proxy at a time), and three UDP answering backends (nginx `stream`, `return`).
GW_TLS_PORT = 18100
UDP_PORT = 18101
UDP_BACKEND_PORTS = [18102, 18103, 18104]
# The host names the Gateway's listeners and routes take.
GRPC_HOST = "grpc.bench"
PASS_HOST = "pass.bench"
SWITCHYARD_ADMIN = 18092
SWITCHYARD_STATS = 18093
# Only one proxy runs at a time, so both use these.
HTTPS_PORT = 18097
TCP_PORT = 18098
PROXY_CORE = "0"
LOAD_CORE = "1"
# `--threads N` (N > 1): every process may run on any core ("no pinning"), and CPU per request is
# also read for the whole machine (/proc/stat), load generator and backends included.
ALL_CORES = ",".join(str(c) for c in sorted(os.sched_getaffinity(0)))
THREADS = 1
CLK_TCK = os.sysconf("SC_CLK_TCK")

WRK_LUA = """
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format("RESULT %d %d %d %d %d %d %d\\n",
    summary.requests, summary.duration, latency:percentile(50), latency:percentile(99),
    latency:percentile(99.9), e.connect + e.read + e.write + e.timeout, e.status))
end
"""

# nginx's `stream` module (Debian: libnginx-mod-stream) for the UDP backends and the UDP rival.
NGINX_STREAM_MODULE = "/usr/lib/nginx/modules/ngx_stream_module.so"

NGINX_CONF = """
load_module {stream_module};
worker_processes 1;
daemon off;
pid {dir}/nginx.pid;
error_log {dir}/nginx-error.log crit;
events {{ worker_connections 4096; }}
http {{
  access_log off;
  keepalive_requests 1000000;
  keepalive_timeout 120s;
  ssl_certificate {dir}/backend-crt.pem;
  ssl_certificate_key {dir}/backend-key.pem;
  {servers}
}}
stream {{
  {udp_servers}
}}
"""

# The rival of switchyard's Gateway UDP listener: nginx 1.22's `stream` UDP proxy, one worker
# on the proxy core, the same three backends picked by a hash of the client's address and port
# (switchyard: rendezvous over the same), a session held 60 s without a datagram
# (switchyard's --udp-idle-timeout default), as many answers as the backend sends.
NGINX_UDP_CONF = """
load_module {stream_module};
worker_processes 1;
daemon off;
pid {dir}/nginx-udp.pid;
error_log {dir}/nginx-udp-error.log crit;
events {{ worker_connections 20000; }}
stream {{
  upstream udp_backends {{
    hash $remote_addr$remote_port consistent;
    {servers}
  }}
  server {{
    listen 127.0.0.1:{port} udp;
    proxy_pass udp_backends;
    proxy_timeout 60s;
  }}
}}
"""


class Procs:
    """Every process started, so that all of them are stopped whatever happens."""

    def __init__(self):
        self.procs = []

    def start(self, cmd, core, log):
        p = subprocess.Popen(["taskset", "-c", core] + cmd, stdout=log, stderr=subprocess.STDOUT,
                             stdin=subprocess.DEVNULL, start_new_session=True)
        self.procs.append(p)
        return p

    def stop(self, p):
        if p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        p.wait(timeout=10)
        if p in self.procs:
            self.procs.remove(p)

    def stop_all(self):
        for p in list(self.procs):
            self.stop(p)


def wait_port(port, timeout=20.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        with socket.socket() as s:
            s.settimeout(0.2)
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise RuntimeError(f"nothing listens on 127.0.0.1:{port} after {timeout}s")


def wait_http_ok(url, timeout=20.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        r = subprocess.run(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "--max-time", "1", url],
                           capture_output=True, text=True)
        if r.stdout == "200":
            return
        time.sleep(0.1)
    raise RuntimeError(f"{url} did not answer 200 within {timeout}s")


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    # utime and stime are fields 14 and 15 of the whole line, 12 and 13 after the comm field.
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def tree_pids(pid):
    """`pid` and its children (nginx's workers are children of its master)."""
    pids = [pid]
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
                        pids.append(int(d))
            except (OSError, IndexError, ValueError):
                pass
    return pids


def tree_cpu_seconds(pid):
    return sum(cpu_seconds(p) for p in tree_pids(pid))


def box_cpu_seconds():
    """Busy CPU time of the whole machine (every core, every process): user, nice, system, irq,
    softirq and steal from /proc/stat."""
    with open("/proc/stat") as f:
        fields = f.readline().split()[1:]
    user, nice, system, _idle, _iowait, irq, softirq, steal = map(int, fields[:8])
    return (user + nice + system + irq + softirq + steal) / CLK_TCK


def peak_rss_mib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024.0
    return 0.0


def run_wrk(url, duration, conns, close, lua):
    cmd = ["taskset", "-c", LOAD_CORE, "wrk", f"-t{THREADS}", f"-c{conns}", f"-d{duration}s", "--timeout", "5s",
           "-s", lua, url]
    if close:
        cmd[5:5] = ["-H", "Connection: close"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=duration + 60).stdout
    for line in out.splitlines():
        if line.startswith("RESULT "):
            req, dur_us, p50, p99, p999, errors, non2xx = map(int, line.split()[1:])
            return {"requests": req, "rps": req / (dur_us / 1e6), "p50_ms": p50 / 1000, "p99_ms": p99 / 1000,
                    "p999_ms": p999 / 1000, "errors": errors + non2xx}
    raise RuntimeError(f"wrk printed no result:\n{out}")


def run_h2load(url, duration, opts, logdir):
    """h2load: HTTP/1 (`--h1`) or HTTP/2 (ALPN h2 over TLS, prior knowledge in clear), `clients`
    connections with `streams` requests in flight on each, at `rps` per client if given (else as
    fast as it goes); a gRPC unary call (POST of `data`) with `grpc`. Latency percentiles come
    from h2load's per-request log."""
    log = os.path.join(logdir, "h2load.log")
    cmd = ["taskset", "-c", LOAD_CORE, "h2load", f"-c{opts['clients']}", f"-m{opts.get('streams', 1)}",
           f"-D{duration}", f"--log-file={log}"]
    if opts.get("h1", True):
        cmd.append("--h1")
    if opts.get("rps"):
        cmd.append(f"--rps={opts['rps']}")
    if opts.get("grpc"):
        cmd += ["-d", opts["data"], "-H", "content-type: application/grpc", "-H", "te: trailers"]
    if url_host(url) != "127.0.0.1":
        cmd.append(f"--connect-to=127.0.0.1:{url_port(url)}")
    cmd.append(url)
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=duration + 60).stdout
    lat = []
    errors = 0
    with open(log) as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 3:
                status, micros = int(parts[1]), int(parts[2])
                lat.append(micros)
                if status != 200:
                    errors += 1
    os.remove(log)
    for line in out.splitlines():
        if line.startswith("requests: "):
            # "requests: N total, N started, N done, N succeeded, N failed, N errored, N timeout"
            words = line.replace(",", "").split()
            errors += int(words[words.index("errored") - 1]) + int(words[words.index("timeout") - 1])
    if not lat:
        raise RuntimeError(f"h2load logged no request:\n{out}")
    lat.sort()
    pick = lambda q: lat[min(len(lat) - 1, int(q * len(lat)))] / 1000
    return {"requests": len(lat), "rps": len(lat) / duration, "p50_ms": pick(0.5), "p99_ms": pick(0.99),
            "p999_ms": pick(0.999), "errors": errors}


def grpc_message(path, text):
    """A gRPC request body: one uncompressed length-prefixed message `Msg { string text = 1 }`."""
    raw = text.encode()
    assert len(raw) < 128  # one-byte varint length
    msg = bytes([0x0A, len(raw)]) + raw
    with open(path, "wb") as f:
        f.write(bytes([0]) + len(msg).to_bytes(4, "big") + msg)


SCENARIOS = [
    # (name, kind, options, frontend)
    ("keep-alive", "wrk", {"conns": 64, "close": False}, "http"),
    ("new connection per request", "wrk", {"conns": 64, "close": True}, "http"),
    ("fixed 5k req/s (latency)", "h2load", {"clients": 10, "rps": 500}, "http"),
    ("TLS keep-alive", "wrk", {"conns": 64, "close": False}, "https"),
    ("TLS new connection per request", "wrk", {"conns": 64, "close": True}, "https"),
    ("raw TCP (HTTP keep-alive through it)", "wrk", {"conns": 64, "close": False}, "tcp"),
    ("keep-alive under 100 table swaps/s", "swap", {"conns": 64, "close": False, "rate": 100}, "http"),
    # HTTP/2 clients (issue #14), backends over HTTP/1 as above.
    ("HTTP/2 TLS -c16 -m1", "h2load", {"clients": 16, "streams": 1, "h1": False}, "h2"),
    ("HTTP/2 TLS -c16 -m10", "h2load", {"clients": 16, "streams": 10, "h1": False}, "h2"),
    ("HTTP/2 TLS -c16 -m100", "h2load", {"clients": 16, "streams": 100, "h1": False}, "h2"),
    # 500 req/s: unsaturated on the loaded 2-core machine, where 16 HTTP/2 streams top out near
    # 1,300 req/s (its HTTP/1 counterpart above runs 5k req/s on a quiet machine).
    ("HTTP/2 TLS fixed 500 req/s (latency)", "h2load", {"clients": 10, "rps": 50, "h1": False}, "h2"),
    ("h2c -c16 -m1", "h2load", {"clients": 16, "streams": 1, "h1": False}, "h2c"),
    ("h2c -c16 -m10", "h2load", {"clients": 16, "streams": 10, "h1": False}, "h2c"),
    ("h2c -c16 -m100", "h2load", {"clients": 16, "streams": 100, "h1": False}, "h2c"),
    # One client connection carrying every stream, as from a CDN or an upstream proxy that
    # multiplexes: with several proxy threads, can its streams use more than one?
    ("h2c -c1 -m100 (one busy connection)", "h2load", {"clients": 1, "streams": 100, "h1": False}, "h2c"),
    # gRPC unary over h2c on both sides (issue #17), to examples/grpc_bench_backend.rs.
    ("gRPC unary h2c -c16 -m10", "h2load", {"clients": 16, "streams": 10, "h1": False, "grpc": True}, "grpc"),
    # HTTP/1 keep-alive clients, backends over TLS with connection reuse (issue #17); read
    # against the plain keep-alive run of the same proxy and repetition (`cpu_vs_keep_alive`).
    ("HTTPS to backends (keep-alive)", "wrk", {"conns": 64, "close": False, "baseline": "keep-alive"},
     "https-backend"),
    # The same at a fixed, unsaturated rate, read against the plain fixed-rate run: at saturation
    # the proxy's wakeups carry as many requests as the load core (wrk and the TLS backends on it)
    # lets queue up, which differs between the two backends' speeds; at one rate both carry alike.
    ("HTTPS to backends (fixed 5k req/s)", "h2load", {"clients": 10, "rps": 500,
                                                     "baseline": "fixed 5k req/s (latency)"},
     "https-backend"),
    # Gateway API kinds (issue #39), switchyard configured by the Gateway `bench` in
    # manifests.yaml, the rivals by haproxy.cfg and NGINX_UDP_CONF.
    # Does a gRPC unary call routed by a GRPCRoute (host grpc.bench, exact method
    # bench.Echo/Say, an h2c Service port) cost no more than HAProxy's `proto h2` with the
    # same host and path rule? h2load over h2c to grpc.bench (--connect-to 127.0.0.1).
    ("GRPCRoute gRPC unary -c16 -m10", "h2load",
     {"clients": 16, "streams": 10, "h1": False, "grpc": True}, "gw-grpc"),
    # How many new TLS connections a second pass through a Gateway TLS listener in Passthrough
    # mode with a TLSRoute for pass.bench, against HAProxy `mode tcp` routing by
    # `req.ssl_sni`, and at what CPU each? Each connection: a full handshake with an nginx
    # TLS backend (ECDSA P-256), one GET, the client closes (loadgen.py tls-new, 8 processes).
    ("TLSRoute passthrough new connections", "tls-new", {"procs": 8}, "gw-tls"),
    # How many datagrams a second does a Gateway UDP listener with a UDPRoute relay, against
    # nginx 1.22's `stream` UDP proxy (NGINX_UDP_CONF; its row's HAProxy column is nginx), and
    # at what CPU each? 64 flows, one 32-byte datagram in flight each, answered by nginx
    # `return` backends (loadgen.py udp); a "request" is one datagram and its answer.
    ("UDPRoute datagrams (rival: nginx stream)", "udp", {"flows": 64}, "gw-udp"),
    # What does an idle UDP flow cost in memory? 5,000 flows (one datagram and its answer
    # each, then silence) are opened and held; the proxy's RSS after them less before, per flow.
    ("UDPRoute idle flows (rival: nginx stream)", "udp-idle", {"flows": 5000}, "gw-udp"),
]
SWAP_BASELINE = "keep-alive"
FAKE_API_PORT = 18099
GRPC_PATH = "/bench.Echo/Say"
# The Service name switchyard sends as SNI to TLS backends is `<name>.<namespace>.svc`.
TLS_BACKEND_NAME = "https-backends.default.svc"


def url_for(frontend, target, http_port):
    """Where the load generator goes for a scenario's frontend; `target` is haproxy, switchyard or
    direct (a backend itself, None where that has no meaning)."""
    if target == "direct":
        return {
            "http": f"http://127.0.0.1:{BACKEND_PORTS[0]}/",
            "grpc": f"http://127.0.0.1:{GRPC_PORTS[0]}{GRPC_PATH}",
            "https-backend": f"https://127.0.0.1:{TLS_BACKEND_PORTS[0]}/",
            "gw-grpc": f"http://127.0.0.1:{GRPC_PORTS[0]}{GRPC_PATH}",
            "gw-tls": f"https://{PASS_HOST}:{TLS_BACKEND_PORTS[0]}/",
            "gw-udp": f"udp://127.0.0.1:{UDP_BACKEND_PORTS[0]}",
        }.get(frontend)
    h2c_port = HAPROXY_H2C_PORT if target == "haproxy" else http_port
    h2_port = HAPROXY_H2_PORT if target == "haproxy" else HTTPS_PORT
    return {
        "http": f"http://127.0.0.1:{http_port}/svc/",
        "https": f"https://127.0.0.1:{HTTPS_PORT}/svc-tls/",
        "tcp": f"http://127.0.0.1:{TCP_PORT}/",
        "h2": f"https://127.0.0.1:{h2_port}/svc-tls/",
        "h2c": f"http://127.0.0.1:{h2c_port}/svc/",
        "grpc": f"http://127.0.0.1:{h2c_port}{GRPC_PATH}",
        "https-backend": f"http://127.0.0.1:{http_port}/https-backends/",
        # Not resolved: the load generators connect to 127.0.0.1 and send the name.
        "gw-grpc": f"http://{GRPC_HOST}:{h2c_port}{GRPC_PATH}",
        "gw-tls": f"https://{PASS_HOST}:{GW_TLS_PORT}/",
        "gw-udp": f"udp://127.0.0.1:{UDP_PORT}",
    }[frontend]


def url_port(url):
    return int(url.rsplit(":", 1)[1].split("/")[0])


def url_host(url):
    return url.split("://", 1)[1].split("/")[0].rsplit(":", 1)[0]


def udp_ask(port, timeout=1.0):
    """One datagram to 127.0.0.1:port; its answer, or None."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.settimeout(timeout)
        try:
            s.sendto(b"check", ("127.0.0.1", port))
            return s.recv(2048)
        except OSError:
            return None


def check_answer(frontend, url, tmp):
    """One request the way the scenario sends them, before measuring: HTTP/2 must really be
    HTTP/2, and a gRPC call must end with `grpc-status: 0` (h2load counts HTTP statuses only)."""
    if frontend == "gw-udp":
        answer = udp_ask(url_port(url), timeout=3.0)
        if answer != b"ok":
            raise RuntimeError(f"{url} ({frontend}) answered {answer!r}, not b'ok'")
        return
    cmd = ["curl", "-s", "-k", "--max-time", "5", "-o", "/dev/null", "-D", "-", "-w", "VERSION %{http_version}\n"]
    if url_host(url) != "127.0.0.1":
        cmd += ["--connect-to", f"{url_host(url)}:{url_port(url)}:127.0.0.1:{url_port(url)}"]
    if frontend == "gw-grpc":
        frontend = "grpc"
    if frontend in ("h2c", "grpc"):
        cmd.append("--http2-prior-knowledge")
    elif frontend == "h2":
        cmd.append("--http2")
    if frontend == "grpc":
        cmd += ["--data-binary", "@" + os.path.join(tmp, "grpc-request.bin"),
                "-H", "content-type: application/grpc", "-H", "te: trailers"]
    out = subprocess.run(cmd + [url], capture_output=True, text=True, timeout=30).stdout.lower()
    ok = " 200" in out.splitlines()[0] if out else False
    if frontend in ("h2", "h2c", "grpc"):
        ok = ok and "version 2" in out
    if frontend == "grpc":
        ok = ok and "grpc-status: 0" in out
    if not ok:
        raise RuntimeError(f"{url} ({frontend}) did not answer as it should:\n{out}")


def run_loadgen(mode, url, duration, opts):
    """benches/loadtest/loadgen.py on the load core: TLS new connections or UDP datagrams."""
    cmd = ["taskset", "-c", LOAD_CORE, sys.executable, os.path.join(HERE, "loadgen.py"), mode,
           "--port", str(url_port(url)), "--duration", str(duration)]
    if mode == "tls-new":
        cmd += ["--sni", url_host(url), "--procs", str(opts["procs"])]
    else:
        cmd += ["--flows", str(opts["flows"])]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=duration + 60).stdout
    for line in out.splitlines():
        if line.startswith("RESULT "):
            ops, took, p50, p99, p999, errors = line.split()[1:]
            return {"requests": int(ops), "rps": int(ops) / float(took), "p50_ms": int(p50) / 1000,
                    "p99_ms": int(p99) / 1000, "p999_ms": int(p999) / 1000, "errors": int(errors)}
    raise RuntimeError(f"loadgen.py {mode} printed no result:\n{out}")


def rss_kib(pids, field="VmRSS:"):
    total = 0
    for pid in pids:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(field):
                    total += int(line.split()[1])
    return total


def measure_idle_flows(opts, url, pid, duration):
    """The proxy's RSS (master and workers) before and while `flows` idle UDP flows are open."""
    time.sleep(1.0)
    before = rss_kib(tree_pids(pid))
    gen = subprocess.Popen(["taskset", "-c", LOAD_CORE, sys.executable, os.path.join(HERE, "loadgen.py"), "udp-idle",
                            "--port", str(url_port(url)), "--flows", str(opts["flows"]),
                            "--duration", str(duration + 120)],
                           stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        line = gen.stdout.readline().split()
        if len(line) != 3 or line[0] != "OPEN":
            raise RuntimeError(f"loadgen.py udp-idle: {line}")
        answered = int(line[1])
        time.sleep(1.0)
        after = rss_kib(tree_pids(pid))
        gen.stdin.close()
        gen.wait(timeout=30)
    finally:
        if gen.poll() is None:
            os.killpg(gen.pid, signal.SIGKILL)
            gen.wait(timeout=10)
    return {"flows": answered, "rss_before_mib": before / 1024, "rss_after_mib": after / 1024,
            "kib_per_flow": (after - before) / max(answered, 1), "errors": opts["flows"] - answered}


def measure(kind, opts, url, duration, pid, tmp, lua):
    before = tree_cpu_seconds(pid) if pid else 0.0
    box_before = box_cpu_seconds()
    if kind == "wrk":
        r = run_wrk(url, duration, opts["conns"], opts["close"], lua)
    elif kind in ("tls-new", "udp"):
        r = run_loadgen(kind, url, duration, opts)
    else:
        if opts.get("grpc"):
            opts = dict(opts, data=os.path.join(tmp, "grpc-request.bin"))
        r = run_h2load(url, duration, opts, tmp)
    if pid:
        r["cpu_per_100k"] = (tree_cpu_seconds(pid) - before) / max(r["requests"], 1) * 100_000
        r["rss_mib"] = max(peak_rss_mib(p) for p in tree_pids(pid))
        r["box_cpu_per_100k"] = (box_cpu_seconds() - box_before) / max(r["requests"], 1) * 100_000
    return r


def start_proxy(name, procs, tmp, switchyard, logs, frontend=None):
    if name == "haproxy" and frontend == "gw-udp":
        # The UDP rival is nginx's stream proxy (HAProxy 2.6 has no UDP proxy).
        p = procs.start(["nginx", "-c", os.path.join(tmp, "nginx-udp.conf")], PROXY_CORE, logs)
        deadline = time.time() + 20
        while udp_ask(UDP_PORT, timeout=0.2) != b"ok":
            if time.time() > deadline:
                raise RuntimeError("nginx's UDP proxy does not answer")
        return p, None
    if name == "haproxy":
        p = procs.start(["haproxy", "-db", "-f", os.path.join(tmp, "haproxy.cfg")], PROXY_CORE, logs)
        port = HAPROXY_PORT
    else:
        p = procs.start([switchyard, "--manifests", os.path.join(tmp, "manifests.yaml"), "--bind-address",
                         "127.0.0.1", "--http-port", str(SWITCHYARD_PORT), "--admin-port", str(SWITCHYARD_ADMIN),
                         "--stats-port", str(SWITCHYARD_STATS), "--https-port", str(HTTPS_PORT),
                         "--ssl-cert", os.path.join(tmp, "cert.pem"), "--tcp-services", f"tcpsvc:{TCP_PORT}",
                         "--backend-ca-file", os.path.join(tmp, "ca.pem"), "--threads", str(THREADS)], PROXY_CORE, logs)
        port = SWITCHYARD_PORT
    wait_http_ok(f"http://127.0.0.1:{port}/svc/")
    wait_port(HTTPS_PORT)
    wait_port(TCP_PORT)
    wait_port(GW_TLS_PORT)
    if name == "haproxy":
        wait_port(HAPROXY_H2C_PORT)
        wait_port(HAPROXY_H2_PORT)
    return p, port


def metric_value(name):
    """One unlabelled series from switchyard's /metrics."""
    out = subprocess.run(["curl", "-s", "--max-time", "2", f"http://127.0.0.1:{SWITCHYARD_ADMIN}/metrics"],
                         capture_output=True, text=True).stdout
    for line in out.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise RuntimeError(f"{name} not in /metrics")


def run_swap_scenario(opts, duration, procs, tmp, switchyard, logs, lua):
    """Keep-alive wrk against switchyard watching fake_api.py, which churns endpoints."""
    api = subprocess.Popen(["taskset", "-c", LOAD_CORE, sys.executable, os.path.join(HERE, "fake_api.py"),
                            "--port", str(FAKE_API_PORT), "--rate", str(opts["rate"]),
                            "--backends", ",".join(map(str, BACKEND_PORTS))],
                           stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=logs, text=True,
                           start_new_session=True)
    procs.procs.append(api)
    try:
        if api.stdout.readline().strip() != "LISTENING":
            raise RuntimeError("fake_api.py did not start")
        kubeconfig = os.path.join(tmp, "kubeconfig")
        with open(kubeconfig, "w") as f:
            f.write("apiVersion: v1\nkind: Config\ncurrent-context: fake\n"
                    f"clusters:\n- name: fake\n  cluster:\n    server: http://127.0.0.1:{FAKE_API_PORT}\n"
                    "contexts:\n- name: fake\n  context:\n    cluster: fake\n    user: fake\n"
                    "    namespace: default\nusers:\n- name: fake\n  user:\n    token: fake-token\n")
        p = procs.start([switchyard, "--kubeconfig", kubeconfig, "--bind-address", "127.0.0.1",
                         "--http-port", str(SWITCHYARD_PORT), "--admin-port", str(SWITCHYARD_ADMIN),
                         "--stats-port", str(SWITCHYARD_STATS), "--threads", str(THREADS),
                         "--watch-max-wait", "10ms"], PROXY_CORE, logs)
        try:
            wait_http_ok(f"http://127.0.0.1:{SWITCHYARD_PORT}/svc/")
            swaps_before = metric_value("switchyard_table_swaps_total")
            api.stdin.write("start\n")
            api.stdin.flush()
            before = cpu_seconds(p.pid)
            r = run_wrk(f"http://127.0.0.1:{SWITCHYARD_PORT}/svc/", duration, opts["conns"], opts["close"], lua)
            r["cpu_per_100k"] = (cpu_seconds(p.pid) - before) / max(r["requests"], 1) * 100_000
            r["rss_mib"] = peak_rss_mib(p.pid)
            api.stdin.write("stop\n")
            api.stdin.flush()
            line = api.stdout.readline().split()
            r["api_changes"] = float(line[1]) if len(line) == 2 and line[0] == "CHANGES" else float("nan")
            r["swaps"] = metric_value("switchyard_table_swaps_total") - swaps_before
            r["swaps_per_s"] = r["swaps"] / duration
            return r
        finally:
            procs.stop(p)
    finally:
        procs.stop(api)


def median(xs):
    return statistics.median(xs) if xs else float("nan")


def load_average():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def make_certificates(tmp):
    """The proxies' certificate (ECDSA P-256, chain and key in one PEM, the form both read), and
    for the TLS backends a CA and a server certificate it signed, for 127.0.0.1 and the Service
    name switchyard sends as SNI."""
    def run(*cmd):
        subprocess.run(cmd, check=True, capture_output=True, cwd=tmp)
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    run("openssl", "req", "-x509", *ec, "-keyout", "key.pem", "-out", "crt.pem", "-days", "2", "-subj", "/CN=localhost")
    with open(os.path.join(tmp, "cert.pem"), "w") as out:
        for part in ("crt.pem", "key.pem"):
            with open(os.path.join(tmp, part)) as f:
                out.write(f.read())
    run("openssl", "req", "-x509", *ec, "-keyout", "ca-key.pem", "-out", "ca.pem", "-days", "2",
        "-subj", "/CN=switchyard loadtest backend CA", "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign,cRLSign")
    run("openssl", "req", "-new", *ec, "-keyout", "backend-key.pem", "-out", "backend.csr",
        "-subj", f"/CN={TLS_BACKEND_NAME}")
    with open(os.path.join(tmp, "backend-ext.cnf"), "w") as f:
        f.write(f"subjectAltName=DNS:{TLS_BACKEND_NAME},IP:127.0.0.1\nbasicConstraints=CA:FALSE\n"
                "keyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\n")
    run("openssl", "x509", "-req", "-in", "backend.csr", "-CA", "ca.pem", "-CAkey", "ca-key.pem",
        "-CAcreateserial", "-days", "2", "-out", "backend-crt.pem", "-extfile", "backend-ext.cnf")


def fill(template, tmp):
    out = (template.replace("@PORT@", str(HAPROXY_PORT)).replace("@NBTHREAD@", str(THREADS)).replace("@HTTPS_PORT@", str(HTTPS_PORT))
           .replace("@TCP_PORT@", str(TCP_PORT)).replace("@CERT@", os.path.join(tmp, "cert.pem"))
           .replace("@H2C_PORT@", str(HAPROXY_H2C_PORT)).replace("@H2_PORT@", str(HAPROXY_H2_PORT))
           .replace("@CA@", os.path.join(tmp, "ca.pem")).replace("@TLS_BACKEND_NAME@", TLS_BACKEND_NAME)
           .replace("@SY_HTTP_PORT@", str(SWITCHYARD_PORT)).replace("@GW_TLS_PORT@", str(GW_TLS_PORT))
           .replace("@UDP_PORT@", str(UDP_PORT)).replace("@GRPC_HOST@", GRPC_HOST)
           .replace("@PASS_HOST@", PASS_HOST))
    for prefix, ports in (("BACKEND", BACKEND_PORTS), ("TLS_BACKEND", TLS_BACKEND_PORTS), ("GRPC", GRPC_PORTS),
                          ("UDP_BACKEND", UDP_BACKEND_PORTS)):
        for i, p in enumerate(ports):
            out = out.replace(f"@{prefix}{i + 1}@", str(p))
    return out


METRICS = [("rps", "{:.0f}"), ("p50_ms", "{:.2f}"), ("p99_ms", "{:.2f}"), ("p999_ms", "{:.2f}"),
           ("cpu_per_100k", "{:.2f}"), ("box_cpu_per_100k", "{:.2f}"), ("rss_mib", "{:.1f}"),
           ("errors", "{:.0f}")]
SWAP_METRICS = [("p99_vs_no_swap", "{:.2f}x"), ("api_changes", "{:.0f}"), ("swaps", "{:.0f}"),
                ("swaps_per_s", "{:.0f}")]
BASELINE_METRICS = [("cpu_vs_keep_alive", "{:.2f}x")]
IDLE_METRICS = [("flows", "{:.0f}"), ("rss_before_mib", "{:.1f}"), ("rss_after_mib", "{:.1f}"),
                ("kib_per_flow", "{:.2f}"), ("errors", "{:.0f}")]


def medians(results, name, target, metric):
    return median([r[metric] for r in results.get((name, target), []) if metric in r])


def write_charts(charts, scenarios, results, header):
    """PNG charts of the medians: rate and CPU per request side by side, the ratios, and latency
    percentiles. One line and no charts when matplotlib is missing."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("charts: matplotlib is not installed (pip install matplotlib); no charts written")
        return
    os.makedirs(charts, exist_ok=True)
    header = textwrap.fill(header, 130)
    both = [n for n, kind, _, _ in scenarios
            if kind not in ("swap", "udp-idle") and results.get((n, "haproxy")) and results.get((n, "switchyard"))]
    if not both:
        return
    colors = {"haproxy": "#7f7f7f", "switchyard": "#1f77b4"}
    labels = {"haproxy": "HAProxy 2.6", "switchyard": "switchyard"}
    ys = range(len(both))
    h = 0.38

    fig, axes = plt.subplots(1, 2, figsize=(13, 0.45 * len(both) + 1.8), sharey=True)
    for ax, metric, title in ((axes[0], "rps", "requests/s (more is better)"),
                              (axes[1], "cpu_per_100k", "proxy CPU seconds per 100k requests (less is better)")):
        for k, target in enumerate(["haproxy", "switchyard"]):
            vals = [medians(results, n, target, metric) for n in both]
            ax.barh([y + (k - 0.5) * h for y in ys], vals, height=h, color=colors[target], label=labels[target])
        ax.set_title(title, fontsize=10)
        ax.grid(axis="x", alpha=0.3)
    axes[0].set_yticks(list(ys))
    axes[0].set_yticklabels(both, fontsize=9)
    axes[0].invert_yaxis()
    axes[0].legend(loc="lower right", fontsize=8)
    fig.suptitle(header, fontsize=9)
    fig.tight_layout()
    fig.savefig(os.path.join(charts, "loadtest-rate-cpu.png"), dpi=110)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(9, 0.45 * len(both) + 1.8))
    for k, (metric, label, color) in enumerate((("rps", "requests/s", "#2ca02c"),
                                                 ("cpu_per_100k", "CPU per request", "#d62728"))):
        vals = [medians(results, n, "switchyard", metric) / medians(results, n, "haproxy", metric) for n in both]
        ax.barh([y + (k - 0.5) * h for y in ys], vals, height=h, color=color, label=label)
        for y, v in zip(ys, vals):
            ax.text(v, y + (k - 0.5) * h, f" {v:.2f}x", va="center", fontsize=7)
    ax.axvline(1.0, color="black", linewidth=0.8)
    ax.set_yticks(list(ys))
    ax.set_yticklabels(both, fontsize=9)
    ax.invert_yaxis()
    ax.set_title("switchyard / HAProxy (rate: more is better; CPU per request: less is better)", fontsize=10)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)
    ax.grid(axis="x", alpha=0.3)
    fig.suptitle(header, fontsize=9)
    fig.tight_layout()
    fig.savefig(os.path.join(charts, "loadtest-ratios.png"), dpi=110)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(11, 0.6 * len(both) + 1.8))
    hh = 0.13
    series = [(t, m) for t in ["haproxy", "switchyard"] for m in ["p50_ms", "p99_ms", "p999_ms"]]
    shades = {"p50_ms": 1.0, "p99_ms": 0.65, "p999_ms": 0.35}
    for k, (target, metric) in enumerate(series):
        vals = [medians(results, n, target, metric) for n in both]
        ax.barh([y + (k - 2.5) * hh for y in ys], vals, height=hh, color=colors[target], alpha=shades[metric],
                label=f"{labels[target]} {metric[:-3].replace('p999', 'p99.9')}")
    ax.set_xscale("log")
    ax.set_yticks(list(ys))
    ax.set_yticklabels(both, fontsize=9)
    ax.invert_yaxis()
    ax.set_xlabel("latency, ms (log scale; less is better)")
    ax.set_title("latency percentiles", fontsize=10)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)
    ax.grid(axis="x", alpha=0.3, which="both")
    fig.suptitle(header, fontsize=9)
    fig.tight_layout()
    fig.savefig(os.path.join(charts, "loadtest-latency.png"), dpi=110)
    plt.close(fig)
    print(f"charts: loadtest-rate-cpu.png, loadtest-ratios.png, loadtest-latency.png in {charts}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--duration", type=int, default=8, help="seconds per run")
    ap.add_argument("--switchyard", default=os.path.join(ROOT, "target", "release", "switchyard"))
    ap.add_argument("--grpc-backend", default=os.path.join(ROOT, "target", "release", "examples", "grpc_bench_backend"),
                    help="examples/grpc_bench_backend.rs built with --release (built if missing and needed)")
    ap.add_argument("--only", help="comma-separated scenario names to run")
    ap.add_argument("--charts", metavar="DIR", help="write PNG charts of the medians into DIR (needs matplotlib)")
    ap.add_argument("--json", metavar="FILE", help="write every run's figures as JSON into FILE")
    ap.add_argument("--replot", metavar="FILE", help="draw --charts from a --json FILE instead of running")
    ap.add_argument("--threads", type=int, default=1,
                    help="proxy threads (switchyard --threads, HAProxy nbthread); above 1 nothing is "
                         "pinned to a core (default 1: the proxy on core 0, the rest on core 1)")
    ap.add_argument("--port-offset", type=int, default=0,
                    help="added to every port used (to run beside another copy of this script)")
    args = ap.parse_args()
    if args.replot:
        with open(args.replot) as f:
            saved = json.load(f)
        results = {(r["scenario"], r["target"]): r["runs"] for r in saved["runs"]}
        write_charts(args.charts or ".", [s for s in SCENARIOS if any(k[0] == s[0] for k in results)], results,
                     saved["header"])
        return
    global BACKEND_PORTS, HAPROXY_PORT, SWITCHYARD_PORT, SWITCHYARD_ADMIN, SWITCHYARD_STATS, HTTPS_PORT, TCP_PORT
    global FAKE_API_PORT, TLS_BACKEND_PORTS, GRPC_PORTS, HAPROXY_H2C_PORT, HAPROXY_H2_PORT
    global THREADS, PROXY_CORE, LOAD_CORE, GW_TLS_PORT, UDP_PORT, UDP_BACKEND_PORTS
    if args.threads < 1:
        sys.exit("loadtest: --threads must be at least 1")
    THREADS = args.threads
    if THREADS > 1:
        PROXY_CORE = LOAD_CORE = ALL_CORES
    o = args.port_offset
    BACKEND_PORTS = [p + o for p in BACKEND_PORTS]
    TLS_BACKEND_PORTS = [p + o for p in TLS_BACKEND_PORTS]
    GRPC_PORTS = [p + o for p in GRPC_PORTS]
    HAPROXY_PORT, SWITCHYARD_PORT, SWITCHYARD_ADMIN, SWITCHYARD_STATS = (
        HAPROXY_PORT + o, SWITCHYARD_PORT + o, SWITCHYARD_ADMIN + o, SWITCHYARD_STATS + o)
    HTTPS_PORT, TCP_PORT, FAKE_API_PORT = HTTPS_PORT + o, TCP_PORT + o, FAKE_API_PORT + o
    HAPROXY_H2C_PORT, HAPROXY_H2_PORT = HAPROXY_H2C_PORT + o, HAPROXY_H2_PORT + o
    GW_TLS_PORT, UDP_PORT = GW_TLS_PORT + o, UDP_PORT + o
    UDP_BACKEND_PORTS = [p + o for p in UDP_BACKEND_PORTS]
    only_names = args.only.split(",") if args.only else None
    needs_wrk = any(kind in ("wrk", "swap") for name, kind, _, _ in SCENARIOS
                    if not only_names or name in only_names)
    for tool in ["haproxy", "nginx", "h2load", "taskset", "curl", "openssl"] + (["wrk"] if needs_wrk else []):
        if not shutil.which(tool):
            sys.exit(f"loadtest: {tool} is not installed (apt-get install haproxy nginx-light wrk nghttp2-client curl openssl)")
    if not os.path.exists(NGINX_STREAM_MODULE):
        sys.exit(f"loadtest: {NGINX_STREAM_MODULE} is missing (apt-get install libnginx-mod-stream)")
    only = args.only.split(",") if args.only else None
    if only:
        unknown = [n for n in only if n not in [s[0] for s in SCENARIOS]]
        if unknown:
            sys.exit(f"loadtest: no scenario named {unknown}; the names are: {[s[0] for s in SCENARIOS]}")
        # A scenario read against another brings it along.
        for name, kind, opts, _ in SCENARIOS:
            if name in only and (kind == "swap" or opts.get("baseline")):
                only.append(opts.get("baseline", SWAP_BASELINE))
    scenarios = [s for s in SCENARIOS if not only or s[0] in only]
    if not os.path.exists(args.switchyard):
        subprocess.run(["cargo", "build", "--release", "--bin", "switchyard"], cwd=ROOT, check=True)
    grpc = any(frontend in ("grpc", "gw-grpc") for _, _, _, frontend in scenarios)
    if grpc and not os.path.exists(args.grpc_backend):
        subprocess.run(["cargo", "build", "--release", "--example", "grpc_bench_backend"], cwd=ROOT, check=True)

    procs = Procs()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    tmp = tempfile.mkdtemp(prefix="switchyard-loadtest-")
    logs = open(os.path.join(tmp, "processes.log"), "w")
    results = {}  # (scenario, target) -> [runs]
    load_before = load_average()
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    print(f"load average (1, 5, 15 min) at the start: {load_before}", flush=True)
    try:
        make_certificates(tmp)
        servers = [f'server {{ listen 127.0.0.1:{p}; location / {{ return 200 "ok"; }} }}' for p in BACKEND_PORTS]
        servers += [f'server {{ listen 127.0.0.1:{p} ssl; location / {{ return 200 "ok"; }} }}'
                    for p in TLS_BACKEND_PORTS]
        udp_servers = [f'server {{ listen 127.0.0.1:{p} udp; return "ok"; }}' for p in UDP_BACKEND_PORTS]
        with open(os.path.join(tmp, "nginx.conf"), "w") as f:
            f.write(NGINX_CONF.format(dir=tmp, stream_module=NGINX_STREAM_MODULE, servers="\n  ".join(servers), udp_servers="\n  ".join(udp_servers)))
        with open(os.path.join(tmp, "nginx-udp.conf"), "w") as f:
            f.write(NGINX_UDP_CONF.format(dir=tmp, stream_module=NGINX_STREAM_MODULE, port=UDP_PORT, servers="\n    ".join(
                f"server 127.0.0.1:{p};" for p in UDP_BACKEND_PORTS)))
        with open(os.path.join(HERE, "haproxy.cfg")) as f:
            cfg = fill(f.read(), tmp)
        with open(os.path.join(tmp, "haproxy.cfg"), "w") as f:
            f.write(cfg)
        with open(os.path.join(HERE, "manifests.yaml")) as f:
            man = fill(f.read(), tmp)
        with open(os.path.join(tmp, "manifests.yaml"), "w") as f:
            f.write(man)
        lua = os.path.join(tmp, "report.lua")
        with open(lua, "w") as f:
            f.write(WRK_LUA)
        grpc_message(os.path.join(tmp, "grpc-request.bin"), "hello from h2load")

        procs.start(["nginx", "-c", os.path.join(tmp, "nginx.conf")], LOAD_CORE, logs)
        for p in BACKEND_PORTS + TLS_BACKEND_PORTS:
            wait_port(p)
        if grpc:
            procs.start([args.grpc_backend] + [str(p) for p in GRPC_PORTS], LOAD_CORE, logs)
            for p in GRPC_PORTS:
                wait_port(p)

        for name, kind, opts, frontend in scenarios:
            url = url_for(frontend, "direct", None)
            if kind in ("swap", "udp-idle") or url is None:
                continue  # the ceiling: one backend without a proxy, where that means the same work
            check_answer(frontend, url, tmp)
            r = measure(kind, opts, url, args.duration, None, tmp, lua)
            results.setdefault((name, "direct"), []).append(r)
            print(f"direct     {name:28} {r['rps']:10.0f} req/s", flush=True)

        for rep in range(args.reps):
            for target in ["haproxy", "switchyard"]:
                for name, kind, opts, frontend in scenarios:
                    if kind == "swap":
                        continue
                    # A fresh proxy for each scenario: no idle connection pool (HAProxy stops
                    # keeping idle server connections past a share of its file descriptors,
                    # which a 1,600-stream run can reach) and no memory peak carries over.
                    p, port = start_proxy(target, procs, tmp, args.switchyard, logs, frontend)
                    try:
                        url = url_for(frontend, target, port)
                        check_answer(frontend, url, tmp)
                        if kind == "udp-idle":
                            r = measure_idle_flows(opts, url, p.pid, args.duration)
                            results.setdefault((name, target), []).append(r)
                            print(f"{target:10} {name:28} {r['flows']} flows  {r['kib_per_flow']:.2f} KiB/flow  "
                                  f"RSS {r['rss_before_mib']:.1f} -> {r['rss_after_mib']:.1f} MiB  (rep {rep + 1})",
                                  flush=True)
                            continue
                        r = measure(kind, opts, url, args.duration, p.pid, tmp, lua)
                    finally:
                        procs.stop(p)
                    base = results.get((opts.get("baseline"), target), [])
                    if opts.get("baseline") and len(base) == rep + 1:
                        r["cpu_vs_keep_alive"] = r["cpu_per_100k"] / base[rep]["cpu_per_100k"]
                    results.setdefault((name, target), []).append(r)
                    print(f"{target:10} {name:28} {r['rps']:10.0f} req/s  p99 {r['p99_ms']:.2f} ms  "
                          f"cpu/100k {r['cpu_per_100k']:.2f} s  errors {r['errors']}  (rep {rep + 1})",
                          flush=True)
                if target != "switchyard":
                    continue  # HAProxy has no counterpart of a table swap without a reload
                for name, kind, opts, frontend in scenarios:
                    if kind != "swap":
                        continue
                    r = run_swap_scenario(opts, args.duration, procs, tmp, args.switchyard, logs, lua)
                    base = results.get((SWAP_BASELINE, target), [])
                    if len(base) == rep + 1:
                        r["p99_vs_no_swap"] = r["p99_ms"] / base[rep]["p99_ms"]
                    results.setdefault((name, target), []).append(r)
                    print(f"{target:10} {name:28} {r['rps']:10.0f} req/s  p99 {r['p99_ms']:.2f} ms "
                          f"({r.get('p99_vs_no_swap', float('nan')):.2f}x no-swap)  errors {r['errors']}  "
                          f"{r['api_changes']:.0f} API changes -> {r['swaps']:.0f} swaps  (rep {rep + 1})",
                          flush=True)
    finally:
        procs.stop_all()
        logs.close()

    load_after = load_average()
    placement = (f"proxy on core {PROXY_CORE}, load and backends on core {LOAD_CORE}" if THREADS == 1 else
                 f"{THREADS} proxy threads (switchyard --threads, HAProxy nbthread), wrk -t{THREADS}, "
                 f"nothing pinned (cores {ALL_CORES})")
    header = (f"{started}: medians of {args.reps} interleaved runs, {args.duration} s each; {placement}; "
              f"load average {load_before} at the start, {load_after} at the end")
    print()
    print(header + ".")
    print()
    print("| scenario | metric | direct | HAProxy | switchyard | switchyard / HAProxy |")
    print("|---|---|---|---|---|---|")
    for name, kind, opts, _ in scenarios:
        metrics = IDLE_METRICS if kind == "udp-idle" else METRICS + (SWAP_METRICS if kind == "swap" else []) + (
            BASELINE_METRICS if opts.get("baseline") else [])
        for metric, fmt in metrics:
            cells = []
            vals = {}
            for target in ["direct", "haproxy", "switchyard"]:
                v = medians(results, name, target, metric)
                vals[target] = v
                cells.append("" if v != v else fmt.format(v))
            ratio = vals["switchyard"] / vals["haproxy"] if vals["haproxy"] else float("nan")
            ratio_cell = "" if ratio != ratio or metric == "errors" else f"{ratio:.2f}x"
            print(f"| {name} | {metric} | " + " | ".join(cells) + f" | {ratio_cell} |")
    if any(kind == "swap" for _, kind, _, _ in scenarios):
        print()
        print("Table swaps: HAProxy has no counterpart without a reload; target 0 errors and "
              "p99_vs_no_swap <= 1.1x.")
    if any(opts.get("baseline") for _, _, opts, _ in scenarios):
        print()
        print("cpu_vs_keep_alive: CPU per request with TLS to the backends over the plain run it is read against "
              "(keep-alive, or the fixed-rate run at the same rate), same proxy and repetition (median of the "
              "per-repetition ratios); the #17 target is <= 1.15x.")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"header": header, "runs": [{"scenario": n, "target": t, "runs": rs}
                                                  for (n, t), rs in results.items()]}, f, indent=1)
    if args.charts:
        write_charts(args.charts, scenarios, results, header)
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
