"""Small attention, sequence and streaming models, trained for seconds on synthetic data.

    python models/attention/build.py NAME [NAME ...] --output DIR

Each NAME writes DIR/NAME/ with the model as a PyTorch program (``NAME.pt2``, ``torch.export``)
and as ONNX (``NAME.onnx``), its calibration data and held-out data. Seeded. The trained ones
are stored trained in ``trained/`` (``models/trained.py``): a build copies them while their
recipe is unchanged; ``--store NAME`` trains and stores one again after its recipe is edited.
They stand for what real exports now carry:

- ``vit``: a tiny vision transformer (8x8 patches by a strided convolution, a class token,
  two pre-norm blocks: multi-head self-attention and a GELU MLP) classifying three shapes.
  ONNX opset 17 (fused ``LayerNormalization``).
- ``text_encoder``: a BERT-style encoder: ``input_ids`` and ``attention_mask`` (int64,
  ``[N, 16]``), token and position embeddings, two post-norm blocks whose attention masks
  padding with an additive ``(1 - mask) * -1e4``, a classifier over the first token (four
  topics). ONNX opset 17.
- ``recognizer``: a text-line recognizer: a convolutional stem over ``[N, 1, 16, 96]`` lines,
  the height folded into channels, two attention blocks over the 24 columns, and per-column
  log-probabilities over 11 symbols (blank first) trained with CTC: ``[N, 24, 11]``. ONNX
  opset 11, as older exports are: LayerNorm as ReduceMean/Sub/Pow/Sqrt/Div, GELU as Erf.
  ``lines.npz`` holds calibration lines, ``heldout.npz`` held-out lines and their texts.
- ``stream``: a streaming voice-activity model in ONNX (a VAD's structure): a 256-sample frame,
  a scalar ``sr`` (int64) whose ``If`` picks the 16 kHz or the 8 kHz front end, and a GRU
  state ``[2, N, 32]`` (two layers, batch on axis 1) read and written every call
  (``state`` -> ``stateN``), with ``speech`` ``[N, 1]``. ``frames.npz`` holds calibration
  frames with the states met while streaming them (batch-first: ``[N, 2, 32]``, the layout the
  package takes); ``stream.npz`` 100 frames in order; ``zeros.npy`` one zero state ``[2, 1, 32]``
  (the source's layout, for ``--input state=zeros.npy``).
- ``onehot``: an int32-input classifier as a JAX/TF export writes it: ``OneHot`` of byte
  tokens, ``MatMul`` + ``Add`` of a ``[1, N]`` bias (which ``quant_pre_process`` fuses into a
  Gemm with a 2-D bias), four classes.
"""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Callable
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from trained import Store, main as trained_main  # noqa: E402  (models/trained.py)

TRAINED = Store(Path(__file__).resolve().parent / "trained")

SYMBOLS = 10  # recognizer: symbols 1..10, 0 is the CTC blank
LINE_HEIGHT, LINE_WIDTH, COLUMNS, GLYPH_WIDTH = 16, 96, 24, 8


