"""`ember serve` over HTTP, as its users talk to it: OpenAI's Python client (chat, streaming chat,
completions, embeddings, errors), eight requests at once against each alone, and a sweep of bad
input (malformed, truncated and huge bodies, wrong types, unicode everywhere, extreme numbers, a
client that sends a byte a second, clients that vanish) after which the server still answers and its
memory has not grown; SIGTERM drains what is in flight. Every server binds loopback on a port the
system picks, and every wait is bounded."""

import concurrent.futures
import http.client
import json
import os
import pathlib
import re
import signal
import socket
import subprocess
import threading
import time

import numpy as np
import openai
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
DATA = pathlib.Path(os.environ.get("EMBER_DATA_DIR", ROOT / "data"))
CLI = pathlib.Path(os.environ.get("EMBER_CLI", ROOT / "build" / "ember"))
MODEL = DATA / "smollm2" / "SmolLM2-135M-Instruct.Q4_1.gguf"
MINILM = DATA / "minilm"
SYSTEM = "You are a concise assistant. Answer in one sentence."


class Server:
    """An `ember serve` process on a free loopback port."""

    def __init__(self, *flags, name="server"):
        if not MODEL.exists():
            pytest.fail(f"{MODEL} is missing: run scripts/setup")
        self.log = open(f"/tmp/ember-serve-{os.getpid()}-{name}.log", "w+")
        self.proc = subprocess.Popen([str(CLI), "serve", "--model", str(MODEL), "--port", "0", "--threads", "2", *flags],
                                     stdout=subprocess.DEVNULL, stderr=self.log)
        deadline = time.monotonic() + 120
        self.port = None
        while self.port is None:
            assert self.proc.poll() is None, f"ember serve exited: {self.output()}"
            assert time.monotonic() < deadline, f"ember serve did not start: {self.output()}"
            found = re.search(r"listening on http://127\.0\.0\.1:(\d+)", self.output())
            if found:
                self.port = int(found.group(1))
            else:
                time.sleep(0.05)
        self.url = f"http://127.0.0.1:{self.port}"

    def output(self):
        self.log.flush()
        return pathlib.Path(self.log.name).read_text(errors="replace")

    def client(self, **kwargs):
        kwargs.setdefault("api_key", "none")
        return openai.OpenAI(base_url=self.url + "/v1", timeout=120, max_retries=0, **kwargs)

    def request(self, method, path, body=None, headers=None, timeout=60):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            conn.request(method, path, body=body, headers=headers or {})
            r = conn.getresponse()
            return r.status, dict(r.getheaders()), r.read()
        finally:
            conn.close()

    def post(self, path, body, **kwargs):
        data = body if isinstance(body, (bytes, str)) else json.dumps(body)
        return self.request("POST", path, data, {"Content-Type": "application/json"}, **kwargs)

    def metric(self, name):
        _, _, text = self.request("GET", "/metrics")
        found = re.search(rf"^{name} (\S+)$", text.decode(), re.M)
        return float(found.group(1))

    def rss_kib(self):
        status = pathlib.Path(f"/proc/{self.proc.pid}/status").read_text()
        return int(re.search(r"VmRSS:\s+(\d+)", status).group(1))

    def stop(self, timeout=60):
        """SIGTERM, then the exit status; the log is removed when the server stopped cleanly."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                raise AssertionError(f"ember serve did not stop on SIGTERM: {self.output()}")
        if self.proc.returncode == 0:
            self.log.close()
            os.unlink(self.log.name)
        return self.proc.returncode


@pytest.fixture(scope="module")
def server():
    s = Server("--parallel", "8", "--context", "512", "--embedding-model", str(MINILM), "--alias", "smollm2")
    yield s
    assert s.stop() == 0, s.output()


def cli_output(*args):
    return subprocess.run([str(CLI), *args], capture_output=True, text=True, check=True, timeout=300).stdout


def test_chat_equals_ember_chat(server):
    reply = server.client().chat.completions.create(
        model="smollm2", messages=[{"role": "system", "content": SYSTEM},
                                   {"role": "user", "content": "Why is the sky blue?"}],
        temperature=0, max_tokens=12)
    expected = cli_output("chat", "--model", str(MODEL), "--system", SYSTEM, "--prompt", "Why is the sky blue?",
                          "--temperature", "0", "--repeat-penalty", "1", "--max-tokens", "12", "--threads", "2")
    assert reply.choices[0].message.content == expected.rstrip("\n")
    assert reply.choices[0].message.role == "assistant"
    assert reply.choices[0].finish_reason == "length"
    assert reply.model == "smollm2"
    assert reply.usage.completion_tokens == 12 and reply.usage.prompt_tokens == 31
    assert reply.usage.total_tokens == 43


def test_streaming_chat_gives_the_same_text(server):
    client = server.client()
    messages = [{"role": "user", "content": "Name three colours."}]
    whole = client.chat.completions.create(model="x", messages=messages, temperature=0, max_tokens=20)
    pieces, reasons, usage = [], [], None
    for chunk in client.chat.completions.create(model="x", messages=messages, temperature=0, max_tokens=20,
                                                stream=True, stream_options={"include_usage": True}):
        if chunk.usage:
            usage = chunk.usage
        for choice in chunk.choices:
            pieces.append(choice.delta.content or "")
            if choice.finish_reason:
                reasons.append(choice.finish_reason)
    assert "".join(pieces) == whole.choices[0].message.content
    assert reasons == [whole.choices[0].finish_reason]
    assert usage.completion_tokens == whole.usage.completion_tokens


def test_completions_and_models(server):
    client = server.client()
    reply = client.completions.create(model="smollm2", prompt="The capital of France is", temperature=0, max_tokens=3)
    assert reply.choices[0].text.startswith(" Paris")
    expected = cli_output("generate", "--model", str(MODEL), "--prompt", "The capital of France is", "--tokens", "3",
                          "--temperature", "0", "--threads", "2")
    assert "The capital of France is" + reply.choices[0].text == expected[:-1]  # the CLI ends with a newline
    stopped = client.completions.create(model="smollm2", prompt="The capital of France is", temperature=0,
                                        max_tokens=3, stop=["ris"])
    assert stopped.choices[0].text == " Pa" and stopped.choices[0].finish_reason == "stop"
    assert [m.id for m in client.models.list()] == ["smollm2", "minilm"]


def test_embeddings_equal_ember_embed(server):
    texts = ["A man is eating food.", "Someone is having a meal.", "Ein Zug fährt durch die Nacht 🚂"]
    reply = server.client().embeddings.create(model="minilm", input=texts)  # the client asks for base64
    expected = json.loads(cli_output("embed", "--model", str(MINILM), "--json", "--threads", "2", *texts))
    for item, vector in zip(reply.data, expected["embeddings"]):
        np.testing.assert_array_equal(np.float32(item.embedding), np.float32(vector))
    as_floats = server.client().embeddings.create(model="minilm", input=texts, encoding_format="float")
    np.testing.assert_array_equal(np.float32(as_floats.data[2].embedding), np.float32(reply.data[2].embedding))
    assert reply.usage.prompt_tokens > 20


def test_errors_are_openai_errors(server):
    client = server.client()
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model="x", messages=[], max_tokens=5)
    assert e.value.body["param"] == "messages"
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model="x", messages=[{"role": "user", "content": "Hi"}], max_tokens=100000)
    assert e.value.body["param"] == "max_tokens" and e.value.body["code"] == "context_length_exceeded"
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model="x", messages=[{"role": "user", "content": "Hi"}], temperature=5)
    assert e.value.body["param"] == "temperature"
    with pytest.raises(openai.NotFoundError):
        client.get("/nothing", cast_to=object)


def test_eight_at_once_give_what_each_gives_alone(server):
    client = server.client()
    questions = ["What is 2 + 2?", "Name a fruit.", "Why is the sky blue?", "Say hello in French.",
                 "What is the capital of Italy?", "Count to five.", "What colour is grass?", "Tell me a short joke."]

    def ask(question):
        reply = client.chat.completions.create(model="x", messages=[{"role": "user", "content": question}],
                                               temperature=0, max_tokens=24)
        return reply.choices[0].message.content

    alone = [ask(q) for q in questions]
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        together = list(pool.map(ask, questions))
    assert together == alone
    assert server.metric("ember_decode_sequences_total") > server.metric("ember_decode_steps_total")


def raw(port, data, read=True, timeout=30):
    """Sends bytes on a fresh connection; the response's status line, or None."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(data)
        if not read:
            return None
        s.shutdown(socket.SHUT_WR)
        head = s.recv(64)
        return head.split(b"\r\n", 1)[0].decode(errors="replace")


