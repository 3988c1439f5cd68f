"""The PyTorch twin of vae.cpp: pytorch/examples' vae/main.py with the same model, loss and
optimizer, on Fashion-MNIST from the Debian package's files, with the C++ program's flags.
Run: /usr/bin/python3 docs/examples/vae.py --epochs 1
"""
import argparse
import gzip
import os

import numpy as np
import torch
import torch.utils.data
from torch import nn, optim
from torch.nn import functional as F
from torchvision.utils import save_image


def load_fashion_mnist(split, folder):
    """Fashion-MNIST's IDX images (the Debian package's, gzipped) as ToTensor gives them: float32
    [N, 1, 28, 28] in [0, 1], with their labels int64 [N]."""
    def read_idx(name):
        path = os.path.join(folder, name)
        with (gzip.open(path + ".gz") if os.path.exists(path + ".gz") else open(path, "rb")) as f:
            data = f.read()
        dims = data[3]
        shape = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(dims)]
        return np.frombuffer(data, np.uint8, offset=4 + 4 * dims).reshape(shape)
    x = torch.from_numpy(read_idx(f"{split}-images-idx3-ubyte").astype(np.float32) / 255)
    y = torch.from_numpy(read_idx(f"{split}-labels-idx1-ubyte").astype(np.int64))
    return x.unsqueeze(1), y


class VAE(nn.Module):
    def __init__(self):
        super(VAE, self).__init__()
        self.fc1 = nn.Linear(784, 400)
        self.fc21 = nn.Linear(400, 20)
        self.fc22 = nn.Linear(400, 20)
        self.fc3 = nn.Linear(20, 400)
        self.fc4 = nn.Linear(400, 784)

    def encode(self, x):
        h1 = F.relu(self.fc1(x))
        return self.fc21(h1), self.fc22(h1)

    def reparameterize(self, mu, logvar):
        std = torch.exp(0.5 * logvar)
        eps = torch.randn_like(std)
        return mu + eps * std

    def decode(self, z):
        h3 = F.relu(self.fc3(z))
        return torch.sigmoid(self.fc4(h3))

    def forward(self, x):
        mu, logvar = self.encode(x.view(-1, 784))
        z = self.reparameterize(mu, logvar)
        return self.decode(z), mu, logvar


# Reconstruction + KL divergence losses summed over all elements and batch
def loss_function(recon_x, x, mu, logvar):
    BCE = F.binary_cross_entropy(recon_x, x.view(-1, 784), reduction="sum")
    # Appendix B of the paper: 0.5 * sum(1 + log(sigma^2) - mu^2 - sigma^2)
    KLD = -0.5 * torch.sum(1 + logvar - mu.pow(2) - logvar.exp())
    return BCE + KLD


def main():
    parser = argparse.ArgumentParser(description="VAE Example (Fashion-MNIST)")
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--log-interval", type=int, default=10)
    parser.add_argument("--steps-per-epoch", type=int, default=0)
    parser.add_argument("--test-batches", type=int, default=0)
    parser.add_argument("--out-dir", default="results")
    parser.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    args = parser.parse_args()
    torch.manual_seed(args.seed)
    os.makedirs(args.out_dir, exist_ok=True)

    train_loader = torch.utils.data.DataLoader(
        torch.utils.data.TensorDataset(*load_fashion_mnist("train", args.data)),
        batch_size=args.batch_size, shuffle=True)
    test_loader = torch.utils.data.DataLoader(
        torch.utils.data.TensorDataset(*load_fashion_mnist("t10k", args.data)),
        batch_size=args.batch_size, shuffle=False)

    model = VAE()
    optimizer = optim.Adam(model.parameters(), lr=1e-3)

    for epoch in range(1, args.epochs + 1):
        model.train()
        train_loss, trained = 0, 0
        for batch_idx, (data, _) in enumerate(train_loader):
            if batch_idx == args.steps_per_epoch > 0:
                break
            optimizer.zero_grad()
            recon_batch, mu, logvar = model(data)
            loss = loss_function(recon_batch, data, mu, logvar)
            loss.backward()
            train_loss += loss.item()
            trained += len(data)
            optimizer.step()
            if batch_idx % args.log_interval == 0:
                print("Train Epoch: {} [{}/{} ({:.0f}%)]\tLoss: {:.6f}".format(
                    epoch, batch_idx * args.batch_size, len(train_loader.dataset),
                    100. * batch_idx / len(train_loader), loss.item() / len(data)))
        print("====> Epoch: {} Average loss: {:.4f}".format(epoch, train_loss / trained))

        model.eval()
        test_loss, seen = 0, 0
        with torch.no_grad():
            for i, (data, _) in enumerate(test_loader):
                if i == args.test_batches > 0:
                    break
                recon_batch, mu, logvar = model(data)
                test_loss += loss_function(recon_batch, data, mu, logvar).item()
                seen += len(data)
                if i == 0:
                    n = min(data.size(0), 8)
                    comparison = torch.cat([data[:n], recon_batch.view(-1, 1, 28, 28)[:n]])
                    save_image(comparison, os.path.join(
                        args.out_dir, "reconstruction_" + str(epoch) + ".png"), nrow=n)
        print("====> Test set loss: {:.4f}".format(test_loss / seen))

        with torch.no_grad():
            sample = model.decode(torch.randn(64, 20))
            save_image(sample.view(64, 1, 28, 28),
                       os.path.join(args.out_dir, "sample_" + str(epoch) + ".png"))


if __name__ == "__main__":
    main()
