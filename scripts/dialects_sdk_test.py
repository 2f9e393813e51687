"""Checks vlm serve's other dialects with the official SDKs: OpenAI's
Responses API and legacy completions (`openai`), Anthropic's Messages API
(`anthropic`).

Usage: python scripts/dialects_sdk_test.py http://127.0.0.1:PORT [--vision URL --image PNG]
(--vision: a second server with a vision model, for image blocks.)
(scripts/openai-sdk-test.sh makes the venv, starts the servers and runs this.)

Each check prints PASS or FAIL with what it saw; the exit status is the
number of failed checks.
"""
import base64
import json
import sys

import anthropic
import openai
import pydantic

BASE = sys.argv[1].rstrip("/")
OPTS = dict(zip(sys.argv[2::2], sys.argv[3::2]))
oai = openai.OpenAI(base_url=f"{BASE}/v1", api_key="not-needed", timeout=300, max_retries=0)
ant = anthropic.Anthropic(base_url=BASE, api_key="not-needed", timeout=300, max_retries=0)
MODEL = oai.models.list().data[0].id
QUESTION = "What is the capital of France?"
GREEDY = {"temperature": 0}
failures = []


def check(name, ok, detail=""):
    print(f"{'PASS' if ok else 'FAIL'}  {name}" + (f"  ({detail})" if detail else ""), flush=True)
    if not ok:
        failures.append(name)


def attempt(name, run):
    """Runs one group of checks; an exception is that group's failure."""
    try:
        run()
    except Exception as e:  # noqa: BLE001 - any error is a failed check, reported by name
        check(name, False, f"{type(e).__name__}: {str(e)[:300]}")


# The chat-completions answer: every dialect runs the same engine request.
reference = oai.chat.completions.create(
    model=MODEL, messages=[{"role": "user", "content": QUESTION}], max_tokens=32, **GREEDY
).choices[0].message.content


# ------------------------------------------------------------- Responses API
def responses_plain():
    r = oai.responses.create(model=MODEL, input=QUESTION, max_output_tokens=32, **GREEDY)
    check("responses.create answers as chat completions does", r.output_text == reference, repr(r.output_text))
    check(
        "a response is well-formed",
        r.object == "response" and r.id.startswith("resp_") and r.status in ("completed", "incomplete")
        and r.usage.input_tokens > 0 and r.usage.total_tokens == r.usage.input_tokens + r.usage.output_tokens,
        f"status={r.status} usage={r.usage}",
    )
    got = oai.responses.retrieve(r.id)
    check("a stored response is read back", got.id == r.id and got.output_text == r.output_text)
    follow = oai.responses.create(
        model=MODEL, input="And of Italy?", previous_response_id=r.id, max_output_tokens=32, **GREEDY
    )
    expected = oai.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": QUESTION}, {"role": "assistant", "content": r.output_text},
                  {"role": "user", "content": "And of Italy?"}],
        max_tokens=32, **GREEDY,
    ).choices[0].message.content
    check("previous_response_id continues the conversation", follow.output_text == expected, repr(follow.output_text))
    oai.responses.delete(r.id)
    try:
        oai.responses.retrieve(r.id)
        check("a deleted response is gone", False, "still there")
    except openai.NotFoundError:
        check("a deleted response is gone", True)


def responses_streamed():
    kinds = []
    with oai.responses.stream(model=MODEL, input=QUESTION, max_output_tokens=32, **GREEDY) as stream:
        for event in stream:
            kinds.append(event.type)
        final = stream.get_final_response()
    check("a streamed response equals the whole one", final.output_text == reference, repr(final.output_text))
    check(
        "the stream follows the documented order",
        kinds[:2] == ["response.created", "response.in_progress"]
        and "response.output_text.delta" in kinds and kinds[-1] in ("response.completed", "response.incomplete"),
        f"{kinds[:4]} … {kinds[-3:]}",
    )


