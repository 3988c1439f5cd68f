"""The PyTorch twin of dcgan.cpp: pytorch/examples' dcgan/main.py (its mnist branch) with the same
models, initialisation, optimizers and losses, on Fashion-MNIST from the Debian package's files
resized to --imageSize (a layer per doubling from 4 x 4, as the C++ program), with the C++
program's flags. Run: /usr/bin/python3 docs/examples/dcgan.py --niter 1 --steps-per-epoch 50
"""
import argparse
import gzip
import os

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
import torchvision.utils as vutils


def load_fashion_mnist(folder, size):
    """The training images as Resize(size), ToTensor and Normalize((0.5,), (0.5,)) give them."""
    path = os.path.join(folder, "train-images-idx3-ubyte")
    with (gzip.open(path + ".gz") if os.path.exists(path + ".gz") else open(path, "rb")) as f:
        data = f.read()
    x = np.frombuffer(data, np.uint8, offset=16).reshape(-1, 1, 28, 28).astype(np.float32) / 255
    x = torch.from_numpy(x)
    if size != 28:
        x = F.interpolate(x, size=(size, size), mode="bilinear", align_corners=False)
    return (x - 0.5) / 0.5


def doublings(size):
    n, s = 0, 4
    while s < size:
        s, n = s * 2, n + 1
    assert n >= 1 and 4 << n == size, "--imageSize must be 4 times a power of 2"
    return n


class Generator(nn.Module):
    def __init__(self, nz, ngf, nc, size):
        super().__init__()
        n = doublings(size)
        ch = ngf << (n - 1)
        layers = [nn.ConvTranspose2d(nz, ch, 4, 1, 0, bias=False), nn.BatchNorm2d(ch), nn.ReLU(True)]
        for _ in range(1, n):
            layers += [nn.ConvTranspose2d(ch, ch // 2, 4, 2, 1, bias=False), nn.BatchNorm2d(ch // 2),
                       nn.ReLU(True)]
            ch //= 2
        layers += [nn.ConvTranspose2d(ch, nc, 4, 2, 1, bias=False), nn.Tanh()]
        self.main = nn.Sequential(*layers)

    def forward(self, z):
        return self.main(z)


class Discriminator(nn.Module):
    def __init__(self, ndf, nc, size):
        super().__init__()
        n = doublings(size)
        ch = ndf
        layers = [nn.Conv2d(nc, ch, 4, 2, 1, bias=False), nn.LeakyReLU(0.2, inplace=True)]
        for _ in range(1, n):
            layers += [nn.Conv2d(ch, ch * 2, 4, 2, 1, bias=False), nn.BatchNorm2d(ch * 2),
                       nn.LeakyReLU(0.2, inplace=True)]
            ch *= 2
        layers += [nn.Conv2d(ch, 1, 4, 1, 0, bias=False), nn.Sigmoid()]
        self.main = nn.Sequential(*layers)

    def forward(self, x):
        return self.main(x).view(-1, 1).squeeze(1)


def weights_init(m):
    classname = m.__class__.__name__
    if classname.find("Conv") != -1:
        torch.nn.init.normal_(m.weight, 0.0, 0.02)
    elif classname.find("BatchNorm") != -1:
        torch.nn.init.normal_(m.weight, 1.0, 0.02)
        torch.nn.init.zeros_(m.bias)


def main():
    p = argparse.ArgumentParser(description="pytorch/examples' dcgan on Fashion-MNIST")
    p.add_argument("--batchSize", type=int, default=64)
    p.add_argument("--imageSize", type=int, default=32)
    p.add_argument("--nz", type=int, default=100)
    p.add_argument("--ngf", type=int, default=64)
    p.add_argument("--ndf", type=int, default=64)
    p.add_argument("--niter", type=int, default=25)
    p.add_argument("--lr", type=float, default=0.0002)
    p.add_argument("--beta1", type=float, default=0.5)
    p.add_argument("--manualSeed", type=int, default=999)
    p.add_argument("--outf", default="results")
    p.add_argument("--steps-per-epoch", type=int, default=0)
    p.add_argument("--log-interval", type=int, default=50)
    p.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--save-model", action="store_true")
    a = p.parse_args()
    torch.manual_seed(a.manualSeed)
    os.makedirs(a.outf, exist_ok=True)
    images = load_fashion_mnist(a.data, a.imageSize)

    nc = 1
    netG = Generator(a.nz, a.ngf, nc, a.imageSize)
    netG.apply(weights_init)
    netD = Discriminator(a.ndf, nc, a.imageSize)
    netD.apply(weights_init)
    criterion = nn.BCELoss()
    fixed_noise = torch.randn(a.batchSize, a.nz, 1, 1)
    real_label, fake_label = 1.0, 0.0
    optimizerD = optim.Adam(netD.parameters(), lr=a.lr, betas=(a.beta1, 0.999))
    optimizerG = optim.Adam(netG.parameters(), lr=a.lr, betas=(a.beta1, 0.999))

    history = []
    for epoch in range(a.niter):
        order = torch.randperm(len(images))
        batches = (len(images) + a.batchSize - 1) // a.batchSize
        for i in range(batches):
            if a.steps_per_epoch and i == a.steps_per_epoch:
                break
            real = images[order[i * a.batchSize:(i + 1) * a.batchSize]]
            b = real.size(0)
            # (1) Update D network: maximize log(D(x)) + log(1 - D(G(z)))
            netD.zero_grad()
            output = netD(real)
            errD_real = criterion(output, torch.full((b,), real_label))
            errD_real.backward()
            D_x = output.mean().item()
            noise = torch.randn(b, a.nz, 1, 1)
            fake = netG(noise)
            output = netD(fake.detach())
            errD_fake = criterion(output, torch.full((b,), fake_label))
            errD_fake.backward()
            D_G_z1 = output.mean().item()
            errD = errD_real.item() + errD_fake.item()
            optimizerD.step()
            # (2) Update G network: maximize log(D(G(z)))
            netG.zero_grad()
            output = netD(fake)
            errG = criterion(output, torch.full((b,), real_label))
            errG.backward()
            D_G_z2 = output.mean().item()
            optimizerG.step()
            history.append(errD)
            if i % a.log_interval == 0:
                print(f"[{epoch}/{a.niter}][{i}/{batches}] Loss_D: {errD:.4f} Loss_G: "
                      f"{errG.item():.4f} D(x): {D_x:.4f} D(G(z)): {D_G_z1:.4f} / {D_G_z2:.4f}",
                      flush=True)
            if i == 0 and epoch == 0:
                vutils.save_image(real, f"{a.outf}/real_samples.png", normalize=True)
        with torch.no_grad():
            fake = netG(fixed_noise)
        vutils.save_image(fake, f"{a.outf}/fake_samples_epoch_{epoch:03d}.png", normalize=True)
        if a.save_model:
            torch.save(netG.state_dict(), f"{a.outf}/netG_epoch_{epoch}.pth")
            torch.save(netD.state_dict(), f"{a.outf}/netD_epoch_{epoch}.pth")
    q = max(1, len(history) // 4)
    print(f"Loss_D: first batches' mean {sum(history[:q]) / q:.4f}, "
          f"last batches' mean {sum(history[-q:]) / q:.4f}")


if __name__ == "__main__":
    main()
