#!/usr/bin/env python3
"""Convert a CTranslate2 Whisper model directory into a whisper.cpp ggml file.

Usage:
    scripts/whisper-ct2-to-ggml.py [--type {f16,q8_0,q5_0,q5_1}] CT2_DIR OUT.bin

CT2_DIR is a directory as faster-whisper loads it: ``model.bin`` (a
CTranslate2 "WhisperSpec" model), ``config.json`` and ``vocabulary.json`` or
``vocabulary.txt``. OUT.bin is written in the legacy ggml container that
whisper.cpp's ``whisper_model_load`` reads (magic, hparams, mel filterbank,
vocabulary, then named tensors). Large matrices are stored as float16
(ftype 1); biases, layer norms, the conv biases and both positional
embeddings are float32, the same split that whisper.cpp's own converters
make. (No all-f32 option: whisper.cpp's CPU conv path asserts f16 conv
kernels, so ftype-0 files abort at the first encode.)

``--type q8_0`` / ``--type q5_0`` / ``--type q5_1`` write the file that whisper.cpp's
``quantize`` tool would make from the f16 file: every 2-D tensor except the
conv biases and the two positional embeddings is block-quantized (32 values a
block), starting from the f16-rounded weights exactly as that tool reads
them; the 3-D conv kernels stay f16 and the 1-D tensors f32; the hparams
ftype becomes 2007 / 2008 (quantization-format version 2 times 1000 plus
GGML_FTYPE_MOSTLY_Q8_0 = 7 / Q5_0 = 8 / Q5_1 = 9). The q8_0 and q5_0 output is byte-identical to
``quantize ggml-f16.bin out.bin q8_0`` (resp. ``q5_0``); q5_1 follows ggml's reference rounding the same
way, checked by decoding with it (BENCHMARKS.md), not against the tool's bytes.
  * q8_0 block (34 bytes): fp16 scale d = max|x| / 127, then 32 int8
    round-half-away-from-zero(x / d).
  * q5_0 block (22 bytes): fp16 scale d = m / -16 where m is the value of
    largest magnitude (first one on ties), a little-endian u32 holding bit 4
    of each of the 32 codes (bit k for value k), then 16 bytes of low
    nibbles (value j in the low nibble of byte j, value j+16 in its high
    nibble); code = min(31, trunc(x / d + 16.5)), decoded as (code - 16) * d.
  * q5_1 block (24 bytes): fp16 scale d = (max - min) / 31, fp16 offset
    m = min, then qh and the nibbles laid out as in q5_0;
    code = trunc((x - min) / d + 0.5), decoded as code * d + m.

Needs Python 3 and numpy only. The 80- (or 128-) bin mel filterbank is not
taken from the model: it is recomputed here (Slaney mel scale, Slaney area
normalisation, n_fft 400 at 16 kHz), which is what Whisper's bundled filters
are.

Formats were learned by reading, not copying:
  * whisper.cpp: src/whisper.cpp (whisper_model_load), src/whisper-arch.h
    (tensor names) and models/convert-pt-to-ggml.py /
    models/convert-h5-to-ggml.py (tensor layout and which tensors are f16);
    examples/quantize + examples/common-ggml.cpp (which tensors get
    quantized, the ftype value), ggml/src/ggml-common.h (block layouts),
    ggml/src/ggml-quants.c (reference q8_0 / q5_0 / q5_1 rounding) and
    ggml/include/ggml.h (type and ftype numbers);
  * CTranslate2: python/ctranslate2/specs/model_spec.py (model.bin
    serialization, aliases, int8/int16 quantization scales),
    specs/whisper_spec.py, specs/transformer_spec.py,
    specs/attention_spec.py, specs/common_spec.py and
    converters/transformers.py + converters/utils.py (variable naming and
    the fused query/key/value layout);
  * GPT-2's byte-level BPE byte<->unicode table (openai/gpt-2 encoder.py).

Not carried over: CTranslate2's alignment_heads (whisper.cpp has its own
DTW presets per model size) and suppress ids (whisper.cpp hardcodes them).
"""

from __future__ import annotations

import argparse
import json
import mmap
import os
import struct
import sys
import time
from pathlib import Path

import numpy as np

GGML_MAGIC = 0x67676D6C  # "ggml"

