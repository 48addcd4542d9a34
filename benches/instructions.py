#!/usr/bin/env python3
"""Instructions per keep-alive request: switchyard against HAProxy 2.6, counted by callgrind.

Question: how much user-space work does each proxy do for one keep-alive HTTP/1.1 request,
measured so that the noise of a shared machine (other tenants, CPU frequency, scheduling) does
not enter? Wall-clock and /proc CPU figures from benches/loadtest/run.py move 20-60 % between
runs here; instruction counts repeat to a fraction of a percent.

How: each proxy runs under `valgrind --tool=callgrind` with the same routing as the load
benchmark (one Service, three nginx backends on 127.0.0.1, /svc stripped, X-Forwarded-For,
roundrobin, keep-alive both sides), once serving N1 and once N2 requests from
`h2load --h1 -c4`; (Ir(N2) - Ir(N1)) / (N2 - N1) cancels start-up and shutdown. Health checks
are off for both (HAProxy's `check inter 5` and switchyard's checks cost per second, not per
request, and would not cancel). Kernel time (the loopback send/receive both do alike) is not
counted: this is the user-space share only.

With `--grpc`: instructions per gRPC unary call instead (issue #17): h2c on both sides,
`h2load -c16 -m10` posting one length-prefixed message to examples/grpc_bench_backend.rs on
three ports, HAProxy with `proto h2` on its server lines (`http-reuse always`), switchyard with
the load benchmark's grpc Service (`appProtocol: grpc`). valgrind runs one thread at a time,
so how many frames a read or a write carries differs from a real run; the counts still
repeat to about 1 % (two runs of one binary: 98.9k and 98.9k per call).

With `--grpcroute` (issue #39): the same calls, switchyard routing them by the load benchmark's
GRPCRoute (a Gateway HTTP listener for host grpc.bench, an exact method match, the grpc-gw
Service with `appProtocol: kubernetes.io/h2c`) and HAProxy by the same host and path rule;
h2load sends `:authority` grpc.bench (`--connect-to` 127.0.0.1).

Caveat: valgrind counts each iteration of `rep movsb` as an instruction, so large memcpys
(Pingora moves big future state machines) weigh more here than in cycles; `perf` on the real
run is the check for that.

Usage: python3 benches/instructions.py [--n1 2000] [--n2 6000] [--switchyard PATH] [--grpc | --grpcroute]
       [--proxies haproxy,switchyard] [--keep]
Needs: valgrind, haproxy, nginx, h2load, curl; a release build (`cargo build --release`), and
for --grpc `cargo build --release --example grpc_bench_backend`.
Takes about a minute. Last result (2-vCPU VM, 2026-11-30, switchyard with jemalloc):
see docs/performance-notebook.md.
"""

import argparse
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, ".."))
# The load benchmark's gRPC request body and method, so that both benchmarks send the same call.
sys.path.insert(0, os.path.join(HERE, "loadtest"))
from run import GRPC_HOST, GRPC_PATH, check_answer, grpc_message  # noqa: E402

# With --grpcroute: the host the calls name (and HAProxy's rule and switchyard's GRPCRoute take).
AUTHORITY = None
BACKENDS = [18181, 18182, 18183]
GRPC_PORTS = [18184, 18185, 18186]
PROXY_PORT = 18191
ADMIN_PORT = 18192
STATS_PORT = 18193


def wait_ok(url, timeout=60.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        r = subprocess.run(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "--max-time", "2", url],
                           capture_output=True, text=True)
        if r.stdout == "200":
            return
        time.sleep(0.2)
    raise RuntimeError(f"{url} did not answer 200 within {timeout}s")


def total_ir(out_file):
    with open(out_file) as f:
        for line in f:
            if line.startswith("summary:") or line.startswith("totals:"):
                return int(line.split()[1])
    raise RuntimeError(f"no totals in {out_file}")


def load_cmd(n, grpc, tmp):
    """The h2load command for n requests: keep-alive HTTP/1.1, or gRPC unary calls over h2c (one
    client for fewer than 16: h2load wants at least one request per client)."""
    if grpc:
        clients = "16" if n >= 16 else "1"
        cmd = ["h2load", "-n", str(n), "-c", clients, "-m", "10", "-d", os.path.join(tmp, "grpc-request.bin"),
               "-H", "content-type: application/grpc", "-H", "te: trailers"]
        if AUTHORITY:
            return cmd + [f"--connect-to=127.0.0.1:{PROXY_PORT}", f"http://{AUTHORITY}:{PROXY_PORT}{GRPC_PATH}"]
        return cmd + [f"http://127.0.0.1:{PROXY_PORT}{GRPC_PATH}"]
    return ["h2load", "--h1", "-n", str(n), "-c", "4", f"http://127.0.0.1:{PROXY_PORT}/svc/"]


