#!/usr/bin/env python3
"""Scale and memory: how much memory does switchyard hold for a large cluster, how long does the
first table take, and what does an idle keep-alive client connection cost?

What runs: a manifest with N Services (default 10,000) of one port and 10 endpoints each, loaded
by a release build of switchyard in offline mode on 127.0.0.1; then, for each kind of client
connection in turn (HTTP/1 in clear, HTTP/1 over TLS, HTTP/2 in clear with prior knowledge,
HTTP/2 over TLS by ALPN), C idle keep-alive connections (default 10,000) each having made one
request (`GET /live/`, answered by a Python backend), held until RSS settles, then closed
before the next kind. Reports RSS after start, RSS with the table, the table build time (from
/metrics), and RSS and live heap per idle connection of each kind. Every process and socket is
closed at the end; every wait is bounded. The HTTP/2 client is a few lines of framing here
(no `h2` module offline): the preface, an empty SETTINGS, its ACK, one HEADERS frame.

RSS is read once it has settled (no change over 3 s, at most 40 s): jemalloc purges freed pages
in the background over about 10 s, so a reading right after the build still holds its garbage.
The live heap (`switchyard_heap_allocated_bytes`, jemalloc's count of bytes allocated and not
freed) is reported next to it: RSS minus heap is allocator slack, thread stacks and code.
The connections are measured from the RSS settled after a first /metrics scrape, so that what
a scrape leaves behind is not counted as theirs.

`--routes R` adds a GatewayClass, one Gateway (an HTTP listener) and R HTTPRoutes with three
rules each (a prefix with a header match, an exact path with a query match, `/`), route i to
Service i modulo N: what switchyard holds for Gateway API routes, its route cache included
(with `--connections 0` to measure the table alone).

`--series 0,1000,3000,10000` instead loads each count in turn (no connections) and prints RSS,
heap and build time by Service count; `--chart FILE` draws them as a PNG (matplotlib).

`--scrape K` instead asks what one Prometheus scrape of `/metrics` costs with the table loaded
(no connections): K scrapes, each with the kernel's RSS high-water mark reset first
(`/proc/PID/clear_refs`), reporting the body's size, the median scrape time and the largest RSS
rise a scrape caused above the settled RSS before it; `--switchyard-args` passes flags (e.g.
`--metrics-endpoint-series=false`).

Usage: python3 benches/scale.py [--services 10000] [--connections 10000] [--switchyard PATH]
                                [--kinds h1,h1-tls,h2c,h2-tls] [--routes 0]
       python3 benches/scale.py --series 0,1000,3000,10000 [--chart FILE]
       python3 benches/scale.py --scrape 5 [--services 10000] [--switchyard-args "..."]
"""

import argparse
import json
import os
import resource
import shutil
import signal
import socket
import ssl
import struct
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, ".."))
HTTP_PORT, ADMIN_PORT, STATS_PORT, BACKEND_PORT, HTTPS_PORT = 18191, 18192, 18193, 18194, 18195
KINDS = ["h1", "h1-tls", "h2c", "h2-tls"]


def rss_mib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    return float("nan")


def settled_rss(pid, quiet=3.0, limit=40.0, at_least=11.0):
    """RSS once it has stopped moving by more than 0.5 MiB for `quiet` seconds, and no sooner
    than `at_least` seconds: jemalloc returns freed pages along a decay curve over its
    dirty_decay_ms (10 s), slowly at first, so an early quiet spell is not the end of it."""
    time.sleep(at_least - quiet)
    deadline = time.time() + limit
    last, since = rss_mib(pid), time.time()
    while time.time() < deadline:
        time.sleep(0.5)
        now = rss_mib(pid)
        if abs(now - last) > 0.5:
            last, since = now, time.time()
        elif time.time() - since >= quiet:
            break
    return rss_mib(pid)


def metric(name):
    text = get(f"http://127.0.0.1:{ADMIN_PORT}/metrics", 30)[1]  # 10,000 entries: a large page
    found = [l for l in text.splitlines() if l.startswith(name + " ") or l.startswith(name + "{")]
    return float(found[0].split()[-1]) if found else float("nan")


