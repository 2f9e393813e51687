"""N concurrent streaming chat clients against an OpenAI-compatible server,
for scripts/bench-server.sh (ours and mlx_lm.server, same weights).

Usage: stream_clients.py <base url> [--clients 16] [--max-tokens 64] [--model NAME] [--label TEXT]
Each client sends a different question with temperature 0 and reads the
server-sent events as they arrive. Prints aggregate completion tok/s (all
clients' tokens over the wall time from the first request to the last
token), median and p95 time to first token, median inter-token latency, and
the completion token counts.
"""
import argparse
import json
import statistics
import threading
import time
import urllib.request

import sse

QUESTIONS = [
    "Tell me about the history of Paris.", "Explain how rain forms.", "Describe a cat to a child.",
    "What makes a good cup of tea?", "Write a short story about a robot.", "Why is the sky blue?",
    "How do airplanes fly?", "Describe the ocean at night.", "What is photosynthesis?",
    "Give advice to a new student.", "Describe a busy market.", "How does a bicycle work?",
    "What is the moon made of?", "Explain what a computer does.", "Describe winter in the mountains.",
    "Why do we sleep?", "Tell me about elephants.", "How is bread made?", "What is music?",
    "Describe a train journey.",
]


def p95(xs):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(0.95 * (len(xs) - 1))))]


def client(base, model, i, max_tokens, out):
    body = {
        "messages": [{"role": "user", "content": QUESTIONS[i % len(QUESTIONS)]}],
        "max_tokens": max_tokens,
        "temperature": 0.0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if model:
        body["model"] = model
    req = urllib.request.Request(
        f"{base}/v1/chat/completions", data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    start = time.perf_counter()
    arrivals, usage, error = [], None, None
    # A server whose listen backlog overflows resets some of 16 simultaneous
    # connections (Python's http.server queues 5): retry those, counting the
    # wait in the client's time to first token.
    for attempt in range(5):
        try:
            with urllib.request.urlopen(req, timeout=600) as r:
                for chunk in sse.chunks(r):
                    if chunk.get("usage"):
                        usage = chunk["usage"]
                    for choice in chunk.get("choices") or []:
                        if (choice.get("delta") or {}).get("content"):
                            arrivals.append(time.perf_counter())
            error = None
            break
        except (ConnectionResetError, ConnectionRefusedError) as e:
            error = repr(e)
            if arrivals:
                break
            time.sleep(0.05 * (attempt + 1))
        except Exception as e:  # noqa: BLE001 - reported
            error = repr(e)
            break
    out[i] = {"start": start, "arrivals": arrivals, "usage": usage, "error": error}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("base")
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--model", default=None)
    ap.add_argument("--label", default="server")
    a = ap.parse_args()
    base = a.base.rstrip("/")
    out = {}
    threads = [threading.Thread(target=client, args=(base, a.model, i, a.max_tokens, out)) for i in range(a.clients)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    errors = [r["error"] for r in out.values() if r["error"]]
    done = [r for r in out.values() if r["arrivals"]]
    end = max(r["arrivals"][-1] for r in done)
    tokens = [
        (r["usage"] or {}).get("completion_tokens") or len(r["arrivals"]) for r in done
    ]
    ttft = [r["arrivals"][0] - r["start"] for r in done]
    gaps = [b - a for r in done for a, b in zip(r["arrivals"], r["arrivals"][1:])]
    print(
        f"{a.label:<14} {a.clients} clients: aggregate {sum(tokens) / (end - t0):.1f} tok/s, "
        f"TTFT median {statistics.median(ttft):.2f} s / p95 {p95(ttft):.2f} s, "
        f"inter-token median {1000 * statistics.median(gaps):.0f} ms, "
        f"{sum(tokens)} tokens in {end - t0:.1f} s" + (f", {len(errors)} errors: {errors[:1]}" if errors else "")
    )


if __name__ == "__main__":
    main()