def run_one(cmd, n, tmp, tag, grpc):
    """Ir of the proxy process `cmd` serving n requests (plus the readiness probe)."""
    out = os.path.join(tmp, f"callgrind.{tag}.{n}")
    log = open(os.path.join(tmp, f"{tag}.{n}.log"), "w")
    p = subprocess.Popen(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}"] + cmd,
                         stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                         start_new_session=True)
    try:
        if grpc:
            # No HTTP/1 route to probe: wait for the port, then for a first call to succeed.
            wait_calls(tmp)
        else:
            wait_ok(f"http://127.0.0.1:{PROXY_PORT}/svc/")
        r = subprocess.run(load_cmd(n, grpc, tmp), capture_output=True, text=True, timeout=600)
        if f"{n} succeeded" not in r.stdout:
            raise RuntimeError(f"{tag}: not all of {n} requests succeeded:\n{r.stdout}")
    finally:
        # SIGINT: switchyard exits at once; HAProxy stops on SIGUSR1 (soft stop) or SIGINT.
        try:
            os.killpg(p.pid, signal.SIGINT)
        except ProcessLookupError:
            pass
        try:
            p.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait(timeout=10)
        log.close()
    return total_ir(out)


def wait_port(ports, timeout=30.0):
    """Waits until each of `ports` on 127.0.0.1 accepts a connection."""
    deadline = time.time() + timeout
    for p in ports:
        while True:
            try:
                socket.create_connection(("127.0.0.1", p), timeout=1).close()
                break
            except OSError:
                if time.time() > deadline:
                    raise RuntimeError(f"nothing listens on 127.0.0.1:{p} after {timeout}s")
                time.sleep(0.1)


