"""One side of scripts/bench-speculation-real.sh: ten coding questions,
greedy, one at a time, decode speed and draft acceptance.

  speculation_real.py serve <base url> --label L [--max-tokens 128] [--prompts 10]
      our `vlm serve` (acceptance from its /health, before and after)
  speculation_real.py mlx <target folder> --label L [--draft FOLDER] [--num-draft N] [--max-tokens 128]
      mlx-lm's stream_generate in this process (with draft_model= when --draft)

Both: the chat template of the folder (the same converted folder on both
sides), temperature 0, one warm-up reply first. A reply's decode speed is
its tokens after the first over the time from its first token to its last,
as each side streams them (ours: the server's chunks as they arrive; a
verify pass's tokens arrive together); the total is all replies' such tokens
over all their such time. Prints one line per reply and a JSON summary line
(`RESULT {...}`) for the table.
"""
import argparse
import json
import os
import sys
import time
import urllib.request

PROMPTS = [
    "Write a Python function that checks whether a string is a palindrome, ignoring case and punctuation.",
    "Write a Python function that returns the n-th Fibonacci number using iteration.",
    "Implement binary search in Python on a sorted list; return the index or -1.",
    "Write a JavaScript function that removes duplicate values from an array.",
    "Write a SQL query that returns the five customers with the highest total order amount.",
    "Write a Rust function that reverses the words in a sentence.",
    "Write a Python class for a stack with push, pop, peek and is_empty methods.",
    "Write a bash script that counts the lines of every .py file in a directory.",
    "Write a Python function that merges two sorted lists into one sorted list.",
    "Write a C function that computes the length of a null-terminated string without strlen.",
]
WARM_UP = "Write a Python function that adds two numbers."


def messages(prompt):
    return [{"role": "user", "content": prompt}]


def summary(label, replies, extra, cpu_s=None):
    tokens = sum(r["tokens"] - 1 for r in replies)
    seconds = sum(r["decode_s"] for r in replies)
    out = {"label": label, "decode_tps": tokens / seconds, "tokens": sum(r["tokens"] for r in replies)}
    if cpu_s is not None:
        # the replies' CPU (prefill included) over their tokens: comparable while other work runs
        out["cpu_ms_per_token"] = 1e3 * cpu_s / out["tokens"]
    out["texts"] = [r["text"] for r in replies]
    out.update(extra)
    print("RESULT " + json.dumps(out), flush=True)


def reply_line(label, i, r):
    tps = (r["tokens"] - 1) / r["decode_s"] if r["decode_s"] > 0 else 0.0
    print(f"{label} #{i}: {r['prompt_tokens']} prompt tokens, {r['tokens']} tokens, "
          f"{tps:.2f} tok/s decode", file=sys.stderr, flush=True)


# --- ours, through vlm serve ---------------------------------------------------


