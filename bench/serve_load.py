#!/usr/bin/env python3
"""Throughput and latency of `vitrine-explain --serve` (docs/benchmarks.md), standard library only.

Starts the server on a free loopback port with the given checkpoint, sends REQUESTS requests of
one image from CLIENTS concurrent clients (each request a fresh POST /api/explain with the file
and the options), and prints the answers by status, the throughput and the latency percentiles.
Each configuration is measured twice: "cold" (every request a new image: the forward and
backward pass runs each time; the image's bytes are varied by a PNG text chunk, so the pixels
stay the same) and "cached" (one image: the pass is reused, only the methods run).

  bench/serve_load.py --exe build/tools/explain/vitrine-explain \
      --checkpoint runs/demo/best.safetensors --image boot.png --requests 200 --clients 8 \
      --options '{"methods": "attention,rollout,grad-rollout,chefer,gradcam,saliency"}'
"""
import argparse
import http.client
import json
import re
import struct
import subprocess
import sys
import threading
import time
import uuid
import zlib


def png_with_text(png: bytes, text: str) -> bytes:
    """The PNG with a tEXt chunk after IHDR (same pixels, other bytes: another cache key)."""
    data = b"Comment\0" + text.encode()
    chunk = struct.pack(">I", len(data)) + b"tEXt" + data
    chunk += struct.pack(">I", zlib.crc32(b"tEXt" + data) & 0xFFFFFFFF)
    return png[:33] + chunk + png[33:]


def form(image: bytes, options: str):
    boundary = uuid.uuid4().hex
    parts = [
        f"--{boundary}\r\nContent-Disposition: form-data; name=\"image\"; filename=\"x.png\"\r\n"
        "Content-Type: image/png\r\n\r\n".encode() + image + b"\r\n",
        f"--{boundary}\r\nContent-Disposition: form-data; name=\"options\"\r\n\r\n{options}\r\n"
        .encode(),
        f"--{boundary}--\r\n".encode(),
    ]
    return b"".join(parts), f"multipart/form-data; boundary={boundary}"


def percentile(sorted_values, p):
    if not sorted_values:
        return float("nan")
    k = min(len(sorted_values) - 1, max(0, round(p / 100 * (len(sorted_values) - 1))))
    return sorted_values[k]


def run(port, images, options, requests, clients):
    statuses, latencies, lock = {}, [], threading.Lock()
    counter = iter(range(requests))

    def client():
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
        while True:
            with lock:
                i = next(counter, None)
            if i is None:
                return
            body, ctype = form(images[i % len(images)], options)
            t0 = time.perf_counter()
            conn.request("POST", "/api/explain", body, {"Content-Type": ctype})
            r = conn.getresponse()
            r.read()
            dt = time.perf_counter() - t0
            with lock:
                statuses[r.status] = statuses.get(r.status, 0) + 1
                if r.status == 200:
                    latencies.append(dt)

    t0 = time.perf_counter()
    threads = [threading.Thread(target=client) for _ in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    latencies.sort()
    return {
        "statuses": statuses,
        "answered_per_s": statuses.get(200, 0) / wall,
        "p50_ms": 1000 * percentile(latencies, 50),
        "p99_ms": 1000 * percentile(latencies, 99),
        "wall_s": wall,
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--exe", required=True)
    ap.add_argument("--checkpoint", required=True)
    ap.add_argument("--model-config", default="")
    ap.add_argument("--image", required=True, help="a PNG file")
    ap.add_argument("--requests", type=int, default=200)
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--queue", type=int, default=4)
    ap.add_argument("--options", default="{}")
    args = ap.parse_args()
    cmd = [args.exe, "--checkpoint", args.checkpoint, "--serve", "--port", "0",
           "--queue", str(args.queue)]
    if args.model_config:
        cmd += ["--model-config", args.model_config]
    server = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        port = None
        for line in server.stdout:
            m = re.search(r"at http://[^:]+:(\d+)/", line)
            if m:
                port = int(m.group(1))
                break
        if port is None:
            sys.exit("the server did not start")
        threading.Thread(target=lambda: [None for _ in server.stdout], daemon=True).start()
        png = open(args.image, "rb").read()
        assert png[:8] == b"\x89PNG\r\n\x1a\n", "--image must be a PNG file"
        cold = [png_with_text(png, str(i)) for i in range(args.requests)]
        results = {}
        for name, images in (("cached", [png]), ("cold", cold)):
            run(port, images[:1], args.options, 1, 1)  # warm up (and fill the cache for "cached")
            results[name] = run(port, images, args.options, args.requests, args.clients)
        print(json.dumps({"requests": args.requests, "clients": args.clients,
                          "queue": args.queue, "options": json.loads(args.options),
                          "results": results}, indent=1))
    finally:
        server.terminate()
        server.wait()


if __name__ == "__main__":
    main()
