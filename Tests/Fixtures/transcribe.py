#!/usr/bin/env python3
"""Transcribes WAV files with faster-whisper (the Whisper CTranslate2 model in .deps/whisper/ct2/tiny.en,
scripts/install-whisper.sh): one line of text per file, in order.

    transcribe.py FILE.wav [FILE.wav ...]"""
import os, sys

from faster_whisper import WhisperModel

root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
model = WhisperModel(os.path.join(root, ".deps/whisper/ct2/tiny.en"), device="cpu", compute_type="int8", cpu_threads=2)
for path in sys.argv[1:]:
    segments, _ = model.transcribe(path, beam_size=5, language="en")
    print(" ".join(s.text.strip() for s in segments), flush=True)