def serve_reply(base, prompt, max_tokens):
    import sse

    body = {"messages": messages(prompt), "max_tokens": max_tokens, "temperature": 0.0, "stream": True,
            "stream_options": {"include_usage": True}}
    req = urllib.request.Request(f"{base}/v1/chat/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    first = last = None
    text, usage = "", None
    with urllib.request.urlopen(req, timeout=3600) as r:
        for chunk in sse.chunks(r):
            if chunk.get("usage"):
                usage = chunk["usage"]
            for choice in chunk.get("choices", []):
                piece = (choice.get("delta") or {}).get("content") or ""
                if piece:
                    now = time.perf_counter()
                    first = first or now
                    last = now
                    text += piece
    return {"tokens": usage["completion_tokens"], "prompt_tokens": usage["prompt_tokens"],
            "decode_s": (last - first) if first else 0.0, "text": text}


def process_cpu_s(pid):
    """user + system CPU seconds of process `pid`, every thread (/proc/PID/stat)"""
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def health(base):
    return json.load(urllib.request.urlopen(f"{base}/health"))["speculation"]


def run_serve(args):
    serve_reply(args.target, WARM_UP, 8)
    before = health(args.target)
    cpu = process_cpu_s(args.pid) if args.pid else None
    replies = []
    for i, p in enumerate(PROMPTS):
        r = serve_reply(args.target, p, args.max_tokens)
        reply_line(args.label, i, r)
        replies.append(r)
    after = health(args.target)
    if cpu is not None:
        cpu = process_cpu_s(args.pid) - cpu
    d = {k: after[k] - before[k] for k in ("verify_passes", "drafted_tokens", "accepted_tokens",
                                            "speculating_rows", "produced_tokens")}
    extra = {"status": after["status"]}
    if d["drafted_tokens"]:
        extra.update({
            "acceptance": d["accepted_tokens"] / d["drafted_tokens"],
            "tokens_per_pass": d["produced_tokens"] / max(d["speculating_rows"], 1),
            "from_draft": d["accepted_tokens"] / sum(r["tokens"] for r in replies),
            "verify_passes": d["verify_passes"],
        })
    summary(args.label, replies, extra, cpu)


# --- mlx-lm, in this process ----------------------------------------------------


def run_mlx(args):
    from mlx_lm import load, stream_generate

    model, tokenizer = load(args.target)
    draft = load(args.draft)[0] if args.draft else None
    kwargs = {"draft_model": draft, "num_draft_tokens": args.num_draft} if draft is not None else {}

    def reply(prompt, max_tokens):
        ids = tokenizer.apply_chat_template(messages(prompt), add_generation_prompt=True)
        first = last = None
        text, n, from_draft, drafted, round_start, rounds = "", 0, 0, 0, 0, 0
        for resp in stream_generate(model, tokenizer, ids, max_tokens=max_tokens, **kwargs):
            now = time.perf_counter()
            first = first or now
            last = now
            text += resp.text
            # every token once, the end-of-sequence token too (ours counts it as well)
            n = resp.generation_tokens
            if draft is not None and n > 0:
                if resp.from_draft:
                    from_draft += 1
                if not resp.from_draft or resp.finish_reason is not None:
                    # a round ends on the target's token (or with the reply):
                    # speculative_generate_step drafted min(k, tokens left) in it
                    drafted += min(args.num_draft, max_tokens - round_start)
                    round_start = n
                    rounds += 1
        return {"tokens": n, "prompt_tokens": len(ids), "decode_s": last - first, "text": text,
                "from_draft": from_draft, "drafted": drafted, "rounds": rounds}

    reply(WARM_UP, 8)
    cpu = time.process_time()
    replies = []
    for i, p in enumerate(PROMPTS):
        r = reply(p, args.max_tokens)
        reply_line(args.label, i, r)
        replies.append(r)
    cpu = time.process_time() - cpu
    extra = {"status": f"draft {args.draft}, {args.num_draft} draft tokens" if draft is not None else "off"}
    if draft is not None:
        kept = sum(r["from_draft"] for r in replies)
        drafted = sum(r["drafted"] for r in replies)
        tokens = sum(r["tokens"] for r in replies)
        extra.update({"acceptance": kept / max(drafted, 1), "from_draft": kept / tokens,
                      "tokens_per_pass": tokens / max(sum(r["rounds"] for r in replies), 1)})
    summary(args.label, replies, extra, cpu)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("side", choices=["serve", "mlx"])
    ap.add_argument("target", help="our server's base URL, or the target folder for mlx-lm")
    ap.add_argument("--label", required=True)
    ap.add_argument("--draft")
    ap.add_argument("--num-draft", type=int, default=3)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--pid", type=int, help="serve: the server's process id, for its CPU time")
    ap.add_argument("--prompts", type=int, default=len(PROMPTS), help="the first N questions")
    args = ap.parse_args()
    del PROMPTS[args.prompts:]
    run_serve(args) if args.side == "serve" else run_mlx(args)


if __name__ == "__main__":
    main()
