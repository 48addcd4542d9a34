#!/usr/bin/env python3
"""Side-by-side load benchmark: switchyard against HAProxy 2.6, same machine, same run.

Question: does switchyard do at least as much work per CPU as HAProxy configured the way the
original service-loadbalancer template configured it, and keep tail latency as low?

What runs: three nginx backends (one worker, `return 200 "ok"`) on 127.0.0.1; then, interleaved
(A B A B ...), HAProxy with haproxy.cfg (keep-alive both sides, forwardfor, roundrobin, the /svc
prefix strip, the template's `check inter 5`) and switchyard in offline mode with manifests.yaml
(the same routing). A direct run against one backend gives the ceiling. The proxy is pinned to
core 0, load generator and backends to core 1. Only 127.0.0.1 is used; every loop is bounded;
every process started is stopped, also on Ctrl-C.

Scenarios: keep-alive (wrk -c64), Connection: close (wrk, a new client connection per request),
fixed rate (h2load --rps, latency at equal, unsaturated load), the same two wrk runs over TLS
(ECDSA P-256, full handshakes in the Connection: close case), and HTTP keep-alive through a raw
TCP frontend (L4 throughput for small messages). Per run: requests/s, p50/p99/p99.9
latency, proxy CPU seconds per 100k requests (from /proc), proxy peak RSS (VmHWM). The table
printed at the end holds medians over the repetitions and switchyard/HAProxy ratios.

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

Usage: python3 benches/loadtest/run.py [--reps 3] [--duration 8] [--switchyard PATH]
Needs: haproxy, nginx, wrk, h2load (nghttp2-client), taskset; a release build of switchyard
(`cargo build --release`), which it builds if missing.
"""

import argparse
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
BACKEND_PORTS = [18081, 18082, 18083]
HAPROXY_PORT = 18090
SWITCHYARD_PORT = 18091
SWITCHYARD_ADMIN = 18092
SWITCHYARD_STATS = 18093
# Only one proxy runs at a time, so both use these.
HTTPS_PORT = 18097
TCP_PORT = 18098
PROXY_CORE = "0"
LOAD_CORE = "1"
CLK_TCK = os.sysconf("SC_CLK_TCK")

WRK_LUA = """
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format("RESULT %d %d %d %d %d %d %d\\n",
    summary.requests, summary.duration, latency:percentile(50), latency:percentile(99),
    latency:percentile(99.9), e.connect + e.read + e.write + e.timeout, e.status))
end
"""

