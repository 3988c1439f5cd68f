"""The PyTorch twin of super_resolution.cpp: pytorch/examples' super_resolution (model.py, data.py,
main.py) with the same model, optimizer and data, on Fashion-MNIST from the Debian package's files
instead of BSDS300, with the C++ program's flags.
Run: /usr/bin/python3 docs/examples/super_resolution.py --nEpochs 1
"""
import argparse
import gzip
import os
from math import log10

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.nn.init as init
import torch.optim as optim
from torch.utils.data import DataLoader, Dataset
from torchvision.transforms import CenterCrop, Compose, Resize


def load_fashion_mnist(split, folder):
    """Fashion-MNIST's IDX images (the Debian package's, gzipped) as ToTensor gives them: float32
    [N, 1, 28, 28] in [0, 1]."""
    path = os.path.join(folder, f"{split}-images-idx3-ubyte")
    with (gzip.open(path + ".gz") if os.path.exists(path + ".gz") else open(path, "rb")) as f:
        data = f.read()
    shape = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(data[3])]
    images = np.frombuffer(data, np.uint8, offset=4 + 4 * data[3]).reshape(shape)
    return torch.from_numpy(images.astype(np.float32) / 255).unsqueeze(1)


# model.py
class Net(nn.Module):
    def __init__(self, upscale_factor):
        super(Net, self).__init__()
        self.relu = nn.ReLU()
        self.conv1 = nn.Conv2d(1, 64, (5, 5), (1, 1), (2, 2))
        self.conv2 = nn.Conv2d(64, 64, (3, 3), (1, 1), (1, 1))
        self.conv3 = nn.Conv2d(64, 32, (3, 3), (1, 1), (1, 1))
        self.conv4 = nn.Conv2d(32, upscale_factor ** 2, (3, 3), (1, 1), (1, 1))
        self.pixel_shuffle = nn.PixelShuffle(upscale_factor)
        init.orthogonal_(self.conv1.weight, init.calculate_gain("relu"))
        init.orthogonal_(self.conv2.weight, init.calculate_gain("relu"))
        init.orthogonal_(self.conv3.weight, init.calculate_gain("relu"))
        init.orthogonal_(self.conv4.weight)

    def forward(self, x):
        x = self.relu(self.conv1(x))
        x = self.relu(self.conv2(x))
        x = self.relu(self.conv3(x))
        return self.pixel_shuffle(self.conv4(x))


# data.py: (input, target) pairs of each image's Y channel (the items are grey: the image itself)
class DatasetFromImages(Dataset):
    def __init__(self, images, input_transform, target_transform):
        self.images = images
        self.input_transform = input_transform
        self.target_transform = target_transform

    def __getitem__(self, index):
        y = self.images[index]
        return self.input_transform(y), self.target_transform(y)

    def __len__(self):
        return len(self.images)


def get_set(split, folder, upscale_factor):
    crop_size = 28 - 28 % upscale_factor  # calculate_valid_crop_size(28, upscale_factor)
    input_transform = Compose([CenterCrop(crop_size),
                               Resize(crop_size // upscale_factor, antialias=True)])
    return DatasetFromImages(load_fashion_mnist(split, folder), input_transform,
                             CenterCrop(crop_size))


def main():
    parser = argparse.ArgumentParser(description="PyTorch Super Res Example (Fashion-MNIST)")
    parser.add_argument("--upscale_factor", type=int, default=3)
    parser.add_argument("--batchSize", "--batch-size", type=int, default=64)
    parser.add_argument("--testBatchSize", "--test-batch-size", type=int, default=10)
    parser.add_argument("--nEpochs", "--epochs", type=int, default=2)
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--seed", type=int, default=123)
    parser.add_argument("--log-interval", type=int, default=10)
    parser.add_argument("--steps-per-epoch", type=int, default=0)
    parser.add_argument("--test-batches", type=int, default=0)
    parser.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    opt = parser.parse_args()
    torch.manual_seed(opt.seed)

    training_data_loader = DataLoader(get_set("train", opt.data, opt.upscale_factor),
                                      batch_size=opt.batchSize, shuffle=True)
    testing_data_loader = DataLoader(get_set("t10k", opt.data, opt.upscale_factor),
                                     batch_size=opt.testBatchSize, shuffle=False)
    model = Net(upscale_factor=opt.upscale_factor)
    criterion = nn.MSELoss()
    optimizer = optim.Adam(model.parameters(), lr=opt.lr)

    for epoch in range(1, opt.nEpochs + 1):
        epoch_loss, iterations = 0, 0
        for iteration, (input, target) in enumerate(training_data_loader, 1):
            if iteration > opt.steps_per_epoch > 0:
                break
            optimizer.zero_grad()
            loss = criterion(model(input), target)
            epoch_loss += loss.item()
            iterations += 1
            loss.backward()
            optimizer.step()
            if (iteration - 1) % opt.log_interval == 0:
                print("===> Epoch[{}]({}/{}): Loss: {:.4f}".format(
                    epoch, iteration, len(training_data_loader), loss.item()))
        print("===> Epoch {} Complete: Avg. Loss: {:.4f}".format(epoch, epoch_loss / iterations))

        avg_psnr, avg_bicubic, tested = 0, 0, 0
        with torch.no_grad():
            for b, (input, target) in enumerate(testing_data_loader):
                if b == opt.test_batches > 0:
                    break
                mse = criterion(model(input), target)
                bicubic = F.interpolate(input, scale_factor=opt.upscale_factor, mode="bicubic")
                avg_psnr += 10 * log10(1 / mse.item())
                avg_bicubic += 10 * log10(1 / criterion(bicubic, target).item())
                tested += 1
        print("===> Avg. PSNR: {:.4f} dB (bicubic upscaling: {:.4f} dB)".format(
            avg_psnr / tested, avg_bicubic / tested))
        model_out_path = "model_epoch_{}.pth".format(epoch)
        torch.save(model, model_out_path)
        print("Checkpoint saved to {}".format(model_out_path))


if __name__ == "__main__":
    main()
