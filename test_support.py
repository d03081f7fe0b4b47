"""Test support, no tests: the official-template oracle and a fake Ollama server on 127.0.0.1.

The official Gemma 4 E2B chat template is an oracle only: the prepared Hub copy when prepare.py fetched
one, else ../shared/gemma-4-E2B-it/chat_template.jinja. official_render and official_count (that prompt
encoded by the tokenizers library straight from prepared/tokenizer.json) share no code with tokenizer.py.

FakeOllama speaks the /api wire format as Ollama 0.32.14 writes it (api/types.go, server/routes.go):
counts left out when zero, a reply with done false and no counts where generation ended without a final
response, done_reason "length", a thinking field, the model named as the request named it, /api/show's
details, /api/ps with or without context_length, and any version string. Its prompt_eval_count is
official_count of the chat, never the lab's counter, so a recording test's prompt-token check compares the
lab's count with an independent one; without the template file it leaves the count out, as a server that
reports none would. NotOllama is another kind of HTTP server on 127.0.0.1; RawServer sends fixed bytes, one at
a time if asked (a trickling server), then closes. Each test file calls only_loopback() from its setUpModule,
so every HTTP request its tests make is checked to go to 127.0.0.1 and OLLAMA_HOST points at a closed loopback
port: no test reaches a real server.
run_command runs a script's main as a user's command runs it, through common.run. This module holds no
test methods (AnswerFilesTest and Rejecting are only base classes).
"""

import contextlib
from functools import lru_cache
import http.server
import io
import json
import os
from pathlib import Path
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import unittest
from unittest import mock

import requests

from answer_model import load_model
from case_set import load_cases
import common
from jinja2.ext import loopcontrols
from jinja2.exceptions import TemplateError
from jinja2.sandbox import ImmutableSandboxedEnvironment
from tokenizers import Tokenizer

import ollama_client
from ollama_client import OllamaClient
from prepared_folder import PREPARED

HERE = Path(__file__).parent
PINNED = 'b37049369adfe3d2b653af0ab301a062ca5cbe96ace6aa0d3f2559ee9b563fc2'  # answer-model.json's digest
OTHER = 'a' * 64  # a digest the tag might point to after it moved
SERVER_VERSION = '0.99.1'  # not the pinned 0.32.14: a newer server with the same digest may record
LOADED_CONTEXT = 4096  # what the fake's /api/ps reports; a real server loads gemma4:e2b with at least 2048
TIMEOUT = 15.0  # seconds for every request a test makes; the fake answers in milliseconds, once its oracle is loaded
# What the fake's /api/tags and /api/show say about every model it holds, as Ollama spells it.
DETAILS = {'parent_model': '', 'format': 'gguf', 'family': 'gemma4', 'families': ['gemma4'], 'parameter_size': '5.1B',
           'quantization_level': 'Q4_K_M'}
LICENSE = '\n  Apache License\n  Version 2.0, January 2004\n'


REAL_REQUEST = requests.Session.request


def loopback_only(session, method, url, *args, **kwargs):
    """requests.Session.request for the tests: anything but 127.0.0.1 is a test failure, not a request."""
    if not url.startswith('http://127.0.0.1:'):
        raise AssertionError(f'a test tried to reach {url}; tests talk only to 127.0.0.1')
    return REAL_REQUEST(session, method, url, *args, **kwargs)


def only_loopback():
    """For a test module's setUpModule: until its tests end, requests reach only 127.0.0.1 and wait TIMEOUT."""
    for patcher in (mock.patch.object(requests.Session, 'request', loopback_only),
                    mock.patch.dict(os.environ, {'OLLAMA_HOST': f'127.0.0.1:{closed_port()}'}),
                    mock.patch.object(ollama_client, 'CHECK_TIMEOUT', TIMEOUT),
                    mock.patch.object(ollama_client, 'CHAT_TIMEOUT', TIMEOUT)):
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


