"""Read the small integer tensors of FlashInfer's level-10 API dumps (`inputs.pt`, `inputs.safetensors`) without
torch: the plan() inputs (indptr, indices, last_page_len, qo_indptr) are 1-D int32/int64 tensors.

- safetensors: an 8-byte little-endian header length, a JSON header {name: {dtype, shape, data_offsets}}, then
  the raw bytes.
- torch.save (the default, `torch.save(dict_of_tensors, path)`): a zip archive `<stem>/data.pkl` (a pickle of
  the dict whose tensors are `torch._utils._rebuild_tensor_v2(storage, offset, size, stride, ...)` with storages
  as persistent ids `('storage', torch.IntStorage, key, location, numel)`) and `<stem>/data/<key>` (raw bytes,
  `<stem>/byteorder` little by default).

The pickle is read by a restricted unpickler that builds nothing but dicts, tuples and the tensors' values: any
other global (what a hostile pickle would call) is refused, so a dump never runs code.
"""

from __future__ import annotations

import io
import json
import pickle
import struct
import zipfile
from array import array
from collections import OrderedDict
from pathlib import Path
from typing import Any

from traceinsight.errors import FormatError

# Element types the dumps' index tensors use: torch storage class / safetensors dtype -> array typecode, bytes.
_TORCH_STORAGES = {"IntStorage": ("i", 4), "LongStorage": ("q", 8), "ShortStorage": ("h", 2),
                   "CharStorage": ("b", 1), "ByteStorage": ("B", 1)}
_SAFETENSORS_DTYPES = {"I32": ("i", 4), "I64": ("q", 8), "I16": ("h", 2), "I8": ("b", 1), "U8": ("B", 1),
                       "U32": ("I", 4)}
# Largest file read (plan() inputs of a 1M-page KV cache are ~4 MB).
MAX_BYTES = 256 << 20
MAX_HEADER = 1 << 20


class _Storage:
    __slots__ = ("code", "key", "numel", "size")

    def __init__(self, code: str, size: int, key: str, numel: int) -> None:
        self.code, self.size, self.key, self.numel = code, size, key, numel


class _Tensor:
    __slots__ = ("offset", "shape", "storage", "stride")

    def __init__(self, storage: _Storage, offset: int, shape: tuple[int, ...], stride: tuple[int, ...]) -> None:
        self.storage, self.offset, self.shape, self.stride = storage, offset, shape, stride


class _StorageType:
    def __init__(self, name: str) -> None:
        self.name = name


def _rebuild_tensor_v2(storage: Any, offset: Any, size: Any, stride: Any, *_rest: Any) -> _Tensor:
    if not isinstance(storage, _Storage):
        raise pickle.UnpicklingError("a tensor without a storage")
    return _Tensor(storage, int(offset), tuple(int(x) for x in size), tuple(int(x) for x in stride))


class _Unpickler(pickle.Unpickler):
    """Only the globals torch.save writes for a dict of plain tensors; persistent ids name storages."""

    def find_class(self, module: str, name: str) -> Any:
        if module == "torch._utils" and name == "_rebuild_tensor_v2":
            return _rebuild_tensor_v2
        if module == "torch" and name in _TORCH_STORAGES:
            return _StorageType(name)
        if module == "collections" and name == "OrderedDict":
            return OrderedDict
        raise pickle.UnpicklingError(f"refused global {module}.{name} (not a dump of integer tensors)")

    def persistent_load(self, pid: Any) -> Any:
        if (not isinstance(pid, tuple) or len(pid) != 5 or pid[0] != "storage"
                or not isinstance(pid[1], _StorageType)):
            raise pickle.UnpicklingError(f"unexpected persistent id {pid!r:.80}")
        code, size = _TORCH_STORAGES[pid[1].name]
        return _Storage(code, size, str(pid[2]), int(pid[4]))


def _values(raw: bytes, code: str, size: int, offset: int, shape: tuple[int, ...], stride: tuple[int, ...],
            little: bool) -> list[int]:
    if len(shape) > 1:
        raise ValueError(f"a {len(shape)}-D tensor (plan() inputs are 1-D)")
    n = shape[0] if shape else 1
    step = stride[0] if stride else 1
    values = array(code)
    if len(raw) % size:
        raise ValueError("storage bytes are not a whole number of elements")
    values.frombytes(raw)
    if not little:
        values.byteswap()
    last = offset + (n - 1) * step if n else offset
    if n and (offset < 0 or last >= len(values) or step < 0):
        raise ValueError("tensor outside its storage")
    return [values[offset + i * step] for i in range(n)]


def read_torch_save(path: Path) -> dict[str, list[int]]:
    """The 1-D integer tensors of a `torch.save`d dict, by key, as lists of ints."""
    try:
        with zipfile.ZipFile(path) as z:
            names = z.namelist()
            pkl = next((n for n in names if n.endswith("/data.pkl") or n == "data.pkl"), None)
            if pkl is None:
                raise ValueError("no data.pkl in the archive")
            stem = pkl[: -len("data.pkl")]
            order = f"{stem}byteorder"
            little = z.read(order).strip() != b"big" if order in names else True
            if z.getinfo(pkl).file_size > MAX_HEADER:
                raise ValueError("data.pkl is too large for a dump of plan() inputs")
            doc = _Unpickler(io.BytesIO(z.read(pkl))).load()
            if not isinstance(doc, dict):
                raise ValueError("the pickle is not a dict of tensors")
            out: dict[str, list[int]] = {}
            for key, t in doc.items():
                if not isinstance(t, _Tensor):
                    continue
                entry = f"{stem}data/{t.storage.key}"
                if z.getinfo(entry).file_size > MAX_BYTES:
                    raise ValueError(f"storage {t.storage.key} is larger than {MAX_BYTES} bytes")
                out[str(key)] = _values(z.read(entry), t.storage.code, t.storage.size, t.offset, t.shape,
                                        t.stride, little)
            return out
    except (zipfile.BadZipFile, KeyError, ValueError, EOFError, pickle.UnpicklingError, TypeError,
            AttributeError, IndexError, OverflowError, struct.error, OSError) as exc:
        raise FormatError(f"{path}: not a torch.save file of integer tensors this reader knows ({exc})") from None


def read_safetensors(path: Path) -> dict[str, list[int]]:
    """The 1-D integer tensors of a safetensors file, by name, as lists of ints."""
    try:
        size = path.stat().st_size
        if size > MAX_BYTES:
            raise ValueError(f"larger than {MAX_BYTES} bytes")
        raw = path.read_bytes()
        (n,) = struct.unpack("<Q", raw[:8])
        if n > min(MAX_HEADER, len(raw) - 8):
            raise ValueError("header length past the end of the file")
        header = json.loads(raw[8 : 8 + n])
        if not isinstance(header, dict):
            raise ValueError("the header is not an object")
        data = raw[8 + n :]
        out: dict[str, list[int]] = {}
        for name, info in header.items():
            if name == "__metadata__" or not isinstance(info, dict):
                continue
            dtype = _SAFETENSORS_DTYPES.get(str(info.get("dtype")))
            if dtype is None:
                continue
            lo, hi = (int(x) for x in info["data_offsets"])
            if not 0 <= lo <= hi <= len(data):
                raise ValueError(f"{name}: data outside the file")
            shape = tuple(int(x) for x in info["shape"])
            out[name] = _values(data[lo:hi], dtype[0], dtype[1], 0, shape, (1,), True)
        return out
    except (ValueError, KeyError, TypeError, struct.error, OSError, UnicodeDecodeError) as exc:
        raise FormatError(f"{path}: not a safetensors file of integer tensors this reader knows ({exc})") from None