def get(url, timeout=5):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.status, r.read().decode()


def wait_ready(timeout):
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            if get(f"http://127.0.0.1:{ADMIN_PORT}/readyz", 1)[0] == 200:
                return True
        except Exception:
            pass
        time.sleep(0.1)
    return False


def gateway_routes(routes, services):
    """A GatewayClass of switchyard's default controller name, a Gateway with one HTTP listener on
    port 80 (served on the HTTP port with --gateway-http-port 80) and `routes` HTTPRoutes."""
    items = [{"apiVersion": "gateway.networking.k8s.io/v1", "kind": "GatewayClass", "metadata": {"name": "sy"},
              "spec": {"controllerName": "switchyard.io/gateway-controller"}},
             {"apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
              "metadata": {"name": "gw", "namespace": "ns-0"},
              "spec": {"gatewayClassName": "sy", "listeners": [
                  {"name": "http", "port": 80, "protocol": "HTTP",
                   "allowedRoutes": {"namespaces": {"from": "All"}}}]}}]
    for i in range(routes):
        j = i % services
        ref = [{"name": f"svc-{j}", "namespace": f"ns-{j % 20}", "port": 80}]
        items.append({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
                      "metadata": {"name": f"r-{i}", "namespace": f"ns-{j % 20}"},
                      "spec": {"parentRefs": [{"name": "gw", "namespace": "ns-0"}],
                               "hostnames": [f"r-{i}.example.com"],
                               "rules": [
                                   {"matches": [{"path": {"type": "PathPrefix", "value": "/api"},
                                                 "headers": [{"name": "x-v", "value": "2"}]}], "backendRefs": ref},
                                   {"matches": [{"path": {"type": "Exact", "value": "/q"},
                                                 "queryParams": [{"name": "a", "value": "b"}]}], "backendRefs": ref},
                                   {"matches": [{"path": {"type": "PathPrefix", "value": "/"}}],
                                    "backendRefs": ref}]}})
    return items


def manifest(n, routes=0):
    items = gateway_routes(routes, n) if routes and n else []
    for i in range(n):
        name = f"svc-{i}"
        items.append({"apiVersion": "v1", "kind": "Service",
                      "metadata": {"name": name, "namespace": f"ns-{i % 20}"},
                      "spec": {"ports": [{"name": "http", "port": 80}]}})
        items.append({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                      "metadata": {"name": f"{name}-1", "namespace": f"ns-{i % 20}",
                                   "labels": {"kubernetes.io/service-name": name}},
                      "addressType": "IPv4",
                      "endpoints": [{"addresses": [f"10.{i // 256 % 256}.{i % 256}.{e + 1}"]} for e in range(10)],
                      "ports": [{"name": "http", "port": 8080}]})
    # One reachable service so that idle connections can send a real request first.
    items.append({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "live"},
                  "spec": {"ports": [{"name": "http", "port": 80}]}})
    items.append({"apiVersion": "v1", "kind": "Endpoints", "metadata": {"name": "live"},
                  "subsets": [{"addresses": [{"ip": "127.0.0.1"}], "ports": [{"name": "http", "port": BACKEND_PORT}]}]})
    # The same on the TLS port (lb.sslTerm Services are served there only).
    items.append({"apiVersion": "v1", "kind": "Service",
                  "metadata": {"name": "live-tls", "annotations": {"serviceloadbalancer/lb.sslTerm": "true"}},
                  "spec": {"ports": [{"name": "http", "port": 80}]}})
    items.append({"apiVersion": "v1", "kind": "Endpoints", "metadata": {"name": "live-tls"},
                  "subsets": [{"addresses": [{"ip": "127.0.0.1"}], "ports": [{"name": "http", "port": BACKEND_PORT}]}]})
    return {"apiVersion": "v1", "kind": "List", "items": items}


def h2_frame(kind, flags, stream, payload=b""):
    return struct.pack(">I", len(payload))[1:] + bytes([kind, flags]) + struct.pack(">I", stream) + payload