def _torch_blocks():  # noqa: ANN202
    """The attention pieces, written out as real exports write them (no fused kernels)."""
    import torch
    from torch import nn

    class Attention(nn.Module):
        def __init__(self, dim: int, heads: int) -> None:
            super().__init__()
            self.heads, self.qkv, self.out = heads, nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)

        def forward(self, x: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
            n, t, d = x.shape
            q, k, v = self.qkv(x).reshape(n, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
            scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(d // self.heads)
            if bias is not None:
                scores = scores + bias
            mixed = torch.matmul(torch.softmax(scores, dim=-1), v)
            return self.out(mixed.transpose(1, 2).reshape(n, t, d))

    class LayerNorm(nn.Module):
        """LayerNorm as opset-11 exports spell it (ReduceMean, Sub, Pow, Sqrt, Div)."""

        def __init__(self, dim: int, spelled_out: bool) -> None:
            super().__init__()
            self.norm, self.spelled_out = nn.LayerNorm(dim), spelled_out

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            if not self.spelled_out:
                return self.norm(x)
            mean = x.mean(-1, keepdim=True)
            variance = (x - mean).pow(2).mean(-1, keepdim=True)
            return (x - mean) / torch.sqrt(variance + 1e-5) * self.norm.weight + self.norm.bias

    class Block(nn.Module):
        def __init__(self, dim: int, heads: int, pre_norm: bool = True, spelled_out: bool = False) -> None:
            super().__init__()
            self.pre_norm = pre_norm
            self.attention = Attention(dim, heads)
            self.norm1, self.norm2 = LayerNorm(dim, spelled_out), LayerNorm(dim, spelled_out)
            self.mlp = nn.Sequential(nn.Linear(dim, 2 * dim), nn.GELU(), nn.Linear(2 * dim, dim))

        def forward(self, x: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
            if self.pre_norm:
                x = x + self.attention(self.norm1(x), bias)
                return x + self.mlp(self.norm2(x))
            x = self.norm1(x + self.attention(x, bias))
            return self.norm2(x + self.mlp(x))

    return Attention, LayerNorm, Block


def _train(model, batches, loss_of, steps: int, rate: float = 3e-3) -> None:  # noqa: ANN001
    import torch

    torch.set_num_threads(min(2, torch.get_num_threads()))
    optimizer = torch.optim.Adam(model.parameters(), rate)
    for step in range(steps):
        optimizer.zero_grad()
        loss = loss_of(*batches(step))
        loss.backward()
        optimizer.step()
    model.eval()


def _save(model, example: tuple, folder: Path, name: str, inputs: list[str], outputs: list[str],  # noqa: ANN001
          opset: int, batch_axes: dict[str, int] | None = None) -> None:
    """``NAME.pt2`` (dynamic batch) and ``NAME.onnx`` (TorchScript exporter, dynamic batch)."""
    import torch

    example = tuple(e.clone() for e in example)  # a slice keeps its whole batch's storage, which the .pt2 would carry
    axes = {name: {axis: "batch"} for name, axis in {**{n: 0 for n in inputs + outputs}, **(batch_axes or {})}.items()}
    batch = torch.export.Dim("batch", min=1, max=1024)
    shapes = tuple({0: batch} for _ in example)
    torch.export.save(torch.export.export(model, example, dynamic_shapes=shapes), str(folder / f"{name}.pt2"))
    torch.onnx.export(model, example, str(folder / f"{name}.onnx"), input_names=inputs, output_names=outputs,
                      dynamic_axes=axes, opset_version=opset, dynamo=False)


# --- vit ---------------------------------------------------------------------------------------


def shape_images(n: int, seed: int):  # noqa: ANN201
    """32x32 grey images [N, 1, 32, 32] of a square, a vertical or a horizontal bar; class ids."""
    import numpy as np

    rng = np.random.default_rng(seed)
    x = rng.uniform(0, 0.2, (n, 1, 32, 32)).astype(np.float32)
    y = rng.integers(0, 3, n)
    for i in range(n):
        r, c = rng.integers(4, 20, 2)
        h, w = [(10, 10), (18, 4), (4, 18)][y[i]]
        x[i, 0, r:r + h, c:c + w] += rng.uniform(0.5, 0.8)
    return x, y


def vit(out: Path) -> Path:
    import numpy as np

    folder = out / "vit"
    folder.mkdir(parents=True, exist_ok=True)
    trained(folder, "vit")
    calibration, _ = shape_images(200, 1)
    heldout, labels = shape_images(200, 2)
    np.savez(folder / "images.npz", image=calibration)
    np.savez(folder / "heldout.npz", image=heldout, labels=labels)
    return folder / "vit.onnx"


def train_vit(folder: Path) -> None:
    import torch
    from torch import nn

    torch.manual_seed(0)
    _, LayerNorm, Block = _torch_blocks()

    class ViT(nn.Module):
        def __init__(self, dim: int = 32) -> None:
            super().__init__()
            self.patches = nn.Conv2d(1, dim, 8, 8)
            self.cls = nn.Parameter(torch.zeros(1, 1, dim))
            self.position = nn.Parameter(torch.randn(1, 17, dim) * 0.02)
            self.blocks = nn.ModuleList([Block(dim, 4), Block(dim, 4)])
            self.norm, self.head = LayerNorm(dim, False), nn.Linear(dim, 3)

        def forward(self, image: torch.Tensor) -> torch.Tensor:
            x = self.patches(image).flatten(2).transpose(1, 2)
            x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], dim=1) + self.position
            for block in self.blocks:
                x = block(x)
            return torch.softmax(self.head(self.norm(x)[:, 0]), dim=-1)

    model = ViT()
    x, y = shape_images(1200, 0)
    xt, yt = torch.from_numpy(x), torch.from_numpy(y)
    _train(model, lambda s: (xt[s % 12 * 100:(s % 12 + 1) * 100], yt[s % 12 * 100:(s % 12 + 1) * 100]),
           lambda a, b: nn.functional.nll_loss(torch.log(model(a) + 1e-9), b), 240)
    _save(model, (torch.from_numpy(x[:2]),), folder, "vit", ["image"], ["probabilities"], 17)


# --- text_encoder --------------------------------------------------------------------------------


def token_batches(n: int, seed: int, length: int = 16, vocab: int = 64):  # noqa: ANN201
    """Token ids [N, 16] (int64) of one of four topics (each topic owns 12 word ids), padded with
    0 after a random length, the attention masks and the topic ids. ID 1 starts every text."""
    import numpy as np

    rng = np.random.default_rng(seed)
    ids = np.zeros((n, length), np.int64)
    mask = np.zeros((n, length), np.int64)
    topics = rng.integers(0, 4, n)
    for i in range(n):
        size = rng.integers(5, length + 1)
        words = np.where(rng.uniform(size=size - 1) < 0.5, 2 + 12 * topics[i] + rng.integers(0, 12, size - 1),
                         50 + rng.integers(0, vocab - 50, size - 1))
        ids[i, 0], ids[i, 1:size], mask[i, :size] = 1, words, 1
    return ids, mask, topics


def text_encoder(out: Path) -> Path:
    import numpy as np

    folder = out / "text_encoder"
    folder.mkdir(parents=True, exist_ok=True)
    trained(folder, "text_encoder")
    ids, mask, _ = token_batches(200, 1)
    np.savez(folder / "texts.npz", input_ids=ids, attention_mask=mask)
    ids, mask, topics = token_batches(200, 2)
    np.savez(folder / "heldout.npz", input_ids=ids, attention_mask=mask, labels=topics)
    return folder / "text_encoder.onnx"


def train_text_encoder(folder: Path) -> None:
    import torch
    from torch import nn

    torch.manual_seed(0)
    _, _, Block = _torch_blocks()

    class Encoder(nn.Module):
        def __init__(self, vocab: int = 64, dim: int = 32, length: int = 16) -> None:
            super().__init__()
            self.tokens, self.position = nn.Embedding(vocab, dim), nn.Parameter(torch.randn(1, length, dim) * 0.02)
            self.norm = nn.LayerNorm(dim)
            self.blocks = nn.ModuleList([Block(dim, 4, pre_norm=False), Block(dim, 4, pre_norm=False)])
            self.head = nn.Linear(dim, 4)

        def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
            x = self.norm(self.tokens(input_ids) + self.position)
            bias = (1.0 - attention_mask[:, None, None, :].to(x.dtype)) * -1e4
            for block in self.blocks:
                x = block(x, bias)
            return self.head(x[:, 0])

    model = Encoder()
    ids, mask, topics = token_batches(1600, 0)
    it, mt, tt = (torch.from_numpy(a) for a in (ids, mask, topics))
    _train(model, lambda s: (it[s % 16 * 100:(s % 16 + 1) * 100], mt[s % 16 * 100:(s % 16 + 1) * 100],
                             tt[s % 16 * 100:(s % 16 + 1) * 100]),
           lambda a, m, b: nn.functional.cross_entropy(model(a, m), b), 300)
    _save(model, (it[:2], mt[:2]), folder, "text_encoder", ["input_ids", "attention_mask"], ["logits"], 17)


# --- recognizer ------------------------------------------------------------------------------------


def glyphs():  # noqa: ANN201
    """One fixed 16x8 pattern per symbol (1..10): a few strokes each."""
    import numpy as np

    rng = np.random.default_rng(7)
    shapes = np.zeros((SYMBOLS + 1, LINE_HEIGHT, GLYPH_WIDTH), np.float32)
    for s in range(1, SYMBOLS + 1):
        for _ in range(3):
            if rng.uniform() < 0.5:
                r = rng.integers(1, LINE_HEIGHT - 1)
                shapes[s, r:r + 2, 1:GLYPH_WIDTH - 1] = 1
            else:
                c = rng.integers(1, GLYPH_WIDTH - 2)
                r0 = rng.integers(0, 6)
                shapes[s, r0:r0 + 10, c:c + 2] = 1
    return shapes


def text_lines(n: int, seed: int):  # noqa: ANN201
    """Lines [N, 1, 16, 96] of 3-8 glyphs with random gaps, and their texts (lists of symbols)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    shapes = glyphs()
    x = rng.uniform(0, 0.15, (n, 1, LINE_HEIGHT, LINE_WIDTH)).astype(np.float32)
    texts = []
    for i in range(n):
        text, column = [], int(rng.integers(0, 6))
        while len(text) < 8 and column + GLYPH_WIDTH <= LINE_WIDTH:
            symbol = int(rng.integers(1, SYMBOLS + 1))
            x[i, 0, :, column:column + GLYPH_WIDTH] += shapes[symbol] * rng.uniform(0.6, 0.9)
            text.append(symbol)
            column += GLYPH_WIDTH + int(rng.integers(1, 6))
            if len(text) >= 3 and rng.uniform() < 0.15:
                break
        texts.append(text)
    return x, texts


def recognizer(out: Path) -> Path:
    import numpy as np

    folder = out / "recognizer"
    folder.mkdir(parents=True, exist_ok=True)
    trained(folder, "recognizer")
    calibration, _ = text_lines(200, 1)
    heldout, held_texts = text_lines(200, 2)
    np.savez(folder / "lines.npz", line=calibration)
    padded = np.zeros((len(held_texts), 8), np.int64)
    for i, t in enumerate(held_texts):
        padded[i, :len(t)] = t
    np.savez(folder / "heldout.npz", line=heldout, texts=padded)
    return folder / "recognizer.onnx"


def train_recognizer(folder: Path) -> None:
    import torch
    from torch import nn

    torch.manual_seed(0)
    _, LayerNorm, Block = _torch_blocks()

    class Recognizer(nn.Module):
        def __init__(self, dim: int = 48) -> None:
            super().__init__()
            self.stem = nn.Sequential(nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                                      nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2))
            self.project = nn.Linear(32 * (LINE_HEIGHT // 4), dim)
            self.blocks = nn.ModuleList([Block(dim, 4, spelled_out=True), Block(dim, 4, spelled_out=True)])
            self.norm, self.head = LayerNorm(dim, True), nn.Linear(dim, SYMBOLS + 1)

        def forward(self, line: torch.Tensor) -> torch.Tensor:
            f = self.stem(line)  # [N, 32, 4, 24]
            n, c, h, w = f.shape
            x = self.project(f.permute(0, 3, 1, 2).reshape(n, w, c * h))
            for block in self.blocks:
                x = block(x)
            return torch.log_softmax(self.head(self.norm(x)), dim=-1)

    model = Recognizer()
    x, texts = text_lines(2000, 0)
    targets = torch.tensor([s for t in texts for s in t])
    lengths = torch.tensor([len(t) for t in texts])
    offsets = torch.cat([torch.zeros(1, dtype=torch.long), torch.cumsum(lengths, 0)])
    xt = torch.from_numpy(x)
    ctc = nn.CTCLoss(blank=0, zero_infinity=True)

    def batch(step: int):  # noqa: ANN202
        i = step % 20 * 100
        return xt[i:i + 100], targets[offsets[i]:offsets[i + 100]], lengths[i:i + 100]

    def loss_of(lines, flat, sizes):  # noqa: ANN001, ANN202
        logp = model(lines).transpose(0, 1)  # [T, N, C]
        return ctc(logp, flat, torch.full((lines.shape[0],), COLUMNS, dtype=torch.long), sizes)

    model.train()
    _train(model, batch, loss_of, 400, rate=2e-3)
    _save(model, (xt[:2],), folder, "recognizer", ["line"], ["logprobs"], 11)


def greedy_ctc(logprobs) -> list[list[int]]:  # noqa: ANN001
    """Best-path decoding: argmax per column, repeats collapsed, blanks (0) dropped."""
    import numpy as np

    best = np.asarray(logprobs).argmax(-1)
    decoded = []
    for row in best:
        text, previous = [], 0
        for symbol in row:
            if symbol != previous and symbol != 0:
                text.append(int(symbol))
            previous = symbol
        decoded.append(text)
    return decoded


# --- stream ------------------------------------------------------------------------------------------


FRAME, STATE = 256, 32


def speech_frames(n: int, seed: int):  # noqa: ANN201
    """A stream of 256-sample frames at 16 kHz: noise, with speech-like bursts (a few harmonics of
    a 120-220 Hz voice) in stretches; and 1 where a frame holds speech."""
    import numpy as np

    rng = np.random.default_rng(seed)
    t = np.arange(FRAME) / 16000
    frames, speech, talking, left = [], [], False, 0
    for i in range(n):
        if left == 0:
            talking, left = not talking, int(rng.integers(5, 20))
        left -= 1
        x = rng.normal(0, 0.05, FRAME)
        if talking:
            f0 = rng.uniform(120, 220)
            x += sum(np.sin(2 * np.pi * f0 * k * (t + i * FRAME / 16000)) / k for k in range(1, 5)) * 0.3
        frames.append(x)
        speech.append(float(talking))
    return np.asarray(frames, np.float32), np.asarray(speech, np.float32)


def stream(out: Path) -> Path:
    import numpy as np

    folder = out / "stream"
    folder.mkdir(parents=True, exist_ok=True)
    trained(folder, "stream")
    np.save(folder / "zeros.npy", np.zeros((2, 1, STATE), np.float32))
    test, labels = speech_frames(100, 2)
    np.savez(folder / "stream.npz", input=test, labels=labels)
    return folder / "stream.onnx"


def train_stream(folder: Path) -> None:
    """``stream.onnx`` and its calibration frames with the states the trained model meets (``frames.npz``)."""
    import numpy as np
    import onnx
    import torch
    from onnx import TensorProto, helper
    from torch import nn

    torch.manual_seed(0)

    class Core(nn.Module):
        """Front-end features -> two GRU layers (one step) -> speech probability."""

        def __init__(self) -> None:
            super().__init__()
            self.front = nn.Sequential(nn.Conv1d(1, 8, 16, stride=8), nn.ReLU(), nn.Conv1d(8, 16, 8, stride=4),
                                       nn.ReLU(), nn.AdaptiveAvgPool1d(1))
            self.gru = nn.GRU(16, STATE, num_layers=2)
            self.head = nn.Linear(STATE, 1)

        def forward(self, frame: torch.Tensor, state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            f = self.front(frame[:, None, :])[:, :, 0]
            y, new_state = self.gru(f[None], state)
            return torch.sigmoid(self.head(y[0])), new_state

    core = Core()
    frames, speech = speech_frames(3000, 0)
    ft, st = torch.from_numpy(frames), torch.from_numpy(speech)
    optimizer = torch.optim.Adam(core.parameters(), 3e-3)
    torch.set_num_threads(min(2, torch.get_num_threads()))
    for epoch in range(6):  # truncated back-propagation through 50-frame windows, 8 streams at once
        for start in range(0, 3000 - 400, 400):
            state = torch.zeros(2, 8, STATE)
            optimizer.zero_grad()
            loss = 0.0
            for k in range(50):
                index = start + torch.arange(8) * 50 + k
                p, state = core(ft[index], state)
                loss = loss + nn.functional.binary_cross_entropy(p[:, 0], st[index])
            (loss / 50).backward()
            optimizer.step()
    core.eval()
    core_path = folder / "core.onnx"
    torch.onnx.export(core, (ft[:2], torch.zeros(2, 2, STATE)), str(core_path), input_names=["features", "state"],
                      output_names=["speech", "stateN"], opset_version=17, dynamo=False,
                      dynamic_axes={"features": {0: "batch"}, "state": {1: "batch"}, "speech": {0: "batch"},
                                    "stateN": {1: "batch"}})
    graph = onnx.load(str(core_path)).graph
    core_path.unlink()
    # The front end by sample rate, as a VAD export does: 16 kHz frames as they are, 8 kHz frames
    # upsampled by repeating each sample (the core sees 256 samples either way).
    then_branch = helper.make_graph([helper.make_node("Identity", ["input"], ["frame16"])], "at_16k", [],
                                    [helper.make_tensor_value_info("frame16", TensorProto.FLOAT, ["batch", FRAME])])
    else_nodes = [helper.make_node("Slice", ["input", "zero", "half", "one_axis"], ["first_half"]),
                  helper.make_node("Unsqueeze", ["first_half", "two_axis"], ["column"]),
                  helper.make_node("Concat", ["column", "column"], ["pairs"], axis=2),
                  helper.make_node("Reshape", ["pairs", "frame_shape"], ["frame8"])]
    else_init = [helper.make_tensor("zero", TensorProto.INT64, [1], [0]),
                 helper.make_tensor("half", TensorProto.INT64, [1], [FRAME // 2]),
                 helper.make_tensor("one_axis", TensorProto.INT64, [1], [1]),
                 helper.make_tensor("two_axis", TensorProto.INT64, [1], [2]),
                 helper.make_tensor("frame_shape", TensorProto.INT64, [2], [-1, FRAME])]
    else_branch = helper.make_graph(else_nodes, "at_8k", [],
                                    [helper.make_tensor_value_info("frame8", TensorProto.FLOAT, ["batch", FRAME])],
                                    initializer=else_init)
    nodes = [helper.make_node("Equal", ["sr", "sr_16k"], ["is_16k"]),
             helper.make_node("If", ["is_16k"], ["features"], then_branch=then_branch, else_branch=else_branch)]
    nodes += list(graph.node)
    inputs = [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["batch", FRAME]),
              helper.make_tensor_value_info("sr", TensorProto.INT64, []),
              helper.make_tensor_value_info("state", TensorProto.FLOAT, [2, "batch", STATE])]
    initializers = list(graph.initializer) + [helper.make_tensor("sr_16k", TensorProto.INT64, [], [16000])]
    merged = helper.make_graph(nodes, "stream", inputs, list(graph.output), initializer=initializers)
    model = helper.make_model(merged, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    onnx.save(model, str(folder / "stream.onnx"))
    # calibration: frames with the states met while streaming them (from zero, one stream)
    frames, _ = speech_frames(300, 1)
    states, state = [], torch.zeros(2, 1, STATE)
    with torch.no_grad():
        for frame in torch.from_numpy(frames):
            states.append(state[:, 0].numpy().copy())
            _, state = core(frame[None], state)
    # states batch-first, as edgekit takes every input (the package's state is [N, 2, 32])
    np.savez(folder / "frames.npz", input=frames, state=np.stack(states, axis=0))


# --- onehot ------------------------------------------------------------------------------------------


def byte_texts(n: int, seed: int, length: int = 24):  # noqa: ANN201
    """Int32 byte tokens [N, 24] of four 'languages' (each favours its own 16 byte values), ids."""
    import numpy as np

    rng = np.random.default_rng(seed)
    y = rng.integers(0, 4, n)
    own = 32 + 16 * y[:, None] + rng.integers(0, 16, (n, length))
    other = rng.integers(32, 96, (n, length))
    return np.where(rng.uniform(size=(n, length)) < 0.6, own, other).astype(np.int32), y


def onehot(out: Path) -> Path:
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    folder = out / "onehot"
    folder.mkdir(parents=True, exist_ok=True)
    x, y = byte_texts(2000, 0)
    depth, length, hidden = 128, x.shape[1], 32
    rng = np.random.default_rng(0)
    # a bag-of-bytes classifier fitted in closed form (counts -> least squares): no framework needed
    counts = np.stack([np.bincount(r, minlength=depth) for r in x]).astype(np.float32)
    w1 = rng.normal(0, 0.3, (depth, hidden)).astype(np.float32)
    h = np.maximum(counts @ w1, 0)
    target = np.eye(4, dtype=np.float32)[y] * 4 - 2
    w2 = np.linalg.lstsq(np.c_[h, np.ones(len(h))], target, rcond=None)[0].astype(np.float32)
    nodes = [helper.make_node("OneHot", ["tokens", "depth", "values"], ["hot"], axis=-1),
             helper.make_node("ReduceSum", ["hot", "axis1"], ["counts"], keepdims=0),
             helper.make_node("MatMul", ["counts", "w1"], ["h0"]),
             helper.make_node("Relu", ["h0"], ["h"]),
             helper.make_node("MatMul", ["h", "w2"], ["z"]),
             helper.make_node("Add", ["z", "b2"], ["logits"]),
             helper.make_node("Softmax", ["logits"], ["probabilities"], axis=-1)]
    initializers = [numpy_helper.from_array(np.array(depth, np.int32), "depth"),
                    numpy_helper.from_array(np.array([0, 1], np.float32), "values"),
                    numpy_helper.from_array(np.array([1], np.int64), "axis1"),
                    numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(w2[:-1], "w2"),
                    numpy_helper.from_array(w2[-1:], "b2")]  # [1, 4]: the 2-D bias JAX/TF exports carry
    graph = helper.make_graph(nodes, "onehot", [helper.make_tensor_value_info("tokens", TensorProto.INT32,
                                                                              ["batch", length])],
                              [helper.make_tensor_value_info("probabilities", TensorProto.FLOAT, ["batch", 4])],
                              initializer=initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    onnx.checker.check_model(model)
    onnx.save(model, str(folder / "onehot.onnx"))
    np.savez(folder / "tokens.npz", tokens=byte_texts(200, 1)[0])
    held, labels = byte_texts(200, 2)
    np.savez(folder / "heldout.npz", tokens=held, labels=labels)
    return folder / "onehot.onnx"


# the models stored trained (name -> its files, its recipe); onehot is fitted in closed form in a second
STORED: dict[str, tuple[list[str], Callable[[Path], None]]] = {
    "vit": (["vit.pt2", "vit.onnx"], train_vit),
    "text_encoder": (["text_encoder.pt2", "text_encoder.onnx"], train_text_encoder),
    "recognizer": (["recognizer.pt2", "recognizer.onnx"], train_recognizer),
    "stream": (["stream.onnx", "frames.npz"], train_stream),
}


def trained(folder: Path, name: str) -> None:
    """NAME's model files in ``folder``: the stored ones while its recipe is unchanged, else trained now."""
    files, train = STORED[name]
    TRAINED.build(name, files, train, folder)


BUILDERS = {"vit": vit, "text_encoder": text_encoder, "recognizer": recognizer, "stream": stream, "onehot": onehot}


if __name__ == "__main__":
    trained_main(__doc__.splitlines()[0], BUILDERS, STORED, TRAINED)
