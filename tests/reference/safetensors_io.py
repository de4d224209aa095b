"""Minimal numpy safetensors reader/writer with BF16 and FP8 (e4m3fn) support.

File layout: u64 little-endian header length N, N bytes of JSON
{name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {...}},
then the data; offsets are relative to the end of the header.

A checkpoint directory holds either `model.safetensors` or shards listed in
`model.safetensors.index.json` ({"metadata": {...}, "weight_map": {name: file}}).
FP8 weights come with `<name>_scale_inv` (f32, one scale per 128x128 tile).
"""
import json
import math
import os
import struct

import numpy as np

# Raw storage dtype of each safetensors dtype (BF16/F8 are kept as bit patterns).
_STORAGE = {
    "F64": np.float64, "F32": np.float32, "F16": np.float16,
    "BF16": np.uint16, "F8_E4M3": np.uint8,
    "I64": np.int64, "I32": np.int32, "I16": np.int16, "I8": np.int8,
    "U8": np.uint8, "BOOL": np.bool_,
}


def _build_e4m3_table():
    """Value of every e4m3fn byte: bias 7, no infinities, 0x7f/0xff are NaN."""
    table = np.zeros(256, dtype=np.float64)
    for byte in range(256):
        sign = -1.0 if byte & 0x80 else 1.0
        exp = (byte >> 3) & 0xF
        mant = byte & 0x7
        if exp == 0xF and mant == 0x7:
            table[byte] = np.nan
        elif exp == 0:
            table[byte] = sign * (mant / 8.0) * 2.0 ** -6
        else:
            table[byte] = sign * (1.0 + mant / 8.0) * 2.0 ** (exp - 7)
    return table


E4M3_TABLE = _build_e4m3_table()
E4M3_MAX = 448.0


def bf16_bits_to_f32(bits):
    """uint16 bf16 bit patterns -> float32 (exact)."""
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


def f32_to_bf16_bits(x):
    """float -> bf16 bits, round to nearest even (NaN kept NaN)."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounded = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    out = rounded.astype(np.uint16)
    nan = np.isnan(np.asarray(x, dtype=np.float32))
    out[nan] = 0x7FC0
    return out


def e4m3_bits_to_f32(bits):
    """uint8 e4m3fn bit patterns -> float32 (exact)."""
    return E4M3_TABLE.astype(np.float32)[np.asarray(bits, dtype=np.uint8)]


def f32_to_e4m3_bits(x):
    """float -> e4m3fn bits: round to nearest, ties to even code, saturate at 448."""
    x = np.asarray(x, dtype=np.float64)
    a = np.minimum(np.abs(x), E4M3_MAX)
    pos = E4M3_TABLE[:0x7F]  # codes 0x00..0x7e are finite and increasing
    hi = np.clip(np.searchsorted(pos, a, side="left"), 1, 0x7E)
    lo = hi - 1
    d_lo, d_hi = a - pos[lo], pos[hi] - a
    pick_hi = (d_hi < d_lo) | ((d_hi == d_lo) & (hi % 2 == 0))
    code = np.where(pick_hi, hi, lo).astype(np.uint8)
    code = np.where(a == 0, 0, code).astype(np.uint8)  # exact zero (searchsorted gives hi=1)
    code = code | np.where(np.signbit(x), 0x80, 0).astype(np.uint8)
    code[np.isnan(x)] = 0x7F
    return code


def block_dequant(values, scale_inv, block=(128, 128)):
    """values [N, K] times the scale of its tile; scale_inv [ceil(N/b0), ceil(K/b1)]."""
    n, k = values.shape
    s = np.repeat(np.repeat(scale_inv, block[0], axis=0), block[1], axis=1)[:n, :k]
    return values.astype(np.float64) * s.astype(np.float64)


def block_quant_fp8(w, block=(128, 128)):
    """float [N, K] -> (e4m3 bits [N, K], f32 scale_inv tiles) with amax/448 per tile."""
    w = np.asarray(w, dtype=np.float64)
    n, k = w.shape
    gn, gk = math.ceil(n / block[0]), math.ceil(k / block[1])
    scale = np.ones((gn, gk), dtype=np.float32)
    for i in range(gn):
        for j in range(gk):
            tile = w[i * block[0]:(i + 1) * block[0], j * block[1]:(j + 1) * block[1]]
            amax = np.abs(tile).max()
            if amax > 0:
                scale[i, j] = np.float32(amax / E4M3_MAX)
    full = np.repeat(np.repeat(scale, block[0], axis=0), block[1], axis=1)[:n, :k]
    return f32_to_e4m3_bits(w / full.astype(np.float64)), scale


def read_header(path):
    """Returns (header dict without __metadata__, metadata dict, data start offset)."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n).decode("utf-8"))
    meta = header.pop("__metadata__", {}) or {}
    return header, meta, 8 + n


