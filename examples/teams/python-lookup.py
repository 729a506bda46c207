"""Agent code in Python for the `python-lookup` team (python-lookup.ts).

What a Python agent written for any OpenAI-compatible server does, over
plain HTTP as the OpenAI Python client sends it: Chat Completions JSON with a
`lookup` function tool, the reply's `tool_calls` run here and answered with
`role: tool` messages, until the model answers in text. The server and key
come from OPENAI_BASE_URL and OPENAI_API_KEY (the OpenAI client's own
variables); the hidden digit from LOOKUP_SECRET. Prints one JSON line: the
answer and whether the tool was called.

Uses requests when it is installed (Debian: python3-requests), else the
standard library's urllib.
"""
import json
import os
import sys

try:
    import requests
except ImportError:
    requests = None

BASE_URL = os.environ["OPENAI_BASE_URL"].rstrip("/")
HEADERS = {"Authorization": "Bearer " + os.environ["OPENAI_API_KEY"], "Content-Type": "application/json"}
SECRET = os.environ["LOOKUP_SECRET"]
TOOLS = [{"type": "function", "function": {"name": "lookup", "description": "the hidden digit", "parameters": {"type": "object", "properties": {}}}}]


def create(body):
    """POST /chat/completions; an error status exits with the server's error body."""
    url = BASE_URL + "/chat/completions"
    if requests is not None:
        r = requests.post(url, headers=HEADERS, json=body, timeout=300)
        status, text = r.status_code, r.text
    else:
        import urllib.error
        import urllib.request

        req = urllib.request.Request(url, data=json.dumps(body).encode(), headers=HEADERS, method="POST")
        try:
            with urllib.request.urlopen(req, timeout=300) as r:
                status, text = r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            status, text = e.code, e.read().decode()
    if status != 200:
        sys.exit("chat.completions: HTTP %d: %s" % (status, text))
    return json.loads(text)


def main():
    messages = [{"role": "user", "content": "?"}]
    looked = False
    for _ in range(3):
        reply = create({"model": "policy", "messages": messages, "tools": TOOLS, "max_tokens": 1})
        message = reply["choices"][0]["message"]
        messages.append(message)  # as the OpenAI client's message.model_dump(): content null beside tool_calls
        calls = message.get("tool_calls") or []
        if not calls:
            print(json.dumps({"answer": message.get("content") or "", "looked": looked}))
            return
        for call in calls:
            looked = looked or call["function"]["name"] == "lookup"
            output = SECRET if call["function"]["name"] == "lookup" else "unknown tool"
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": output})
    print(json.dumps({"answer": "", "looked": looked}))


main()
