#!/usr/bin/env python3
"""An independent reader of vitrine-train's TensorBoard event file, checked against the run.

    /usr/bin/python3 tests/train/read_tfevents.py RUN_DIR

It shares no code with the C++ writer (train/tfevents.cpp): it parses the TFRecord framing
itself, checks both masked CRC-32Cs of every record with its own CRC-32C, and decodes each Event
with python3-protobuf from the same message declarations (train/proto/tfevents.proto,
compiled here by protoc into a temporary folder). Then it holds the events to the run folder:

  - exactly one file events.out.tfevents.* in RUN_DIR, made of whole records only;
  - the first event says file_version "brain.Event:2";
  - then one event per line of metrics.jsonl, in order, at the line's global_step, whose summary
    holds exactly the line's scalars: every number but epoch, step and global_step (null, a value
    that was not finite, is left out), tagged "<group>/<key>" with group "val" for "eval" lines and
    the type otherwise, each equal to the number rounded to float32;
  - with confusion_matrix.json, one last event at the last line's step: the PNG image
    "test/confusion_matrix" whose chunks have good CRCs and whose squares have the colours of
    the matrix's rows (white to dark blue by the row's fraction);
  - every event decodes with no field unknown to the declarations (re-encoded, the same bytes),
    and wall times never go back.

Exit status: 0 all good; 1 a fault (said on stderr); 2 a bad command line; 77 (the suite's
"skipped") when google.protobuf or protoc is missing.
"""

import importlib.util
import json
import math
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import zlib

SKIP = 77
HERE = os.path.dirname(os.path.abspath(__file__))
PROTO = os.path.join(HERE, "..", "..", "train", "proto", "tfevents.proto")


class Fault(Exception):
    pass


def crc32c_table():
    table = []
    for b in range(256):
        c = b
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


CRC32C_TABLE = crc32c_table()


