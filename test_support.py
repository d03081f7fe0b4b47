"""Test support, no tests: fake servers on 127.0.0.1, and the guard that keeps every test on loopback.

FakeOllama speaks the /api wire format as Ollama 0.32.14 writes it (api/types.go, server/routes.go):
counts left out when zero, a reply with done false and no counts where generation ended without a final
response, done_reason "length", a thinking field, the model named as the request named it, /api/show's
details, /api/ps with or without context_length, and any version string. Its prompt_eval_count is
official_count of the chat (test_support_oracle), never the lab's counter, so a recording test's prompt-token
check compares the lab's count with an independent one; without the template file it leaves the count out, as a
server that reports none would. FakeLlamaServer speaks llama.cpp's llama-server (OpenAI-compatible, build 11434)
and counts with the same oracle. NotOllama is another kind of HTTP server on 127.0.0.1; RawServer sends fixed
bytes, one at a time if asked (a trickling server), then closes. Each test file that speaks HTTP takes only_loopback as
its setUpModule, so every HTTP request its tests make is checked to go to 127.0.0.1 and OLLAMA_HOST points at a
closed loopback port: no test reaches a real server. The other support: test_support_oracle (the official
template), test_support_runs (scripts run as a user runs them), test_support_fixtures (what many tests share).
"""
import contextlib
import http.server
import json
import os
from pathlib import Path
import socket
import tempfile
import threading
import unittest
from unittest import mock

import requests

from answer_model import load_model
import ollama_client
from ollama_client import OllamaClient
from test_support_oracle import OFFICIAL_TEMPLATE, official_count

PINNED = 'b37049369adfe3d2b653af0ab301a062ca5cbe96ace6aa0d3f2559ee9b563fc2'  # answer-model.json's digest
OTHER = 'a' * 64  # a digest the tag might point to after it moved
SERVER_VERSION = '0.99.1'  # not the pinned 0.32.14: a newer server with the same digest may record
LOADED_CONTEXT = 4096  # what the fake's /api/ps reports; a real server loads gemma4:e2b with at least 2048
REQUEST_TIMEOUT = 15.0  # seconds for every request a test makes; the fake answers in milliseconds, oracle loaded
# What the fake's /api/tags and /api/show say about every model it holds, as Ollama spells it.
DETAILS = {'parent_model': '', 'format': 'gguf', 'family': 'gemma4', 'families': ['gemma4'], 'parameter_size': '5.1B',
           'quantization_level': 'Q4_K_M'}
LICENSE = '\n  Apache License\n  Version 2.0, January 2004\n'
LLAMA_MODEL = 'gemma-4-E2B-it-Q4_K_M.gguf'  # the model file the fake llama-server serves, and so its model id
LLAMA_BUILD = 'b11434-f00dcafe'  # its /props build_info and system_fingerprint
LLAMA_TEMPLATE = '{{ bos_token }}{% for m in messages %}{{ m.content }}{% endfor %}'  # its /props chat_template
LLAMA_CONTEXT = 8192  # the context it says it loaded (/v1/models meta.n_ctx, /props default_generation_settings)


REAL_REQUEST = requests.Session.request


def loopback_only(session, method, url, *args, **kwargs):
    """requests.Session.request for the tests: anything but 127.0.0.1 is a test failure, not a request."""
    if not url.startswith('http://127.0.0.1:'):
        raise AssertionError(f'a test tried to reach {url}; tests talk only to 127.0.0.1')
    return REAL_REQUEST(session, method, url, *args, **kwargs)


def only_loopback():
    """A test module's setUpModule: until its tests end, requests reach only 127.0.0.1 and wait REQUEST_TIMEOUT."""
    for patcher in (mock.patch.object(requests.Session, 'request', loopback_only),
                    mock.patch.dict(os.environ, {'OLLAMA_HOST': f'127.0.0.1:{closed_port()}',  # and no key or URL
                                                 'AI_CONTEXT_EVAL_API_KEY': '', 'AI_CONTEXT_EVAL_BASE_URL': ''}),
                    mock.patch.object(ollama_client, 'CHECK_TIMEOUT', REQUEST_TIMEOUT),
                    mock.patch.object(ollama_client, 'CHAT_TIMEOUT', REQUEST_TIMEOUT)):
        patcher.start()
        unittest.addModuleCleanup(patcher.stop)


