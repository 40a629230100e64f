#!/usr/bin/env python3
"""Cuts a Piper voice (a VITS model exported to ONNX) into the two halves `tts engine: piper` streams with:

    scripts/piper-stream.py VOICE.onnx [VOICE.onnx ...]

writes, beside each model, the folder VOICE.stream/ with
    encoder.onnx  phoneme ids, lengths, scales (and sid) -> the prior sample z_p, its mask (and what else
                  the second half needs: a speaker's embedding)
    decoder.onnx  those -> audio (the normalizing flow and the HiFi-GAN vocoder)
    split.json    the tensors between the halves, which of them run along time, the samples per frame
                  (hop), the frames of context a slice needs on each side, and the model's size.

The second half is the costly one (about four fifths of the time) and it only looks a few dozen frames
around each frame: run over slices of z_p with some context each side, it gives the same audio slice by
slice, so the first 0.3 s of a sentence can play before the rest is made. The cut is found from the graph
(the vocoder's first convolution, and what the flow reads), not from tensor names, then checked: the
halves, sliced, must give the whole model's audio (noise off) to within 1e-3 of its level, or nothing is
written. Needs the `onnx` and `onnxruntime` Python packages (scripts/install-python-deps.sh installs them
into .deps/venv).
"""
import json
import os
import sys

import numpy as np
import onnx
import onnx.utils
import onnxruntime as ort

HOP = 256  # samples per frame; measured from each model in split()
CONTEXT = 24  # frames of context each side of a slice (measured: 24 gives 2e-4 of the level, 32 gives 2e-6)


def cut_points(model):
    """The tensors the second half starts from: the flow's input (z_p) and everything else outside the flow
    and vocoder that they read (the mask, a speaker embedding)."""
    g = model.graph
    producer = {o: n for n in g.node for o in n.output}
    inits = {i.name for i in g.initializer}
    inputs = {i.name for i in g.input}
    conv_pre = [n for n in g.node if n.op_type == "Conv" and "/dec/" in n.name and "conv_pre" in n.name]
    if not conv_pre:
        raise SystemExit("no vocoder (a '/dec/…conv_pre' convolution) in the graph: not a Piper VITS export")
    # z_p: the sum of the prior mean and the scaled noise, i.e. the Add fed by a RandomNormalLike outside
    # the duration predictor.
    noise = [n for n in g.node if n.op_type == "RandomNormalLike" and "/dp/" not in n.name]
    if len(noise) != 1:
        raise SystemExit(f"{len(noise)} prior-noise nodes in the graph, expected 1")
    consumers = {}
    for n in g.node:
        for i in n.input:
            consumers.setdefault(i, []).append(n)
    frontier, z_p = [noise[0].output[0]], None
    for _ in range(6):  # RandomNormalLike -> Mul (exp(logs_p)) -> Mul (noise_scale) -> Add (m_p + …)
        nxt = []
        for t in frontier:
            for c in consumers.get(t, []):
                if c.op_type == "Add":
                    z_p = c.output[0]
                nxt += list(c.output)
        if z_p:
            break
        frontier = nxt
    if not z_p:
        raise SystemExit("cannot find where the prior sample z_p is made")
    # The second half: every node after z_p's (the graph is in execution order) that the output depends on.
    # What those nodes read from before z_p (other than constants) is the rest of the cut: the mask, a
    # speaker embedding.
    order = {n.name: k for k, n in enumerate(g.node)}
    cut_at = order[producer[z_p].name]
    need, seen, stack = [], set(), [g.output[0].name]
    while stack:
        t = stack.pop()
        if t in seen or t == z_p or t in inits:
            continue
        seen.add(t)
        if t in inputs:
            raise SystemExit(f"the vocoder side reads the model input {t} directly: cannot split")
        n = producer.get(t)
        if n is None:
            continue
        if order[n.name] < cut_at and n.op_type != "Constant":
            need.append(t)
            continue
        stack.extend(i for i in n.input if i)
    return z_p, need