class LoopbackServer:
    """A test server on 127.0.0.1 (self.server) served by a thread (self.thread) between `with` and its end."""

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=TIMEOUT)


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

        class Handler(http.server.BaseHTTPRequestHandler):
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

            def log_message(self, *args):
                pass  # keep test output clean

        self.server = http.server.ThreadingHTTPServer(('127.0.0.1', 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={'poll_interval': 0.05},
                                       daemon=True)

    @property
    def host(self) -> str:
        return f'http://127.0.0.1:{self.server.server_address[1]}'

    def chats(self) -> list[dict]:
        return [json.loads(raw) for method, path, raw in self.requests if path == '/api/chat']



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


@contextlib.contextmanager
def ctrl_c_reaches_children():
    """Start scripts inside this to send them Ctrl-C: a suite run as a background job (`... &`) ignores SIGINT,
    and so would every program it starts, while a handled signal starts as the default in a new program."""
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, before)


def hypothesis_home_outside_the_tree():
    """(setUpModule, tearDownModule) for a file of property tests: while it runs, Hypothesis keeps its files in a
    temporary folder, never in a .hypothesis/ folder of the working tree."""
    from hypothesis import configuration  # a tests-only package, loaded only by the files that use it
    home = tempfile.TemporaryDirectory(prefix='hypothesis-')

    def set_up() -> None:
        configuration.set_hypothesis_home_dir(home.name)

    def tear_down() -> None:
        configuration.set_hypothesis_home_dir(None)
        home.cleanup()
    return set_up, tear_down


def client_for(host: str) -> OllamaClient:
    """The real client, finding the server through OLLAMA_HOST as a user's would."""
    with mock.patch.dict(os.environ, {'OLLAMA_HOST': host}):
        return OllamaClient(load_model())


def run_command(main, argv: list[str], script: str) -> tuple[int, str, str]:
    """main run through common.run as `.venv/bin/python script argv` runs it: (exit status, stdout, stderr).

    A LabError is then the one line a user reads, and Ctrl-C exit 130 with the state the main reported. stderr
    also holds what reached file descriptor 2 meanwhile: what a rules process, which inherits it, wrote there.
    """
    out, err = io.StringIO(), io.StringIO()
    with (tempfile.TemporaryFile() as raw, mock.patch.object(sys, 'argv', [script, *argv]),
          mock.patch.object(signal, 'signal'), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err)):
        saved = os.dup(2)
        os.dup2(raw.fileno(), 2)
        try:
            common.run(main)
            raise AssertionError('common.run returned instead of exiting')
        except SystemExit as exit:  # run always ends in sys.exit
            code = exit.code
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        raw.seek(0)
        return code, out.getvalue(), err.getvalue() + raw.read().decode('utf-8', 'replace')


def in_process(script, *argv: str) -> subprocess.CompletedProcess:
    """`.venv/bin/python SCRIPT.py argv` for a script module, run by run_command in this process, so the counter is
    loaded once for the suite (about 2 s a run saved), shaped as subprocess.run's result."""
    name = f'{script.__name__}.py'
    return subprocess.CompletedProcess([name, *argv], *run_command(script.main, list(argv), name))


def run_answer_check(argv: list[str], **options) -> tuple[int, str, str]:
    """`answer_check.py argv` with main's keyword options (its files, its client): (exit status, stdout, stderr)."""
    import answer_check  # here, not at the top: the oracle's users need no strategies

    return run_command(lambda args: answer_check.main(args, **options), argv, 'answer_check.py')


def rule_requests(count) -> list[list[dict]]:
    """Every request the four rules count or return on the shipped cases, each turn costed as a difference of
    whole requests (a plain count function, so every candidate request is seen), notes blocks included."""
    from strategies import RULES  # here, not at the top: the oracle's users need no strategies

    seen = []

    def recording(messages):
        seen.append(messages)
        return count(messages)

    for case in load_cases(HERE / 'cases.json'):
        for rule in RULES.values():
            seen.append(rule(case, recording)['messages'])
    return seen


def held_out_cases() -> list[dict]:
    """The held-out cases of the shipped cases.json, picked here rather than by the code under test."""
    return [case for case in load_cases(HERE / 'cases.json') if case['split'] == 'held_out']


