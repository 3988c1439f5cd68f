"""The PyTorch twin of siamese_network.cpp: pytorch/examples' siamese_network/main.py with the same
model, pairs, optimizer and schedule, on Fashion-MNIST from the Debian package's files, with the
C++ program's flags (--small: a ResNet-8 backbone as models/resnet.h's, in place of ResNet-18).
Run: /usr/bin/python3 docs/examples/siamese_network.py --epochs 1
"""
import argparse
import gzip
import os
import random

import numpy as np
import torch
import torch.nn as nn
import torch.optim as optim
import torchvision
from torch.optim.lr_scheduler import StepLR
from torch.utils.data import Dataset


def load_fashion_mnist(split, folder):
    """Fashion-MNIST's IDX files (the Debian package's, gzipped) as torchvision's MNIST keeps
    them: images uint8 [N, 28, 28], labels int64 [N]."""
    def read_idx(name):
        path = os.path.join(folder, name)
        with (gzip.open(path + ".gz") if os.path.exists(path + ".gz") else open(path, "rb")) as f:
            data = f.read()
        dims = data[3]
        shape = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(dims)]
        return np.frombuffer(data, np.uint8, offset=4 + 4 * dims).reshape(shape)
    return (torch.from_numpy(read_idx(f"{split}-images-idx3-ubyte").copy()),
            torch.from_numpy(read_idx(f"{split}-labels-idx1-ubyte").astype(np.int64)))


