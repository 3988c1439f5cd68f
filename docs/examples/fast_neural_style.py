"""The PyTorch twin of fast_neural_style.cpp: pytorch/examples' fast_neural_style
(neural_style/transformer_net.py, vgg.py, utils.py and neural_style.py in one file) with the
C++ program's flags: on the CPU, the VGG16 random unless --vgg gives torchvision's vgg16 weights
(a state dict .pth; nothing is downloaded), --synthetic writing the same pattern images, --check.
Run: /usr/bin/python3 docs/examples/fast_neural_style.py train --dataset /tmp/fns
         --style-image /tmp/fns/style.png --synthetic 8 --image-size 32 --epochs 3
         --log-interval 1 --save-model-dir /tmp/fns_models
A model it saves (.pth) loads into the C++ program after
    /usr/bin/python3 tools/convert/convert.py model.pth model.safetensors --by-name
"""
import argparse
import os
import re
import sys
import time

import numpy as np
import torch
from PIL import Image
from torch.optim import Adam
from torch.utils.data import DataLoader
from torchvision import datasets, models, transforms


# ---- transformer_net.py ------------------------------------------------------------------------
class ConvLayer(torch.nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, stride):
        super().__init__()
        self.reflection_pad = torch.nn.ReflectionPad2d(kernel_size // 2)
        self.conv2d = torch.nn.Conv2d(in_channels, out_channels, kernel_size, stride)

    def forward(self, x):
        return self.conv2d(self.reflection_pad(x))


class ResidualBlock(torch.nn.Module):
    def __init__(self, channels):
        super().__init__()
        self.conv1 = ConvLayer(channels, channels, kernel_size=3, stride=1)
        self.in1 = torch.nn.InstanceNorm2d(channels, affine=True)
        self.conv2 = ConvLayer(channels, channels, kernel_size=3, stride=1)
        self.in2 = torch.nn.InstanceNorm2d(channels, affine=True)
        self.relu = torch.nn.ReLU()

    def forward(self, x):
        out = self.relu(self.in1(self.conv1(x)))
        return self.in2(self.conv2(out)) + x


class UpsampleConvLayer(torch.nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, stride, upsample=None):
        super().__init__()
        self.upsample = upsample
        self.reflection_pad = torch.nn.ReflectionPad2d(kernel_size // 2)
        self.conv2d = torch.nn.Conv2d(in_channels, out_channels, kernel_size, stride)

    def forward(self, x):
        if self.upsample:
            x = torch.nn.functional.interpolate(x, mode="nearest", scale_factor=self.upsample)
        return self.conv2d(self.reflection_pad(x))


class TransformerNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = ConvLayer(3, 32, kernel_size=9, stride=1)
        self.in1 = torch.nn.InstanceNorm2d(32, affine=True)
        self.conv2 = ConvLayer(32, 64, kernel_size=3, stride=2)
        self.in2 = torch.nn.InstanceNorm2d(64, affine=True)
        self.conv3 = ConvLayer(64, 128, kernel_size=3, stride=2)
        self.in3 = torch.nn.InstanceNorm2d(128, affine=True)
        self.res1 = ResidualBlock(128)
        self.res2 = ResidualBlock(128)
        self.res3 = ResidualBlock(128)
        self.res4 = ResidualBlock(128)
        self.res5 = ResidualBlock(128)
        self.deconv1 = UpsampleConvLayer(128, 64, kernel_size=3, stride=1, upsample=2)
        self.in4 = torch.nn.InstanceNorm2d(64, affine=True)
        self.deconv2 = UpsampleConvLayer(64, 32, kernel_size=3, stride=1, upsample=2)
        self.in5 = torch.nn.InstanceNorm2d(32, affine=True)
        self.deconv3 = ConvLayer(32, 3, kernel_size=9, stride=1)
        self.relu = torch.nn.ReLU()

    def forward(self, X):
        y = self.relu(self.in1(self.conv1(X)))
        y = self.relu(self.in2(self.conv2(y)))
        y = self.relu(self.in3(self.conv3(y)))
        for block in (self.res1, self.res2, self.res3, self.res4, self.res5):
            y = block(y)
        y = self.relu(self.in4(self.deconv1(y)))
        y = self.relu(self.in5(self.deconv2(y)))
        return self.deconv3(y)


# ---- vgg.py --------------------------------------------------------------------------------
class Vgg16(torch.nn.Module):
    """relu1_2, relu2_2, relu3_3, relu4_3 of torchvision's vgg16().features[:23]; upstream builds
    it from models.vgg16(pretrained=True), here the weights are random unless vgg_weights names a
    torchvision vgg16 state dict."""

    def __init__(self, vgg_weights=None, requires_grad=False):
        super().__init__()
        vgg = models.vgg16()
        if vgg_weights:
            vgg.load_state_dict(torch.load(vgg_weights, map_location="cpu"))
        features = vgg.features
        bounds = [(0, 4), (4, 9), (9, 16), (16, 23)]
        self.slices = torch.nn.ModuleList(
            torch.nn.Sequential(*[features[i] for i in range(a, b)]) for a, b in bounds)
        if not requires_grad:
            for param in self.parameters():
                param.requires_grad = False

    def forward(self, X):
        out, h = [], X
        for s in self.slices:
            h = s(h)
            out.append(h)
        return out  # relu1_2, relu2_2, relu3_3, relu4_3


# ---- utils.py ------------------------------------------------------------------------------
def load_image(filename, size=None, scale=None):
    img = Image.open(filename).convert("RGB")
    if size is not None:
        img = img.resize((size, size), Image.LANCZOS)
    elif scale is not None:
        img = img.resize((int(img.size[0] / scale), int(img.size[1] / scale)), Image.LANCZOS)
    return img


def save_image(filename, data):
    img = data.clone().clamp(0, 255).numpy().transpose(1, 2, 0).astype("uint8")
    Image.fromarray(img).save(filename)


def gram_matrix(y):
    b, ch, h, w = y.size()
    features = y.view(b, ch, w * h)
    return features.bmm(features.transpose(1, 2)) / (ch * h * w)


def normalize_batch(batch):
    mean = batch.new_tensor([0.485, 0.456, 0.406]).view(-1, 1, 1)
    std = batch.new_tensor([0.229, 0.224, 0.225]).view(-1, 1, 1)
    return (batch / 255.0 - mean) / std


def write_patterns(dataset, style_image, count, size):
    """fast_neural_style.cpp's --synthetic images, pixel for pixel."""
    def png(path, pixel):
        a = np.array([[pixel(x, y) for x in range(size)] for y in range(size)], dtype=np.uint8)
        Image.fromarray(a).save(path)
    os.makedirs(os.path.join(dataset, "patterns"), exist_ok=True)
    for i in range(count):
        cx, cy, r = (i * 7 + 3) % size, (i * 13 + 5) % size, size // 4 + i % 5
        def content(x, y, i=i, cx=cx, cy=cy, r=r):
            disk = (x - cx) ** 2 + (y - cy) ** 2 < r * r
            return (x * 255 // (size - 1), y * 255 // (size - 1),
                    255 - (40 * i) % 256 if disk else (40 * i) % 256)
        png(os.path.join(dataset, "patterns", "%03d.png" % i), content)
    if os.path.dirname(style_image):
        os.makedirs(os.path.dirname(style_image), exist_ok=True)

    def style(x, y):
        if (x + y) % 8 < 2:
            return (240, 200, 30)
        return (230, 60, 40) if (x // 4 + y // 4) % 2 else (30, 90, 200)
    png(style_image, style)


# ---- neural_style.py -----------------------------------------------------------------------
def train(args):
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    os.makedirs(args.save_model_dir, exist_ok=True)  # upstream's check_paths
    if args.checkpoint_model_dir is not None:
        os.makedirs(args.checkpoint_model_dir, exist_ok=True)
    if args.synthetic > 0:
        write_patterns(args.dataset, args.style_image, args.synthetic, args.image_size)

    transform = transforms.Compose([
        transforms.Resize(args.image_size),
        transforms.CenterCrop(args.image_size),
        transforms.ToTensor(),
        transforms.Lambda(lambda x: x.mul(255)),
    ])
    train_dataset = datasets.ImageFolder(args.dataset, transform)
    train_loader = DataLoader(train_dataset, batch_size=args.batch_size)

    transformer = TransformerNet()
    optimizer = Adam(transformer.parameters(), args.lr)
    mse_loss = torch.nn.MSELoss()

    vgg = Vgg16(args.vgg, requires_grad=False)
    style_transform = transforms.Compose([
        transforms.ToTensor(),
        transforms.Lambda(lambda x: x.mul(255)),
    ])
    style = style_transform(load_image(args.style_image, size=args.style_size))
    style = style.repeat(args.batch_size, 1, 1, 1)
    features_style = vgg(normalize_batch(style))
    gram_style = [gram_matrix(y) for y in features_style]

    first_epoch_total = last_epoch_total = None
    for e in range(args.epochs):
        transformer.train()
        agg_content_loss = agg_style_loss = 0.
        count = 0
        for batch_id, (x, _) in enumerate(train_loader):
            n_batch = len(x)
            count += n_batch
            optimizer.zero_grad()

            y = transformer(x)
            y = normalize_batch(y)
            x = normalize_batch(x)
            features_y = vgg(y)
            features_x = vgg(x)

            content_loss = args.content_weight * mse_loss(features_y[1], features_x[1])
            style_loss = 0.
            for ft_y, gm_s in zip(features_y, gram_style):
                style_loss += mse_loss(gram_matrix(ft_y), gm_s[:n_batch, :, :])
            style_loss *= args.style_weight

            total_loss = content_loss + style_loss
            total_loss.backward()
            optimizer.step()

            agg_content_loss += content_loss.item()
            agg_style_loss += style_loss.item()
            if (batch_id + 1) % args.log_interval == 0:
                print("{}\tEpoch {}:\t[{}/{}]\tcontent: {:.6f}\tstyle: {:.6f}\ttotal: {:.6f}".format(
                    time.ctime(), e + 1, count, len(train_dataset),
                    agg_content_loss / (batch_id + 1), agg_style_loss / (batch_id + 1),
                    (agg_content_loss + agg_style_loss) / (batch_id + 1)))
            if args.checkpoint_model_dir is not None and \
                    (batch_id + 1) % args.checkpoint_interval == 0:
                transformer.eval()
                path = os.path.join(args.checkpoint_model_dir,
                                    "ckpt_epoch_" + str(e) + "_batch_id_" + str(batch_id + 1) + ".pth")
                torch.save(transformer.state_dict(), path)
                transformer.train()
        mean_total = (agg_content_loss + agg_style_loss) / (batch_id + 1)
        if first_epoch_total is None:
            first_epoch_total = mean_total
        last_epoch_total = mean_total

    transformer.eval()
    save_model_path = os.path.join(args.save_model_dir, "epoch_{}_{:g}_{:g}.pth".format(
        args.epochs, args.content_weight, args.style_weight))
    torch.save(transformer.state_dict(), save_model_path)
    print("\nDone, trained model saved at", save_model_path)
    print("mean total loss: first epoch {:.1f}, last epoch {:.1f}".format(first_epoch_total,
                                                                        last_epoch_total))
    if args.check and not last_epoch_total < first_epoch_total:
        sys.exit("error: the total loss did not fall")


def stylize(args):
    content_image = load_image(args.content_image, scale=args.content_scale)
    content_transform = transforms.Compose([
        transforms.ToTensor(),
        transforms.Lambda(lambda x: x.mul(255)),
    ])
    content_image = content_transform(content_image).unsqueeze(0)
    with torch.no_grad():
        style_model = TransformerNet()
        state_dict = torch.load(args.model)
        for k in list(state_dict.keys()):  # InstanceNorm's running_* of PyTorch before 0.4
            if re.search(r"in\d+\.running_(mean|var)$", k):
                del state_dict[k]
        style_model.load_state_dict(state_dict)
        style_model.eval()
        output = style_model(content_image)
    save_image(args.output_image, output[0])
    print("wrote", args.output_image)


def main():
    parser = argparse.ArgumentParser(description="parser for fast-neural-style")
    sub = parser.add_subparsers(title="subcommands", dest="subcommand")
    t = sub.add_parser("train")
    t.add_argument("--epochs", type=int, default=2)
    t.add_argument("--batch-size", type=int, default=4)
    t.add_argument("--dataset", type=str, required=True)
    t.add_argument("--style-image", type=str, required=True)
    t.add_argument("--save-model-dir", type=str, required=True)
    t.add_argument("--checkpoint-model-dir", type=str, default=None)
    t.add_argument("--image-size", type=int, default=256)
    t.add_argument("--style-size", type=int, default=None)
    t.add_argument("--seed", type=int, default=42)
    t.add_argument("--content-weight", type=float, default=1e5)
    t.add_argument("--style-weight", type=float, default=1e10)
    t.add_argument("--lr", type=float, default=1e-3)
    t.add_argument("--log-interval", type=int, default=500)
    t.add_argument("--checkpoint-interval", type=int, default=2000)
    t.add_argument("--vgg", type=str, default=None)
    t.add_argument("--synthetic", type=int, default=0)
    t.add_argument("--check", action="store_true")
    e = sub.add_parser("eval")
    e.add_argument("--content-image", type=str, required=True)
    e.add_argument("--content-scale", type=float, default=None)
    e.add_argument("--output-image", type=str, required=True)
    e.add_argument("--model", type=str, required=True)
    args = parser.parse_args()
    if args.subcommand is None:
        parser.error("specify either train or eval")
    train(args) if args.subcommand == "train" else stylize(args)


if __name__ == "__main__":
    main()
