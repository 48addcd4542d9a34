#!/usr/bin/env python3
"""A tiny fake Kubernetes API for run.py's "table swap under load" scenario: list and watch of
Services and EndpointSlices (the subset of the API switchyard's watcher uses, as
tests/kube_api/mod.rs serves it to the Rust tests), Events accepted and dropped, and a churn
driver that adds or removes an endpoint of `svc` RATE times a second.

The world: Service `svc` (one port `http`, routed at /svc like manifests.yaml), an EndpointSlice
`svc-base` with the first backend (always there, always ready), and two slices `svc-churn-1`
and `svc-churn-2` with the second and third backends, which the driver deletes and re-creates
in turn, one change per tick: `svc` has one to three ready endpoints, never zero. Every change
is one watch event; switchyard (a change on an idle watcher is built at once, builds at least
10 ms apart) started with `--watch-max-wait 10ms` makes nearly each one its own table swap.

Churn starts when a line is written to stdin ("start") and stops on "stop" or EOF, so run.py
can line it up with its wrk run; the number of changes made is printed on stdout as
`CHANGES <n>` on every stop. Plain HTTP on 127.0.0.1, no authentication; every wait is bounded.

Usage: fake_api.py --port P --backends P1,P2,P3 [--rate 100]
"""

import argparse
import bisect
import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

SERVICE = ("v1", "Service")
SLICE = ("discovery.k8s.io/v1", "EndpointSlice")


class World:
    """Objects, a resourceVersion counter and the log of changes, under one condition."""

    def __init__(self):
        self.cond = threading.Condition()
        self.rv = 0
        self.objects = {}  # (kind, name) -> object
        self.log = []  # (rv, type, kind, object), in resourceVersion order
        self.rvs = []  # the log's resourceVersions, for bisect

    def apply(self, obj):
        with self.cond:
            self.rv += 1
            key = (obj["kind"], obj["metadata"]["name"])
            obj["metadata"]["resourceVersion"] = str(self.rv)
            obj["metadata"].setdefault("uid", f"uid-{key[1]}-{self.rv}")
            kind = "MODIFIED" if key in self.objects else "ADDED"
            self.objects[key] = obj
            self.log.append((self.rv, kind, obj["kind"], obj))
            self.rvs.append(self.rv)
            self._trim()
            self.cond.notify_all()

    def delete(self, kind, name):
        with self.cond:
            obj = self.objects.pop((kind, name), None)
            if obj is None:
                return
            self.rv += 1
            obj = json.loads(json.dumps(obj))
            obj["metadata"]["resourceVersion"] = str(self.rv)
            self.log.append((self.rv, "DELETED", kind, obj))
            self.rvs.append(self.rv)
            self._trim()
            self.cond.notify_all()

    def _trim(self):
        # A watch that falls this far behind would need a 410 and a re-list; at 100 changes a
        # second it does not happen in a benchmark run.
        if len(self.log) > 100_000:
            del self.log[:50_000]
            del self.rvs[:50_000]

    def since(self, rv, kind):
        """Changes of `kind` after `rv`; the caller holds `cond`."""
        return [(r, t, o) for r, t, k, o in self.log[bisect.bisect_right(self.rvs, rv):] if k == kind]


def service():
    return {"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "svc", "namespace": "default",
                         "annotations": {"serviceloadbalancer/lb.expose": "true"}},
            "spec": {"ports": [{"name": "http", "port": 80, "protocol": "TCP"}], "clusterIP": "10.96.0.1"}}


def endpoint_slice(name, port):
    return {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": name, "namespace": "default",
                         "labels": {"kubernetes.io/service-name": "svc"}},
            "addressType": "IPv4",
            "endpoints": [{"addresses": ["127.0.0.1"],
                           "conditions": {"ready": True, "serving": True, "terminating": False}}],
            "ports": [{"name": "http", "port": port, "protocol": "TCP"}]}


def kind_of(path):
    parts = path.strip("/").split("/")
    if parts in (["api", "v1", "services"], ["api", "v1", "namespaces", "default", "services"]):
        return SERVICE
    if parts in (["apis", "discovery.k8s.io", "v1", "endpointslices"],
                 ["apis", "discovery.k8s.io", "v1", "namespaces", "default", "endpointslices"]):
        return SLICE
    return None


