#!/usr/bin/env python3
"""Small bounded load generators for the run.py scenarios no installed tool drives.

Questions they serve (run.py states them per scenario):
- `tls-new`: how many new TLS connections a second reach a backend through a TLS passthrough
  proxy, each a full handshake with the backend (by SNI) and one HTTP/1.1 request and answer,
  then closed by the client. `--procs` processes each run one connection at a time, so that
  many are in flight; wrk and h2load cannot send a server name other than the URL's host
  (and h2load 1.52 reconnects in a loop past its -D when the server closes).
- `udp`: how many datagrams a second a UDP proxy relays, request and answer: `--flows` client
  sockets (each its own source port, so its own flow), each with one datagram in flight
  (closed loop: the next is sent when the answer arrives, or after 100 ms without one, which
  counts as lost).
- `udp-idle`: opens `--flows` flows (one datagram and its answer each) and keeps them open,
  silent, until stdin closes or `--duration` passes: the proxy's memory per idle flow is read
  around it by run.py.

Every loop is bounded by `--duration` and by `--max` (operations), and only 127.0.0.1 is used.
Prints one line `RESULT <ops> <seconds> <p50_us> <p99_us> <p999_us> <errors>`.

Usage: loadgen.py tls-new --port P --sni NAME [--procs 8] [--duration 8] [--max 2000000]
       loadgen.py udp --port P [--flows 64] [--duration 8] [--max 50000000]
       loadgen.py udp-idle --port P --flows N [--duration 120]
"""

import argparse
import multiprocessing
import os
import selectors
import socket
import ssl
import sys
import time

HOST = "127.0.0.1"


def percentiles(lat):
    lat.sort()
    if not lat:
        return 0, 0, 0
    pick = lambda q: lat[min(len(lat) - 1, int(q * len(lat)))]
    return pick(0.5), pick(0.99), pick(0.999)


def tls_worker(port, sni, deadline, max_ops, out):
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    request = f"GET / HTTP/1.1\r\nHost: {sni}\r\nConnection: close\r\n\r\n".encode()
    ops = errors = 0
    lat = []
    while time.monotonic() < deadline and ops + errors < max_ops:
        t0 = time.monotonic()
        try:
            with socket.create_connection((HOST, port), timeout=5) as raw:
                with ctx.wrap_socket(raw, server_hostname=sni) as s:
                    s.sendall(request)
                    got = b""
                    while b"\r\n\r\n" not in got:
                        chunk = s.recv(4096)
                        if not chunk:
                            break
                        got += chunk
                    if not got.startswith(b"HTTP/1.1 200"):
                        raise OSError(f"answer {got[:40]!r}")
            ops += 1
            lat.append(int((time.monotonic() - t0) * 1e6))
        except (OSError, ssl.SSLError):
            errors += 1
            time.sleep(0.001)
    out.put((ops, errors, lat))


def tls_new(args):
    deadline = time.monotonic() + args.duration
    out = multiprocessing.Queue()
    per = max(1, args.max // args.procs)
    workers = [multiprocessing.Process(target=tls_worker, args=(args.port, args.sni, deadline, per, out))
               for _ in range(args.procs)]
    start = time.monotonic()
    for w in workers:
        w.start()
    results = [out.get(timeout=args.duration + 30) for _ in workers]
    for w in workers:
        w.join(timeout=10)
        if w.is_alive():
            w.kill()
    took = time.monotonic() - start
    ops = sum(r[0] for r in results)
    errors = sum(r[1] for r in results)
    lat = [x for r in results for x in r[2]]
    return ops, took, lat, errors


def udp(args):
    sel = selectors.DefaultSelector()
    socks = []
    sent_at = {}
    payload = b"x" * 32
    for _ in range(args.flows):
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.setblocking(False)
        s.connect((HOST, args.port))
        sel.register(s, selectors.EVENT_READ)
        socks.append(s)
    ops = errors = 0
    lat = []
    start = time.monotonic()
    deadline = start + args.duration
    now = start
    for s in socks:
        s.send(payload)
        sent_at[s] = now
    while now < deadline and ops + errors < args.max:
        for key, _ in sel.select(timeout=0.05):
            s = key.fileobj
            try:
                while True:
                    s.recv(2048)
                    ops += 1
            except BlockingIOError:
                pass
            except ConnectionRefusedError:
                errors += 1
            now = time.monotonic()
            lat.append(int((now - sent_at[s]) * 1e6))
            try:
                s.send(payload)
            except OSError:
                errors += 1
            sent_at[s] = now
        now = time.monotonic()
        for s in socks:  # an answer lost: send again after 100 ms
            if now - sent_at[s] > 0.1:
                errors += 1
                try:
                    s.send(payload)
                except OSError:
                    pass
                sent_at[s] = now
    took = time.monotonic() - start
    for s in socks:
        s.close()
    return ops, took, lat, errors


def udp_idle(args):
    """N flows, one datagram and its answer each, then silence until stdin closes."""
    socks = []
    answered = 0
    deadline = time.monotonic() + args.duration
    for i in range(args.flows):
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.settimeout(1.0)
        s.connect((HOST, args.port))
        socks.append(s)
        for _ in range(3):
            try:
                s.send(b"hello")
                s.recv(2048)
                answered += 1
                break
            except (socket.timeout, OSError):
                continue
        if time.monotonic() > deadline:
            break
    print(f"OPEN {answered} {len(socks)}", flush=True)
    # Held until run.py closes stdin (it reads the proxy's memory meanwhile) or the deadline.
    sel = selectors.DefaultSelector()
    sel.register(sys.stdin, selectors.EVENT_READ)
    sel.select(timeout=max(0.0, deadline - time.monotonic()))
    for s in socks:
        s.close()
    return answered, 0.0, [], len(socks) - answered


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("mode", choices=["tls-new", "udp", "udp-idle"])
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--sni", default="localhost")
    ap.add_argument("--procs", type=int, default=8)
    ap.add_argument("--flows", type=int, default=64)
    ap.add_argument("--duration", type=float, default=8.0)
    ap.add_argument("--max", type=int, default=50_000_000)
    args = ap.parse_args()
    args.duration = min(args.duration, 600.0)
    ops, took, lat, errors = {"tls-new": tls_new, "udp": udp, "udp-idle": udp_idle}[args.mode](args)
    p50, p99, p999 = percentiles(lat)
    print(f"RESULT {ops} {took:.3f} {p50} {p99} {p999} {errors}", flush=True)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    main()
