#!/usr/bin/env python3
"""A local OpenAI-compatible chat server for the voice-loop benchmark and trials.

POST /v1/chat/completions with "stream": true answers with server-sent events (one
`chat.completion.chunk` per word, then `data: [DONE]`), as llama.cpp's server, Ollama and vLLM do.
The answer is --answer (default: a fixed two-sentence reply), or with --echo "You said: <question>.".
--token-ms delays each word (0: the whole answer at once). Every request is appended to --log as one
JSON line (the messages received), so a test can check what history the client sent.

    bench/chat-server.py --port 8090 [--answer TEXT] [--token-ms 0] [--log FILE]
"""
import argparse
import json
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

DEFAULT = ("The weather today is sunny with a light breeze from the west. "
           "Later this evening some clouds will come in from the sea, and tomorrow it may rain a little.")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, default=8090)
    ap.add_argument("--answer", default=DEFAULT)
    ap.add_argument("--echo", action="store_true")
    ap.add_argument("--token-ms", type=float, default=0)
    ap.add_argument("--log")
    args = ap.parse_args()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *a):
            pass

        def do_POST(self):
            if self.path.rstrip("/") != "/v1/chat/completions":
                self.send_error(404)
                return
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))) or b"{}")
            messages = body.get("messages", [])
            if args.log:
                with open(args.log, "a") as f:
                    f.write(json.dumps({"t": time.time(), "messages": messages}) + "\n")
            question = next((m["content"] for m in reversed(messages) if m.get("role") == "user"), "")
            answer = f"You said: {question}." if args.echo else args.answer
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-cache")
            self.send_header("Connection", "close")
            self.end_headers()
            try:
                words = answer.split(" ")
                for i, w in enumerate(words):
                    delta = (w if i == 0 else " " + w)
                    chunk = {"id": "c1", "object": "chat.completion.chunk", "created": int(time.time()), "model": "local",
                             "choices": [{"index": 0, "delta": {"content": delta}, "finish_reason": None}]}
                    self.wfile.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
                    self.wfile.flush()
                    if args.token_ms:
                        time.sleep(args.token_ms / 1000)
                end = {"id": "c1", "object": "chat.completion.chunk", "created": int(time.time()), "model": "local",
                       "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}
                self.wfile.write(b"data: " + json.dumps(end).encode() + b"\n\ndata: [DONE]\n\n")
                self.wfile.flush()
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client cancelled the request (an interruption)
            self.close_connection = True

    server = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    print(f"chat-server: http://127.0.0.1:{args.port}", file=sys.stderr, flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