def h2_request(path, scheme):
    """The client preface, SETTINGS, and one GET on stream 1 (HPACK: indexed :method GET and
    :scheme, literal :path and :authority without indexing)."""
    block = b"\x82" + (b"\x87" if scheme == "https" else b"\x86")
    block += b"\x04" + bytes([len(path)]) + path + b"\x01\x01x"
    return (b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + h2_frame(4, 0, 0)
            + h2_frame(1, 0x5, 1, block))


def h2_exchange(s, path, scheme):
    """Sends one request and reads frames until stream 1 ends; ACKs the server's SETTINGS."""
    s.sendall(h2_request(path, scheme))
    buf = b""
    while True:
        while len(buf) < 9:
            chunk = s.recv(65536)
            if not chunk:
                raise ConnectionError("closed")
            buf += chunk
        length = int.from_bytes(buf[:3], "big")
        while len(buf) < 9 + length:
            chunk = s.recv(65536)
            if not chunk:
                raise ConnectionError("closed")
            buf += chunk
        kind, flags, stream = buf[3], buf[4], int.from_bytes(buf[5:9], "big") & 0x7FFFFFFF
        buf = buf[9 + length:]
        if kind == 4 and not flags & 1:
            s.sendall(h2_frame(4, 1, 0))
        if stream == 1 and kind in (0, 1) and flags & 1:
            return
        if kind == 7 or (stream == 1 and kind == 3):
            raise ConnectionError("GOAWAY or RST_STREAM")


def open_idle(kind, tls_ctx):
    """One connection of `kind`, after one request."""
    port = HTTPS_PORT if kind.endswith("tls") else HTTP_PORT
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    if kind.endswith("tls"):
        ctx = tls_ctx["h2" if kind.startswith("h2") else "h1"]
        s = ctx.wrap_socket(s, server_hostname="localhost")
    path = b"/live-tls/" if kind.endswith("tls") else b"/live/"
    if kind.startswith("h2"):
        h2_exchange(s, path, "https" if kind.endswith("tls") else "http")
    else:
        s.sendall(b"GET " + path + b" HTTP/1.1\r\nHost: x\r\n\r\n")
        s.recv(65536)
    return s


def tls_contexts():
    out = {}
    for name, alpn in (("h1", ["http/1.1"]), ("h2", ["h2"])):
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        ctx.set_alpn_protocols(alpn)
        out[name] = ctx
    return out


def hwm_mib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024.0
    return float("nan")


