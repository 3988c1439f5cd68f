# compare_outputs.sh's ResNet: torchvision's resnet18 (5 classes, seed 0) for 3x64x64 inputs,
# written as a safetensors file with Vitrine's metadata (config, mean, std) by hand (no
# safetensors package needed). Usage: /usr/bin/python3 make_compare_resnet.py OUT.safetensors
import json
import struct
import sys

import torch
import torchvision

torch.manual_seed(0)
model = torchvision.models.resnet18(num_classes=5)
config = {"arch": "resnet", "depth": 18, "channels": 3, "num_classes": 5, "width": 64,
          "image_size": [64, 64], "layers": [2, 2, 2, 2], "stem": "imagenet"}
header, blobs, offset = {}, [], 0
for name, v in model.state_dict().items():
    data = v.contiguous().numpy().tobytes()
    header[name] = {"dtype": "I64" if v.dtype == torch.int64 else "F32", "shape": list(v.shape),
                    "data_offsets": [offset, offset + len(data)]}
    blobs.append(data)
    offset += len(data)
header["__metadata__"] = {"vitrine.config": json.dumps(config),
                          "vitrine.mean": "[0.5, 0.4, 0.3]", "vitrine.std": "[0.25, 0.25, 0.25]"}
text = json.dumps(header).encode()
text += b" " * ((8 - len(text) % 8) % 8)
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<Q", len(text)))
    f.write(text)
    for data in blobs:
        f.write(data)
