"""A small safetensors reader/writer (no `safetensors` package): enough for the reference
fixtures. Format: u64 little-endian header length, JSON header, then the raw tensor bytes."""

import json
import os
import struct

import numpy as np
import torch

# safetensors dtype name -> (torch dtype, bytes per element)
_DTYPES = {
    "F64": (torch.float64, 8),
    "F32": (torch.float32, 4),
    "F16": (torch.float16, 2),
    "BF16": (torch.bfloat16, 2),
    "I64": (torch.int64, 8),
    "I32": (torch.int32, 4),
    "I16": (torch.int16, 2),
    "I8": (torch.int8, 1),
    "U8": (torch.uint8, 1),
}
_NAMES = {dt: name for name, (dt, _) in _DTYPES.items()}


def _raw_bytes(t: torch.Tensor) -> bytes:
    t = t.detach().contiguous().cpu()
    if t.dtype in (torch.bfloat16, torch.float16):
        # numpy has no bfloat16: reinterpret the 16-bit patterns
        return t.view(torch.int16).numpy().astype("<i2").tobytes()
    return t.numpy().astype(t.numpy().dtype.newbyteorder("<")).tobytes()


def _element_size(t):
    return t.itemsize if isinstance(t, np.ndarray) else t.element_size()


def write(path, tensors, metadata=None, sort_keys=True):
    """Write `tensors` (name -> torch.Tensor, or a numpy uint32 array for "U32", which torch 1.13
    lacks) to `path` atomically (temp file + rename).

    Like the Hugging Face writer, tensors are laid out by element size (widest first, so every
    tensor stays aligned) and then by name; the header lists `__metadata__` first (string ->
    string map) and is padded with spaces to a multiple of 8 bytes."""
    names = list(tensors)
    if sort_keys:
        names.sort(key=lambda n: (-_element_size(tensors[n]), n))
    header = {}
    if metadata is not None:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    blobs = []
    offset = 0
    for name in names:
        t = tensors[name]
        if isinstance(t, np.ndarray):
            if t.dtype != np.uint32:
                raise ValueError(f"{path}: tensor {name}: numpy arrays must be uint32")
            blob, dtype_name = np.ascontiguousarray(t).astype("<u4").tobytes(), "U32"
        elif t.dtype not in _NAMES:
            raise ValueError(f"{path}: tensor {name}: unsupported dtype {t.dtype}")
        else:
            blob, dtype_name = _raw_bytes(t), _NAMES[t.dtype]
        header[name] = {
            "dtype": dtype_name,
            "shape": list(t.shape),
            "data_offsets": [offset, offset + len(blob)],
        }
        offset += len(blob)
        blobs.append(blob)
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * ((8 - len(text) % 8) % 8)
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for blob in blobs:
            f.write(blob)
    os.replace(tmp, path)


def read(path):
    """Read a safetensors file: returns (name -> torch.Tensor, metadata dict or {})."""
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 8:
        raise ValueError(f"{path}: too short for a safetensors header")
    (n,) = struct.unpack("<Q", data[:8])
    if 8 + n > len(data):
        raise ValueError(f"{path}: header length {n} exceeds file size {len(data)}")
    header = json.loads(data[8 : 8 + n].decode("utf-8"))
    body = data[8 + n :]
    meta = header.pop("__metadata__", {}) or {}
    out = {}
    for name, info in header.items():
        if info["dtype"] == "U32":  # as numpy uint32 (torch 1.13 has no uint32)
            begin, end = info["data_offsets"]
            out[name] = np.frombuffer(body[begin:end], dtype="<u4").reshape(info["shape"]).copy()
            continue
        dtype, size = _DTYPES[info["dtype"]]
        begin, end = info["data_offsets"]
        shape = info["shape"]
        count = int(np.prod(shape)) if shape else 1
        if end > len(body) or end - begin != count * size:
            raise ValueError(f"{path}: tensor {name}: bad data_offsets {begin}..{end}")
        raw = body[begin:end]
        if dtype in (torch.bfloat16, torch.float16):
            arr = np.frombuffer(raw, dtype="<i2").copy()
            t = torch.from_numpy(arr).view(dtype)
        else:
            np_dtype = torch.empty(0, dtype=dtype).numpy().dtype.newbyteorder("<")
            t = torch.from_numpy(np.frombuffer(raw, dtype=np_dtype).copy())
        out[name] = t.reshape(shape)
    return out, meta