def sweep(server):
    """One round of bad input; every request is answered 400 (or 404/405), the server keeps serving."""
    hi = {"role": "user", "content": "Hi"}
    bodies = [
        b"", b"{", b"{\"messages\": [", b"null", b"[]", b"\xff\xfe\x00", b"{\"messages\": \"\xff\"}",
        json.dumps({"messages": [hi], "max_tokens": -5}), json.dumps({"messages": [hi], "max_tokens": 10 ** 30}),
        json.dumps({"messages": [hi], "max_tokens": 2 ** 63}), json.dumps({"messages": [hi], "temperature": -1e308}),
        json.dumps({"messages": [hi], "top_p": "high"}), json.dumps({"messages": [hi], "seed": 1.5}),
        json.dumps({"messages": [hi], "stop": {"a": 1}}), json.dumps({"messages": [{"role": "🤖", "content": "x"}]}),
        json.dumps({"messages": [{"role": "user", "content": {"ünïcödé": "✓"}}]}),
        json.dumps({"messages": [hi], "stream": "🚀"}), json.dumps({"messages": [hi], "n": 7}),
        json.dumps({"messages": [hi], "model": 3}), "[" * 100000 + "]" * 100000,
        json.dumps({"messages": [hi] * 2000}),
    ]
    for body in bodies:
        status, _, text = server.post("/v1/chat/completions", body)
        assert status == 400, (body[:100], status, text[:300])
        assert "error" in json.loads(text)
    for path, body in [("/v1/completions", {"prompt": [-1]}), ("/v1/completions", {"prompt": None}),
                       ("/v1/embeddings", {"input": []}), ("/v1/embeddings", {"input": [1, 2]}),
                       ("/v1/embeddings", {"input": "x", "encoding_format": "hex"}),
                       ("/v1/embeddings", {"input": ["ok"] * 300})]:
        status, _, text = server.post(path, body)
        assert status == 400, (path, body, status, text)
    # 10 MB, answered without reading it into a request.
    status, _, text = server.post("/v1/chat/completions", b"{\"x\": \"" + b"a" * (10 << 20) + b"\"}")
    assert status == 400 and b"limit" in text, (status, text[:300])
    # Unicode in every field of a good request.
    status, _, text = server.post("/v1/chat/completions", {
        "model": "模型 🧪", "messages": [{"role": "system", "content": "Réponds en français ✓"},
                                         {"role": "user", "content": "Ça va ? 😀 \u0000 \ud7ff"}],
        "max_tokens": 3, "stop": ["🛑"], "user": "üser"})
    assert status == 200 and json.loads(text)["choices"][0]["message"]["role"] == "assistant", text
    assert server.request("GET", "/v1/nothing")[0] == 404
    assert server.request("DELETE", "/v1/models")[0] == 405
    # Malformed HTTP and clients that vanish: half a request line, half the headers, half a body.
    assert raw(server.port, b"GARBAGE\r\n\r\n") in ("", "HTTP/1.1 400 Bad Request")  # httplib may just close
    raw(server.port, b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Le", read=False)
    raw(server.port, b"POST /v1/chat/completions HTTP/1.1\r\nContent-Length: 100\r\n\r\n{\"messa", read=False)
    raw(server.port, b"GET /health HTTP/1.1\r\n", read=False)


def test_bad_input_leaves_the_server_answering_and_its_memory_flat(server):
    sweep(server)  # the first round warms the allocator's caches
    before = server.rss_kib()
    for _ in range(3):
        sweep(server)
    grown = server.rss_kib() - before
    # Under AddressSanitizer freed memory waits in its quarantine (256 MB at most) before reuse.
    limit_mib = 300 if "ASAN_OPTIONS" in os.environ else 32
    assert grown < limit_mib * 1024, f"the server's memory grew by {grown} KiB over three rounds of bad input"
    assert server.request("GET", "/health")[0] == 200


def test_a_slow_client_does_not_hold_up_the_others(server):
    """A client that sends its request a byte a second; the others are answered meanwhile."""
    request = b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n"
    answered = []

    def slow():
        with socket.create_connection(("127.0.0.1", server.port), timeout=30) as s:
            for byte in request[:6]:
                s.sendall(bytes([byte]))
                time.sleep(1)
            answered.append(time.monotonic())

    t = threading.Thread(target=slow)
    t.start()
    time.sleep(1.5)
    start = time.monotonic()
    for _ in range(3):
        assert server.request("GET", "/health")[0] == 200
    assert time.monotonic() - start < 5
    reply = server.client().chat.completions.create(model="x", messages=[{"role": "user", "content": "Hi"}],
                                                    max_tokens=4)
    assert reply.choices[0].finish_reason in ("stop", "length")
    assert not answered, "the others were answered while the slow client was still sending"
    t.join(timeout=30)


def test_a_vanished_streaming_client_frees_its_slot():
    s = Server("--parallel", "1", "--queue", "0", "--context", "1024", name="vanish")
    try:
        body = json.dumps({"prompt": "Once upon a time", "max_tokens": 1000, "stream": True,
                           "temperature": 0.8, "seed": 1}).encode()
        with socket.create_connection(("127.0.0.1", s.port), timeout=30) as c:
            c.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                      b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
            assert c.recv(4096).startswith(b"HTTP/1.1 200")
            time.sleep(0.2)
            assert s.metric("ember_slots_busy") == 1
            # The only slot is taken and nothing may wait: another request is refused, with Retry-After.
            status, headers, text = s.post("/v1/completions", {"prompt": "Hi", "max_tokens": 2})
            assert status == 503 and headers.get("Retry-After") == "1", (status, headers, text)
        deadline = time.monotonic() + 5
        while s.metric("ember_slots_busy") != 0:
            assert time.monotonic() < deadline, "the slot of a client that left was not freed"
            time.sleep(0.02)
        assert s.metric("ember_generated_tokens_total") < 500
        status, _, _ = s.post("/v1/completions", {"prompt": "Hi", "max_tokens": 2})
        assert status == 200
    finally:
        assert s.stop() == 0, s.output()


def test_api_key_is_required():
    s = Server("--api-key", "sk-test-123", name="key")
    try:
        with pytest.raises(openai.AuthenticationError) as e:
            s.client(api_key="sk-test-124").models.list()
        assert e.value.body["code"] == "invalid_api_key"
        assert s.request("GET", "/health")[0] == 401
        assert [m.id for m in s.client(api_key="sk-test-123").models.list()] == ["SmolLM2-135M-Instruct.Q4_1"]
    finally:
        assert s.stop() == 0, s.output()


def test_sigterm_drains_requests_in_flight():
    s = Server("--parallel", "2", name="drain")
    client = s.client()
    pieces = []
    started = threading.Event()

    def stream():
        for chunk in client.completions.create(model="x", prompt="Once upon a time", max_tokens=40, temperature=0,
                                               stream=True):
            pieces.append(chunk.choices[0].text)
            started.set()

    t = threading.Thread(target=stream)
    t.start()
    assert started.wait(60)
    s.proc.send_signal(signal.SIGTERM)
    t.join(timeout=60)
    assert not t.is_alive()
    assert s.proc.wait(timeout=60) == 0, s.output()
    assert "finishing the requests in flight" in s.output()
    s.stop()
    alone = subprocess.run([str(CLI), "generate", "--model", str(MODEL), "--prompt", "Once upon a time", "--tokens",
                            "40", "--temperature", "0", "--threads", "2"], capture_output=True, text=True,
                           timeout=300).stdout
    assert "Once upon a time" + "".join(pieces) == alone[:-1]