def scrapes(pid, count):
    """`count` scrapes of /metrics: (body bytes, median seconds, largest RSS rise in MiB)."""
    base = settled_rss(pid)
    sizes, times, rises = [], [], []
    for _ in range(count):
        with open(f"/proc/{pid}/clear_refs", "w") as f:
            f.write("5")  # resets VmHWM to the current RSS
        before = rss_mib(pid)
        t = time.time()
        body = get(f"http://127.0.0.1:{ADMIN_PORT}/metrics", 60)[1]
        times.append(time.time() - t)
        sizes.append(len(body.encode()))
        rises.append(hwm_mib(pid) - before)
        del body
        time.sleep(1.0)
    times.sort()
    return base, sizes[-1], times[len(times) // 2], max(rises)


def measure(switchyard, services, connections, kinds, routes=0, extra=(), scrape=0):
    """One switchyard with `services` Services (and `routes` HTTPRoutes) loaded, then
    `connections` idle connections of each of `kinds` in turn."""
    tmp = tempfile.mkdtemp(prefix="switchyard-scale-")
    path = os.path.join(tmp, "world.json")
    with open(path, "w") as f:
        json.dump(manifest(services, routes), f)
    pem = os.path.join(tmp, "tls.pem")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
                    "-nodes", "-days", "2", "-subj", "/CN=localhost", "-keyout", pem + ".key",
                    "-out", pem], check=True, capture_output=True)
    with open(pem, "a") as out, open(pem + ".key") as key:
        out.write(key.read())
    backend = subprocess.Popen([sys.executable, "-m", "http.server", str(BACKEND_PORT), "--bind", "127.0.0.1"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=tmp)
    started = time.time()
    sy = subprocess.Popen([switchyard, "--manifests", path, "--bind-address", "127.0.0.1",
                           "--http-port", str(HTTP_PORT), "--admin-port", str(ADMIN_PORT),
                           "--stats-port", str(STATS_PORT), "--check-interval", "0", "--threads", "2",
                           "--ssl-cert", pem, "--https-port", str(HTTPS_PORT),
                           # Longer than all the kinds take: no connection may time out.
                           "--keep-alive-timeout", "3600s",
                           # Every Service is routed: the table holds all of them.
                           "--service-routes", "all"] + (["--gateway-http-port", "80"] if routes else [])
                          + list(extra),
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    conns = []
    try:
        time.sleep(0.3)
        rss_start = rss_mib(sy.pid)
        if not wait_ready(120):
            sys.exit("switchyard did not become ready")
        ready_s = time.time() - started
        if routes:
            # Routed, not sent: the endpoints are not on this machine.
            last = routes - 1
            answer = get(f"http://127.0.0.1:{ADMIN_PORT}/explain?host=r-{last}.example.com&path=/q%3Fa%3Db", 10)[1]
            if f"svc-{last % services}" not in answer or '"outcome": "proxy"' not in answer:
                sys.exit(f"the HTTPRoutes are not live: /explain says\n{answer}")
        if scrape:
            return scrapes(sy.pid, scrape)
        time.sleep(1.0)
        rss_table_1s = rss_mib(sy.pid)
        rss_table = settled_rss(sy.pid)
        heap_table = metric("switchyard_heap_allocated_bytes") / 2**20
        build_s = metric("switchyard_table_build_seconds_sum")
        # What a scraped instance holds: whatever a /metrics scrape keeps counts here, not in
        # the connections' figures.
        rss_scraped = settled_rss(sy.pid) if connections else rss_table
        row = {"services": services, "rss_start": rss_start, "ready_s": ready_s, "rss_table_1s": rss_table_1s,
               "rss_table": rss_table, "heap_table": heap_table, "build_s": build_s,
               "rss_scraped": rss_scraped, "kinds": {}}
        if not connections:
            return row
        tls_ctx = tls_contexts()
        rss_before = rss_scraped
        heap_before = metric("switchyard_heap_allocated_bytes") / 2**20
        for kind in kinds:
            deadline = time.time() + 180
            for _ in range(connections):
                if time.time() > deadline:
                    break
                conns.append(open_idle(kind, tls_ctx))
            rss_conns = settled_rss(sy.pid)
            heap_conns = metric("switchyard_heap_allocated_bytes") / 2**20
            n = max(len(conns), 1)
            row["kinds"][kind] = {"conns": len(conns), "rss": rss_conns, "heap": heap_conns,
                                  "per_conn_kib": (rss_conns - rss_before) * 1024 / n,
                                  "heap_per_conn_kib": (heap_conns - heap_before) * 1024 / n}
            for s in conns:
                s.close()
            conns = []
            # The next kind starts from what is left once these are gone.
            rss_before = settled_rss(sy.pid)
            heap_before = metric("switchyard_heap_allocated_bytes") / 2**20
        return row
    finally:
        for s in conns:
            s.close()
        for p in (sy, backend):
            p.send_signal(signal.SIGKILL)
            p.wait(timeout=10)
        shutil.rmtree(tmp, ignore_errors=True)


def chart(rows, path):
    """RSS (settled) and live heap by Service count, as a PNG; one line when matplotlib is missing."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("chart: matplotlib is not installed (pip install matplotlib); no chart written")
        return
    xs = [r["services"] for r in rows]
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot(xs, [r["rss_table"] for r in rows], "o-", label="RSS, settled")
    ax.plot(xs, [r["heap_table"] for r in rows], "s--", label="live heap (jemalloc)")
    ax.plot(xs, [r["rss_table_1s"] for r in rows], "^:", label="RSS 1 s after ready", alpha=0.6)
    ax.set_xlabel("Services (1 port, 10 endpoints each)")
    ax.set_ylabel("MiB")
    ax.set_title("switchyard memory by Service count (benches/scale.py)", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    print(f"chart: {path}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--services", type=int, default=10_000)
    ap.add_argument("--connections", type=int, default=10_000)
    ap.add_argument("--series", help="comma-separated Service counts: memory by Service count (no connections)")
    ap.add_argument("--chart", metavar="PNG", help="with --series: draw RSS and heap by Service count into PNG")
    ap.add_argument("--switchyard", default=os.path.join(ROOT, "target", "release", "switchyard"))
    ap.add_argument("--kinds", default=",".join(KINDS), help="which client connections to measure")
    ap.add_argument("--routes", type=int, default=0, help="HTTPRoutes (3 rules each) on one Gateway, route i to Service i")
    ap.add_argument("--scrape", type=int, default=0, metavar="K",
                    help="measure K /metrics scrapes with the table loaded (no connections)")
    ap.add_argument("--switchyard-args", default="", help="more flags for switchyard (space-separated)")
    args = ap.parse_args()
    kinds = [k for k in args.kinds.split(",") if k]
    if any(k not in KINDS for k in kinds):
        sys.exit(f"--kinds: one of {KINDS}")
    if not os.path.exists(args.switchyard):
        subprocess.run(["cargo", "build", "--release", "--bin", "switchyard"], cwd=ROOT, check=True)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(soft, args.connections + 1000)), hard))

    extra = args.switchyard_args.split()
    if args.scrape:
        base, size, median, rise = measure(args.switchyard, args.services, 0, [], extra=extra,
                                           scrape=args.scrape)
        print(f"| Services x endpoints | {args.services} x 10 | flags: {' '.join(extra) or '(none)'} |")
        print(f"| RSS settled before scraping | {base:.1f} MiB |")
        print(f"| /metrics body | {size / 2**20:.2f} MiB ({size} bytes) |")
        print(f"| scrape time, median of {args.scrape} | {median * 1000:.0f} ms |")
        print(f"| largest RSS rise during a scrape | {rise:.1f} MiB |")
        return

    if args.series:
        rows = []
        print("| Services × 10 endpoints | RSS settled | live heap | RSS 1 s after ready | build | start to ready |")
        print("|---|---|---|---|---|---|")
        for n in [int(x) for x in args.series.split(",")]:
            r = measure(args.switchyard, n, 0, [], extra=extra)
            rows.append(r)
            print(f"| {n} | {r['rss_table']:.1f} MiB | {r['heap_table']:.1f} MiB | {r['rss_table_1s']:.1f} MiB | "
                  f"{r['build_s'] * 1000:.0f} ms | {r['ready_s']:.2f} s |", flush=True)
        if args.chart:
            chart(rows, args.chart)
        return

    if args.routes and not args.services:
        sys.exit("--routes needs Services to route to (--services)")
    r = measure(args.switchyard, args.services, args.connections, kinds, args.routes, extra)
    print(f"| Services x endpoints | {args.services} x 10 |")
    if args.routes:
        print(f"| HTTPRoutes x rules | {args.routes} x 3 |")
    print(f"| RSS 0.3 s after start (parsing) | {r['rss_start']:.1f} MiB |")
    print(f"| RSS with the table, 1 s after ready | {r['rss_table_1s']:.1f} MiB |")
    print(f"| RSS with the table, settled | {r['rss_table']:.1f} MiB (heap allocated {r['heap_table']:.1f} MiB) |")
    print(f"| RSS with the table, settled after a /metrics scrape | {r['rss_scraped']:.1f} MiB |")
    print(f"| first table: build time (table_build_seconds) | {r['build_s'] * 1000:.0f} ms |")
    print(f"| first table: process start to ready (parse + build) | {r['ready_s']:.2f} s |")
    for kind, k in r["kinds"].items():
        print(f"| {kind}: idle keep-alive connections | {k['conns']}: RSS {k['rss']:.1f} MiB, "
              f"{k['per_conn_kib']:.1f} KiB per connection; heap {k['heap']:.1f} MiB, "
              f"{k['heap_per_conn_kib']:.1f} KiB per connection |")

if __name__ == "__main__":
    main()