class BasicBlock(nn.Module):
    """torchvision's BasicBlock, for the --small backbone."""
    def __init__(self, inplanes, planes, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = None
        if stride != 1 or inplanes != planes:
            self.downsample = nn.Sequential(nn.Conv2d(inplanes, planes, 1, stride, bias=False),
                                            nn.BatchNorm2d(planes))

    def forward(self, x):
        out = torch.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return torch.relu(out + (x if self.downsample is None else self.downsample(x)))


class ResNet8(nn.Module):
    """models/resnet.h's ResNet-8 for one channel (a 3x3 stem, stages of one block at 16, 32 and
    64 channels, global average pooling, fc), initialised as torchvision's ResNets."""
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(16)
        self.relu = nn.ReLU(inplace=True)
        self.layer1 = BasicBlock(16, 16, 1)
        self.layer2 = BasicBlock(16, 32, 2)
        self.layer3 = BasicBlock(32, 64, 2)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(64, 10)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")


class SiameseNetwork(nn.Module):
    def __init__(self, small=False):
        super(SiameseNetwork, self).__init__()
        if small:
            self.resnet = ResNet8()
        else:
            self.resnet = torchvision.models.resnet18(weights=None)
            # one input channel: the images are grey
            self.resnet.conv1 = nn.Conv2d(1, 64, kernel_size=(7, 7), stride=(2, 2),
                                          padding=(3, 3), bias=False)
        self.fc_in_features = self.resnet.fc.in_features
        # every child of the ResNet but the last (fc)
        self.resnet = torch.nn.Sequential(*(list(self.resnet.children())[:-1]))
        self.fc = nn.Sequential(
            nn.Linear(self.fc_in_features * 2, 256),
            nn.ReLU(inplace=True),
            nn.Linear(256, 1),
        )
        self.sigmoid = nn.Sigmoid()
        self.resnet.apply(self.init_weights)
        self.fc.apply(self.init_weights)

    def init_weights(self, m):
        if isinstance(m, nn.Linear):
            torch.nn.init.xavier_uniform_(m.weight)
            m.bias.data.fill_(0.01)

    def forward_once(self, x):
        output = self.resnet(x)
        return output.view(output.size()[0], -1)

    def forward(self, input1, input2):
        output = torch.cat((self.forward_once(input1), self.forward_once(input2)), 1)
        return self.sigmoid(self.fc(output))


class APP_MATCHER(Dataset):
    """Pair i: a random class's image and another image of the same class (i even, target 1) or
    of another class (i odd, target 0); pixels 0-255 as floats, unnormalised."""
    def __init__(self, split, folder):
        super(APP_MATCHER, self).__init__()
        images, targets = load_fashion_mnist(split, folder)
        self.data = images.unsqueeze(1).clone()
        np_arr = targets.numpy()
        self.grouped_examples = {i: np.where(np_arr == i)[0] for i in range(10)}

    def __len__(self):
        return self.data.shape[0]

    def __getitem__(self, index):
        selected_class = random.randint(0, 9)
        group = self.grouped_examples[selected_class]
        random_index_1 = random.randint(0, group.shape[0] - 1)
        image_1 = self.data[group[random_index_1]].clone().float()
        if index % 2 == 0:
            random_index_2 = random.randint(0, group.shape[0] - 1)
            while random_index_2 == random_index_1:
                random_index_2 = random.randint(0, group.shape[0] - 1)
            image_2 = self.data[group[random_index_2]].clone().float()
            target = torch.tensor(1, dtype=torch.float)
        else:
            other_selected_class = random.randint(0, 9)
            while other_selected_class == selected_class:
                other_selected_class = random.randint(0, 9)
            other = self.grouped_examples[other_selected_class]
            image_2 = self.data[other[random.randint(0, other.shape[0] - 1)]].clone().float()
            target = torch.tensor(0, dtype=torch.float)
        return image_1, image_2, target


def main():
    parser = argparse.ArgumentParser(description="PyTorch Siamese network Example (Fashion-MNIST)")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--test-batch-size", type=int, default=1000)
    parser.add_argument("--epochs", type=int, default=14)
    parser.add_argument("--lr", type=float, default=1.0)
    parser.add_argument("--gamma", type=float, default=0.7)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--log-interval", type=int, default=10)
    parser.add_argument("--steps-per-epoch", type=int, default=0)
    parser.add_argument("--test-batches", type=int, default=0)
    parser.add_argument("--small", action="store_true")
    parser.add_argument("--save-model", action="store_true")
    parser.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    args = parser.parse_args()
    torch.manual_seed(args.seed)
    random.seed(args.seed)  # the original leaves Python's random unseeded

    train_dataset = APP_MATCHER("train", args.data)
    test_dataset = APP_MATCHER("t10k", args.data)
    train_loader = torch.utils.data.DataLoader(train_dataset, batch_size=args.batch_size)
    test_loader = torch.utils.data.DataLoader(test_dataset, batch_size=args.test_batch_size)

    model = SiameseNetwork(args.small)
    optimizer = optim.Adadelta(model.parameters(), lr=args.lr)
    scheduler = StepLR(optimizer, step_size=1, gamma=args.gamma)
    criterion = nn.BCELoss()
    for epoch in range(1, args.epochs + 1):
        model.train()
        for batch_idx, (images_1, images_2, targets) in enumerate(train_loader):
            if batch_idx == args.steps_per_epoch > 0:
                break
            optimizer.zero_grad()
            outputs = model(images_1, images_2).squeeze(1)
            loss = criterion(outputs, targets)
            loss.backward()
            optimizer.step()
            if batch_idx % args.log_interval == 0:
                print("Train Epoch: {} [{}/{} ({:.0f}%)]\tLoss: {:.6f}".format(
                    epoch, batch_idx * args.batch_size, len(train_loader.dataset),
                    100. * batch_idx / len(train_loader), loss.item()))
        model.eval()
        test_loss, correct, seen = 0, 0, 0
        with torch.no_grad():
            for b, (images_1, images_2, targets) in enumerate(test_loader):
                if b == args.test_batches > 0:
                    break
                outputs = model(images_1, images_2).squeeze(1)
                test_loss += criterion(outputs, targets).sum().item()  # the batch's mean
                pred = torch.where(outputs > 0.5, 1, 0)
                correct += pred.eq(targets.view_as(pred)).sum().item()
                seen += len(targets)
        test_loss /= seen
        print("\nTest set: Average loss: {:.4f}, Accuracy: {}/{} ({:.0f}%)\n".format(
            test_loss, correct, seen, 100. * correct / seen))
        scheduler.step()

    if args.save_model:
        torch.save(model.state_dict(), "siamese_network.pt")


if __name__ == "__main__":
    main()
