#!/usr/bin/env python3
"""lql --serve over loopback: what the HTTP layer costs beside the statement itself.

usage: bench/serve.py LQL_BINARY CONTAINER [ROUNDS]
Prints medians: /health round trip (never queued), /v1/query of a small INFER against the
same statement's own time (`.timer on` in the shell), a greedy completion (up to 200
tokens) non-streamed and streamed (tokens/s and time to the first token), and the
throughput of 8 client threads sharing the one compute thread. Loopback only; the server
is killed at the end.
"""
import http.client
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time

LQL, CONT = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
ROUNDS = int(sys.argv[3]) if len(sys.argv) > 3 else 50
tmp = tempfile.mkdtemp()
srv = subprocess.Popen([LQL, CONT, "--serve", "127.0.0.1:0"], stderr=subprocess.PIPE,
                       env=dict(os.environ, TMPDIR=tmp))
try:
    line = srv.stderr.readline().decode().strip()
    if not line.startswith("lql: serving"):
        sys.exit("the server did not start: " + line)
    PORT = int(line.rsplit(":", 1)[1])

    def post(path, body, stream=False):
        c = http.client.HTTPConnection("127.0.0.1", PORT, timeout=120)
        t0 = time.perf_counter()
        c.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
        r = c.getresponse()
        first = None
        data = b""
        while True:
            chunk = r.read1(65536) if stream else r.read()
            if not chunk:
                break
            if first is None:
                first = time.perf_counter() - t0
            data += chunk
            if not stream:
                break
        c.close()
        return time.perf_counter() - t0, first, data

    def get(path):
        c = http.client.HTTPConnection("127.0.0.1", PORT, timeout=60)
        t0 = time.perf_counter()
        c.request("GET", path)
        c.getresponse().read()
        c.close()
        return time.perf_counter() - t0

    ms = lambda xs: statistics.median(xs) * 1e3
    print("health round trip: %.3f ms" % ms([get("/health") for _ in range(ROUNDS * 4)]))
    stmt = 'INFER "The capital of France is" TOP 3;'
    post("/v1/query", {"lql": stmt})
    q = [post("/v1/query", {"lql": stmt, "format": "tsv"})[0] for _ in range(ROUNDS)]
    shell = subprocess.run([LQL, CONT, "-c", ".timer on\n" + stmt * ROUNDS], capture_output=True, text=True).stderr
    own = [float(l.split()[1]) / 1e3 for l in shell.splitlines() if l.startswith("time:")][1:]
    print("query INFER TOP 3: %.3f ms over HTTP, %.3f ms the statement alone (shell .timer)" % (ms(q), ms(own)))
    body = {"prompt": "The capital of France is", "max_tokens": 200, "temperature": 0}
    runs = max(5, ROUNDS // 5)
    full = [post("/v1/completions", body) for _ in range(runs)]
    ntok = json.loads(full[0][2])["usage"]["completion_tokens"]
    st = [post("/v1/completions", dict(body, stream=True), stream=True) for _ in range(runs)]
    nst = sum(1 for l in st[0][2].decode().split("\n") if l.startswith("data: {"))
    print("completion of %d tokens (greedy, ends at eos): %.1f tok/s non-streamed, %.1f tok/s streamed "
          "(%d events), first event after %.1f ms"
          % (ntok, ntok / statistics.median([f[0] for f in full]), ntok / statistics.median([s[0] for s in st]),
             nst, ms([s[1] for s in st])))
    done = []

    def client():
        for _ in range(ROUNDS // 2):
            done.append(post("/v1/query", {"lql": stmt, "format": "tsv"})[0])
    t0 = time.perf_counter()
    th = [threading.Thread(target=client) for _ in range(8)]
    for t in th:
        t.start()
    for t in th:
        t.join()
    wall = time.perf_counter() - t0
    print("8 clients x %d INFER: %.1f queries/s (serial: %.1f/s), median latency %.3f ms"
          % (ROUNDS // 2, len(done) / wall, 1 / statistics.median(q), ms(done)))
finally:
    srv.terminate()
    srv.wait(20)
