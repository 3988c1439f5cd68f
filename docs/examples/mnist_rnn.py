"""The PyTorch twin of mnist_rnn.cpp: pytorch/examples' mnist_rnn/main.py with the same model,
optimizer and schedule, on Fashion-MNIST from the Debian package's files, with the
C++ program's flags. Run: /usr/bin/python3 docs/examples/mnist_rnn.py --epochs 1
"""
import argparse
import gzip
import os

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from torch.optim.lr_scheduler import StepLR


def load_fashion_mnist(split, folder, mean=0.2860, std=0.3530):
    """Fashion-MNIST's IDX files (the Debian package's, gzipped) as ToTensor and Normalize give
    them: images float32 [N, 1, 28, 28], (x / 255 - mean) / std; labels int64 [N]."""
    def read_idx(name):
        path = os.path.join(folder, name)
        with (gzip.open(path + ".gz") if os.path.exists(path + ".gz") else open(path, "rb")) as f:
            data = f.read()
        dims = data[3]
        shape = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(dims)]
        return np.frombuffer(data, np.uint8, offset=4 + 4 * dims).reshape(shape)
    x = torch.from_numpy(read_idx(f"{split}-images-idx3-ubyte").astype(np.float32) / 255)
    y = torch.from_numpy(read_idx(f"{split}-labels-idx1-ubyte").astype(np.int64))
    return ((x - mean) / std).unsqueeze(1), y


class Net(nn.Module):
    def __init__(self):
        super(Net, self).__init__()
        self.rnn = nn.LSTM(input_size=28, hidden_size=64, batch_first=True)
        self.batchnorm = nn.BatchNorm1d(64)
        # The original's nn.Dropout2d on this [B, 64] input drops single elements (with a
        # deprecation warning in PyTorch 1.13): nn.Dropout is the same.
        self.dropout1 = nn.Dropout(0.25)
        self.dropout2 = nn.Dropout(0.5)
        self.fc1 = nn.Linear(64, 32)
        self.fc2 = nn.Linear(32, 10)

    def forward(self, input):
        input = input.reshape(-1, 28, 28)  # [B, 28 rows, 28 pixels]
        output, hidden = self.rnn(input)
        output = output[:, -1, :]          # the last step's output
        output = self.dropout1(self.batchnorm(output))
        output = F.relu(self.fc1(output))
        output = self.fc2(self.dropout2(output))
        return F.log_softmax(output, dim=1)


def main():
    parser = argparse.ArgumentParser(description="PyTorch MNIST Example using RNN (Fashion-MNIST)")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--test-batch-size", type=int, default=1000)
    parser.add_argument("--epochs", type=int, default=14)
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("--gamma", type=float, default=0.7)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--log-interval", type=int, default=10)
    parser.add_argument("--steps-per-epoch", type=int, default=0)
    parser.add_argument("--test-batches", type=int, default=0)
    parser.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    args = parser.parse_args()
    torch.manual_seed(args.seed)

    x_train, y_train = load_fashion_mnist("train", args.data)
    x_test, y_test = load_fashion_mnist("t10k", args.data)
    train_loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x_train, y_train),
                                               batch_size=args.batch_size, shuffle=True)
    test_loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x_test, y_test),
                                              batch_size=args.test_batch_size)

    model = Net()
    optimizer = optim.Adadelta(model.parameters(), lr=args.lr)
    scheduler = StepLR(optimizer, step_size=1, gamma=args.gamma)
    for epoch in range(1, args.epochs + 1):
        model.train()
        for batch_idx, (data, target) in enumerate(train_loader):
            if batch_idx == args.steps_per_epoch > 0:
                break
            optimizer.zero_grad()
            loss = F.nll_loss(model(data), target)
            loss.backward()
            optimizer.step()
            if batch_idx % args.log_interval == 0:
                print("Train Epoch: {} [{}/{} ({:.0f}%)]\tLoss: {:.6f}".format(
                    epoch, batch_idx * len(data), len(train_loader.dataset),
                    100. * batch_idx / len(train_loader), loss.item()))
        model.eval()
        test_loss, correct, seen = 0, 0, 0
        with torch.no_grad():
            for b, (data, target) in enumerate(test_loader):
                if b == args.test_batches > 0:
                    break
                output = model(data)
                test_loss += F.nll_loss(output, target, reduction="sum").item()
                correct += output.argmax(dim=1).eq(target).sum().item()
                seen += len(target)
        print("\nTest set: Average loss: {:.4f}, Accuracy: {}/{} ({:.0f}%)\n".format(
            test_loss / seen, correct, seen, 100. * correct / seen))
        scheduler.step()


if __name__ == "__main__":
    main()
