import json, struct, sys, torch, torchvision
torch.manual_seed(0)
m = torchvision.models.resnet18(num_classes=5)
sd = {k: v.contiguous() for k, v in m.state_dict().items()}
header, blobs, off = {}, [], 0
for k, v in sd.items():
    b = v.numpy().tobytes()
    header[k] = {"dtype": "I64" if v.dtype == torch.int64 else "F32", "shape": list(v.shape), "data_offsets": [off, off + len(b)]}
    blobs.append(b); off += len(b)
header["__metadata__"] = {"vitrine.config": json.dumps({"arch": "resnet", "depth": 18, "channels": 3, "num_classes": 5, "width": 64, "image_size": [64, 64], "layers": [2, 2, 2, 2], "stem": "imagenet"}), "vitrine.mean": "[0.5, 0.4, 0.3]", "vitrine.std": "[0.25, 0.25, 0.25]"}
h = json.dumps(header).encode()
h += b" " * ((8 - len(h) % 8) % 8)
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<Q", len(h))); f.write(h); [f.write(b) for b in blobs]