WEATHER_TOOL = {
    "type": "function", "name": "get_weather", "description": "The weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}


def responses_tool_round_trip():
    # SmolLM2-135M's template shows no tools, so it is not expected to call
    # one (and a required call, which a grammar would enforce, is refused
    # for a template without a tool-call format): the offer, an earlier call
    # and the tool's output must render, run and come back well-formed.
    first = oai.responses.create(
        model=MODEL, input="What is the weather in Paris?", tools=[WEATHER_TOOL], tool_choice="auto",
        max_output_tokens=32, **GREEDY,
    )
    check("a function tool offer is answered", first.status in ("completed", "incomplete") and first.output,
          f"{[item.type for item in first.output]}")
    call = {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": '{"city": "Paris"}'}
    second = oai.responses.create(
        model=MODEL, tools=[WEATHER_TOOL], max_output_tokens=32, **GREEDY,
        input=[{"role": "user", "content": "What is the weather in Paris?"}, call,
               {"type": "function_call_output", "call_id": "call_1", "output": "sunny, 21 C"}],
    )
    check("a call and its output are answered", second.status in ("completed", "incomplete") and second.output_text,
          repr(second.output_text))
    try:
        oai.responses.create(model=MODEL, input="x", tools=[{"type": "web_search"}], max_output_tokens=4)
        check("a hosted tool is refused by name", False, "accepted")
    except openai.BadRequestError as e:
        check("a hosted tool is refused by name", "web_search" in str(e), str(e)[:200])


class Capital(pydantic.BaseModel):
    country: str
    capital: str


def responses_structured():
    r = oai.responses.create(
        model=MODEL, input=QUESTION, max_output_tokens=64, **GREEDY,
        text={"format": {"type": "json_schema", "name": "capital", "schema": Capital.model_json_schema(),
                         "strict": True}},
    )
    try:
        Capital.model_validate_json(r.output_text)
        check("text.format json_schema holds", True, r.output_text)
    except pydantic.ValidationError as e:
        check("text.format json_schema holds", False, f"{r.output_text!r}: {e}")
    parsed = oai.responses.parse(model=MODEL, input=QUESTION, text_format=Capital, max_output_tokens=64, **GREEDY)
    check("responses.parse gives a Pydantic object", isinstance(parsed.output_parsed, Capital), f"{parsed.output_parsed}")


# ------------------------------------------------------------- Messages API
def messages_plain_and_streamed():
    m = ant.messages.create(model=MODEL, max_tokens=32, messages=[{"role": "user", "content": QUESTION}],
                            extra_body=GREEDY)
    text = "".join(b.text for b in m.content if b.type == "text")
    check("messages.create answers as chat completions does", text == reference, repr(text))
    check(
        "a message is well-formed",
        m.type == "message" and m.role == "assistant" and m.stop_reason in ("end_turn", "max_tokens")
        and m.usage.output_tokens > 0,
        f"stop={m.stop_reason} usage={m.usage}",
    )
    with ant.messages.stream(model=MODEL, max_tokens=32, messages=[{"role": "user", "content": QUESTION}],
                             extra_body=GREEDY) as stream:
        streamed = "".join(stream.text_stream)
        final = stream.get_final_message()
    check("a streamed message equals the whole one", streamed == text and final.stop_reason == m.stop_reason,
          repr(streamed))
    count = ant.messages.count_tokens(model=MODEL, messages=[{"role": "user", "content": QUESTION}])
    check("count_tokens counts the prompt", count.input_tokens == m.usage.input_tokens + (m.usage.cache_read_input_tokens or 0),
          f"{count.input_tokens} vs {m.usage}")
    try:
        ant.messages.create(model=MODEL, max_tokens=8, messages=[{"role": "user", "content": QUESTION}],
                            extra_body={"mcp_servers": []})
        check("an unsupported field is refused by name", False, "accepted")
    except anthropic.BadRequestError as e:
        check("an unsupported field is refused by name", "mcp_servers" in str(e), str(e)[:200])


ANT_TOOL = {"name": "get_weather", "description": "The weather in a city",
            "input_schema": WEATHER_TOOL["parameters"]}


def messages_tool_round_trip():
    # As in the Responses check: the offer, an earlier tool_use and its
    # tool_result must render, run and come back well-formed.
    ask = [{"role": "user", "content": "What is the weather in Paris?"}]
    first = ant.messages.create(model=MODEL, max_tokens=32, messages=ask, tools=[ANT_TOOL], extra_body=GREEDY)
    check("a tool offer is answered", first.content and first.stop_reason in ("end_turn", "max_tokens", "tool_use"),
          f"{[b.type for b in first.content]} {first.stop_reason}")
    use = {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}}
    second = ant.messages.create(
        model=MODEL, max_tokens=32, tools=[ANT_TOOL], extra_body=GREEDY,
        messages=ask + [{"role": "assistant", "content": [use]},
                        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1",
                                                      "content": "sunny, 21 C"}]}],
    )
    text = "".join(b.text for b in second.content if b.type == "text")
    check("a tool_use and its tool_result are answered", text and second.stop_reason in ("end_turn", "max_tokens"),
          repr(text))


def messages_thinking():
    # No thinking model is served here: the request must be taken (thinking
    # switched on through the template) and answered well-formed.
    m = ant.messages.create(model=MODEL, max_tokens=32, messages=[{"role": "user", "content": QUESTION}],
                            thinking={"type": "enabled", "budget_tokens": 16})
    check("a thinking request is answered", m.content and m.stop_reason in ("end_turn", "max_tokens"),
          f"{[b.type for b in m.content]}")


