"""Checks vlm serve with the official OpenAI Python SDK.

Usage: python scripts/openai_sdk_test.py http://127.0.0.1:PORT [--vision URL --image PNG]
(--vision: a second server with a vision model, for image messages.)
(scripts/openai-sdk-test.sh makes the venv, starts the server and runs this.)

Each check prints PASS or FAIL with what it saw; the exit status is the
number of failed checks.
"""
import base64
import json
import sys
import threading
import time
import urllib.request

import openai
import pydantic
from openai import OpenAI

BASE = sys.argv[1].rstrip("/")
OPTS = dict(zip(sys.argv[2::2], sys.argv[3::2]))
client = OpenAI(base_url=f"{BASE}/v1", api_key="not-needed", timeout=300, max_retries=0)
failures = []


def check(name, ok, detail=""):
    print(f"{'PASS' if ok else 'FAIL'}  {name}" + (f"  ({detail})" if detail else ""), flush=True)
    if not ok:
        failures.append(name)


def health():
    with urllib.request.urlopen(f"{BASE}/health", timeout=10) as r:
        return json.load(r)


models = client.models.list().data
MODEL = models[0].id
check("models list names the loaded model", len(models) >= 1 and MODEL, f"{[m.id for m in models]}")

QUESTION = [{"role": "user", "content": "What is the capital of France?"}]

# A whole reply.
reply = client.chat.completions.create(model=MODEL, messages=QUESTION, temperature=0, max_tokens=64)
answer = reply.choices[0].message.content or ""
check("non-streamed answer mentions Paris", "Paris" in answer, repr(answer))
check(
    "non-streamed reply is well-formed",
    reply.object == "chat.completion"
    and reply.id.startswith("chatcmpl-")
    and reply.choices[0].finish_reason in ("stop", "length")
    and reply.usage.prompt_tokens > 0
    and reply.usage.completion_tokens > 0
    and reply.usage.total_tokens == reply.usage.prompt_tokens + reply.usage.completion_tokens
    and reply.usage.prompt_tokens_details.cached_tokens is not None,
    f"finish={reply.choices[0].finish_reason} usage={reply.usage}",
)

# The same, streamed, with a usage chunk.
stream = client.chat.completions.create(
    model=MODEL, messages=QUESTION, temperature=0, max_tokens=64, stream=True, stream_options={"include_usage": True}
)
chunks = list(stream)
streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
check("streamed answer equals the whole one", streamed == answer, repr(streamed))
check("stream opens with the assistant role", chunks[0].choices[0].delta.role == "assistant")
check("stream has one finish reason", finishes == [reply.choices[0].finish_reason], f"{finishes}")
check(
    "stream ends with a usage chunk",
    not chunks[-1].choices and chunks[-1].usage is not None and chunks[-1].usage.prompt_tokens == reply.usage.prompt_tokens,
    f"{chunks[-1].usage}",
)

# A tool-call round trip, as far as SmolLM2-135M goes: its template shows
# no tools, so the model is not expected to call one; the request with tools,
# an earlier call and the tool's answer must render, run and come back well-formed.
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Current weather in a city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        },
    }
]
first = client.chat.completions.create(
    model=MODEL,
    messages=[{"role": "user", "content": "What is the weather in Paris? Use the tool."}],
    tools=TOOLS,
    tool_choice="auto",
    temperature=0,
    max_tokens=64,
)
calls = first.choices[0].message.tool_calls or []
check(
    "request with tools is answered",
    first.choices[0].finish_reason in ("stop", "length", "tool_calls")
    and (calls or first.choices[0].message.content is not None),
    f"finish={first.choices[0].finish_reason} tool_calls={len(calls)}",
)
for call in calls:
    json.loads(call.function.arguments)  # raises (and fails the script) if not JSON
round_trip = client.chat.completions.create(
    model=MODEL,
    messages=[
        {"role": "user", "content": "What is the weather in Paris?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": '{"temperature_c": 21, "sky": "clear"}'},
    ],
    tools=TOOLS,
    temperature=0,
    max_tokens=64,
)
message = round_trip.choices[0].message
check(
    "tool result round trip is well-formed",
    message.role == "assistant"
    and round_trip.choices[0].finish_reason in ("stop", "length", "tool_calls")
    and (message.content or message.tool_calls),
    repr((message.content or "")[:120]),
)