NGINX_CONF = """
worker_processes 1;
daemon off;
pid {dir}/nginx.pid;
error_log {dir}/nginx-error.log crit;
events {{ worker_connections 4096; }}
http {{
  access_log off;
  keepalive_requests 1000000;
  keepalive_timeout 120s;
  {servers}
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


def peak_rss_mib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024.0
    return 0.0


def run_wrk(url, duration, conns, close, lua):
    cmd = ["taskset", "-c", LOAD_CORE, "wrk", "-t1", f"-c{conns}", f"-d{duration}s", "--timeout", "5s",
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


def run_h2load(url, duration, clients, rps, logdir):
    log = os.path.join(logdir, "h2load.log")
    cmd = ["taskset", "-c", LOAD_CORE, "h2load", "--h1", f"-c{clients}", f"--rps={rps}", f"-D{duration}",
           f"--log-file={log}", url]
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
    if not lat:
        raise RuntimeError(f"h2load logged no request:\n{out}")
    lat.sort()
    pick = lambda q: lat[min(len(lat) - 1, int(q * len(lat)))] / 1000
    return {"requests": len(lat), "rps": len(lat) / duration, "p50_ms": pick(0.5), "p99_ms": pick(0.99),
            "p999_ms": pick(0.999), "errors": errors}


SCENARIOS = [
    # (name, kind, options, frontend)
    ("keep-alive", "wrk", {"conns": 64, "close": False}, "http"),
    ("new connection per request", "wrk", {"conns": 64, "close": True}, "http"),
    ("fixed 5k req/s (latency)", "h2load", {"clients": 10, "rps": 500}, "http"),
    ("TLS keep-alive", "wrk", {"conns": 64, "close": False}, "https"),
    ("TLS new connection per request", "wrk", {"conns": 64, "close": True}, "https"),
    ("raw TCP (HTTP keep-alive through it)", "wrk", {"conns": 64, "close": False}, "tcp"),
    ("keep-alive under 100 table swaps/s", "swap", {"conns": 64, "close": False, "rate": 100}, "http"),
]
SWAP_BASELINE = "keep-alive"
FAKE_API_PORT = 18099


def url_for(frontend, http_port):
    return {
        "http": f"http://127.0.0.1:{http_port}/svc/",
        "https": f"https://127.0.0.1:{HTTPS_PORT}/svc-tls/",
        "tcp": f"http://127.0.0.1:{TCP_PORT}/",
    }[frontend]


def measure(kind, opts, url, duration, pid, tmp, lua):
    before = cpu_seconds(pid) if pid else 0.0
    if kind == "wrk":
        r = run_wrk(url, duration, opts["conns"], opts["close"], lua)
    else:
        r = run_h2load(url, duration, opts["clients"], opts["rps"], tmp)
    if pid:
        r["cpu_per_100k"] = (cpu_seconds(pid) - before) / max(r["requests"], 1) * 100_000
        r["rss_mib"] = peak_rss_mib(pid)
    return r


def start_proxy(name, procs, tmp, switchyard, logs):
    if name == "haproxy":
        p = procs.start(["haproxy", "-db", "-f", os.path.join(tmp, "haproxy.cfg")], PROXY_CORE, logs)
        port = HAPROXY_PORT
    else:
        p = procs.start([switchyard, "--manifests", os.path.join(tmp, "manifests.yaml"), "--bind-address",
                         "127.0.0.1", "--http-port", str(SWITCHYARD_PORT), "--admin-port", str(SWITCHYARD_ADMIN),
                         "--stats-port", str(SWITCHYARD_STATS), "--https-port", str(HTTPS_PORT),
                         "--ssl-cert", os.path.join(tmp, "cert.pem"), "--tcp-services", f"tcpsvc:{TCP_PORT}",
                         "--threads", "1"], PROXY_CORE, logs)
        port = SWITCHYARD_PORT
    wait_http_ok(f"http://127.0.0.1:{port}/svc/")
    wait_port(HTTPS_PORT)
    wait_port(TCP_PORT)
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
                         "--stats-port", str(SWITCHYARD_STATS), "--threads", "1",
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


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--duration", type=int, default=8, help="seconds per run")
    ap.add_argument("--switchyard", default=os.path.join(ROOT, "target", "release", "switchyard"))
    ap.add_argument("--only", help="comma-separated scenario names to run")
    ap.add_argument("--port-offset", type=int, default=0,
                    help="added to every port used (to run beside another copy of this script)")
    args = ap.parse_args()
    global BACKEND_PORTS, HAPROXY_PORT, SWITCHYARD_PORT, SWITCHYARD_ADMIN, SWITCHYARD_STATS, HTTPS_PORT, TCP_PORT
    global FAKE_API_PORT
    o = args.port_offset
    BACKEND_PORTS = [p + o for p in BACKEND_PORTS]
    HAPROXY_PORT, SWITCHYARD_PORT, SWITCHYARD_ADMIN, SWITCHYARD_STATS = (
        HAPROXY_PORT + o, SWITCHYARD_PORT + o, SWITCHYARD_ADMIN + o, SWITCHYARD_STATS + o)
    HTTPS_PORT, TCP_PORT, FAKE_API_PORT = HTTPS_PORT + o, TCP_PORT + o, FAKE_API_PORT + o
    for tool in ["haproxy", "nginx", "wrk", "h2load", "taskset", "curl"]:
        if not shutil.which(tool):
            sys.exit(f"loadtest: {tool} is not installed (apt-get install haproxy nginx-light wrk nghttp2-client curl)")
    if not os.path.exists(args.switchyard):
        subprocess.run(["cargo", "build", "--release", "--bin", "switchyard"], cwd=ROOT, check=True)
    only = args.only.split(",") if args.only else None
    if only and any(kind == "swap" and name in only for name, kind, _, _ in SCENARIOS):
        only.append(SWAP_BASELINE)  # the swap scenario is read against it
    scenarios = [s for s in SCENARIOS if not only or s[0] in only]

    procs = Procs()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    tmp = tempfile.mkdtemp(prefix="switchyard-loadtest-")
    logs = open(os.path.join(tmp, "processes.log"), "w")
    results = {}  # (scenario, target) -> [runs]
    try:
        servers = "\n  ".join(f'server {{ listen 127.0.0.1:{p}; location / {{ return 200 "ok"; }} }}'
                              for p in BACKEND_PORTS)
        with open(os.path.join(tmp, "nginx.conf"), "w") as f:
            f.write(NGINX_CONF.format(dir=tmp, servers=servers))
        # An ECDSA P-256 certificate, chain and key in one PEM (both proxies read that form).
        subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                        "-nodes", "-keyout", os.path.join(tmp, "key.pem"), "-out", os.path.join(tmp, "crt.pem"),
                        "-days", "2", "-subj", "/CN=localhost"], check=True, capture_output=True)
        with open(os.path.join(tmp, "cert.pem"), "w") as out:
            for part in ("crt.pem", "key.pem"):
                with open(os.path.join(tmp, part)) as f:
                    out.write(f.read())
        with open(os.path.join(HERE, "haproxy.cfg")) as f:
            cfg = (f.read().replace("@PORT@", str(HAPROXY_PORT)).replace("@HTTPS_PORT@", str(HTTPS_PORT))
                   .replace("@TCP_PORT@", str(TCP_PORT)).replace("@CERT@", os.path.join(tmp, "cert.pem")))
        for i, p in enumerate(BACKEND_PORTS):
            cfg = cfg.replace(f"@BACKEND{i + 1}@", str(p))
        with open(os.path.join(tmp, "haproxy.cfg"), "w") as f:
            f.write(cfg)
        with open(os.path.join(HERE, "manifests.yaml")) as f:
            man = f.read().replace("@TCP_PORT@", str(TCP_PORT))
        for i, p in enumerate(BACKEND_PORTS):
            man = man.replace(f"@BACKEND{i + 1}@", str(p))
        with open(os.path.join(tmp, "manifests.yaml"), "w") as f:
            f.write(man)
        lua = os.path.join(tmp, "report.lua")
        with open(lua, "w") as f:
            f.write(WRK_LUA)

        procs.start(["nginx", "-c", os.path.join(tmp, "nginx.conf")], LOAD_CORE, logs)
        for p in BACKEND_PORTS:
            wait_port(p)

        for name, kind, opts, frontend in scenarios:
            if frontend != "http" or kind == "swap":
                continue  # the ceiling is plain HTTP to one backend
            r = measure(kind, opts, f"http://127.0.0.1:{BACKEND_PORTS[0]}/", args.duration, None, tmp, lua)
            results.setdefault((name, "direct"), []).append(r)
            print(f"direct     {name:28} {r['rps']:10.0f} req/s", flush=True)

        for rep in range(args.reps):
            for target in ["haproxy", "switchyard"]:
                p, port = start_proxy(target, procs, tmp, args.switchyard, logs)
                try:
                    for name, kind, opts, frontend in scenarios:
                        if kind == "swap":
                            continue
                        r = measure(kind, opts, url_for(frontend, port), args.duration, p.pid, tmp, lua)
                        results.setdefault((name, target), []).append(r)
                        print(f"{target:10} {name:28} {r['rps']:10.0f} req/s  p99 {r['p99_ms']:.2f} ms  "
                              f"cpu/100k {r['cpu_per_100k']:.2f} s  errors {r['errors']}  (rep {rep + 1})",
                              flush=True)
                finally:
                    procs.stop(p)
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

    print()
    print(f"Medians of {args.reps} interleaved runs, {args.duration} s each; proxy on core {PROXY_CORE}, "
          f"load and backends on core {LOAD_CORE}.")
    print()
    print("| scenario | metric | direct | HAProxy | switchyard | switchyard / HAProxy |")
    print("|---|---|---|---|---|---|")
    for name, kind, _, _ in scenarios:
        metrics = [("rps", "{:.0f}"), ("p50_ms", "{:.2f}"), ("p99_ms", "{:.2f}"), ("p999_ms", "{:.2f}"),
                   ("cpu_per_100k", "{:.2f}"), ("rss_mib", "{:.1f}"), ("errors", "{:.0f}")]
        if kind == "swap":
            metrics += [("p99_vs_no_swap", "{:.2f}x"), ("api_changes", "{:.0f}"), ("swaps", "{:.0f}"),
                        ("swaps_per_s", "{:.0f}")]
        for metric, fmt in metrics:
            cells = []
            vals = {}
            for target in ["direct", "haproxy", "switchyard"]:
                runs = results.get((name, target), [])
                v = median([r[metric] for r in runs if metric in r])
                vals[target] = v
                cells.append("" if v != v else fmt.format(v))
            ratio = vals["switchyard"] / vals["haproxy"] if vals["haproxy"] else float("nan")
            ratio_cell = "" if ratio != ratio or metric == "errors" else f"{ratio:.2f}x"
            print(f"| {name} | {metric} | " + " | ".join(cells) + f" | {ratio_cell} |")
    if any(kind == "swap" for _, kind, _, _ in scenarios):
        print()
        print("Table swaps: HAProxy has no counterpart without a reload; target 0 errors and "
              "p99_vs_no_swap <= 1.1x.")
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
