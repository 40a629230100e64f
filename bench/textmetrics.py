"""Word error rate for the recognizer benchmarks (bench/asr-bench.py, bench/asr-compare.py)."""
import re


def words(s):
    """Lower-case words; punctuation other than the apostrophe separates them."""
    return re.sub(r"[^a-z0-9' ]", " ", s.lower()).split()


def edit_distance(r, h):
    """Word-level Levenshtein distance between the lists r and h."""
    prev = list(range(len(h) + 1))
    for i in range(1, len(r) + 1):
        row = [i] + [0] * len(h)
        for j in range(1, len(h) + 1):
            row[j] = min(prev[j] + 1, row[j - 1] + 1, prev[j - 1] + (r[i - 1] != h[j - 1]))
        prev = row
    return prev[-1]


def wer(ref, hyp):
    """Word error rate of the text hyp against the text ref."""
    r = words(ref)
    return edit_distance(r, words(hyp)) / len(r)