# Structured output: the SDK's parse() with a Pydantic model, a JSON schema
# streamed, JSON mode, and a refused schema.

class Capital(pydantic.BaseModel):
    country: str
    capital: str


parsed = client.chat.completions.parse(
    model=MODEL,
    messages=[{"role": "user", "content": "What is the capital of France?"}],
    response_format=Capital,
    temperature=0,
    max_tokens=80,
)
capital = parsed.choices[0].message.parsed
check("parse() gives the Pydantic model", isinstance(capital, Capital), repr(parsed.choices[0].message.content))
schema = {
    "type": "object",
    "properties": {"colors": {"type": "array", "items": {"enum": ["red", "green", "blue"]}, "minItems": 2, "maxItems": 3}},
    "required": ["colors"],
    "additionalProperties": False,
}
stream = client.chat.completions.create(
    model=MODEL,
    messages=[{"role": "user", "content": "Name two colors."}],
    response_format={"type": "json_schema", "json_schema": {"name": "colors", "schema": schema, "strict": True}},
    temperature=0.8,
    seed=3,
    max_tokens=40,
    stream=True,
)
text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
colors = json.loads(text).get("colors", [])
check("streamed JSON follows its schema", 2 <= len(colors) <= 3 and set(colors) <= {"red", "green", "blue"}, repr(text))
mode = client.chat.completions.create(
    model=MODEL,
    messages=[{"role": "user", "content": "Describe Paris in JSON."}],
    response_format={"type": "json_object"},
    temperature=0,
    max_tokens=80,
)
content = mode.choices[0].message.content
try:
    ok = mode.choices[0].finish_reason == "length" or isinstance(json.loads(content), dict)
except ValueError:
    ok = False
check("JSON mode answers an object", ok, repr(content))
try:
    client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "x"}],
        response_format={"type": "json_schema", "json_schema": {"name": "bad", "schema": {"type": "no-such-type"}}},
        max_tokens=4,
    )
    check("an invalid schema is refused", False, "it was accepted")
except openai.BadRequestError as e:
    check("an invalid schema is refused", "invalid JSON schema" in str(e), str(e)[:200])

# Log-probabilities: one entry per token, the tokens spelling the answer.
lp_reply = client.chat.completions.create(
    model=MODEL,
    messages=[{"role": "user", "content": "What is the capital of France?"}],
    logprobs=True,
    top_logprobs=3,
    temperature=0,
    max_tokens=12,
)
entries = lp_reply.choices[0].logprobs.content if lp_reply.choices[0].logprobs else []
spelled = bytes(b for e in entries for b in (e.bytes or [])).decode("utf-8", "replace")
check(
    "logprobs for every token, with 3 alternatives",
    len(entries) == lp_reply.usage.completion_tokens
    and all(len(e.top_logprobs) == 3 and e.logprob <= 0 for e in entries)
    and spelled.startswith(lp_reply.choices[0].message.content or "\0"),
    f"{len(entries)} entries for {lp_reply.usage.completion_tokens} tokens; {spelled!r}",
)

# Sixteen concurrent streaming clients; four hang up after a few chunks.
PROMPTS = [
    "What is the capital of France?",
    "Name a color.",
    "Say hello.",
    "What is 2 + 2?",
    "Name an animal.",
    "What is the opposite of hot?",
    "Write one word about the sea.",
    "What day comes after Monday?",
]
results = {}


