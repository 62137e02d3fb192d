# Reference reader/writer for the safetensors format, independent of the C++ engine.
# Owns: header parsing/writing (8-byte LE length + JSON header + raw little-endian bytes),
# dtypes F32, F64, BF16, I64, and BF16 round-to-nearest-even from fp32.
# Tensors are exchanged as torch CPU tensors; bf16 tensors are returned as torch.bfloat16.
import json
import struct

import numpy as np
import torch

# safetensors dtype tag -> (numpy little-endian dtype used for the raw bytes, element size)
_NP_DTYPES = {
    "F32": (np.dtype("<f4"), 4),
    "F64": (np.dtype("<f8"), 8),
    "BF16": (np.dtype("<u2"), 2),
    "I64": (np.dtype("<i8"), 8),
}
_TORCH_TO_TAG = {
    torch.float32: "F32",
    torch.float64: "F64",
    torch.bfloat16: "BF16",
    torch.int64: "I64",
}


def bf16_bits_from_f32(x: np.ndarray) -> np.ndarray:
    """fp32 array (any shape) -> uint16 bf16 bit patterns, round-to-nearest-even; NaN stays NaN."""
    bits = np.ascontiguousarray(x, dtype="<f4").view(np.uint32).astype(np.uint64)
    lsb = (bits >> 16) & 1
    rounded = ((bits + 0x7FFF + lsb) >> 16).astype(np.uint16)
    is_nan = np.isnan(np.asarray(x, dtype=np.float32))
    nan_bits = ((bits >> 16) | 0x40).astype(np.uint16)  # keep sign/payload top, force quiet bit
    return np.where(is_nan, nan_bits, rounded)


def f32_from_bf16_bits(bits: np.ndarray) -> np.ndarray:
    """uint16 bf16 bit patterns -> exact fp32 values (same shape)."""
    return (bits.astype(np.uint32) << 16).view(np.float32)


def round_to_bf16(t: torch.Tensor) -> torch.Tensor:
    """Any float tensor -> torch.bfloat16 using our own RNE of its fp32 value."""
    bits = bf16_bits_from_f32(t.detach().to(torch.float32).numpy())
    return torch.from_numpy(bits.astype(np.int16)).view(torch.bfloat16)


def _decode(tag: str, shape, raw: bytes) -> torch.Tensor:
    np_dtype, size = _NP_DTYPES[tag]
    count = int(np.prod(shape)) if shape else 1
    if len(raw) != count * size:
        raise ValueError(f"byte length {len(raw)} != {count} x {size} for {tag} {shape}")
    arr = np.frombuffer(raw, dtype=np_dtype).reshape(shape)
    if tag == "BF16":
        return torch.from_numpy(arr.astype(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(arr.astype(np_dtype.newbyteorder("="), copy=True))


def load(path):
    """path -> (dict name -> torch tensor, metadata dict or None)."""
    with open(path, "rb") as f:
        blob = f.read()
    (header_len,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8 : 8 + header_len].decode("utf-8"))
    data = memoryview(blob)[8 + header_len :]
    metadata = header.pop("__metadata__", None)
    tensors = {}
    for name, info in header.items():
        start, end = info["data_offsets"]
        if not 0 <= start <= end <= len(data):
            raise ValueError(f"bad data_offsets for {name}: {start},{end}")
        tensors[name] = _decode(info["dtype"], list(info["shape"]), bytes(data[start:end]))
    return tensors, metadata


def _encode(t: torch.Tensor) -> (str, bytes):
    tag = _TORCH_TO_TAG.get(t.dtype)
    if tag is None:
        raise ValueError(f"unsupported dtype {t.dtype}")
    t = t.detach().contiguous().cpu()
    if tag == "BF16":
        return tag, t.view(torch.int16).numpy().astype("<u2").tobytes()
    return tag, t.numpy().astype(_NP_DTYPES[tag][0]).tobytes()


def save(path, tensors, metadata=None):
    """Write dict name -> torch tensor. Keys sorted, offsets contiguous, header space-padded to 8."""
    header, chunks, offset = {}, [], 0
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    for name in sorted(tensors):
        tag, raw = _encode(tensors[name])
        shape = list(tensors[name].shape)
        header[name] = {"dtype": tag, "shape": shape, "data_offsets": [offset, offset + len(raw)]}
        chunks.append(raw)
        offset += len(raw)
    header_bytes = json.dumps(header, separators=(",", ":")).encode("utf-8")
    header_bytes += b" " * (-len(header_bytes) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(header_bytes)))
        f.write(header_bytes)
        for raw in chunks:
            f.write(raw)


def _selftest():
    """Round-trip every dtype and check BF16 RNE on hand-picked bit patterns."""
    import os
    import tempfile

    x = np.array([1.0, 1.00390625, 1.01171875, 1.0 + 2**-8 + 2**-20, -3.5, 0.0], dtype=np.float32)
    # 1+2^-8 is a tie -> even (1.0); 1+3*2^-8 is a tie -> even (1+2^-6); just above tie rounds up
    want = np.array([1.0, 1.0, 1.015625, 1.0078125, -3.5, 0.0], dtype=np.float32)
    got = f32_from_bf16_bits(bf16_bits_from_f32(x))
    assert np.array_equal(got, want), (got, want)
    tensors = {
        "b": torch.randn(3, 4, dtype=torch.float64),
        "a": torch.randn(2, 5).to(torch.float32),
        "c": torch.arange(7, dtype=torch.int64).reshape(7),
        "d": round_to_bf16(torch.randn(4, 2)),
        "e": torch.zeros(0, 3),
    }
    with tempfile.TemporaryDirectory() as d:
        p = os.path.join(d, "t.safetensors")
        save(p, tensors, {"format": "pt"})
        back, meta = load(p)
    assert meta == {"format": "pt"} and sorted(back) == sorted(tensors)
    for k, v in tensors.items():
        assert back[k].dtype == v.dtype and torch.equal(back[k].float(), v.float()), k
    print("safetensors_io self-test ok")


if __name__ == "__main__":
    _selftest()