# Per-tensor type ids (ggml_type) and the hparams ftype each output type gets.
# Quantized files carry the quantization-format version in the thousands.
GGML_TYPE_F32 = 0
GGML_TYPE_F16 = 1
GGML_QNT_VERSION = 2
WEIGHT_TYPES = {  # --type -> (ggml_type of the quantized 2-D weights, hparams ftype)
    "f16": (GGML_TYPE_F16, 1),  # GGML_FTYPE_MOSTLY_F16 (no version: not quantized)
    "q8_0": (8, GGML_QNT_VERSION * 1000 + 7),  # GGML_TYPE_Q8_0, GGML_FTYPE_MOSTLY_Q8_0
    "q5_0": (6, GGML_QNT_VERSION * 1000 + 8),  # GGML_TYPE_Q5_0, GGML_FTYPE_MOSTLY_Q5_0
    "q5_1": (7, GGML_QNT_VERSION * 1000 + 9),  # GGML_TYPE_Q5_1, GGML_FTYPE_MOSTLY_Q5_1
}
QBLOCK = 32  # values per q8_0 / q5_0 / q5_1 block

# CTranslate2 DataType enum order (type ids in model.bin, binary version >= 4).
CT2_DTYPES = {
    0: "float32",
    1: "int8",
    2: "int16",
    3: "int32",
    4: "float16",
    5: "bfloat16",
}
CT2_ITEMSIZE = {"float32": 4, "int8": 1, "int16": 2, "int32": 4, "float16": 2, "bfloat16": 2}

# Token ids that whisper.cpp assumes (it does not read them from the file).
EOT_ENGLISH = 50256
EOT_MULTILINGUAL = 50257


class ConversionError(Exception):
    """A problem with the input that the user should be told about."""


# --------------------------------------------------------------------------
# CTranslate2 model.bin reader
# --------------------------------------------------------------------------


