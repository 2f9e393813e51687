"""Inter-token latency of running text streams while image requests arrive,
against any OpenAI-compatible server (scripts/bench-image-burst.sh runs it
against `vlm serve` and `mlx_vlm.server` on the same checkpoint).

Usage: image_burst.py <base url> <image dir> [--streams 4] [--images 16] [--model NAME] [--label TEXT]

1. quiet: the text streams alone (greedy, 48 tokens each): median, p99 and
   max gap between two streamed chunks;
2. burst: the same streams; once each has streamed 8 chunks, all image
   requests (one image each, 8 tokens) are sent at once. Gaps that end while
   the burst is in flight (first image request sent to last one finished)
   give median / p99 / max; the streams are closed when the burst is over.
Also printed: the image requests' time to first token (median, max) and the
burst's length. Target (issue 17): burst p99 within 2x the quiet median.

--letters tokenizer.json: a random-weight checkpoint emits random bytes,
which a server may hold back until they form UTF-8 (ours does), so chunks
would not be tokens; this biases every request (+100, through the standard
`logit_bias`) towards the tokens of a-z and space, one character per token.
"""
import argparse
import base64
import json
import os
import statistics
import threading
import time
import urllib.request

import sse

QUESTIONS = [
    "Tell me about the history of Paris.", "Explain how rain forms.", "Describe a cat to a child.",
    "What makes a good cup of tea?", "Why is the sky blue?", "How do airplanes fly?",
]


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))]


def stream(base, body, on_chunk, stop=None):
    """Streams one chat completion; calls on_chunk(time) per content chunk.
    Returns (start, error). Stops early when `stop` is set."""
    body = dict(body, stream=True)
    req = urllib.request.Request(
        f"{base}/v1/chat/completions", data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    start = time.perf_counter()
    try:
        with urllib.request.urlopen(req, timeout=1200) as r:
            for chunk in sse.chunks(r):
                for choice in chunk.get("choices") or []:
                    delta = choice.get("delta") or {}
                    if delta.get("content") or delta.get("reasoning_content") or delta.get("reasoning"):
                        on_chunk(time.perf_counter())
                if stop is not None and stop.is_set():
                    break
        return start, None
    except Exception as e:  # noqa: BLE001 - reported
        return start, repr(e)


BIAS = {}


def letter_bias(tokenizer_json):
    """logit_bias favouring the single-letter tokens of a byte-level vocabulary."""
    with open(tokenizer_json) as f:
        vocab = json.load(f)["model"]["vocab"]
    # byte-level BPE writes a space as "Ġ"; letters stand for themselves
    return {str(vocab[c]): 100 for c in "abcdefghijklmnopqrstuvwxyzĠ" if c in vocab}


def text_body(i, max_tokens, model):
    body = {
        "logit_bias": BIAS,
        "messages": [{"role": "user", "content": QUESTIONS[i % len(QUESTIONS)]}],
        "max_tokens": max_tokens,
        "temperature": 0.0,
    }
    if model:
        body["model"] = model
    return body


def image_body(path, model):
    with open(path, "rb") as f:
        url = "data:image/png;base64," + base64.b64encode(f.read()).decode()
    body = {
        "logit_bias": BIAS,
        "messages": [{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": url}},
            {"type": "text", "text": "Describe this picture."},
        ]}],
        "max_tokens": 8,
        "temperature": 0.0,
    }
    if model:
        body["model"] = model
    return body


def gaps(arrivals, window=None):
    out = []
    for a, b in zip(arrivals, arrivals[1:]):
        if window is None or window[0] <= b <= window[1]:
            out.append(b - a)
    return out


def summary(xs):
    return f"median {1000 * statistics.median(xs):.0f} ms, p99 {1000 * pct(xs, 0.99):.0f} ms, max {1000 * max(xs):.0f} ms"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("base")
    ap.add_argument("images")
    ap.add_argument("--streams", type=int, default=4)
    ap.add_argument("--images-count", type=int, default=16)
    ap.add_argument("--model", default=None)
    ap.add_argument("--label", default="server")
    ap.add_argument("--letters", default=None, metavar="TOKENIZER_JSON")
    a = ap.parse_args()
    if a.letters:
        BIAS.update(letter_bias(a.letters))
    base = a.base.rstrip("/")
    paths = sorted(os.path.join(a.images, p) for p in os.listdir(a.images) if p.endswith(".png"))[: a.images_count]

    # 1. quiet
    arrivals = [[] for _ in range(a.streams)]
    threads = [
        threading.Thread(target=stream, args=(base, text_body(i, 48, a.model), arrivals[i].append))
        for i in range(a.streams)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    quiet = [g for arr in arrivals for g in gaps(arr[1:])]  # the first gap spans the others' prefill

    # 2. burst
    arrivals = [[] for _ in range(a.streams)]
    stop = threading.Event()
    threads = [
        threading.Thread(target=stream, args=(base, text_body(i, 2000, a.model), arrivals[i].append, stop))
        for i in range(a.streams)
    ]
    for t in threads:
        t.start()
    while min(len(x) for x in arrivals) < 8:
        time.sleep(0.01)
    firsts, errors = {}, []

    def image_client(k, path):
        start, error = stream(base, image_body(path, a.model), lambda t: firsts.setdefault(k, t))
        if error:
            errors.append(error)
        elif k in firsts:
            firsts[k] -= start

    burst_start = time.perf_counter()
    image_threads = [threading.Thread(target=image_client, args=(k, p)) for k, p in enumerate(paths)]
    for t in image_threads:
        t.start()
    for t in image_threads:
        t.join()
    burst_end = time.perf_counter()
    stop.set()
    for t in threads:
        t.join()
    burst = [g for arr in arrivals for g in gaps(arr, (burst_start, burst_end))]
    ttft = list(firsts.values())
    print(f"{a.label}: {a.streams} text streams, quiet: {summary(quiet)}")
    print(
        f"{a.label}: while {len(paths)} image requests arrive ({burst_end - burst_start:.1f} s): {summary(burst)}; "
        f"p99 / quiet median = {pct(burst, 0.99) / statistics.median(quiet):.1f}x; "
        f"image TTFT median {statistics.median(ttft):.2f} s, max {max(ttft):.2f} s"
        + (f"; {len(errors)} errors: {errors[:1]}" if errors else "")
    )


if __name__ == "__main__":
    main()
