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

Caveat: valgrind counts each iteration of `rep movsb` as an instruction, so large memcpys
(Pingora moves big future state machines) weigh more here than in cycles; `perf` on the real
run is the check for that.

Usage: python3 benches/instructions.py [--n1 2000] [--n2 6000] [--switchyard PATH]
Needs: valgrind, haproxy, nginx, h2load, curl; a release build (`cargo build --release`).
Takes about a minute. Last result (2-vCPU VM, 2026-11-30, switchyard with jemalloc):
see docs/performance.md.
"""

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, ".."))
BACKENDS = [18181, 18182, 18183]
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


def run_one(cmd, n, tmp, tag):
    """Ir of the proxy process `cmd` serving n keep-alive requests (plus the readiness probe)."""
    out = os.path.join(tmp, f"callgrind.{tag}.{n}")
    log = open(os.path.join(tmp, f"{tag}.{n}.log"), "w")
    p = subprocess.Popen(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}"] + cmd,
                         stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                         start_new_session=True)
    try:
        wait_ok(f"http://127.0.0.1:{PROXY_PORT}/svc/")
        r = subprocess.run(["h2load", "--h1", "-n", str(n), "-c", "4", f"http://127.0.0.1:{PROXY_PORT}/svc/"],
                           capture_output=True, text=True, timeout=600)
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


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n1", type=int, default=2000)
    ap.add_argument("--n2", type=int, default=6000)
    ap.add_argument("--switchyard", default=os.path.join(ROOT, "target", "release", "switchyard"))
    args = ap.parse_args()
    if args.n2 <= args.n1:
        sys.exit("instructions: --n2 must be larger than --n1")
    for tool in ["valgrind", "haproxy", "nginx", "h2load", "curl"]:
        if not shutil.which(tool):
            sys.exit(f"instructions: {tool} is not installed (apt-get install valgrind haproxy nginx-light "
                     "nghttp2-client curl)")
    if not os.path.exists(args.switchyard):
        sys.exit(f"instructions: no switchyard binary at {args.switchyard} (cargo build --release)")

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
    cfg = cfg.replace("@PORT@", str(PROXY_PORT)).replace(" check inter 5", "")
    with open(os.path.join(HERE, "loadtest", "manifests.yaml")) as f:
        man = f.read().split("# The same endpoints, TLS-terminated")[0]
    for i, p in enumerate(BACKENDS):
        cfg = cfg.replace(f"@BACKEND{i + 1}@", str(p))
        man = man.replace(f"@BACKEND{i + 1}@", str(p))
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
    nginx = subprocess.Popen(["nginx", "-c", os.path.join(tmp, "nginx.conf")], stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL, start_new_session=True)
    per_request = {}
    try:
        for b in BACKENDS:
            wait_ok(f"http://127.0.0.1:{b}/")
        for tag, cmd in proxies.items():
            a = run_one(cmd, args.n1, tmp, tag)
            b = run_one(cmd, args.n2, tmp, tag)
            per_request[tag] = (b - a) / (args.n2 - args.n1)
            print(f"{tag:10} {per_request[tag]:10.0f} instructions per request", flush=True)
    finally:
        try:
            os.killpg(nginx.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        nginx.wait(timeout=10)
    print()
    print("| proxy | user-space instructions per keep-alive request | / HAProxy |")
    print("|---|---|---|")
    for tag, v in per_request.items():
        print(f"| {tag} | {v:.0f} | {v / per_request['haproxy']:.2f}x |")
    print("TMP", tmp)


if __name__ == "__main__":
    main()