class Ct2Model:
    """Random access to the variables of a CTranslate2 model.bin (memory-mapped)."""

    def __init__(self, path: Path):
        self.path = path
        try:
            self._file = open(path, "rb")
        except OSError as exc:
            raise ConversionError(f"{path}: cannot open ({exc.strerror})") from exc
        size = os.fstat(self._file.fileno()).st_size
        if size < 16:
            raise ConversionError(f"{path}: file is too small ({size} bytes) to be a CTranslate2 model")
        self._mm = mmap.mmap(self._file.fileno(), 0, access=mmap.ACCESS_READ)
        self._pos = 0
        self.variables: dict[str, tuple[str, tuple[int, ...], int]] = {}  # name -> (dtype, shape, offset)
        self.aliases: dict[str, str] = {}
        self.dtypes_seen: set[str] = set()
        try:
            self._parse()
        except (struct.error, UnicodeDecodeError, IndexError) as exc:
            raise ConversionError(f"{path}: truncated or malformed CTranslate2 model.bin ({exc})") from exc

    # -- low-level readers
    def _take(self, n: int) -> bytes:
        if self._pos + n > len(self._mm):
            raise ConversionError(
                f"{self.path}: unexpected end of file at byte {self._pos} (wanted {n} more bytes); "
                "not a complete CTranslate2 model.bin"
            )
        b = self._mm[self._pos:self._pos + n]
        self._pos += n
        return b

    def _u8(self) -> int:
        return self._take(1)[0]

    def _u16(self) -> int:
        return struct.unpack("<H", self._take(2))[0]

    def _u32(self) -> int:
        return struct.unpack("<I", self._take(4))[0]

    def _string(self) -> str:
        n = self._u16()  # length including the trailing NUL
        if n == 0:
            raise ConversionError(f"{self.path}: zero-length string at byte {self._pos - 2}")
        raw = self._take(n)
        if raw[-1] != 0:
            raise ConversionError(f"{self.path}: string at byte {self._pos - n} is not NUL-terminated")
        return raw[:-1].decode("utf-8")

    def _parse(self) -> None:
        self.binary_version = self._u32()
        if 6 < self.binary_version < 100:
            raise ConversionError(
                f"{self.path}: CTranslate2 binary version {self.binary_version} is newer than this converter "
                "knows (6); check model_spec.py for format changes"
            )
        if not 1 <= self.binary_version <= 6:
            raise ConversionError(
                f"{self.path}: not a CTranslate2 model.bin (binary version field is {self.binary_version}, "
                "expected 1..6)"
            )
        if self.binary_version < 4:
            raise ConversionError(
                f"{self.path}: CTranslate2 binary version {self.binary_version} predates Whisper support; "
                "re-convert the model with a current CTranslate2"
            )
        self.spec_name = self._string()
        self.spec_revision = self._u32()
        if self.spec_name != "WhisperSpec":
            raise ConversionError(
                f"{self.path}: CTranslate2 model spec is '{self.spec_name}', not 'WhisperSpec' "
                "(this is not a Whisper model)"
            )
        count = self._u32()
        for _ in range(count):
            name = self._string()
            rank = self._u8()
            shape = tuple(self._u32() for _ in range(rank))
            type_id = self._u8()
            nbytes = self._u32()
            dtype = CT2_DTYPES.get(type_id)
            if dtype is None:
                raise ConversionError(f"{self.path}: variable '{name}' has unknown dtype id {type_id}")
            expect = int(np.prod(shape, dtype=np.int64)) * CT2_ITEMSIZE[dtype]
            if expect != nbytes:
                raise ConversionError(
                    f"{self.path}: variable '{name}' {shape} {dtype} declares {nbytes} bytes, expected {expect}"
                )
            self.variables[name] = (dtype, shape, self._pos)
            self._skip(nbytes, name)
        if self._pos < len(self._mm):  # alias table (binary version >= 3)
            for _ in range(self._u32()):
                alias = self._string()
                target = self._string()
                self.aliases[alias] = target

    def _skip(self, n: int, name: str) -> None:
        if self._pos + n > len(self._mm):
            raise ConversionError(
                f"{self.path}: truncated: data of variable '{name}' runs past the end of the file "
                f"({self._pos + n} > {len(self._mm)} bytes)"
            )
        self._pos += n

    # -- variable access
    def resolve(self, name: str) -> str | None:
        seen = set()
        while name not in self.variables:
            if name in self.aliases and name not in seen:
                seen.add(name)
                name = self.aliases[name]
                continue
            # CTranslate2 also aliases "<alias>_scale" to "<target>_scale".
            for suffix in ("_scale", "_zero"):
                if name.endswith(suffix):
                    base = name[: -len(suffix)]
                    if base in self.aliases and base not in seen:
                        seen.add(base)
                        name = self.aliases[base] + suffix
                        break
            else:
                return None
        return name

    def has(self, name: str) -> bool:
        return self.resolve(name) is not None

    def raw(self, name: str) -> tuple[np.ndarray, str]:
        real = self.resolve(name)
        if real is None:
            raise ConversionError(f"{self.path}: required variable '{name}' is missing")
        dtype, shape, offset = self.variables[real]
        count = int(np.prod(shape, dtype=np.int64))
        if dtype == "bfloat16":
            bits = np.frombuffer(self._mm, dtype="<u2", count=count, offset=offset)
            arr = (bits.astype(np.uint32) << 16).view(np.float32)
        else:
            np_dtype = {"float32": "<f4", "int8": "i1", "int16": "<i2", "int32": "<i4", "float16": "<f2"}[dtype]
            arr = np.frombuffer(self._mm, dtype=np_dtype, count=count, offset=offset)
        return arr.reshape(shape), dtype

    def tensor(self, name: str) -> np.ndarray:
        """Variable as float32, dequantizing int8/int16 weights with their scale."""
        arr, dtype = self.raw(name)
        self.dtypes_seen.add(dtype)
        if dtype in ("float32", "float16", "bfloat16"):
            return arr.astype(np.float32)
        if dtype in ("int8", "int16"):
            if self.has(name + "_zero"):
                raise ConversionError(
                    f"{self.path}: '{name}' uses AWQ-style zero points, which this converter does not support"
                )
            if not self.has(name + "_scale"):
                raise ConversionError(f"{self.path}: quantized variable '{name}' has no '{name}_scale'")
            scale, scale_dtype = self.raw(name + "_scale")
            self.dtypes_seen.add(f"{scale_dtype} (scales)")
            scale = scale.astype(np.float32)
            # int8: one scale per output row (conv weights: per output channel);
            # int16: a single scale for the whole matrix.
            if scale.size > 1:
                scale = scale.reshape((-1,) + (1,) * (arr.ndim - 1))
            return arr.astype(np.float32) / scale
        raise ConversionError(f"{self.path}: variable '{name}' has dtype {dtype}, expected a float or int8/int16 weight")

    def scalar(self, name: str) -> int | None:
        if not self.has(name):
            return None
        arr, _ = self.raw(name)
        return int(arr.reshape(-1)[0])


# --------------------------------------------------------------------------
# Vocabulary
# --------------------------------------------------------------------------


def byte_level_decoder() -> dict[str, int]:
    """Inverse of GPT-2's byte->printable-unicode table used by byte-level BPE."""
    printable = (
        list(range(ord("!"), ord("~") + 1))
        + list(range(ord("\u00a1"), ord("\u00ac") + 1))
        + list(range(ord("\u00ae"), ord("\u00ff") + 1))
    )
    table = {b: chr(b) for b in printable}
    extra = 0
    for b in range(256):
        if b not in table:
            table[b] = chr(256 + extra)
            extra += 1
    return {ch: b for b, ch in table.items()}