def reply(content: str, prompt_tokens: int = 0, answer_tokens: int = 0, done_reason: str = 'stop',
          thinking: str = '') -> dict:
    """A non-streamed /api/chat response as Ollama sends it: empty and zero fields are left out."""
    message = {'role': 'assistant', 'content': content}
    if thinking:
        message['thinking'] = thinking
    # FakeOllama adds the model, named as the request named it, where a test's payload leaves it out.
    payload = {'created_at': '2026-10-20T00:00:00Z', 'message': message,
               'done_reason': done_reason, 'done': True, 'total_duration': 1000}
    if prompt_tokens:
        payload['prompt_eval_count'] = prompt_tokens
    if answer_tokens:
        payload['eval_count'] = answer_tokens
    return payload


def unfinished(content: str) -> dict:
    """What the server sends with stream false when generation ends without a final response (a token
    repeated over and over): the text so far, done false, and no done_reason, durations or counts."""
    return {'created_at': '2026-10-20T00:00:00Z', 'message': {'role': 'assistant', 'content': content}, 'done': False}


def server_count(messages: list[dict]) -> int | None:
    """prompt_eval_count as a server with the official template would report it; None without that template."""
    return None if OFFICIAL_TEMPLATE is None else official_count(messages)


def counted_reply(body: dict, number: int) -> tuple[int, dict]:
    """A reply whose prompt_eval_count is the server's own count of the prompt it received."""
    return 200, reply(f'answer {number}', server_count(body['messages']) or 0, 3)


class JsonHandler(http.server.BaseHTTPRequestHandler):
    """What the fake servers' handlers share: a JSON reply, and no log."""
    def send_json(self, status: int, payload: dict) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header('Content-Type', 'application/json; charset=utf-8')
        self.send_header('Content-Length', str(len(data)))
        self.end_headers()
        try:
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client already gave up, as in the timeout test

    def log_message(self, *args):
        pass  # keep test output clean


class LoopbackServer:
    """A test server on 127.0.0.1 (self.server) served by a thread (self.thread) between `with` and its end."""

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=REQUEST_TIMEOUT)