def handler(world):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def send_json(self, code, body):
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_POST(self):
            # Events about Services: accepted, not kept.
            length = int(self.headers.get("Content-Length") or 0)
            self.rfile.read(length)
            self.send_json(201, {"kind": "Event", "apiVersion": "events.k8s.io/v1", "metadata": {}})

        do_PATCH = do_POST

        def do_GET(self):
            url = urlsplit(self.path)
            kind = kind_of(url.path)
            if kind is None:
                self.send_json(404, {"kind": "Status", "code": 404, "message": url.path})
                return
            q = {k: v[-1] for k, v in parse_qs(url.query).items()}
            if q.get("watch") in ("true", "1"):
                self.watch(kind, int(q.get("resourceVersion") or 0), int(q.get("timeoutSeconds") or 290),
                           q.get("allowWatchBookmarks") == "true")
                return
            with world.cond:
                items = [o for (k, _), o in world.objects.items() if k == kind[1]]
                body = {"apiVersion": kind[0], "kind": kind[1] + "List",
                        "metadata": {"resourceVersion": str(world.rv)}, "items": items}
                data = json.dumps(body)
            self.send_json(200, json.loads(data))

        def chunk(self, obj):
            data = (json.dumps(obj) + "\n").encode()
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()

        def watch(self, kind, sent, timeout, bookmarks):
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            deadline = time.time() + timeout
            last_bookmark = time.time()
            try:
                while time.time() < deadline:
                    with world.cond:
                        pending = world.since(sent, kind[1])
                        if not pending:
                            world.cond.wait(timeout=0.5)
                            pending = world.since(sent, kind[1])
                    for rv, t, o in pending:
                        self.chunk({"type": t, "object": o})
                        sent = rv
                    if bookmarks and time.time() - last_bookmark > 0.5:
                        last_bookmark = time.time()
                        self.chunk({"type": "BOOKMARK", "object": {
                            "kind": kind[1], "apiVersion": kind[0],
                            "metadata": {"resourceVersion": str(sent)}}})
                self.wfile.write(b"0\r\n\r\n")
            except (BrokenPipeError, ConnectionResetError):
                pass
            self.close_connection = True

    return Handler


def churn(world, backends, rate, running, changes):
    """While `running` is set: one change per tick, alternating between the two churn slices."""
    present = {1: True, 2: True}
    n = 0
    tick = 1.0 / rate
    next_at = time.monotonic()
    while True:
        running.wait()
        now = time.monotonic()
        if next_at < now - tick:
            next_at = now  # behind (a pause): do not burst to catch up
        time.sleep(max(0.0, next_at - now))
        next_at += tick
        if not running.is_set():
            continue
        i = 1 + n % 2
        n += 1
        name = f"svc-churn-{i}"
        if present[i]:
            world.delete("EndpointSlice", name)
        else:
            world.apply(endpoint_slice(name, backends[i]))
        present[i] = not present[i]
        changes[0] += 1


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--backends", required=True, help="three backend ports, comma-separated")
    ap.add_argument("--rate", type=float, default=100.0, help="endpoint changes per second")
    args = ap.parse_args()
    backends = [int(p) for p in args.backends.split(",")]
    world = World()
    world.apply(service())
    world.apply(endpoint_slice("svc-base", backends[0]))
    for i in (1, 2):
        world.apply(endpoint_slice(f"svc-churn-{i}", backends[i]))
    server = ThreadingHTTPServer(("127.0.0.1", args.port), handler(world))
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    running, changes = threading.Event(), [0]
    threading.Thread(target=churn, args=(world, backends, args.rate, running, changes), daemon=True).start()
    print("LISTENING", flush=True)
    for line in sys.stdin:
        if line.strip() == "start":
            running.set()
        elif line.strip() == "stop":
            running.clear()
            print(f"CHANGES {changes[0]}", flush=True)
    running.clear()
    try:
        print(f"CHANGES {changes[0]}", flush=True)
    except BrokenPipeError:
        pass  # whoever started us has gone


if __name__ == "__main__":
    main()
