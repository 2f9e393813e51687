"""Server-sent events of an OpenAI-compatible streamed reply, for the bench
clients (stream_clients.py, image_burst.py)."""
import json


def chunks(response):
    """Yields each `data:` chunk of `response` as parsed JSON, until [DONE]."""
    for raw in response:
        line = raw.decode().strip()
        if not line.startswith("data:"):
            continue
        data = line[5:].strip()
        if data == "[DONE]":
            return
        yield json.loads(data)
