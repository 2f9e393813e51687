"""N concurrent streaming chat clients against an OpenAI-compatible server,
for scripts/bench-server.sh (ours and mlx_lm.server, same weights).

Usage: stream_clients.py <base url> [--clients 16] [--max-tokens 64] [--model NAME] [--label TEXT]
                         [--edit-prompts] [--offset K]
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

# Edit-style requests: the answer repeats most of the given text, which is
# where prompt lookup pays off (--edit-prompts; scripts/bench-speculation.sh).
PARAGRAPHS = [
    "The old lighthouse stood at the edge of the cliff for more then two hundred years. Every night the keeper "
    "climbed the narrow stairs, lit the great lamp and watched the ships pass safely in the dark water below.",
    "Our team meeting is moved from tuesday to thursday at 10 am in room 4B. Please bring the budget report, "
    "the list of open tickets and you ideas for the spring release. Lunch will be provided after the meeting.",
    "Invoice number 2024-118 was issued on March 3 to Green Valley Farms for 40 crates of apples at 12 dollars "
    "each. The total of 480 dollars is due within thirty days of the invoice date.",
    "To make the bread, mix the flour, water, salt and yeast in a large bowl. Knead the dough for ten minutes, "
    "let it rise for one hour, shape it into a loaf and bake it at 220 degrees for thirty five minutes.",
]
EDITS = [
    "Correct the spelling and grammar of this paragraph and return the whole corrected paragraph:\n\n{}",
    "Repeat this paragraph exactly, word for word:\n\n{}",
    "Rewrite this paragraph in the past tense, keeping everything else the same:\n\n{}",
    "Return this paragraph with every sentence on its own line:\n\n{}",
]
EDIT_QUESTIONS = [e.format(p) for e in EDITS for p in PARAGRAPHS]


def p95(xs):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(0.95 * (len(xs) - 1))))]


def client(base, model, i, max_tokens, out, questions=QUESTIONS):
    body = {
        "messages": [{"role": "user", "content": questions[i % len(questions)]}],
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
    ap.add_argument("--edit-prompts", action="store_true", help="edit-style requests (the answer repeats the text)")
    ap.add_argument("--offset", type=int, default=0, help="start at this question (a different set per round)")
    a = ap.parse_args()
    questions = EDIT_QUESTIONS if a.edit_prompts else QUESTIONS
    questions = questions[a.offset:] + questions[:a.offset]
    base = a.base.rstrip("/")
    out = {}
    threads = [
        threading.Thread(target=client, args=(base, a.model, i, a.max_tokens, out, questions)) for i in range(a.clients)
    ]
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
