"""A minimal safetensors reader and writer (F32 only) for the PyTorch tests, so that the
`safetensors` package stays optional."""
import json
import struct

import numpy as np


def read_safetensors(path):
    """Returns ({name: float32 ndarray}, metadata dict)."""
    with open(path, "rb") as f:
        blob = f.read()
    (header_length,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + header_length])
    metadata = header.pop("__metadata__", {})
    data = blob[8 + header_length:]
    tensors = {}
    for name, info in header.items():
        assert info["dtype"] == "F32", f"{name}: dtype {info['dtype']}"
        begin, end = info["data_offsets"]
        tensors[name] = np.frombuffer(data[begin:end], dtype="<f4").reshape(info["shape"]).copy()
    return tensors, metadata


def write_safetensors(path, tensors):
    """Writes {name: float32 ndarray} the way safetensors.torch.save_file lays it out."""
    header, chunks, offset = {}, [], 0
    for name in sorted(tensors):
        raw = np.ascontiguousarray(tensors[name], dtype="<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(tensors[name].shape),
                        "data_offsets": [offset, offset + len(raw)]}
        chunks.append(raw)
        offset += len(raw)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(chunks))