def client_run(i):
    prompt = PROMPTS[i % len(PROMPTS)]
    leaves = i % 4 == 3
    try:
        s = client.chat.completions.create(
            model=MODEL,
            messages=[{"role": "user", "content": prompt}],
            temperature=0,
            max_tokens=48 if not leaves else 2000,
            stream=True,
            stream_options={"include_usage": True},
        )
        text, finish, usage, n = "", None, None, 0
        for chunk in s:
            n += 1
            if chunk.choices:
                text += chunk.choices[0].delta.content or ""
                finish = chunk.choices[0].finish_reason or finish
            if chunk.usage:
                usage = chunk.usage
            if leaves and n >= 3:
                s.close()
                break
        results[i] = {"prompt": prompt, "text": text, "finish": finish, "usage": usage, "left": leaves}
    except Exception as e:  # noqa: BLE001 - reported as a failed client
        results[i] = {"error": repr(e), "left": leaves}


started = time.time()
threads = [threading.Thread(target=client_run, args=(i,)) for i in range(16)]
for t in threads:
    t.start()
for t in threads:
    t.join()
elapsed = time.time() - started
stayed = [r for r in results.values() if not r["left"]]
errors = [r for r in results.values() if "error" in r]
complete = [
    r
    for r in stayed
    if "error" not in r and r["text"] and r["finish"] in ("stop", "length") and r["usage"] and r["usage"].completion_tokens > 0
]
check("16 concurrent clients: no errors", not errors, f"{errors[:2]}")
check(
    "12 staying clients got complete answers",
    len(complete) == 12,
    f"{len(complete)}/12 complete in {elapsed:.1f}s",
)

# Greedy answers in a batch should be the answers alone.
same = 0
for r in complete:
    alone = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": r["prompt"]}], temperature=0, max_tokens=48
    )
    same += (alone.choices[0].message.content or "") == r["text"]
check("batched answers equal the answers alone", same == len(complete), f"{same}/{len(complete)} identical")

# The four that left were cancelled, not left running.
deadline = time.time() + 10
h = health()
while (h.get("running") or h.get("waiting")) and time.time() < deadline:
    time.sleep(0.2)
    h = health()
check("engine idle after the clients left", h.get("running") == 0 and h.get("waiting") == 0, f"{h}")

# Images. The default model has no vision tower: a clear 400, not a crash.

if "--image" in OPTS:
    with open(OPTS["--image"], "rb") as f:
        data_url = "data:image/png;base64," + base64.b64encode(f.read()).decode()
    image_message = [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": data_url}},
        {"type": "text", "text": "What is in this picture?"},
    ]}]
    try:
        client.chat.completions.create(model=MODEL, messages=image_message, max_tokens=8)
        check("an image to a text-only model is refused", False, "it was accepted")
    except openai.BadRequestError as e:
        check("an image to a text-only model is refused", "does not accept images" in str(e), str(e)[:200])

if "--vision" in OPTS:
    vision = OpenAI(base_url=f"{OPTS['--vision'].rstrip('/')}/v1", api_key="not-needed", timeout=300, max_retries=0)
    vmodel = vision.models.list().data[0].id
    text_only = vision.chat.completions.create(
        model=vmodel, messages=[{"role": "user", "content": "What is in this picture?"}], max_tokens=8, temperature=0
    )
    with_image = vision.chat.completions.create(model=vmodel, messages=image_message, max_tokens=8, temperature=0)
    check(
        "an image message gets a well-formed reply",
        with_image.choices[0].finish_reason in ("stop", "length") and with_image.usage.completion_tokens > 0,
        f"finish={with_image.choices[0].finish_reason} usage={with_image.usage}",
    )
    check(
        "the image's tokens count in the prompt",
        with_image.usage.prompt_tokens > text_only.usage.prompt_tokens + 10,
        f"{with_image.usage.prompt_tokens} vs {text_only.usage.prompt_tokens} without the image",
    )
    s = vision.chat.completions.create(
        model=vmodel, messages=image_message, max_tokens=8, temperature=0, stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(s)
    streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    usage = [c.usage for c in chunks if c.usage]
    check(
        "a streamed image message equals the whole one and reuses the cached prompt",
        streamed == (with_image.choices[0].message.content or "")
        and usage and usage[-1].prompt_tokens_details.cached_tokens > 0,
        f"{streamed!r} usage={usage[-1] if usage else None}",
    )

print(f"\n{'all checks passed' if not failures else f'{len(failures)} failed: {failures}'}")
sys.exit(len(failures))
