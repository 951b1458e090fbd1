#!/usr/bin/env python3
"""Completions decoded together (docs/lql/SERVE.md): what batching concurrent requests buys.

usage: bench/serve_batch.py LQL_BINARY CONTAINER [ROUNDS] [TOKENS] [CLIENTS ...]
Starts two servers on the container, one with the default batch_max and one with
`--limit batch_max=1` (each completion decoded alone, in turn), and in every round, for each
client count, has that many clients ask at once for a TOKENS-token completion (greedy, each a
different prompt, no eos: `max_tokens` is what is generated unless the model ends first), on
one server then the other (the order alternates by round, so both run in the same minutes).
Prints, per round and count, the aggregate tokens/s of each, their ratio, the mean time to the
first event, the 1-minute load, and whether every batched answer equals the one-at-a-time
answer to the same request. Defaults: 3 rounds, 32 tokens, clients 1 2 4 8. Loopback only;
both servers are killed at the end.
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
ROUNDS = int(sys.argv[3]) if len(sys.argv) > 3 else 3
TOKENS = int(sys.argv[4]) if len(sys.argv) > 4 else 32
CLIENTS = [int(c) for c in sys.argv[5:]] or [1, 2, 4, 8]
PROMPTS = ["The capital of France is", "Once upon a time, in a small village,", "def fibonacci(n):",
           "The weather today is", "In 1492, Columbus", "My favourite food is", "The theory of relativity",
           "Water boils at", "The quick brown fox", "A good cup of tea needs", "The largest planet is",
           "import numpy as np", "Dear Sir or Madam,", "The history of Rome", "Photosynthesis is",
           "Once there was a king"]
tmp = tempfile.mkdtemp()
servers = {}


def start(name, extra):
    p = subprocess.Popen([LQL, CONT, "--serve", "127.0.0.1:0"] + extra, stderr=subprocess.PIPE,
                         env=dict(os.environ, TMPDIR=tmp))
    line = p.stderr.readline().decode().strip()
    if not line.startswith("lql: serving"):
        sys.exit("the server did not start: " + line)
    servers[name] = (p, int(line.rsplit(":", 1)[1]))


def complete(port, k, out, first):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    body = {"prompt": PROMPTS[k % len(PROMPTS)], "max_tokens": TOKENS, "temperature": 0, "stream": True,
            "stream_options": {"include_usage": True}}
    t0 = time.perf_counter()
    c.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
    r = c.getresponse()
    text, ntok = "", 0
    for line in r:
        line = line.strip()
        if not line.startswith(b"data: {"):
            continue
        if first[k] is None:
            first[k] = time.perf_counter() - t0
        ev = json.loads(line[6:])
        if ev.get("choices"):
            text += ev["choices"][0]["text"]
        if ev.get("usage"):
            ntok = ev["usage"]["completion_tokens"]
    out[k] = (text, ntok)
    c.close()


def run(name, n):
    port = servers[name][1]
    out, first = [None] * n, [None] * n
    th = [threading.Thread(target=complete, args=(port, k, out, first)) for k in range(n)]
    t0 = time.perf_counter()
    for t in th:
        t.start()
    for t in th:
        t.join()
    wall = time.perf_counter() - t0
    return sum(o[1] for o in out) / wall, statistics.mean(first), [o[0] for o in out]


try:
    start("batched", [])
    start("alone", ["--limit", "batch_max=1"])
    for name in servers:                     # warm: the first statement hashes the weights it touches
        run(name, 1)
    print("%s, %d tokens a completion (greedy), %d rounds" % (CONT, TOKENS, ROUNDS))
    print("round clients load |  batched tok/s first ms |  alone tok/s first ms | ratio same")
    ratios = {n: [] for n in CLIENTS}
    for r in range(ROUNDS):
        for n in CLIENTS:
            order = ["batched", "alone"] if (r + n) % 2 == 0 else ["alone", "batched"]
            got = {}
            for name in order:
                got[name] = run(name, n)
            b, a = got["batched"], got["alone"]
            ratios[n].append(b[0] / a[0])
            print("%5d %7d %4.2f | %13.1f %8.1f | %11.1f %8.1f | %5.2f %s"
                  % (r + 1, n, os.getloadavg()[0], b[0], b[1] * 1e3, a[0], a[1] * 1e3, b[0] / a[0],
                     "yes" if b[2] == a[2] else "NO"))
    for n in CLIENTS:
        print("%d clients: batched / alone tokens/s %s" % (n, ", ".join("%.2f" % x for x in ratios[n])))
finally:
    for p, _ in servers.values():
        p.terminate()
        p.wait(20)