def wait_calls(tmp, timeout=60.0):
    """Waits until one gRPC call through the proxy succeeds: reaches the backend and ends with
    `grpc-status: 0` (h2load counts a proxy's own `UNIMPLEMENTED`, an HTTP 200, as a success)."""
    deadline = time.time() + timeout
    url = f"http://{AUTHORITY or '127.0.0.1'}:{PROXY_PORT}{GRPC_PATH}"
    while time.time() < deadline:
        try:
            check_answer("grpc", url, tmp)
            return
        except (RuntimeError, IndexError, subprocess.TimeoutExpired):
            pass
        time.sleep(0.2)
    raise RuntimeError(f"no gRPC call succeeded through port {PROXY_PORT} within {timeout}s")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n1", type=int, default=2000)
    ap.add_argument("--n2", type=int, default=6000)
    ap.add_argument("--switchyard", default=os.path.join(ROOT, "target", "release", "switchyard"))
    ap.add_argument("--grpc", action="store_true", help="gRPC unary calls over h2c instead of HTTP/1.1")
    ap.add_argument("--grpcroute", action="store_true",
                    help="--grpc, switchyard routing by a Gateway API GRPCRoute (HAProxy by host and path)")
    ap.add_argument("--grpc-backend", default=os.path.join(ROOT, "target", "release", "examples", "grpc_bench_backend"),
                    help="examples/grpc_bench_backend.rs built with --release")
    ap.add_argument("--keep", action="store_true",
                    help="keep the callgrind profiles (printed: read them with callgrind_annotate)")
    ap.add_argument("--proxies", default="haproxy,switchyard",
                    help="which proxies to count, comma-separated (default both)")
    args = ap.parse_args()
    global AUTHORITY
    if args.grpcroute:
        args.grpc = True
        AUTHORITY = GRPC_HOST
    if args.n2 <= args.n1:
        sys.exit("instructions: --n2 must be larger than --n1")
    for tool in ["valgrind", "haproxy", "nginx", "h2load", "curl"]:
        if not shutil.which(tool):
            sys.exit(f"instructions: {tool} is not installed (apt-get install valgrind haproxy nginx-light "
                     "nghttp2-client curl)")
    if not os.path.exists(args.switchyard):
        sys.exit(f"instructions: no switchyard binary at {args.switchyard} (cargo build --release)")
    if args.grpc and not os.path.exists(args.grpc_backend):
        sys.exit(f"instructions: no gRPC backend at {args.grpc_backend} "
                 "(cargo build --release --example grpc_bench_backend)")

    tmp = tempfile.mkdtemp(prefix="switchyard-instructions-")
    servers = "\n  ".join(f'server {{ listen 127.0.0.1:{p}; location / {{ return 200 "ok"; }} }}' for p in BACKENDS)
    with open(os.path.join(tmp, "nginx.conf"), "w") as f:
        f.write(f"""worker_processes 1;
daemon off;
pid {tmp}/nginx.pid;
error_log {tmp}/nginx-error.log crit;
events {{ worker_connections 1024; }}
http {{
  access_log off;
  keepalive_requests 1000000;
  {servers}
}}
""")
    # HAProxy: the load benchmark's configuration (the original template's), minus the TLS and
    # TCP frontends and the health checks.
    with open(os.path.join(HERE, "loadtest", "haproxy.cfg")) as f:
        cfg = f.read().split("# TLS termination")[0]
    cfg = cfg.replace("@PORT@", str(PROXY_PORT)).replace(" check inter 5", "").replace("@NBTHREAD@", "1")
    # The route to the TLS backends names a backend defined past the cut.
    cfg = "".join(line for line in cfg.splitlines(keepends=True) if "https_backends" not in line)
    with open(os.path.join(HERE, "loadtest", "manifests.yaml")) as f:
        whole = f.read()
    man = whole.split("# The same endpoints, TLS-terminated")[0]
    if args.grpc:
        # The load benchmark's grpc Service alone, and HAProxy's h2c frontend and grpc backend
        # from its configuration (`proto h2` both sides), health checks off.
        man = whole.split("# gRPC unary")[1].split("\n---\n# ")[0]
        man = "# gRPC unary" + man
        with open(os.path.join(HERE, "loadtest", "haproxy.cfg")) as f:
            full = f.read()
        backend = "backend grpc\n" + full.split("\nbackend grpc\n", 1)[1].split("\n\n")[0]
        cfg = (cfg.split("frontend httpfrontend")[0]
               + f"frontend grpcfrontend\n    bind 127.0.0.1:{PROXY_PORT} proto h2\n"
               + ("    use_backend grpc if { req.hdr(host),field(1,:) -i " + GRPC_HOST + " } { path "
                  + GRPC_PATH + " }\n    default_backend default404\n\nbackend default404\n"
                  "    http-request return status 404\n\n" if args.grpcroute else "    default_backend grpc\n\n")
               + backend.replace(" check inter 5s", "") + "\n")
        if args.grpcroute:
            # The load benchmark's Gateway with its HTTP listener only, the GRPCRoute and its
            # Service and EndpointSlices.
            # (The rest of the marker's comment line is dropped.)
            docs = whole.split("# Gateway API scenarios (issue #39)")[1].split("\n", 1)[1].split("\n---\n")
            keep = [d for d in docs if "kind: GatewayClass" in d or "kind: Gateway\n" in d
                    or "kind: GRPCRoute" in d or "grpc-gw" in d]
            man = "\n---\n".join("".join(line + "\n" for line in d.splitlines()
                                         if "name: pass," not in line and "name: udp," not in line)
                                 for d in keep)
            man = man.replace("@SY_HTTP_PORT@", str(PROXY_PORT)).replace("@GRPC_HOST@", GRPC_HOST)
        grpc_message(os.path.join(tmp, "grpc-request.bin"), "hello from h2load")
    for i, p in enumerate(BACKENDS):
        cfg = cfg.replace(f"@BACKEND{i + 1}@", str(p))
        man = man.replace(f"@BACKEND{i + 1}@", str(p))
    for i, p in enumerate(GRPC_PORTS):
        cfg = cfg.replace(f"@GRPC{i + 1}@", str(p))
        man = man.replace(f"@GRPC{i + 1}@", str(p))
    with open(os.path.join(tmp, "haproxy.cfg"), "w") as f:
        f.write(cfg)
    with open(os.path.join(tmp, "manifests.yaml"), "w") as f:
        f.write(man)

    proxies = {
        "haproxy": ["haproxy", "-db", "-f", os.path.join(tmp, "haproxy.cfg")],
        "switchyard": [args.switchyard, "--manifests", os.path.join(tmp, "manifests.yaml"), "--bind-address",
                       "127.0.0.1", "--http-port", str(PROXY_PORT), "--admin-port", str(ADMIN_PORT),
                       "--stats-port", str(STATS_PORT), "--threads", "1", "--check-interval", "0s"],
    }
    # The backends: nginx, or for --grpc the gRPC bench backend on its three ports.
    backend_cmd = ([args.grpc_backend] + [str(p) for p in GRPC_PORTS] if args.grpc
                   else ["nginx", "-c", os.path.join(tmp, "nginx.conf")])
    backends = subprocess.Popen(backend_cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                start_new_session=True)
    per_request = {}
    try:
        if args.grpc:
            wait_port(GRPC_PORTS)
        else:
            for b in BACKENDS:
                wait_ok(f"http://127.0.0.1:{b}/")
        for tag, cmd in proxies.items():
            if tag not in args.proxies.split(","):
                continue
            a = run_one(cmd, args.n1, tmp, tag, args.grpc)
            b = run_one(cmd, args.n2, tmp, tag, args.grpc)
            per_request[tag] = (b - a) / (args.n2 - args.n1)
            print(f"{tag:10} {per_request[tag]:10.0f} instructions per request", flush=True)
    finally:
        try:
            os.killpg(backends.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        backends.wait(timeout=10)
    print()
    what = "gRPC unary call (h2c -c16 -m10)" if args.grpc else "keep-alive request"
    if args.grpcroute:
        what += " through a GRPCRoute"
    print(f"| proxy | user-space instructions per {what} | / HAProxy |")
    print("|---|---|---|")
    for tag, v in per_request.items():
        ratio = f"{v / per_request['haproxy']:.2f}x" if "haproxy" in per_request else ""
        print(f"| {tag} | {v:.0f} | {ratio} |")
    if args.keep:
        print(f"callgrind profiles kept in {tmp}")
    else:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
