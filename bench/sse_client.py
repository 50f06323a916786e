#!/usr/bin/python3
"""bench/sse_client.py: per-event delay of SSE streams, for bench/request.sh.

    sse_client.py run HOST PORT STREAMS EVENTS INTERVAL_MS OUT
    sse_client.py stats FILE...

"run" opens STREAMS connections to HOST:PORT, sends on each a warm-up
request (n=0: the upstream answers at once) and reads its response, then
POSTs /v1/chat/completions?n=EVENTS&ms=INTERVAL_MS with "stream": true on
each (staggered by INTERVAL_MS / STREAMS, so that their events do not all
leave the upstream in the same timer tick), and reads the responses
(HTTP/1.1, chunked or not) with one poll loop. The warm-up makes each path
alike: nginx sets TCP_NODELAY on a connection when it goes keep-alive
(and on the client side of unbuffered proxying), so without it the first
response of a fresh connection straight from the upstream, and only
there, would be held by Nagle's algorithm behind the client's delayed
ACKs. Each event of
bench/lua/sse.lua carries "t", the upstream's CLOCK_MONOTONIC in ns just
before it wrote the event; the client reads the same clock right after
each recv() and writes arrival - t, in microseconds, one line per event,
to OUT. It prints "events p50 p90 p99 max" (us) and fails unless every
stream gave EVENTS events, then [DONE], with status 200.

"stats" prints "events p50 p90 p99 max" of the delays in FILEs, pooled.

Standard library only; bench/request.sh pins it to the load generator's CPU.
"""

import re
import selectors
import socket
import sys
import time

T_RE = re.compile(rb'"t":(\d+)')


def clock_ns():
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC)


def pct(sorted_values, p):
    """nearest rank"""
    if not sorted_values:
        return float("nan")
    k = max(0, min(len(sorted_values) - 1,
                   int(-(-p * len(sorted_values) // 100)) - 1))
    return sorted_values[k]


def summary(values):
    v = sorted(values)
    return "%d %.1f %.1f %.1f %.1f" % (len(v), pct(v, 50), pct(v, 90),
                                       pct(v, 99), v[-1] if v else 0.0)


def request(host, port, events, interval_ms, connection):
    body = b'{"model":"bench","prompt":"Say hello","stream":true}'
    return (b"POST /v1/chat/completions?n=%d&ms=%d HTTP/1.1\r\n"
            b"Host: %s:%d\r\nContent-Type: application/json\r\n"
            b"Accept: text/event-stream\r\nConnection: %s\r\n"
            b"Content-Length: %d\r\n\r\n%s"
            % (events, interval_ms, host.encode(), port, connection,
               len(body), body))


class Stream:
    def __init__(self, host, port, events, interval_ms):
        self.sock = socket.create_connection((host, port))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.request = request(host, port, events, interval_ms, b"close")

        # the warm-up, blocking
        self.sock.settimeout(10)
        self.reset()
        self.sock.sendall(request(host, port, 0, 1, b"keep-alive"))
        while not self.complete:
            data = self.sock.recv(65536)
            if not data:
                raise RuntimeError("the warm-up response was cut short")
            self.feed(data, 0, [])
        if self.status != 200 or not self.done:
            raise RuntimeError("the warm-up gave %d" % self.status)
        self.reset()

    def reset(self):
        self.raw = b""          # bytes not yet de-chunked
        self.body = b""         # de-chunked bytes not yet split in events
        self.head = None
        self.chunked = False
        self.chunk_left = 0     # bytes left in the current chunk
        self.events = 0
        self.done = False
        self.closed = False
        self.status = 0
        self.complete = False   # the chunked response's last chunk seen

    def feed(self, data, now, delays):
        self.raw += data

        if self.head is None:
            i = self.raw.find(b"\r\n\r\n")
            if i < 0:
                return
            self.head = self.raw[:i].decode("latin-1")
            self.raw = self.raw[i + 4:]
            self.status = int(self.head.split(" ", 2)[1])
            self.chunked = bool(re.search(r"(?im)^transfer-encoding:\s*chunked",
                                          self.head))

        if self.chunked:
            self.dechunk()
        else:
            self.body += self.raw
            self.raw = b""

        while True:
            i = self.body.find(b"\n\n")
            if i < 0:
                break
            event = self.body[:i]
            self.body = self.body[i + 2:]
            if event == b"data: [DONE]":
                self.done = True
                continue
            m = T_RE.search(event)
            if m:
                self.events += 1
                delays.append((now - int(m.group(1))) / 1000.0)

    def dechunk(self):
        while self.raw:
            if self.chunk_left > 0:
                take = min(self.chunk_left, len(self.raw))
                self.body += self.raw[:take]
                self.raw = self.raw[take:]
                self.chunk_left -= take
                continue
            # at a chunk size line, possibly after the previous CRLF
            if self.raw.startswith(b"\r\n"):
                self.raw = self.raw[2:]
                continue
            i = self.raw.find(b"\r\n")
            if i < 0:
                return
            size = int(self.raw[:i].split(b";")[0], 16)
            self.raw = self.raw[i + 2:]
            if size == 0:
                self.raw = b""
                self.complete = True
                return
            self.chunk_left = size


def run(host, port, streams, events, interval_ms, out):
    sel = selectors.DefaultSelector()
    delays = []
    conns = []
    stagger = interval_ms / 1000.0 / streams

    for k in range(streams):
        s = Stream(host, port, events, interval_ms)
        s.sock.sendall(s.request)
        s.sock.setblocking(False)
        sel.register(s.sock, selectors.EVENT_READ, s)
        conns.append(s)
        if k + 1 < streams:
            time.sleep(stagger)

    deadline = time.monotonic() + events * interval_ms / 1000.0 * 3 + 10
    open_ = streams

    while open_ and time.monotonic() < deadline:
        for key, _ in sel.select(timeout=1.0):
            s = key.data
            try:
                data = s.sock.recv(65536)
            except BlockingIOError:
                continue
            now = clock_ns()
            if not data:
                sel.unregister(s.sock)
                s.sock.close()
                s.closed = True
                open_ -= 1
                continue
            s.feed(data, now, delays)

    with open(out, "w") as f:
        f.write("\n".join("%.1f" % d for d in delays))
        f.write("\n")

    bad = [(s.status, s.events, s.done, s.closed) for s in conns
           if s.status != 200 or s.events != events or not s.done]
    print(summary(delays))
    if bad:
        sys.stderr.write("sse_client: incomplete streams (status, events, "
                         "[DONE], closed): %r\n" % bad)
        return 1
    return 0


def stats(files):
    values = []
    for name in files:
        with open(name) as f:
            values.extend(float(x) for x in f if x.strip())
    print(summary(values))
    return 0


def main(argv):
    if len(argv) >= 2 and argv[1] == "stats":
        return stats(argv[2:])
    if len(argv) == 8 and argv[1] == "run":
        return run(argv[2], int(argv[3]), int(argv[4]), int(argv[5]),
                   int(argv[6]), argv[7])
    sys.stderr.write(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
