#!/usr/bin/python3
"""The PyTorch twin of bench/dcgan.cpp: the same DCGAN training step (docs/examples/dcgan.py's
models at 32 x 32, nz 100, ngf = ndf = 64, one channel) in images per second, or one of the
generator's transposed convolutions / the convolution it is the gradient of, forward + backward,
in calls per second. Prints one JSON line.
    /usr/bin/python3 bench/dcgan_torch.py --what step|convt|conv [--layer 1..4] [--threads 2]
"""
import argparse, json, os, sys, time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "docs",
                                "examples"))
import dcgan  # noqa: E402

LAYERS = [(100, 256, 1, 1, 0), (256, 128, 4, 2, 1), (128, 64, 8, 2, 1), (64, 1, 16, 2, 1)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--what", default="step")
    ap.add_argument("--layer", type=int, default=1)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(999)
    b = a.batch
    if a.what == "step":
        netG, netD = dcgan.Generator(100, 64, 1, 32), dcgan.Discriminator(64, 1, 32)
        netG.apply(dcgan.weights_init)
        netD.apply(dcgan.weights_init)
        optD = torch.optim.Adam(netD.parameters(), lr=2e-4, betas=(0.5, 0.999))
        optG = torch.optim.Adam(netG.parameters(), lr=2e-4, betas=(0.5, 0.999))
        real = torch.rand(b, 1, 32, 32) * 2 - 1
        ones, zeros = torch.full((b,), 1.0), torch.full((b,), 0.0)

        def step():
            netD.zero_grad()
            F.binary_cross_entropy(netD(real), ones).backward()
            fake = netG(torch.randn(b, 100, 1, 1))
            F.binary_cross_entropy(netD(fake.detach()), zeros).backward()
            optD.step()
            netG.zero_grad()
            F.binary_cross_entropy(netD(fake), ones).backward()
            optG.step()
    else:
        cin, cout, s, stride, pad = LAYERS[a.layer - 1]
        S = (s - 1) * stride - 2 * pad + 4
        w = (torch.randn(cin, cout, 4, 4) * 0.02).requires_grad_(True)
        x = torch.randn(*((b, cin, s, s) if a.what == "convt" else (b, cout, S, S)),
                        requires_grad=True)

        def step():
            if a.what == "convt":
                y = F.conv_transpose2d(x, w, None, stride, pad)
            else:
                y = F.conv2d(x, w, None, stride, pad)
            y.sum().backward()
            x.grad = None
            w.grad = None
    for _ in range(2):
        step()
    t0 = time.perf_counter()
    for _ in range(a.steps):
        step()
    secs = time.perf_counter() - t0
    rate = a.steps * b / secs if a.what == "step" else a.steps / secs
    print(json.dumps({"side": "pytorch", "what": a.what,
                      "layer": 0 if a.what == "step" else a.layer, "threads": a.threads,
                      "steps": a.steps, "rate": round(rate, 2)}))


if __name__ == "__main__":
    main()