def crc32c(data):
    c = 0xFFFFFFFF
    for byte in data:
        c = CRC32C_TABLE[(c ^ byte) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


def masked_crc32c(data):
    c = crc32c(data)
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def records(blob, name):
    """The data of every TFRecord record in blob, both CRCs checked."""
    at, out = 0, []
    while at < len(blob):
        where = f"{name}: record {len(out)} at byte {at}"
        if len(blob) - at < 12:
            raise Fault(f"{where}: {len(blob) - at} bytes left, a record header needs 12")
        header = blob[at:at + 8]
        (length,) = struct.unpack("<Q", header)
        (length_crc,) = struct.unpack("<I", blob[at + 8:at + 12])
        if length_crc != masked_crc32c(header):
            raise Fault(f"{where}: the length's CRC is {length_crc:#010x}, "
                        f"the length bytes give {masked_crc32c(header):#010x}")
        if len(blob) - at - 12 < length + 4:
            raise Fault(f"{where}: the record says {length} bytes of data, the file ends before")
        data = blob[at + 12:at + 12 + length]
        (data_crc,) = struct.unpack("<I", blob[at + 12 + length:at + 16 + length])
        if data_crc != masked_crc32c(data):
            raise Fault(f"{where}: the data's CRC is {data_crc:#010x}, "
                        f"the data gives {masked_crc32c(data):#010x}")
        out.append(data)
        at += 16 + length
    return out


def load_messages(tmp):
    """The Event class from tfevents.proto, compiled by protoc into tmp."""
    protoc = shutil.which("protoc")
    if protoc is None:
        return None, "protoc is not installed (Debian: protobuf-compiler)"
    proto_dir, proto_name = os.path.split(os.path.abspath(PROTO))
    done = subprocess.run([protoc, f"-I{proto_dir}", f"--python_out={tmp}", proto_name],
                          capture_output=True, text=True)
    if done.returncode != 0:
        raise Fault(f"protoc failed on {PROTO}:\n{done.stderr}")
    module_path = os.path.join(tmp, proto_name.replace(".proto", "_pb2.py"))
    spec = importlib.util.spec_from_file_location("tfevents_pb2", module_path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.Event, ""


def float32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def expected_scalars(line):
    group = "val" if line["type"] == "eval" else line["type"]
    out = []
    for key, value in line.items():
        if key in ("epoch", "step", "global_step") or isinstance(value, bool):
            continue
        if isinstance(value, (int, float)) and math.isfinite(value):
            out.append((f"{group}/{key}", float32(value)))
    return out


def png_rows(png, where):
    """The RGB rows of an 8-bit RGB PNG (every chunk's CRC checked), and its width and height."""
    if png[:8] != b"\x89PNG\r\n\x1a\n":
        raise Fault(f"{where}: not a PNG (signature {png[:8]!r})")
    at, idat, width, height = 8, b"", None, None
    while at < len(png):
        (length,) = struct.unpack(">I", png[at:at + 4])
        kind = png[at + 4:at + 8]
        body = png[at + 8:at + 8 + length]
        (crc,) = struct.unpack(">I", png[at + 8 + length:at + 12 + length])
        if crc != zlib.crc32(kind + body):
            raise Fault(f"{where}: PNG chunk {kind!r} has a bad CRC")
        if kind == b"IHDR":
            width, height, depth, colour = struct.unpack(">IIBB", body[:10])
            if (depth, colour) != (8, 2):
                raise Fault(f"{where}: PNG of bit depth {depth}, colour type {colour}; "
                            "expected 8-bit RGB (2)")
        elif kind == b"IDAT":
            idat += body
        at += 12 + length
    raw = zlib.decompress(idat)
    stride = 3 * width
    if len(raw) != height * (1 + stride):
        raise Fault(f"{where}: PNG data of {len(raw)} bytes for {width} x {height} RGB")
    rows, previous = [], bytearray(stride)
    for y in range(height):
        kind, line = raw[y * (1 + stride)], bytearray(raw[y * (1 + stride) + 1:(y + 1) * (1 + stride)])
        for i in range(stride):
            a = line[i - 3] if i >= 3 else 0
            b = previous[i]
            c = previous[i - 3] if i >= 3 else 0
            if kind == 1:
                line[i] = (line[i] + a) & 0xFF
            elif kind == 2:
                line[i] = (line[i] + b) & 0xFF
            elif kind == 3:
                line[i] = (line[i] + (a + b) // 2) & 0xFF
            elif kind == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 0xFF
            elif kind != 0:
                raise Fault(f"{where}: PNG row {y} has filter {kind}")
        rows.append(line)
        previous = line
    return rows, width, height


def check_confusion_image(value, confusion, where):
    image = value.image
    rows, width, height = png_rows(image.encoded_image_string, where)
    if (image.width, image.height, image.colorspace) != (width, height, 3):
        raise Fault(f"{where}: Summary.Image says {image.width} x {image.height} colorspace "
                    f"{image.colorspace}, the PNG is {width} x {height} RGB")
    classes = len(confusion)
    cell = min(max(256 // classes, 1), 32)
    grid = 1 if cell >= 4 else 0
    side = classes * cell + (classes + 1) * grid
    if (width, height) != (side, side):
        raise Fault(f"{where}: {width} x {height} pixels for {classes} classes, expected {side}")
    for t, row in enumerate(confusion):
        total = sum(row)
        for p, n in enumerate(row):
            f = n / total if total else 0.0
            want = tuple(int(math.floor(255 + f * (end - 255) + 0.5)) for end in (8, 48, 107))
            y = grid + t * (cell + grid) + cell // 2
            x = grid + p * (cell + grid) + cell // 2
            got = tuple(rows[y][3 * x:3 * x + 3])
            if any(abs(g - w) > 1 for g, w in zip(got, want)):
                raise Fault(f"{where}: square ({t}, {p}) is {got}, its fraction {n}/{total} "
                            f"gives {want}")


def check(run_dir, Event):
    names = sorted(n for n in os.listdir(run_dir) if n.startswith("events.out.tfevents."))
    if len(names) != 1:
        raise Fault(f"{run_dir}: {len(names)} event files ({names}), expected one")
    path = os.path.join(run_dir, names[0])
    with open(path, "rb") as f:
        datas = records(f.read(), path)
    events = []
    for i, data in enumerate(datas):
        event = Event.FromString(data)
        if event.SerializeToString() != data:
            raise Fault(f"{path}: record {i} does not re-encode to its bytes "
                        "(fields the declarations do not know?)")
        events.append(event)
    if not events or events[0].WhichOneof("what") != "file_version" or \
            events[0].file_version != "brain.Event:2" or events[0].wall_time <= 0:
        raise Fault(f"{path}: the first event is not file_version \"brain.Event:2\" "
                    f"with a wall time: {events[0] if events else 'no records'}")
    for i in range(1, len(events)):
        if events[i].wall_time < events[i - 1].wall_time:
            raise Fault(f"{path}: record {i}'s wall time goes back")

    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        lines = [json.loads(line) for line in f if line.strip()]
    confusion_path = os.path.join(run_dir, "confusion_matrix.json")
    has_image = os.path.exists(confusion_path)
    want_records = 1 + len(lines) + (1 if has_image else 0)
    if len(events) != want_records:
        raise Fault(f"{path}: {len(events)} records; metrics.jsonl's {len(lines)} lines "
                    f"{'and the confusion matrix ' if has_image else ''}make {want_records}")
    values = 0
    for i, line in enumerate(lines):
        event, where = events[i + 1], f"{path}: record {i + 1} (metrics.jsonl line {i + 1})"
        if event.WhichOneof("what") != "summary":
            raise Fault(f"{where}: not a summary: {event}")
        if event.step != line["global_step"]:
            raise Fault(f"{where}: step {event.step}, the line's global_step is "
                        f"{line['global_step']}")
        got = []
        for v in event.summary.value:
            if v.WhichOneof("value") != "simple_value":
                raise Fault(f"{where}: {v.tag} is not a scalar")
            got.append((v.tag, v.simple_value))
        want = expected_scalars(line)
        if got != want:
            raise Fault(f"{where}: scalars {got}, the line gives {want}")
        values += len(got)
    summary = (f"{path}: {len(events)} records, every CRC good; the file version, then "
               f"{len(lines)} events matching metrics.jsonl ({values} scalars, steps "
               f"{lines[0]['global_step'] if lines else '-'} to "
               f"{lines[-1]['global_step'] if lines else '-'})")
    if has_image:
        with open(confusion_path) as f:
            confusion = json.load(f)["confusion"]
        event, where = events[-1], f"{path}: the last record"
        values = list(event.summary.value) if event.WhichOneof("what") == "summary" else []
        if len(values) != 1 or values[0].tag != "test/confusion_matrix" or \
                values[0].WhichOneof("value") != "image":
            raise Fault(f"{where}: expected the image test/confusion_matrix, got "
                        f"{[v.tag for v in values]}")
        if event.step != lines[-1]["global_step"]:
            raise Fault(f"{where}: step {event.step}, the run's last is "
                        f"{lines[-1]['global_step']}")
        check_confusion_image(values[0], confusion, where)
        summary += (f", and the {values[0].image.width} x {values[0].image.height} confusion "
                    f"matrix image at step {event.step}")
    print(summary)


def main(argv):
    if len(argv) != 2:
        print(f"usage: {argv[0]} RUN_DIR", file=sys.stderr)
        return 2
    try:
        import google.protobuf  # noqa: F401
    except ImportError:
        print("read_tfevents: skipped: python3's google.protobuf is not installed "
              "(Debian: python3-protobuf)")
        return SKIP
    with tempfile.TemporaryDirectory() as tmp:
        try:
            Event, why = load_messages(tmp)
            if Event is None:
                print(f"read_tfevents: skipped: {why}")
                return SKIP
            check(argv[1], Event)
        except Fault as e:
            print(f"read_tfevents: {e}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
