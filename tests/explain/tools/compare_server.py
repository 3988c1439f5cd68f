#!/usr/bin/python3
"""vitrine-explain --serve's answers before and after a change, byte for byte but the timings
(issue 62: the option schema and the methods' files must not change an answer).

    LD_LIBRARY_PATH=/tmp/baseline /usr/bin/python3 tests/explain/tools/compare_server.py \
        OLD_BINARY NEW_BINARY

Starts both servers on free loopback ports with the same random ViT (random:fmnist, seed 3), then
POSTs the same image and options to each: every method alone with the defaults, then with other
options. The old server is sent the old spellings (methods, head_fusion, ig_rule, ...), the new
one the same request once with those (its aliases) and once with the schema's names (method,
head-fusion, ig-method, ...). Each answer's JSON is compared whole, but for "timings" and each
method's "seconds". GET /api/model is compared too. Exit 1 on a difference. Run both binaries
with the same LD_LIBRARY_PATH (the same libvitrine).
"""
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
IMAGES = os.path.join(ROOT, "tests", "fixtures", "images")
METHODS = ["attention", "rollout", "grad-rollout", "chefer", "gradcam", "saliency", "smoothgrad",
           "integrated-gradients", "activation-max", "qkv"]
# The schema's names for the old JSON spellings.
NEW_NAMES = {"methods": "method", "head_fusion": "head-fusion", "discard_ratio": "discard-ratio",
             "ig_rule": "ig-method", "pos_interp": "pos-interp", "distance_norm": "distance-norm",
             "am_steps": "am-steps"}
FAST = {"samples": 2, "steps": 4, "am_steps": 3, "grids": True}


def requests():
    """(image file, options with the old spellings) of every request."""
    out = [("grey.png", dict(FAST, methods=m)) for m in METHODS]
    # The methods by name, not "all": a method added later must not change these answers.
    out.append(("grey.png", dict(FAST, methods=",".join(METHODS[:8]), threshold=0.5, head=1,
                                 layer=0)))
    out.append(("dino_301x203.png", dict(
        FAST, methods=METHODS, resize="factor:0.2", crop="topleft", pos_interp="dino",
        upsample="nearest", layer=1, head=1, head_fusion="max", discard_ratio=0.5,
        ig_rule="trapezoid", baseline="blur", sigma=0.3, seed=7, patch=[1, 2], neuron=5,
        colormap="jet", alpha=0.3, threshold=0.4, distance_norm="patches", target=3)))
    out.append(("dino_301x203.png", dict(FAST, methods="attention,rollout,qkv", resize="factor:0.1",
                                         normalise="none", heads=False)))
    out.append(("dino_301x203.png", dict(FAST, methods=["smoothgrad"], normalise="imagenet")))
    return out


def start(exe, log):
    p = subprocess.Popen([exe, "--checkpoint", "random:fmnist", "--seed", "3", "--serve", "--port",
                          "0"], stdout=log, stderr=subprocess.STDOUT)
    for _ in range(600):
        with open(log.name) as f:
            m = re.search(r"at http://[^:]+:(\d+)/", f.read())
        if m:
            return p, int(m.group(1))
        if p.poll() is not None:
            break
        time.sleep(0.05)
    p.kill()
    sys.exit(f"{exe} did not start: {open(log.name).read()}")


def post(port, image, options):
    boundary = "vitrinecompare"
    with open(os.path.join(IMAGES, image), "rb") as f:
        data = f.read()
    body = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"image\"; filename=\"{image}\""
            f"\r\nContent-Type: application/octet-stream\r\n\r\n").encode() + data + (
        f"\r\n--{boundary}\r\nContent-Disposition: form-data; name=\"options\"\r\n\r\n"
        f"{json.dumps(options)}\r\n--{boundary}--\r\n").encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}/api/explain", data=body, headers={
        "Content-Type": f"multipart/form-data; boundary={boundary}"})
    try:
        with urllib.request.urlopen(req, timeout=600) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def without_timings(body):
    j = json.loads(body)
    if isinstance(j, dict):
        j.pop("timings", None)
        for m in j.get("methods", []):
            m.pop("seconds", None)
    return json.dumps(j, sort_keys=True)


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    old_exe, new_exe = sys.argv[1], sys.argv[2]
    with tempfile.TemporaryDirectory() as tmp:
        logs = [open(os.path.join(tmp, n), "w") for n in ("old.log", "new.log")]
        (old, old_port), (new, new_port) = start(old_exe, logs[0]), start(new_exe, logs[1])
        bad = n = 0
        try:
            a = urllib.request.urlopen(f"http://127.0.0.1:{old_port}/api/model").read()
            b = urllib.request.urlopen(f"http://127.0.0.1:{new_port}/api/model").read()
            n += 1
            ja, jb = json.loads(a), json.loads(b)
            added = [m for m in jb["methods"] if m not in ja["methods"]]
            same = without_stats(a, drop=["methods"]) == without_stats(b, drop=["methods"]) and \
                [m for m in jb["methods"] if m in ja["methods"]] == ja["methods"]
            print(f"{'same' if same else 'DIFFERS'}: GET /api/model (methods added: {added})")
            bad += not same
            for image, options in requests():
                renamed = {NEW_NAMES.get(k, k): v for k, v in options.items()}
                # Each server is asked twice (the second answer from its caches, "cached": true).
                for label, opts in (("old names", options), ("new names", renamed)):
                    sa, want = post(old_port, image, options)
                    sb, got = post(new_port, image, opts)
                    n += 1
                    same = sa == sb and without_timings(want) == without_timings(got)
                    print(f"{'same' if same else 'DIFFERS'}: {image} {label} "
                          f"{json.dumps(opts)[:100]} (HTTP {sa} / {sb}, {len(got)} bytes)")
                    bad += not same
        finally:
            for p in (old, new):
                p.terminate()
                p.wait()
        print(f"\n{n} answers compared, {bad} differ")
        return 1 if bad else 0


def without_stats(body, drop=()):
    j = json.loads(body)
    j.pop("stats", None)  # the counters differ by the requests each has seen
    for k in drop:
        j.pop(k, None)
    return json.dumps(j, sort_keys=True)


if __name__ == "__main__":
    sys.exit(main())