def check(src, enc, dec, config, names, timed):
    so = ort.SessionOptions()
    so.intra_op_num_threads = 2
    whole = ort.InferenceSession(src, so)
    first = ort.InferenceSession(enc, so)
    second = ort.InferenceSession(dec, so)
    ids = [config["phoneme_id_map"]["^"][0]]
    symbols = [s for s in "həlˈoʊ wˈɜːld ðɪs ɪz ɐ tˈɛst ʌv ðə vˈɔɪs" if s in config["phoneme_id_map"]]
    for s in symbols * 3:
        ids += config["phoneme_id_map"][s] + config["phoneme_id_map"]["_"]
    ids += config["phoneme_id_map"]["$"]
    feed = {"input": np.array([ids], dtype=np.int64), "input_lengths": np.array([len(ids)], dtype=np.int64),
            "scales": np.array([0, 1, 0], dtype=np.float32)}
    if "sid" in [i.name for i in whole.get_inputs()]:
        feed["sid"] = np.array([0], dtype=np.int64)
    reference = whole.run(None, feed)[0].ravel()
    middle = dict(zip(names, first.run(names, {k: v for k, v in feed.items() if k in [i.name for i in first.get_inputs()]})))
    frames = middle[names[0]].shape[-1]
    pieces, start, size = [], 0, 24
    while start < frames:
        lo, hi = max(0, start - CONTEXT), min(frames, start + size + CONTEXT)
        part = {k: (np.ascontiguousarray(v[..., lo:hi]) if k in timed else v) for k, v in middle.items()}
        audio = second.run(None, part)[0].ravel()
        n = min(size, frames - start)
        pieces.append(audio[(start - lo) * HOP:(start - lo + n) * HOP])
        start += n
        size *= 3
    sliced = np.concatenate(pieces)
    if sliced.size != reference.size:
        raise SystemExit(f"the halves give {sliced.size} samples, the whole model {reference.size}")
    level = float(np.sqrt(np.mean(reference ** 2))) or 1.0
    error = float(np.sqrt(np.mean((sliced - reference) ** 2))) / level
    if error > 1e-3:
        raise SystemExit(f"the sliced halves differ from the whole model by {error:.2e} of its level")
    return error, frames


def split(src):
    stem = src[:-len(".onnx")] if src.endswith(".onnx") else src
    out = stem + ".stream"
    with open(src + ".json") as f:
        config = json.load(f)
    model = onnx.load(src)
    z_p, others = cut_points(model)
    names = [z_p] + others
    inputs = [i.name for i in model.graph.input]
    os.makedirs(out, exist_ok=True)
    enc, dec = os.path.join(out, "encoder.onnx.part"), os.path.join(out, "decoder.onnx.part")
    onnx.utils.extract_model(src, enc, inputs, names)
    onnx.utils.extract_model(src, dec, names, [model.graph.output[0].name])
    # Which cut tensors run along time: those whose last axis is as long as z_p's, on a test sentence.
    so = ort.SessionOptions()
    first = ort.InferenceSession(enc, so)
    ids = config["phoneme_id_map"]["^"] + config["phoneme_id_map"]["_"] * 9 + config["phoneme_id_map"]["$"]
    feed = {"input": np.array([ids], dtype=np.int64), "input_lengths": np.array([len(ids)], dtype=np.int64),
            "scales": np.array([0, 1, 0], dtype=np.float32)}
    if "sid" in [i.name for i in first.get_inputs()]:
        feed["sid"] = np.array([0], dtype=np.int64)
    values = first.run(names, feed)
    frames = values[0].shape[-1]
    whole = ort.InferenceSession(src, so).run(None, feed)[0].size
    if whole % frames:
        raise SystemExit(f"{whole} samples for {frames} frames: not a whole number of samples per frame")
    global HOP
    HOP = whole // frames
    timed = [n for n, v in zip(names, values) if v.shape[-1] == frames and v.ndim == 3 and (n == z_p or v.shape[1] == 1)]
    error, tested = check(src, enc, dec, config, names, set(timed))
    os.replace(enc, os.path.join(out, "encoder.onnx"))
    os.replace(dec, os.path.join(out, "decoder.onnx"))
    manifest = {"format": 1, "source": os.path.basename(src), "source_bytes": os.path.getsize(src),
                "between": names, "along_time": timed, "hop": HOP, "context_frames": CONTEXT,
                "checked": {"frames": tested, "relative_error": error}}
    with open(os.path.join(out, "split.json"), "w") as f:
        json.dump(manifest, f, indent=1)
    print(f"piper-stream: {os.path.basename(src)} -> {out}/ (between: {', '.join(names)}; sliced error {error:.1e} of the level)")


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    failed = 0
    for src in sys.argv[1:]:
        try:
            split(src)
        except SystemExit as e:
            print(f"piper-stream: {src}: {e.code}", file=sys.stderr)
            failed += 1
        except Exception as e:  # a model onnx cannot read
            print(f"piper-stream: {src}: {type(e).__name__}: {e}", file=sys.stderr)
            failed += 1
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