def load_vocabulary(model_dir: Path) -> list[str]:
    js = model_dir / "vocabulary.json"
    txt = model_dir / "vocabulary.txt"
    if js.is_file():
        try:
            tokens = json.loads(js.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise ConversionError(f"{js}: cannot read vocabulary ({exc})") from exc
        if not isinstance(tokens, list) or not all(isinstance(t, str) for t in tokens):
            raise ConversionError(f"{js}: expected a JSON list of token strings")
        return tokens
    if txt.is_file():
        try:
            text = txt.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise ConversionError(f"{txt}: cannot read vocabulary ({exc})") from exc
        # One token per line; split on "\n" only (other Unicode line breaks are token characters).
        lines = text.split("\n")
        if lines and lines[-1] == "":
            lines.pop()
        return [line[:-1] if line.endswith("\r") else line for line in lines]
    raise ConversionError(f"{model_dir}: no vocabulary.json or vocabulary.txt (not a CTranslate2 Whisper model directory)")


def token_bytes(token: str, decoder: dict[str, int]) -> bytes:
    if all(ch in decoder for ch in token):
        return bytes(decoder[ch] for ch in token)
    return token.encode("utf-8")  # a token outside the byte-level alphabet: keep its text


# --------------------------------------------------------------------------
# Mel filterbank (Slaney scale and normalisation, as librosa.filters.mel)
# --------------------------------------------------------------------------


def _hz_to_mel(hz: np.ndarray) -> np.ndarray:
    hz = np.asarray(hz, dtype=np.float64)
    f_sp = 200.0 / 3.0
    brk_hz = 1000.0
    brk_mel = brk_hz / f_sp
    log_step = np.log(6.4) / 27.0
    return np.where(hz >= brk_hz, brk_mel + np.log(np.maximum(hz, 1e-10) / brk_hz) / log_step, hz / f_sp)


def _mel_to_hz(mel: np.ndarray) -> np.ndarray:
    mel = np.asarray(mel, dtype=np.float64)
    f_sp = 200.0 / 3.0
    brk_hz = 1000.0
    brk_mel = brk_hz / f_sp
    log_step = np.log(6.4) / 27.0
    return np.where(mel >= brk_mel, brk_hz * np.exp(log_step * (mel - brk_mel)), mel * f_sp)


def mel_filterbank(n_mels: int, sample_rate: int = 16000, n_fft: int = 400) -> np.ndarray:
    """Triangular filters, shape (n_mels, n_fft // 2 + 1), float32."""
    bins = np.arange(n_fft // 2 + 1, dtype=np.float64) * (sample_rate / n_fft)
    edges = _mel_to_hz(np.linspace(_hz_to_mel(0.0), _hz_to_mel(sample_rate / 2.0), n_mels + 2))
    widths = np.diff(edges)
    out = np.zeros((n_mels, bins.size), dtype=np.float64)
    for m in range(n_mels):
        rising = (bins - edges[m]) / widths[m]
        falling = (edges[m + 2] - bins) / widths[m + 1]
        out[m] = np.clip(np.minimum(rising, falling), 0.0, None)
        out[m] *= 2.0 / (edges[m + 2] - edges[m])  # equal area per filter
    return out.astype(np.float32)


# --------------------------------------------------------------------------
# ggml block quantization (q8_0, q5_0, q5_1), whole blocks at a time with numpy
# --------------------------------------------------------------------------

# On-disk blocks; numpy structured dtypes are packed, like the C structs.
Q8_0_BLOCK = np.dtype([("d", "<f2"), ("qs", "i1", (QBLOCK,))])
Q5_0_BLOCK = np.dtype([("d", "<f2"), ("qh", "u1", (4,)), ("qs", "u1", (QBLOCK // 2,))])
Q5_1_BLOCK = np.dtype([("d", "<f2"), ("m", "<f2"), ("qh", "u1", (4,)), ("qs", "u1", (QBLOCK // 2,))])
assert Q8_0_BLOCK.itemsize == 34 and Q5_0_BLOCK.itemsize == 22 and Q5_1_BLOCK.itemsize == 24

# Blocks per numpy pass; bounds the temporaries (a few hundred MB at most even
# for large-v3's token embedding).
QUANT_CHUNK_BLOCKS = 1 << 18


def _reciprocal(d: np.ndarray) -> np.ndarray:
    """float32 1/d, and 0 where d is 0 (an all-zero block)."""
    inv = np.zeros_like(d)
    np.divide(np.float32(1.0), d, out=inv, where=d != 0)
    return inv


def q8_0_blocks(x: np.ndarray) -> np.ndarray:
    """(n, 32) float32 -> n q8_0 blocks.

    All arithmetic stays float32 where ggml's reference code uses float, so
    the codes match it bit for bit: d = amax / 127, codes = round(x * (1/d))
    with halves rounded away from zero (C roundf, not numpy's half-to-even).
    """
    d = np.abs(x).max(axis=1) / np.float32(127.0)
    scaled = x * _reciprocal(d)[:, None]
    # |scaled| + 0.5 is exact in float64, so floor gives roundf's answer even
    # for values just below a half.
    codes = np.copysign(np.floor(np.abs(scaled).astype(np.float64) + 0.5), scaled)
    out = np.empty(x.shape[0], dtype=Q8_0_BLOCK)
    out["d"] = d  # float32 -> float16, round to nearest even (as ggml)
    out["qs"] = codes.astype(np.int8)
    return out


def q5_0_blocks(x: np.ndarray) -> np.ndarray:
    """(n, 32) float32 -> n q5_0 blocks.

    The scale comes from the signed value of largest magnitude m (the first
    such value in the block), d = m / -16, so that m itself maps to code 0;
    codes = min(31, trunc(x * (1/d) + 16.5)) with the addition done in
    float32, as ggml's reference code does before its integer cast.
    """
    rows = np.arange(x.shape[0])
    mag = np.abs(x)
    first = mag.argmax(axis=1)  # first index on ties, like a strict '<' scan
    m = x[rows, first]
    # An all-zero block keeps ggml's initial +0.0 (d becomes -0.0, stored as 0x8000).
    m = np.where(mag[rows, first] > 0, m, np.float32(0.0))
    d = m / np.float32(-16.0)
    shifted = x * _reciprocal(d)[:, None] + np.float32(16.5)
    codes = np.minimum(np.trunc(shifted), np.float32(31.0)).astype(np.uint8)
    out = np.empty(x.shape[0], dtype=Q5_0_BLOCK)
    out["d"] = d
    # Bit 4 of code k goes to bit k of a little-endian u32.
    out["qh"] = np.packbits((codes >> 4) & 1, axis=1, bitorder="little")
    low = codes & 0x0F
    out["qs"] = low[:, : QBLOCK // 2] | (low[:, QBLOCK // 2 :] << 4)
    return out


def q5_1_blocks(x: np.ndarray) -> np.ndarray:
    """(n, 32) float32 -> n q5_1 blocks.

    An offset and a scale per block: m = the block's minimum, d = (max - min) / 31, both in float32;
    codes = trunc((x - m) * (1/d) + 0.5) in float32 (0...31), decoded as code * d + m.
    """
    lo = x.min(axis=1)
    hi = x.max(axis=1)
    d = (hi - lo) / np.float32(31.0)
    shifted = (x - lo[:, None]) * _reciprocal(d)[:, None] + np.float32(0.5)
    codes = np.minimum(np.trunc(shifted), np.float32(31.0)).astype(np.uint8)
    out = np.empty(x.shape[0], dtype=Q5_1_BLOCK)
    out["d"] = d
    out["m"] = lo
    out["qh"] = np.packbits((codes >> 4) & 1, axis=1, bitorder="little")
    low = codes & 0x0F
    out["qs"] = low[:, : QBLOCK // 2] | (low[:, QBLOCK // 2 :] << 4)
    return out


QUANTIZERS = {"q8_0": q8_0_blocks, "q5_0": q5_0_blocks, "q5_1": q5_1_blocks}


def write_quantized(out, data: np.ndarray, kind: str) -> int:
    """Write a 2-D tensor (rows of whole blocks) as ggml blocks; returns bytes written.

    The input is the tensor as it would be stored in the f16 file (whisper.cpp's
    quantize tool reads those f16 values), so it is widened from float16.
    """
    blocks = np.ascontiguousarray(data, dtype=np.float16).reshape(-1, QBLOCK)
    quantize = QUANTIZERS[kind]
    written = 0
    for start in range(0, blocks.shape[0], QUANT_CHUNK_BLOCKS):
        part = quantize(blocks[start:start + QUANT_CHUNK_BLOCKS].astype(np.float32))
        out.write(part.tobytes())
        written += part.nbytes
    return written


# --------------------------------------------------------------------------
# Conversion
# --------------------------------------------------------------------------


def count_layers(model: Ct2Model, prefix: str) -> int:
    n = 0
    while any(v.startswith(f"{prefix}/layer_{n}/") for v in model.variables) or any(
        a.startswith(f"{prefix}/layer_{n}/") for a in model.aliases
    ):
        n += 1
    return n


def split_rows(weight: np.ndarray, parts: int, name: str) -> list[np.ndarray]:
    if weight.shape[0] % parts:
        raise ConversionError(f"fused variable '{name}' has {weight.shape[0]} rows, not divisible by {parts}")
    return np.split(weight, parts, axis=0)


def collect_tensors(model: Ct2Model, n_enc: int, n_dec: int):
    """Yield (ggml_name, float32 array in PyTorch/Whisper layout)."""
    t = model.tensor

    def linear(src: str, dst: str, bias: bool = True):
        yield f"{dst}.weight", t(f"{src}/weight")
        if bias:
            if model.has(f"{src}/bias"):
                yield f"{dst}.bias", t(f"{src}/bias")
            else:
                rows = model.raw(f"{src}/weight")[0].shape[0]
                yield f"{dst}.bias", np.zeros(rows, dtype=np.float32)

    def norm(src: str, dst: str):
        yield f"{dst}.weight", t(f"{src}/gamma")
        yield f"{dst}.bias", t(f"{src}/beta")

    def fused(src: str, dsts: list[str]):
        w = t(f"{src}/weight")
        ws = split_rows(w, len(dsts), f"{src}/weight")
        if model.has(f"{src}/bias"):
            bs = split_rows(t(f"{src}/bias"), len(dsts), f"{src}/bias")
        else:
            bs = [np.zeros(x.shape[0], dtype=np.float32) for x in ws]
        for dst, wi, bi in zip(dsts, ws, bs):
            yield f"{dst}.weight", wi
            if not dst.endswith(".key"):  # whisper has no key bias (CTranslate2 stores zeros there)
                yield f"{dst}.bias", bi

    yield "encoder.positional_embedding", t("encoder/position_encodings/encodings")
    for i in (1, 2):
        yield f"encoder.conv{i}.weight", t(f"encoder/conv{i}/weight")
        b = t(f"encoder/conv{i}/bias")
        yield f"encoder.conv{i}.bias", b.reshape(b.shape[0], 1)
    for i in range(n_enc):
        s, d = f"encoder/layer_{i}", f"encoder.blocks.{i}"
        yield from fused(f"{s}/self_attention/linear_0", [f"{d}.attn.query", f"{d}.attn.key", f"{d}.attn.value"])
        yield from linear(f"{s}/self_attention/linear_1", f"{d}.attn.out")
        yield from norm(f"{s}/self_attention/layer_norm", f"{d}.attn_ln")
        yield from linear(f"{s}/ffn/linear_0", f"{d}.mlp.0")
        yield from linear(f"{s}/ffn/linear_1", f"{d}.mlp.2")
        yield from norm(f"{s}/ffn/layer_norm", f"{d}.mlp_ln")
    yield from norm("encoder/layer_norm", "encoder.ln_post")

    yield "decoder.positional_embedding", t("decoder/position_encodings/encodings")
    yield "decoder.token_embedding.weight", t("decoder/embeddings/weight")
    for i in range(n_dec):
        s, d = f"decoder/layer_{i}", f"decoder.blocks.{i}"
        yield from fused(f"{s}/self_attention/linear_0", [f"{d}.attn.query", f"{d}.attn.key", f"{d}.attn.value"])
        yield from linear(f"{s}/self_attention/linear_1", f"{d}.attn.out")
        yield from norm(f"{s}/self_attention/layer_norm", f"{d}.attn_ln")
        yield from linear(f"{s}/attention/linear_0", f"{d}.cross_attn.query")
        yield from fused(f"{s}/attention/linear_1", [f"{d}.cross_attn.key", f"{d}.cross_attn.value"])
        yield from linear(f"{s}/attention/linear_2", f"{d}.cross_attn.out")
        yield from norm(f"{s}/attention/layer_norm", f"{d}.cross_attn_ln")
        yield from linear(f"{s}/ffn/linear_0", f"{d}.mlp.0")
        yield from linear(f"{s}/ffn/linear_1", f"{d}.mlp.2")
        yield from norm(f"{s}/ffn/layer_norm", f"{d}.mlp_ln")
    yield from norm("decoder/layer_norm", "decoder.ln")


def keep_f32(name: str, ndim: int) -> bool:
    return ndim < 2 or name in (
        "encoder.conv1.bias",
        "encoder.conv2.bias",
        "encoder.positional_embedding",
        "decoder.positional_embedding",
    )


def convert(model_dir: Path, out_path: Path, log=print, weight_type: str = "f16") -> dict:
    """Write OUT; weight_type is "f16" or a quantization ("q8_0", "q5_0", "q5_1") for the 2-D weights."""
    if weight_type not in WEIGHT_TYPES:
        raise ConversionError(f"unknown weight type '{weight_type}' (choose from {', '.join(WEIGHT_TYPES)})")
    weight_ggml_type, ftype = WEIGHT_TYPES[weight_type]
    if not model_dir.is_dir():
        raise ConversionError(f"{model_dir}: not a directory")
    bin_path = model_dir / "model.bin"
    if not bin_path.is_file():
        raise ConversionError(f"{bin_path}: missing (a CTranslate2 model directory holds model.bin)")
    if not out_path.parent.is_dir():
        raise ConversionError(f"{out_path.parent}: output directory does not exist")
    model = Ct2Model(bin_path)

    # config.json (alignment heads, suppress ids, language ids) has no place in
    # a ggml file: whisper.cpp derives or hardcodes all of it.

    required = [
        "encoder/conv1/weight",
        "encoder/conv2/weight",
        "encoder/position_encodings/encodings",
        "decoder/embeddings/weight",
        "decoder/position_encodings/encodings",
    ]
    missing = [n for n in required if not model.has(n)]
    if missing:
        raise ConversionError(f"{bin_path}: WhisperSpec model lacks variables: {', '.join(missing)}")

    conv1 = model.raw("encoder/conv1/weight")[0].shape  # (n_audio_state, n_mels, 3)
    enc_pe = model.raw("encoder/position_encodings/encodings")[0].shape  # (n_audio_ctx, n_audio_state)
    emb = model.raw("decoder/embeddings/weight")[0].shape  # (n_vocab, n_text_state)
    dec_pe = model.raw("decoder/position_encodings/encodings")[0].shape  # (n_text_ctx, n_text_state)
    n_enc = count_layers(model, "encoder")
    n_dec = count_layers(model, "decoder")
    if len(conv1) != 3 or conv1[2] != 3 or n_enc == 0 or n_dec == 0:
        raise ConversionError(f"{bin_path}: unexpected Whisper layout (conv1 {conv1}, {n_enc} encoder / {n_dec} decoder layers)")

    n_audio_state, n_mels = conv1[0], conv1[1]
    n_text_state = emb[1]
    if n_text_state != n_audio_state or enc_pe[1] != n_audio_state or dec_pe[1] != n_text_state:
        raise ConversionError(
            f"{bin_path}: inconsistent widths (conv1 {conv1}, encoder positions {enc_pe}, "
            f"embeddings {emb}, decoder positions {dec_pe}); whisper.cpp needs one model width"
        )
    # All Whisper sizes use 64-wide attention heads; prefer the stored counts.
    n_audio_head = model.scalar("encoder/num_heads") or n_audio_state // 64
    n_text_head = model.scalar("decoder/num_heads") or n_text_state // 64
    hparams = {
        "n_vocab": emb[0],
        "n_audio_ctx": enc_pe[0],
        "n_audio_state": n_audio_state,
        "n_audio_head": n_audio_head,
        "n_audio_layer": n_enc,
        "n_text_ctx": dec_pe[0],
        "n_text_state": n_text_state,
        "n_text_head": n_text_head,
        "n_text_layer": n_dec,
        "n_mels": n_mels,
        "ftype": ftype,
    }

    # Vocabulary: ggml files carry only the ordinary BPE tokens (ids below
    # <|endoftext|>); whisper.cpp derives the special and timestamp tokens
    # from n_vocab and hardcoded ids.
    tokens = load_vocabulary(model_dir)
    multilingual = hparams["n_vocab"] >= 51865
    want_eot = EOT_MULTILINGUAL if multilingual else EOT_ENGLISH
    vocab_name = "vocabulary.json" if (model_dir / "vocabulary.json").is_file() else "vocabulary.txt"
    try:
        eot = tokens.index("<|endoftext|>")
    except ValueError:
        raise ConversionError(f"{model_dir / vocab_name}: no <|endoftext|> token (not a Whisper vocabulary)") from None
    if eot != want_eot:
        raise ConversionError(
            f"{model_dir / vocab_name}: <|endoftext|> is token {eot}, but whisper.cpp expects {want_eot} "
            f"for a model with n_vocab {hparams['n_vocab']}"
        )
    if len(tokens) > eot + 1 and tokens[eot + 1] != "<|startoftranscript|>":
        raise ConversionError(f"{model_dir / vocab_name}: token {eot + 1} is '{tokens[eot + 1]}', expected <|startoftranscript|>")
    if len(tokens) > hparams["n_vocab"]:
        raise ConversionError(
            f"{model_dir / vocab_name}: {len(tokens)} tokens but the embedding has only {hparams['n_vocab']} rows"
        )
    decoder = byte_level_decoder()
    vocab_bytes = [token_bytes(tok, decoder) for tok in tokens[:eot]]

    # Whisper ties the output projection to the token embedding; whisper.cpp
    # only has the embedding, so an untied projection cannot be represented.
    proj_real = model.resolve("decoder/projection/weight")
    if proj_real is not None and proj_real != model.resolve("decoder/embeddings/weight"):
        if not np.array_equal(model.tensor("decoder/projection/weight"), model.tensor("decoder/embeddings/weight")):
            log("warning: decoder projection differs from the token embedding; whisper.cpp will use the embedding")
    if model.has("decoder/projection/bias") and np.any(model.tensor("decoder/projection/bias")):
        log("warning: non-zero decoder projection bias is dropped (whisper.cpp has none)")

    filters = mel_filterbank(n_mels)

    tmp_path = out_path.with_name(out_path.name + ".part")
    n_tensors = 0
    type_counts: dict[str, int] = {}
    try:
        with open(tmp_path, "wb") as out:
            out.write(struct.pack("<I", GGML_MAGIC))
            for key in ("n_vocab", "n_audio_ctx", "n_audio_state", "n_audio_head", "n_audio_layer",
                        "n_text_ctx", "n_text_state", "n_text_head", "n_text_layer", "n_mels", "ftype"):
                out.write(struct.pack("<i", hparams[key]))
            out.write(struct.pack("<ii", filters.shape[0], filters.shape[1]))
            out.write(filters.astype("<f4").tobytes())
            out.write(struct.pack("<i", len(vocab_bytes)))
            for b in vocab_bytes:
                out.write(struct.pack("<i", len(b)))
                out.write(b)
            for name, data in collect_tensors(model, n_enc, n_dec):
                f32 = keep_f32(name, data.ndim)
                data = np.ascontiguousarray(data, dtype="<f4" if f32 else "<f2")
                if not np.all(np.isfinite(data)):
                    raise ConversionError(f"{bin_path}: tensor for '{name}' has non-finite values after conversion")
                ttype, tname = (GGML_TYPE_F32, "f32") if f32 else (GGML_TYPE_F16, "f16")
                # whisper.cpp's quantizer takes every 2-D tensor of the f16 file
                # but the skip list (conv biases, positional embeddings: kept
                # f32 here); the 3-D conv kernels stay f16.
                if weight_type != "f16" and not f32 and data.ndim == 2:
                    if data.shape[1] % QBLOCK:
                        raise ConversionError(
                            f"{bin_path}: '{name}' rows have {data.shape[1]} values, not a multiple of "
                            f"{QBLOCK}; cannot {weight_type}-quantize it"
                        )
                    ttype, tname = weight_ggml_type, weight_type
                encoded = name.encode("utf-8")
                out.write(struct.pack("<iii", data.ndim, len(encoded), ttype))
                out.write(struct.pack(f"<{data.ndim}i", *reversed(data.shape)))  # ggml: fastest dim first
                out.write(encoded)
                if ttype in (GGML_TYPE_F32, GGML_TYPE_F16):
                    out.write(data.tobytes())
                else:
                    write_quantized(out, data, weight_type)
                n_tensors += 1
                type_counts[tname] = type_counts.get(tname, 0) + 1
        os.replace(tmp_path, out_path)
    except BaseException:
        try:
            tmp_path.unlink()
        except OSError:
            pass
        raise

    return {
        "hparams": hparams,
        "multilingual": multilingual,
        "n_tokens_written": len(vocab_bytes),
        "n_tensors": n_tensors,
        "tensor_types": type_counts,
        "ct2_dtypes": sorted(model.dtypes_seen),
        "binary_version": model.binary_version,
        "spec_revision": model.spec_revision,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Convert a CTranslate2 Whisper model directory to a whisper.cpp ggml file.")
    ap.add_argument("ct2_dir", type=Path, help="CTranslate2 model directory (model.bin, config.json, vocabulary)")
    ap.add_argument("out", type=Path, help="output ggml .bin file")
    ap.add_argument(
        "--type",
        dest="weight_type",
        choices=list(WEIGHT_TYPES),
        default="f16",
        help="storage of the 2-D weight matrices: f16 (default), or q8_0 / q5_0 block quantization "
        "as whisper.cpp's quantize tool makes it",
    )
    args = ap.parse_args(argv)

    start = time.monotonic()
    try:
        info = convert(args.ct2_dir, args.out, log=lambda m: print(m, file=sys.stderr), weight_type=args.weight_type)
    except ConversionError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"error: {exc.filename or args.out}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    hp = info["hparams"]
    print("hparams: " + ", ".join(f"{k}={v}" for k, v in hp.items()))
    print(
        f"{'multilingual' if info['multilingual'] else 'English-only'} model; "
        f"{info['n_tokens_written']} BPE tokens, {info['n_tensors']} tensors "
        f"({', '.join(f'{n} {t}' for t, n in sorted(info['tensor_types'].items()))}); "
        f"CTranslate2 binary v{info['binary_version']} rev {info['spec_revision']}, "
        f"dtypes {', '.join(info['ct2_dtypes'])}"
    )
    print(f"wrote {args.out} ({args.out.stat().st_size / 1e6:.1f} MB) in {time.monotonic() - start:.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