class SafetensorsFile:
    """One .safetensors file; tensors are read lazily through a memmap."""

    def __init__(self, path):
        self.path = path
        self.header, self.metadata, self._start = read_header(path)
        self._mm = np.memmap(path, dtype=np.uint8, mode="r")

    def names(self):
        return list(self.header)

    def dtype(self, name):
        return self.header[name]["dtype"]

    def raw(self, name):
        """The stored array (BF16 as uint16 bits, F8_E4M3 as uint8 bits)."""
        info = self.header[name]
        begin, end = info["data_offsets"]
        np_dtype = np.dtype(_STORAGE[info["dtype"]])
        shape = tuple(info["shape"])
        if (end - begin) != np_dtype.itemsize * int(np.prod(shape, dtype=np.int64)):
            raise ValueError(f"{self.path}: size mismatch for {name}")
        buf = self._mm[self._start + begin:self._start + end]
        return np.frombuffer(buf.tobytes(), dtype=np_dtype.newbyteorder("<")).reshape(shape)

    def raw_rows(self, name, start, stop):
        """Rows [start, stop) of the stored array, reading only those bytes."""
        info = self.header[name]
        np_dtype = np.dtype(_STORAGE[info["dtype"]])
        shape = tuple(info["shape"])
        if not 0 <= start <= stop <= shape[0]:
            raise ValueError(f"{self.path}: rows [{start}, {stop}) of {name} {shape}")
        row = np_dtype.itemsize * int(np.prod(shape[1:], dtype=np.int64))
        begin = self._start + info["data_offsets"][0]
        buf = self._mm[begin + start * row:begin + stop * row]
        return np.frombuffer(buf.tobytes(), dtype=np_dtype.newbyteorder("<")).reshape(
            (stop - start,) + shape[1:])

    def get(self, name):
        """Decoded values: float32 for float dtypes (F64 stays F64), ints as stored."""
        arr, dt = self.raw(name), self.dtype(name)
        if dt == "BF16":
            return bf16_bits_to_f32(arr)
        if dt == "F8_E4M3":
            return e4m3_bits_to_f32(arr)
        return arr


class Checkpoint:
    """A model directory: single model.safetensors or an index.json with shards."""

    def __init__(self, model_dir):
        self.dir = model_dir
        index = os.path.join(model_dir, "model.safetensors.index.json")
        self._files = {}
        if os.path.exists(index):
            with open(index) as f:
                self.weight_map = json.load(f)["weight_map"]
        else:
            names = self._file("model.safetensors").names()
            self.weight_map = {n: "model.safetensors" for n in names}
        block = (128, 128)
        cfg_path = os.path.join(model_dir, "config.json")
        if os.path.exists(cfg_path):
            with open(cfg_path) as f:
                q = (json.load(f).get("quantization_config") or {})
            block = tuple(q.get("weight_block_size", block))
        self.block = block

    def _file(self, fname):
        if fname not in self._files:
            self._files[fname] = SafetensorsFile(os.path.join(self.dir, fname))
        return self._files[fname]

    def names(self):
        return list(self.weight_map)

    def has(self, name):
        return name in self.weight_map

    def dtype(self, name):
        return self._file(self.weight_map[name]).dtype(name)

    def get(self, name):
        """Decoded tensor (float32) without any block scale applied."""
        return self._file(self.weight_map[name]).get(name)

    def get_f64(self, name):
        """Real-valued float64 tensor; FP8 weights are multiplied by their tile scales."""
        values = self.get(name)
        if self.dtype(name) == "F8_E4M3":
            scale_name = name + "_scale_inv"
            if not self.has(scale_name):
                raise KeyError(f"FP8 tensor {name} has no {scale_name}")
            return block_dequant(values, self.get(scale_name), self.block)
        return values.astype(np.float64)


    def rows_f64(self, name, start, stop):
        """Rows [start, stop) of a BF16/F32 tensor as float64, reading only those rows (the
        embeddings and LM head of a real-shape model without their whole float64 copies)."""
        f = self._file(self.weight_map[name])
        dt = f.dtype(name)
        arr = f.raw_rows(name, start, stop)
        if dt == "BF16":
            return bf16_bits_to_f32(arr).astype(np.float64)
        if dt in ("F32", "F64"):
            return arr.astype(np.float64)
        raise ValueError(f"{name}: rows_f64 reads BF16/F32 tensors, not {dt}")


def write_safetensors(path, tensors, metadata=None):
    """tensors: {name: (dtype string, numpy array in storage form)}; 8-byte aligned header."""
    header, offset, blobs = {}, 0, []
    for name, (dt, arr) in tensors.items():
        arr = np.ascontiguousarray(arr, dtype=np.dtype(_STORAGE[dt]).newbyteorder("<"))
        data = arr.tobytes()
        header[name] = {"dtype": dt, "shape": list(arr.shape),
                        "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    if metadata is not None:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for blob in blobs:
            f.write(blob)


def write_checkpoint(model_dir, tensors, num_shards=1, metadata=None):
    """Writes model.safetensors, or num_shards files plus model.safetensors.index.json."""
    os.makedirs(model_dir, exist_ok=True)
    meta = {"format": "pt", **(metadata or {})}
    if num_shards <= 1:
        write_safetensors(os.path.join(model_dir, "model.safetensors"), tensors, meta)
        return
    names = list(tensors)
    per = math.ceil(len(names) / num_shards)
    weight_map, total = {}, 0
    for s in range(num_shards):
        fname = f"model-{s + 1:05d}-of-{num_shards:05d}.safetensors"
        part = {n: tensors[n] for n in names[s * per:(s + 1) * per]}
        write_safetensors(os.path.join(model_dir, fname), part, meta)
        for n, (dt, arr) in part.items():
            weight_map[n] = fname
            total += arr.nbytes
    with open(os.path.join(model_dir, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2)