class FakeOllama(LoopbackServer):
    """An Ollama stand-in on 127.0.0.1 that records every request it receives.

    chat(body, number) -> (status, payload) answers the number-th /api/chat request (from 1);
    version is what /api/version says; context_length is what /api/ps reports for a loaded model
    (None: the field is left out, as servers before 0.9.7 do); ps_status other than 200 makes /api/ps
    fail with that status, as a proxy in front of the server might. Setting fake.digest moves the tag. family is the
    model family every endpoint reports, as /api/show's details give it.
    """

    def __init__(self, digest: str = PINNED, tags: tuple = ('gemma4:e2b',), chat=counted_reply,
                 version: str = SERVER_VERSION, context_length: int | None = LOADED_CONTEXT,
                 ps_status: int = 200, family: str = DETAILS['family']):
        self.requests: list[tuple[str, str, bytes]] = []
        self.digest = digest
        fake, details = self, {**DETAILS, 'family': family, 'families': [family]}

        def loaded() -> list[dict]:
            """/api/ps: the model is loaded once a chat request has reached it."""
            if not fake.chats():
                return []
            entry = {'name': tags[0], 'model': tags[0], 'size': 7162394016, 'digest': fake.digest,
                     'details': {'family': family, 'quantization_level': 'Q4_K_M'},
                     'expires_at': '2026-10-20T00:05:00Z', 'size_vram': 0}
            if context_length is not None:
                entry['context_length'] = context_length
            return [entry]

        class Handler(JsonHandler):
            def do_GET(self):
                fake.requests.append(('GET', self.path, b''))
                if self.path == '/api/version':
                    self.send_json(200, {'version': version})
                elif self.path == '/api/ps':
                    self.send_json(*((200, {'models': loaded()}) if ps_status == 200
                                     else (ps_status, {'error': 'internal server error'})))
                elif self.path == '/api/tags':
                    self.send_json(200, {'models': [
                        {'name': tag, 'model': tag, 'modified_at': '2026-10-20T00:00:00Z', 'size': 7162394016,
                         'digest': fake.digest, 'details': details} for tag in tags]})
                else:
                    self.send_json(404, {'error': 'not found'})

            def do_POST(self):
                raw = self.rfile.read(int(self.headers.get('Content-Length', 0)))
                fake.requests.append(('POST', self.path, raw))
                body = json.loads(raw)
                if self.path not in ('/api/chat', '/api/show'):
                    self.send_json(404, {'error': 'not found'})
                elif body.get('model') not in tags:
                    self.send_json(404, {'error': f"model '{body.get('model')}' not found"})
                elif self.path == '/api/show':  # as 0.32.14 answers it, less model_info, template and tensors
                    self.send_json(200, {'license': LICENSE, 'modelfile': '# Modelfile', 'details': details,
                                         'capabilities': ['completion'], 'modified_at': '2026-10-20T00:00:00Z'})
                else:
                    status, payload = chat(body, len(fake.chats()))
                    self.send_json(status, {'model': body['model'], **payload} if status == 200 else payload)

        self.server = http.server.ThreadingHTTPServer(('127.0.0.1', 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={'poll_interval': 0.05},
                                       daemon=True)

    @property
    def host(self) -> str:
        return f'http://127.0.0.1:{self.server.server_address[1]}'

    def chats(self) -> list[dict]:
        return [json.loads(raw) for method, path, raw in self.requests if path == '/api/chat']


def llama_count(body: dict) -> int | None:
    """usage.prompt_tokens as llama-server with the official template reports it: the body's tools rendered as the
    template's tools; None without that template."""
    messages = body['messages']
    if body.get('tools'):
        messages = [{**messages[0], 'tools': body['tools']}, *messages[1:]]
    return server_count(messages)


def completion(content: str, prompt_tokens: int, answer_tokens: int = 3, finish_reason: str = 'stop') -> dict:
    """A non-streamed chat.completion as llama-server writes it (server-task.cpp, to_json_oaicompat_chat); the fake
    adds model."""
    return {'choices': [{'finish_reason': finish_reason, 'index': 0,
                         'message': {'role': 'assistant', 'content': content}}],
            'created': 1796342400, 'system_fingerprint': LLAMA_BUILD, 'object': 'chat.completion',
            'usage': {'completion_tokens': answer_tokens, 'prompt_tokens': prompt_tokens,
                      'total_tokens': prompt_tokens + answer_tokens, 'prompt_tokens_details': {'cached_tokens': 0}},
            'id': 'chatcmpl-0'}


def llama_error(status: int, message: str, kind: str) -> tuple[int, dict]:
    """An error as llama-server sends it (server-common.cpp, format_error_response)."""
    return status, {'error': {'code': status, 'message': message, 'type': kind}}


class FakeLlamaServer(LoopbackServer):
    """A stand-in for llama.cpp's llama-server at build 11434 on 127.0.0.1, its JSON as tools/server writes it: the
    routes of server.cpp, /v1/models and /props of server-context.cpp, a chat completion of server-task.cpp and
    errors of server-common.cpp. It serves fake.model_file (its id: a model started without an alias is named by its
    file) and counts each prompt with llama_count. chat(body, number) -> (status, payload) answers the number-th
    /v1/chat/completions; counts false drops /v1/chat/completions/input_tokens and props false drops /props, as vLLM
    and LM Studio serve neither; key is the API key it requires (--api-key), if any."""

    def __init__(self, chat=None, counts: bool = True, props: bool = True, key: str | None = None,
                 count=llama_count):
        self.requests: list[tuple[str, str, bytes, str | None]] = []
        self.model_file, self.alias, fake = LLAMA_MODEL, None, self  # alias: its --alias, which names the model

        def info() -> dict:
            return {'id': fake.alias or fake.model_file, 'aliases': [], 'tags': [], 'object': 'model',
                    'created': 1796342400, 'owned_by': 'llamacpp',
                    'meta': {'vocab_type': 1, 'n_vocab': 262144, 'n_ctx': LLAMA_CONTEXT, 'n_ctx_train': 131072,
                             'n_params': 4647450147}}
        routes = {'/v1/models': lambda: {'object': 'list', 'data': [info()]},
                  '/props': lambda: {'default_generation_settings': {'n_ctx': LLAMA_CONTEXT}, 'total_slots': 1,
                                     'model_path': f'/srv/models/{fake.model_file}', 'chat_template': LLAMA_TEMPLATE,
                                     'build_info': LLAMA_BUILD, 'is_sleeping': False}}
        chat = chat or (lambda body, number: (200, completion(f'answer {number}', count(body) or 0)))

        class Handler(JsonHandler):
            def answer(self, raw: bytes) -> tuple[int, dict]:
                if key is not None and self.headers.get('Authorization') != f'Bearer {key}':
                    return llama_error(401, 'Invalid API Key', 'authentication_error')
                if self.path in routes and (props or self.path != '/props') and self.command == 'GET':
                    return 200, routes[self.path]()
                if self.path == '/v1/chat/completions/input_tokens' and counts and raw:
                    return 200, {'input_tokens': count(json.loads(raw))}
                if self.path == '/v1/chat/completions' and raw:
                    status, payload = chat(json.loads(raw), len(fake.chats()))
                    named = {**payload, 'model': fake.alias or fake.model_file}
                    return status, named if status == 200 else payload
                return llama_error(404, 'File Not Found', 'not_found_error')

            def do_GET(self):
                fake.requests.append(('GET', self.path, b'', self.headers.get('Authorization')))
                self.send_json(*self.answer(b''))

            def do_POST(self):
                raw = self.rfile.read(int(self.headers.get('Content-Length', 0)))
                fake.requests.append(('POST', self.path, raw, self.headers.get('Authorization')))
                self.send_json(*self.answer(raw))

        self.server = http.server.ThreadingHTTPServer(('127.0.0.1', 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={'poll_interval': 0.05},
                                       daemon=True)
        self.base_url = f'http://127.0.0.1:{self.server.server_address[1]}/v1'

    def chats(self) -> list[dict]:
        return [json.loads(raw) for _, path, raw, _ in self.requests if path == '/v1/chat/completions']

    def paths(self) -> list[str]:
        return [path for _, path, _, _ in self.requests]


class NotOllama(LoopbackServer):
    """Another kind of HTTP server on 127.0.0.1: the same status and body for every GET and POST. By default
    404 '404 page not found', as a Go program answers a path it does not serve."""

    def __init__(self, status: int = 404, body: bytes = b'404 page not found\n'):
        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                self.send_response(status)
                self.send_header('Content-Length', str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_POST = do_GET

            def log_message(self, *args):
                pass  # keep test output clean

        self.server = http.server.ThreadingHTTPServer(('127.0.0.1', 0), Handler)
        self.host = f'http://127.0.0.1:{self.server.server_address[1]}'
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)


class RawServer(LoopbackServer):
    """An HTTP server on 127.0.0.1 that answers each request with the bytes `raw`, one every `delay` seconds (at
    once for 0), then closes the connection; it stops sending when the `with` block ends."""

    def __init__(self, raw: bytes, delay: float = 0.0):
        stopped = threading.Event()

        class Handler(http.server.BaseHTTPRequestHandler):
            def handle_one_request(self):
                self.raw_requestline = self.rfile.readline()
                self.parse_request()
                self.rfile.read(int(self.headers.get('Content-Length', 0)))
                step = 1 if delay else max(1, len(raw))
                with contextlib.suppress(OSError):
                    for index in range(0, len(raw), step):
                        if stopped.wait(delay):
                            break
                        self.wfile.write(raw[index:index + step])
                self.close_connection = True

        self.stopped = stopped
        self.server = http.server.ThreadingHTTPServer(('127.0.0.1', 0), Handler)
        self.server.daemon_threads = True
        self.host = f'http://127.0.0.1:{self.server.server_address[1]}'
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={'poll_interval': 0.05}, daemon=True)

    def __exit__(self, *exc):
        self.stopped.set()
        super().__exit__(*exc)


def http_reply(body: bytes, length: int | None = None) -> bytes:
    """An HTTP/1.1 200 response with a JSON body; a length above len(body) makes a reply cut off."""
    return (b'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n'
            % (len(body) if length is None else length)) + body


@contextlib.contextmanager
def ollama_command(installed: bool):
    """PATH holding only a temp folder, with an executable named ollama in it when installed is true."""
    with tempfile.TemporaryDirectory() as folder:
        if installed:
            command = Path(folder) / 'ollama'
            command.write_text('#!/bin/sh\nexit 0\n', encoding='utf-8')
            command.chmod(0o755)
        with mock.patch.dict(os.environ, {'PATH': folder}):
            yield


def closed_port() -> int:
    """A loopback port that nothing listens on."""
    with socket.socket() as probe:
        probe.bind(('127.0.0.1', 0))
        return probe.getsockname()[1]


def client_for(host: str) -> OllamaClient:
    """The real client, finding the server through OLLAMA_HOST as a user's would."""
    with mock.patch.dict(os.environ, {'OLLAMA_HOST': host}):
        return OllamaClient(load_model())


