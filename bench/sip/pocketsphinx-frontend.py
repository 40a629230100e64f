#!/usr/bin/env python3
"""PocketSphinx on 8 kHz telephone audio: can its front end be set for it? Trials with Debian's
`pocketsphinx_continuous` (package pocketsphinx, the library voicepipe embeds) and the en-us model.

    bench/sip/pocketsphinx-frontend.py [--channels wideband,pcmu]

Material and channels as bench/sip/telephone-asr.py (the narrowband ones converted to 16 kHz by sox, as
the model's sample rate wants). Variants:
  default              the model as installed;
  dither               `-dither yes` (a little noise on every sample);
  cmdline-upperf3500   `-upperf 3500` on the command line: the model's feat.params wins, nothing changes;
  model-*              a copy of the model whose feat.params has another filter bank (upper edge 3500,
                       4000 or 3800 Hz with the lower edge at 200, or 20 filters up to 3500 Hz): what
                       setting the front end for the telephone band does to a model trained on 130-6800 Hz;
                       or the same filter bank with a cepstral mean to start from measured on telephone audio;
  noise-N              the empty 3.7-7.9 kHz band filled with white noise at -N dBFS.
Prints word error rates (bench/whisper-bench.py's normalization), one line per material, channel and variant.
"""
import argparse, importlib.util, os, subprocess, sys, tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
MODEL = "/usr/share/pocketsphinx/model/en-us/en-us"
FILTERBANKS = {"model-upperf3500": {"-upperf": "3500"}, "model-upperf4000": {"-upperf": "4000"},
               "model-200-3800": {"-upperf": "3800", "-lowerf": "200"}, "model-nfilt20-3500": {"-upperf": "3500", "-nfilt": "20"},
               # The same filter bank; only the cepstral mean the decoder starts from: the one PocketSphinx's live
               # CMN reached at the end of the human material through the pcmu channel (its log, cmn_live.c).
               "model-cmninit-telephone": {"-cmninit": "42.76,25.10,-46.53,24.32,-26.23,-23.70,10.84,-37.46,-3.43,-6.82,-20.84,6.11,-13.98"}}


def load(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m); return m


def model_copy(tmp, name, changes):
    d = f"{tmp}/{name}"
    os.makedirs(d)
    for f in os.listdir(MODEL):
        if f != "feat.params":
            os.symlink(f"{MODEL}/{f}", f"{d}/{f}")
    with open(f"{MODEL}/feat.params") as src, open(f"{d}/feat.params", "w") as dst:
        for line in src:
            key = line.split()[0] if line.strip() else ""
            dst.write(f"{key} {changes[key]}\n" if key in changes else line)
    return d


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--channels", default="wideband,pcmu")
    args = ap.parse_args()
    if subprocess.run(["which", "pocketsphinx_continuous"], capture_output=True).returncode != 0:
        sys.exit("pocketsphinx-frontend: pocketsphinx_continuous not found (Debian package pocketsphinx)")
    tel = load("telephone_asr", f"{HERE}/telephone-asr.py")
    wb = load("whisper_bench", f"{ROOT}/bench/whisper-bench.py")
    ac = wb.load_compare()
    with tempfile.TemporaryDirectory() as tmp:
        os.chdir(ROOT)
        variants = {"default": [], "dither": ["-dither", "yes"], "cmdline-upperf3500": ["-upperf", "3500"]}
        variants |= {name: ["-hmm", model_copy(tmp, name, c)] for name, c in FILTERBANKS.items()}
        g722 = tel.G722()
        for m in wb.materials(ac, tmp, False):
            ref = " ".join(m["refs"])
            for c in args.channels.split(","):
                wav = tel.channel(m["wav"], c, tmp, g722)
                if c != "wideband" and c != "g722":
                    up = wav[:-4] + "-16k.wav"
                    tel.sox(wav, "-r", "16000", up)
                    wav = up
                runs = dict(variants)
                if c != "wideband":
                    for level in (70, 55, 40):
                        noisy = f"{wav[:-4]}-noise{level}.wav"
                        dur = subprocess.run(["soxi", "-D", wav], capture_output=True, text=True).stdout.strip()
                        tel.sox("-n", "-r", "16000", "-b", "16", f"{noisy}.n.wav", "synth", dur, "whitenoise", "vol", f"-{level}dB", "sinc", "3700-7900")
                        tel.sox("-m", "-v", "1", wav, "-v", "1", f"{noisy}.n.wav", noisy)
                        runs[f"noise-{level}"] = (noisy, [])
                for name, v in runs.items():
                    path, extra = v if isinstance(v, tuple) else (wav, v)
                    out = subprocess.run(["pocketsphinx_continuous", "-infile", path, "-logfn", "/dev/null"] + extra,
                                         capture_output=True, text=True).stdout
                    hyp = " ".join(l.strip() for l in out.splitlines() if l.strip())
                    print(f"| {m['key']} | {c} | {name} | {100 * wb.error_rate(ref, hyp):.1f} |", flush=True)


if __name__ == "__main__":
    main()