def recorded_answer(text: str, seed: int = 1) -> dict:
    """One answer as a recording holds it, for a request nobody sends."""
    return {'seed': seed, 'answer': text, 'tool_calls': [], 'done_reason': 'stop', 'prompt_tokens': 50,
            'answer_tokens': 9, 'request_sha256': '0' * 64, 'input_tokens': 50}


class Rejecting(unittest.TestCase):
    """Base for tests of a loader that must refuse a file with one line starting with the file's path."""

    def rejection(self, loader, file_name: str, data) -> str:
        with tempfile.TemporaryDirectory() as folder:
            path = Path(folder) / file_name
            path.write_text(json.dumps(data))
            with self.assertRaises(common.LabError) as caught:
                loader(path)
        message = str(caught.exception)
        self.assertTrue(message.startswith(f'{path}: '), message)
        self.assertNotIn('\n', message)
        return message


class AnswerFilesTest(unittest.TestCase):
    """A temporary folder for each test, and where the recording and the grades go in it."""

    def setUp(self):
        folder = tempfile.TemporaryDirectory()
        self.addCleanup(folder.cleanup)
        self.folder = Path(folder.name)
        self.result = self.folder / 'answer-result.json'
        self.grades = self.folder / 'answer-grades.json'


def oracle_template_path() -> Path | None:
    for path in (PREPARED / 'chat_template.jinja', HERE.parent / 'shared' / 'gemma-4-E2B-it' / 'chat_template.jinja'):
        if path.is_file():
            return path
    return None


@lru_cache(maxsize=1)
def official_template():
    """The official template compiled once, in an environment set up as transformers' apply_chat_template sets it."""
    def raise_exception(message):
        raise TemplateError(message)

    environment = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    environment.globals['raise_exception'] = raise_exception
    environment.filters['tojson'] = lambda value, **_: json.dumps(value)
    return environment.from_string(OFFICIAL_TEMPLATE)


def official_render(messages: list[dict]) -> str:
    """Render with the official template the way transformers' apply_chat_template does."""
    return official_template().render(messages=messages, bos_token='<bos>', add_generation_prompt=True,
                                      enable_thinking=False)


@lru_cache(maxsize=1)
def official_tokenizer() -> Tokenizer:
    """prepared/tokenizer.json loaded by the tokenizers library itself, not through tokenizer.py."""
    return Tokenizer.from_file(str(PREPARED / 'tokenizer.json'))


def official_count(messages: list[dict]) -> int:
    """Tokens of the prompt the official template renders, encoded as transformers' apply_chat_template
    encodes it (special-token text becomes its id; nothing is added): the oracle's count, sharing no code
    with tokenizer.py. official_count of dev-correction's bare request -> 35."""
    return len(official_tokenizer().encode(official_render(messages), add_special_tokens=False).ids)


OFFICIAL_PATH = oracle_template_path()
OFFICIAL_TEMPLATE = OFFICIAL_PATH.read_text(encoding='utf-8') if OFFICIAL_PATH else None
NO_ORACLE = 'neither prepared/chat_template.jinja nor ../shared/gemma-4-E2B-it/chat_template.jinja exists'


# --- Fixtures every test file shares

class TempFolderTest(unittest.TestCase):
    """A temporary folder for each test, self.tmp, removed after it: no test writes into the working tree."""

    def setUp(self):
        temp = tempfile.TemporaryDirectory()
        self.addCleanup(temp.cleanup)
        self.tmp = Path(temp.name)


def shipped_cases() -> dict[str, dict]:
    """The shipped cases.json by id, freshly loaded so a test may change its copy."""
    return {case['id']: case for case in load_cases(HERE / 'cases.json')}


def whole_count(messages: list[dict]) -> int:
    """A plain count function: the request rendered and encoded whole, no cache, no sums, no `turn_costs`."""
    from tokenizer import counter  # here, not at the top: the oracle's users need no counter

    return len(counter().encode(counter().prompt(messages)))


def evaluate_py(*args: str) -> subprocess.CompletedProcess:
    """`evaluate.py ARGS` in a process of its own (for what only a process shows: signals, pipes, encodings),
    reading the prepared folder this process reads."""
    return subprocess.run([sys.executable, 'evaluate.py', *args], cwd=HERE, capture_output=True, text=True,
                          timeout=300)