def messages_image():
    with open(OPTS["--image"], "rb") as f:
        data = base64.b64encode(f.read()).decode()
    vision = anthropic.Anthropic(base_url=OPTS["--vision"].rstrip("/"), api_key="x", timeout=300, max_retries=0)
    block = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": data}}
    with_image = vision.messages.create(model="default", max_tokens=8, extra_body=GREEDY, messages=[
        {"role": "user", "content": [block, {"type": "text", "text": "What is in this picture?"}]}])
    text_only = vision.messages.count_tokens(model="default", messages=[
        {"role": "user", "content": [{"type": "text", "text": "What is in this picture?"}]}])
    prompt = with_image.usage.input_tokens + (with_image.usage.cache_read_input_tokens or 0)
    check("an image block is seen (its tokens count in the prompt)", prompt > text_only.input_tokens + 10,
          f"{prompt} vs {text_only.input_tokens} without the image")


# ------------------------------------------------------------- legacy completions
def completions():
    c = oai.completions.create(model=MODEL, prompt="The capital of France is", max_tokens=8, logprobs=2, **GREEDY)
    choice = c.choices[0]
    check(
        "a completion comes with its tokens' logprobs",
        c.object == "text_completion" and choice.text and len(choice.logprobs.tokens) == c.usage.completion_tokens
        and all(lp <= 0 for lp in choice.logprobs.token_logprobs),
        f"{choice.text!r} {choice.logprobs.tokens}",
    )
    echoed = oai.completions.create(model=MODEL, prompt="The capital of France is", max_tokens=8, n=2, echo=True,
                                    **GREEDY)
    check("n and echo", [x.text for x in echoed.choices] == ["The capital of France is" + choice.text] * 2,
          f"{[x.text for x in echoed.choices]}")
    streamed = "".join(
        chunk.choices[0].text
        for chunk in oai.completions.create(model=MODEL, prompt="The capital of France is", max_tokens=8,
                                            stream=True, **GREEDY)
        if chunk.choices
    )
    check("a streamed completion equals the whole one", streamed == choice.text, repr(streamed))


def completions_scored():
    """echo + logprobs: the prompt scored, as evaluation harnesses ask."""
    prompt = "The capital of France is"
    s = oai.completions.create(model=MODEL, prompt=prompt, max_tokens=0, echo=True, logprobs=1)
    choice, lp = s.choices[0], s.choices[0].logprobs
    check(
        "echo=True, logprobs=1, max_tokens=0 scores the prompt",
        choice.text == prompt and "".join(lp.tokens) == prompt and len(lp.tokens) == s.usage.prompt_tokens
        and lp.token_logprobs[0] is None and lp.top_logprobs[0] is None
        and all(v <= 0 for v in lp.token_logprobs[1:]) and all(len(t) == 1 for t in lp.top_logprobs[1:])
        and s.usage.completion_tokens == 0 and choice.finish_reason == "length",
        f"{lp.tokens} {lp.token_logprobs}",
    )
    # A greedy answer scored as part of the prompt gets the figures decoding reported for it.
    answer = oai.completions.create(model=MODEL, prompt=prompt, max_tokens=6, logprobs=1, **GREEDY).choices[0]
    whole = oai.completions.create(model=MODEL, prompt=prompt + answer.text, max_tokens=0, echo=True, logprobs=1)
    wl = whole.choices[0].logprobs
    n = len(answer.logprobs.tokens)
    if wl.tokens != lp.tokens + answer.logprobs.tokens:
        check("a greedy answer scored in the prompt (tokenized apart)", True,
              f"skipped: the text re-tokenizes as {wl.tokens[-n:]} vs {answer.logprobs.tokens}")
    else:
        diff = max(abs(a - b) for a, b in zip(wl.token_logprobs[-n:], answer.logprobs.token_logprobs))
        check("a greedy answer scored in the prompt gets decoding's figures", diff < 1e-3, f"max diff {diff:.2e}")
    first = list(oai.completions.create(model=MODEL, prompt=prompt, max_tokens=2, echo=True, logprobs=1,
                                        stream=True, **GREEDY))[0]
    check("streamed, the scored prompt comes first",
          first.choices[0].text == prompt and first.choices[0].logprobs.token_logprobs[0] is None
          and len(first.choices[0].logprobs.tokens) == len(lp.tokens), repr(first.choices[0]))


attempt("responses: plain, stored, continued, deleted", responses_plain)
attempt("responses: streamed", responses_streamed)
attempt("responses: function tool round trip", responses_tool_round_trip)
attempt("responses: structured output", responses_structured)
attempt("messages: plain, streamed, count_tokens", messages_plain_and_streamed)
attempt("messages: tool round trip", messages_tool_round_trip)
attempt("messages: thinking", messages_thinking)
if "--vision" in OPTS and "--image" in OPTS:
    attempt("messages: image", messages_image)
attempt("completions", completions)
attempt("completions: the prompt scored (echo + logprobs)", completions_scored)

print(f"\n{'all checks passed' if not failures else f'{len(failures)} failed: {failures}'}")
sys.exit(len(failures))
