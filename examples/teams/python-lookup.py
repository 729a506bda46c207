"""Agent code in Python for the `python-lookup` team (python-lookup.ts).

What a Python agent written for any OpenAI-compatible server does, over
plain HTTP as the OpenAI Python client sends it: Chat Completions JSON with a
`lookup` function tool, the reply's `tool_calls` run here and answered with
`role: tool` messages, until the model answers in text.

It runs as a small agent service, as agent code usually is deployed: one
process serves many episodes at once. Each line on stdin is one episode,
`{"id", "base_url", "api_key", "secret"}` (the episode's session: what the
OpenAI client reads from OPENAI_BASE_URL and OPENAI_API_KEY); each episode
runs on its own thread and answers with one line on stdout, `{"id",
"outcome": {"answer", "looked"}}` or `{"id", "error"}`. The process exits
when stdin closes, so it never outlives the process that started it.

Uses requests when it is installed (Debian: python3-requests), else the
standard library's urllib.
"""
import json
import sys
import threading

try:
    import requests
except ImportError:
    requests = None

TOOLS = [{"type": "function", "function": {"name": "lookup", "description": "the hidden digit", "parameters": {"type": "object", "properties": {}}}}]
write_lock = threading.Lock()


class ServerError(Exception):
    pass


def create(session, body):
    """POST /chat/completions; an error status raises with the server's error body."""
    url = session["base_url"].rstrip("/") + "/chat/completions"
    headers = {"Authorization": "Bearer " + session["api_key"], "Content-Type": "application/json"}
    if requests is not None:
        r = requests.post(url, headers=headers, json=body, timeout=300)
        status, text = r.status_code, r.text
    else:
        import urllib.error
        import urllib.request

        req = urllib.request.Request(url, data=json.dumps(body).encode(), headers=headers, method="POST")
        try:
            with urllib.request.urlopen(req, timeout=300) as r:
                status, text = r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            status, text = e.code, e.read().decode()
    if status != 200:
        raise ServerError("chat.completions: HTTP %d: %s" % (status, text))
    return json.loads(text)


def episode(session):
    """The agent: ask, run the tool calls it gets back, until the model answers in text (at most 3 calls)."""
    messages = [{"role": "user", "content": "?"}]
    looked = False
    for _ in range(3):
        reply = create(session, {"model": "policy", "messages": messages, "tools": TOOLS, "max_tokens": 1})
        message = reply["choices"][0]["message"]
        messages.append(message)  # as the OpenAI client's message.model_dump(): content null beside tool_calls
        calls = message.get("tool_calls") or []
        if not calls:
            return {"answer": message.get("content") or "", "looked": looked}
        for call in calls:
            looked = looked or call["function"]["name"] == "lookup"
            output = str(session["secret"]) if call["function"]["name"] == "lookup" else "unknown tool"
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": output})
    return {"answer": "", "looked": looked}


def serve(line):
    request = json.loads(line)
    try:
        answer = {"id": request["id"], "outcome": episode(request)}
    except Exception as e:  # the episode's error goes back to it; the service goes on
        answer = {"id": request["id"], "error": "%s: %s" % (type(e).__name__, e)}
    with write_lock:
        sys.stdout.write(json.dumps(answer) + "\n")
        sys.stdout.flush()


def main():
    for line in sys.stdin:
        if line.strip():
            threading.Thread(target=serve, args=(line,), daemon=True).start()


main()
