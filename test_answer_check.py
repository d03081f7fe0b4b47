"""Tests for the answer grader, the pinned Ollama client and the recording run.

    python -m unittest -v test_answer_check.py

Grading tests use the shipped answer-keys.json. Client and recording tests run
the real requests-based client against a fake Ollama server that this file
starts on 127.0.0.1 and that speaks the /api wire format as Ollama 0.32.14
writes it (api/types.go, server/routes.go): counts left out when zero, a
reply with done false and no counts where generation ended without a final
response, done_reason "length", a thinking field, /api/ps with or without
context_length, and any version string, such as one that leaves cached prompt
tokens out of its counts; no model is called.
Every file a test writes goes to a temporary directory; the shipped files are
only read. Recording tests use the real strategies, cases and prepared counter,
so `python prepare.py` must have run. Every HTTP request the client makes in
these tests is checked to go to 127.0.0.1, and OLLAMA_HOST points at a closed
loopback port, so no test can reach a real server.
"""
import contextlib
import hashlib
import http.server
import io
import json
import os
from pathlib import Path
import re
import socket
import tempfile
import threading
import time
import unittest
from unittest import mock

import requests

import answer_check
import answer_model
import answer_record
from answer_check import AnswerCheckError, grade, load_keys, load_recording, summarize
from answer_model import AnswerModel, AnswerModelError, PinError, load_model, ollama_host
from evaluate import load_cases
from strategies import STRATEGIES
from cli import python_command
from tokenizer import count_request

HERE = Path(__file__).parent
PYTHON = python_command()  # how the advice in messages starts Python: .venv/bin/python from the lab's venv
PINNED = 'b37049369adfe3d2b653af0ab301a062ca5cbe96ace6aa0d3f2559ee9b563fc2'
OTHER = 'a' * 64
HELD_OUT = ['held-latest', 'held-old-decision', 'held-correction', 'held-pronoun', 'held-spread', 'held-buried']
SERVER_VERSION = '0.99.1'  # not the pinned 0.32.14: a newer server with the same digest may record
LOADED_CONTEXT = 4096  # what the fake's /api/ps reports; a real server loads gemma4:e2b with at least 2048
TIMEOUT = 5.0  # seconds for every request a test makes; the fake answers in milliseconds


REAL_REQUEST = requests.Session.request


def loopback_only(session, method, url, *args, **kwargs):
    """requests.Session.request for the tests: anything but 127.0.0.1 is a test failure, not a request."""
    if not url.startswith('http://127.0.0.1:'):
        raise AssertionError(f'a test tried to reach {url}; tests talk only to 127.0.0.1')
    return REAL_REQUEST(session, method, url, *args, **kwargs)


def setUpModule():
    for patcher in (mock.patch.object(requests.Session, 'request', loopback_only),
                    mock.patch.dict(os.environ, {'OLLAMA_HOST': f'127.0.0.1:{closed_port()}'})):
        patcher.start()
        unittest.addModuleCleanup(patcher.stop)


def reply(content: str, prompt_tokens: int = 0, answer_tokens: int = 0, done_reason: str = 'stop',
          thinking: str = '') -> dict:
    """A non-streamed /api/chat response as Ollama sends it: empty and zero fields are left out."""
    message = {'role': 'assistant', 'content': content}
    if thinking:
        message['thinking'] = thinking
    payload = {'model': 'gemma4:e2b', 'created_at': '2026-10-20T00:00:00Z', 'message': message,
               'done_reason': done_reason, 'done': True, 'total_duration': 1000}
    if prompt_tokens:
        payload['prompt_eval_count'] = prompt_tokens
    if answer_tokens:
        payload['eval_count'] = answer_tokens
    return payload


def unfinished(content: str) -> dict:
    """What the server sends with stream false when generation ends without a final response (a token
    repeated over and over): the text so far, done false, and no done_reason, durations or counts."""
    return {'model': 'gemma4:e2b', 'created_at': '2026-10-20T00:00:00Z',
            'message': {'role': 'assistant', 'content': content}, 'done': False}


def counted_reply(body: dict, number: int) -> tuple[int, dict]:
    """The server reads exactly the prompt the lab counted."""
    return 200, reply(f'answer {number}', count_request(body['messages']), 3)


def steady_reply(body: dict, number: int) -> tuple[int, dict]:
    """An answer that depends only on the request, as a resumed run must be able to reproduce it."""
    sha = hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()
    return 200, reply(f'answer to {sha[:16]}', count_request(body['messages']), 3)


class FakeOllama:
    """An Ollama stand-in on 127.0.0.1 that records every request it receives.

    chat(body, number) -> (status, payload) answers the number-th /api/chat request (from 1);
    version is what /api/version says; context_length is what /api/ps reports for a loaded model
    (None: the field is left out, as servers before 0.9.7 do); ps_status other than 200 makes /api/ps
    fail with that status, as a proxy in front of the server might.
    """

    def __init__(self, digest: str = PINNED, tags: tuple = ('gemma4:e2b',), chat=counted_reply,
                 version: str = SERVER_VERSION, context_length: int | None = LOADED_CONTEXT,
                 ps_status: int = 200):
        self.requests: list[tuple[str, str, bytes]] = []
        fake = self

        def loaded() -> list[dict]:
            """/api/ps: the model is loaded once a chat request has reached it."""
            if not fake.chats():
                return []
            entry = {'name': tags[0], 'model': tags[0], 'size': 7162394016, 'digest': digest,
                     'details': {'family': 'gemma4', 'quantization_level': 'Q4_K_M'},
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
                         'digest': digest, 'details': {'family': 'gemma4', 'quantization_level': 'Q4_K_M'}}
                        for tag in tags]})
                else:
                    self.send_json(404, {'error': 'not found'})

            def do_POST(self):
                raw = self.rfile.read(int(self.headers.get('Content-Length', 0)))
                fake.requests.append(('POST', self.path, raw))
                body = json.loads(raw)
                if self.path != '/api/chat':
                    self.send_json(404, {'error': 'not found'})
                elif body.get('model') not in tags:
                    self.send_json(404, {'error': f"model '{body.get('model')}' not found"})
                else:
                    self.send_json(*chat(body, len(fake.chats())))

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

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=TIMEOUT)


def closed_port() -> int:
    """A loopback port that nothing listens on."""
    with socket.socket() as probe:
        probe.bind(('127.0.0.1', 0))
        return probe.getsockname()[1]


def client_for(host: str, timeout: float = TIMEOUT) -> AnswerModel:
    """The real client, finding the server through OLLAMA_HOST as a user's would."""
    with mock.patch.dict(os.environ, {'OLLAMA_HOST': host}):
        return AnswerModel(load_model(), timeout=timeout, check_timeout=timeout)


def held_out_cases() -> list[dict]:
    return [case for case in load_cases(HERE / 'cases.json') if case['split'] == 'held_out']


def answer(text: str, seed: int = 1) -> dict:
    return {'seed': seed, 'answer': text, 'tool_calls': [], 'done_reason': 'stop', 'prompt_tokens': 50,
            'answer_tokens': 9, 'request_sha256': '0' * 64, 'input_tokens': 50}


class KeysTest(unittest.TestCase):
    def test_keys_cover_exactly_the_held_out_cases(self):
        keys = load_keys()
        self.assertEqual(sorted(keys), sorted(HELD_OUT))
        self.assertEqual(sorted(case['id'] for case in held_out_cases()), sorted(HELD_OUT))

    def test_every_key_matches_the_case_facts_it_was_written_from(self):
        keys = load_keys()
        for case in held_out_cases():
            for kind, facts in (('must', case['required']), ('stale', case['stale'])):
                for pattern in keys[case['id']][kind]:
                    with self.subTest(case=case['id'], kind=kind, pattern=pattern):
                        self.assertTrue(any(re.search(pattern, fact, re.I) for fact in facts))


class GradeTest(unittest.TestCase):
    def test_replaced_decision_presented_as_current_fails(self):
        for text in ('We use RabbitMQ for the job queue.', 'The job queue is RabbitMQ.\nIt was decided early.'):
            with self.subTest(text=text):
                self.assertEqual(grade('held-correction', answer(text)),
                                 ('fail', 'presents a replaced decision as current'))

    def test_correction_named_together_with_the_replaced_decision_passes(self):
        for text in ('Redis streams replaced RabbitMQ for the job queue.',
                     'Use Redis streams. RabbitMQ was the earlier choice.',
                     'Actually, the team switched from RabbitMQ to Redis streams.',
                     'The job queue uses Redis streams, not RabbitMQ.'):
            with self.subTest(text=text):
                self.assertEqual(grade('held-correction', answer(text)), ('pass', 'every required fact'))

    def test_every_required_fact_passes(self):
        for case_id, text in (('held-latest', 'Mateo reviews the pricing page.'),
                              ('held-old-decision', 'Uploads go to object storage.'),
                              ('held-pronoun', 'The limit is 3 attempts.'),
                              ('held-spread', 'At least 14 characters; sessions expire after 30 minutes.'),
                              ('held-buried', 'The gateway must allow 200 connections.')):
            with self.subTest(case=case_id):
                self.assertEqual(grade(case_id, answer(text)), ('pass', 'every required fact'))

    def test_partial_facts_fail(self):
        for case_id, text in (('held-spread', 'Passwords need at least 14 characters.'),
                              ('held-spread', 'Sessions expire after 30 minutes.'),
                              ('held-buried', 'The gateway must allow 2000 connections.'),
                              ('held-pronoun', 'The limit is thirty attempts.')):
            with self.subTest(case=case_id, text=text):
                self.assertEqual(grade(case_id, answer(text)), ('fail', 'required fact absent'))

    def test_saying_the_fact_is_not_in_the_conversation_fails_and_counts_as_said_missing(self):
        text = 'That is not in the conversation.'
        self.assertEqual(grade('held-buried', answer(text)), ('fail', 'says the fact is missing'))
        recorded = {'answers': {'recent': {'held-buried': [answer(text)]}}}
        self.assertEqual(summarize(recorded)['recent'],
                         {'pass': 0, 'fail': 1, 'incomplete': 0, 'said_missing': 1, 'stale_as_current': 0,
                          'cases_passed_every_trial': 0})

    def test_empty_answer_is_incomplete(self):
        for text in ('', '  \n'):
            with self.subTest(text=text):
                self.assertEqual(grade('held-latest', answer(text)), ('incomplete', 'no answer'))

    def test_summary_counts_each_outcome_per_strategy(self):
        recorded = {'answers': {
            'notes': {'held-correction': [answer('We use RabbitMQ.', seed) for seed in (1, 2)],
                      'held-latest': [answer('Mateo.', 1), answer('Mateo reviews it.', 2)]},
            'recent': {'held-latest': [answer('Mateo.', 1), answer('', 2)],
                       'held-buried': [answer("The conversation doesn't mention it.", 1),
                                       answer('The gateway allows 200.', 2)]}}}
        self.assertEqual(summarize(recorded), {
            'notes': {'pass': 2, 'fail': 2, 'incomplete': 0, 'said_missing': 0, 'stale_as_current': 2,
                      'cases_passed_every_trial': 1},
            'recent': {'pass': 2, 'fail': 1, 'incomplete': 1, 'said_missing': 1, 'stale_as_current': 0,
                       'cases_passed_every_trial': 0}})


class ClientTest(unittest.TestCase):
    def test_non_pinned_digest_is_refused_before_any_chat_request(self):
        with FakeOllama(digest=OTHER) as fake:
            client = client_for(fake.host)
            with self.assertRaises(PinError) as caught:
                client.answer([{'role': 'user', 'content': 'Hi'}], [], num_ctx=384, num_predict=96, seed=1)
        self.assertEqual(str(caught.exception),
                         f'Ollama at {fake.host} has gemma4:e2b with digest {OTHER}, but the pinned build is {PINNED}: '
                         'the tag has moved (`ollama pull gemma4:e2b` fetches whatever it points to today), and '
                         'answers from a new build need a deliberate change of answer-model.json and a new '
                         'recording; no chat request was sent')
        self.assertEqual([(m, p) for m, p, _ in fake.requests], [('GET', '/api/version'), ('GET', '/api/tags')])

    def test_model_that_is_not_pulled_is_refused_before_any_chat_request(self):
        with FakeOllama(tags=('llama3:8b',)) as fake:
            with self.assertRaises(PinError) as caught:
                client_for(fake.host).answer([{'role': 'user', 'content': 'Hi'}], [], 384, 96, 1)
        self.assertEqual(str(caught.exception),
                         f'Ollama at {fake.host} has no gemma4:e2b: run `ollama pull gemma4:e2b`, then check that '
                         'the ID column of `ollama list` starts with b37049369adf, the pinned build')
        self.assertEqual(fake.chats(), [])

    def test_server_that_is_down_gives_one_clear_message(self):
        host = f'http://127.0.0.1:{closed_port()}'
        with self.assertRaises(AnswerModelError) as caught:
            client_for(host).verify()
        self.assertEqual(str(caught.exception), f'no Ollama server answers at {host}: start it with '
                                                '`ollama serve`, or set OLLAMA_HOST to the address it listens on')

    def test_timeout_gives_one_clear_message(self):
        def slow(body, number):
            time.sleep(1.0)
            return 200, reply('late')
        with FakeOllama(chat=slow) as fake:
            with self.assertRaises(AnswerModelError) as caught:
                client_for(fake.host, timeout=0.2).answer([{'role': 'user', 'content': 'Hi'}], [], 384, 96, 1)
        self.assertEqual(str(caught.exception), f'Ollama at {fake.host} did not answer /api/chat within 0.2 s: '
                                                'check that the server is not stuck or overloaded, then run again')

    def test_http_errors_give_one_clear_message(self):
        for status, error, expected in (
                (404, "model 'gemma4:e2b' not found", 'run `ollama pull gemma4:e2b`'),
                (400, 'invalid options', 'rejected /api/chat as a bad request (invalid options)'),
                (503, 'server busy, please try again.  maximum pending requests exceeded', 'is busy (503'),
                (500, 'llama runner process has terminated', 'answered HTTP 500 to /api/chat')):
            with self.subTest(status=status), FakeOllama(chat=lambda body, n: (status, {'error': error})) as fake:
                with self.assertRaises(AnswerModelError) as caught:
                    client_for(fake.host).answer([{'role': 'user', 'content': 'Hi'}], [], 384, 96, 1)
                message = str(caught.exception)
                self.assertIn(fake.host, message)
                self.assertIn(expected, message)
                self.assertNotIn('\n', message)

    def test_omitted_zero_counts_read_as_zero(self):
        with FakeOllama(chat=lambda body, n: (200, reply('', done_reason='length'))) as fake:
            got = client_for(fake.host).answer([{'role': 'user', 'content': 'Hi'}], [], 384, 96, 4)
        self.assertEqual(got, {'seed': 4, 'answer': '', 'tool_calls': [], 'done_reason': 'length',
                               'prompt_tokens': 0, 'answer_tokens': 0})

    def test_tests_reach_no_host_but_127_0_0_1(self):
        session = requests.Session()
        for url in ('http://localhost:11434/api/version', 'http://192.0.2.1:11434/api/version'):
            with self.subTest(url=url), self.assertRaises(AssertionError) as caught:
                session.get(url, timeout=TIMEOUT)
            self.assertIn('tests talk only to 127.0.0.1', str(caught.exception))
        # A client built without a host reads OLLAMA_HOST, which setUpModule set to a closed loopback port.
        self.assertTrue(AnswerModel(load_model()).host.startswith('http://127.0.0.1:'))

    def test_ollama_host_is_read_as_the_official_python_client_reads_it(self):
        # Only parsed: no test contacts anything but 127.0.0.1.
        for value, expected in ((None, 'http://127.0.0.1:11434'), ('', 'http://127.0.0.1:11434'),
                                ('1.2.3.4', 'http://1.2.3.4:11434'), (':56789', 'http://127.0.0.1:56789'),
                                ('1.2.3.4:56789', 'http://1.2.3.4:56789'), ('localhost', 'http://localhost:11434'),
                                ('http://example.com', 'http://example.com:80'),
                                ('https://example.com', 'https://example.com:443'),
                                ('https://example.com:56789', 'https://example.com:56789'),
                                ('example.com/', 'http://example.com:11434'),
                                ('http://127.0.0.1:11434/', 'http://127.0.0.1:11434'),
                                ('example.com:56789/path/', 'http://example.com:56789/path'),
                                ('[0001:002:003:0004::1]:56789', 'http://[0001:002:003:0004::1]:56789'),
                                ('https://[0001:002:003:0004::1]', 'https://[0001:002:003:0004::1]:443')):
            with self.subTest(value=value):
                self.assertEqual(ollama_host(value), expected)

    def test_unspecified_bind_address_in_ollama_host_means_loopback(self):
        for value, expected in (('0.0.0.0', 'http://127.0.0.1:11434'), ('0.0.0.0:11434', 'http://127.0.0.1:11434'),
                                ('http://0.0.0.0:8080', 'http://127.0.0.1:8080'), ('::', 'http://[::1]:11434'),
                                ('[::]', 'http://[::1]:11434'), ('[::]:56789', 'http://[::1]:56789'),
                                ('https://[::]', 'https://[::1]:443')):
            with self.subTest(value=value):
                self.assertEqual(ollama_host(value), expected)

    def test_unreadable_ollama_host_gives_one_clear_message(self):
        for value, reason in (('localhost:port', "Port could not be cast to integer value as 'port'"),
                              ('[::', 'Invalid IPv6 URL')):
            with self.subTest(value=value), self.assertRaises(AnswerModelError) as caught:
                ollama_host(value)
            self.assertEqual(str(caught.exception), f'OLLAMA_HOST={value!r} cannot be read as an address '
                                                    f'({reason}): set it like http://127.0.0.1:11434')

    def test_unfinished_reply_is_not_an_answer(self):
        with FakeOllama(chat=lambda body, n: (200, unfinished('the the the'))) as fake:
            with self.assertRaises(AnswerModelError) as caught:
                client_for(fake.host).answer([{'role': 'user', 'content': 'Hi'}], [], 384, 96, 1)
        self.assertEqual(str(caught.exception), f'Ollama at {fake.host} stopped before finishing the reply (done '
                                                'is false), so nothing from it is kept: run again, and read the '
                                                'server log if it happens again')

    def test_thinking_is_not_taken_for_the_answer(self):
        with FakeOllama(chat=lambda body, n: (200, reply('Mateo.', 20, 2, thinking='Mateo or Ana?'))) as fake:
            got = client_for(fake.host).answer([{'role': 'user', 'content': 'Hi'}], [], 384, 96, 1)
        self.assertEqual(got, {'seed': 1, 'answer': 'Mateo.', 'tool_calls': [], 'done_reason': 'stop',
                               'prompt_tokens': 20, 'answer_tokens': 2})

    def test_loaded_context_is_read_from_api_ps_where_reported(self):
        for context_length, expected in ((LOADED_CONTEXT, LOADED_CONTEXT), (None, None), (0, None)):
            with self.subTest(context_length=context_length), FakeOllama(context_length=context_length) as fake:
                client = client_for(fake.host)
                self.assertIsNone(client.loaded_context_length())  # nothing is loaded before a chat
                client.answer([{'role': 'user', 'content': 'Hi'}], [], 384, 96, 1)
                self.assertEqual(client.loaded_context_length(), expected)

    def test_versions_that_leave_cached_prompt_tokens_uncounted(self):
        for version, expected in (('0.30.0', True), ('0.30.0-rc5', True), ('0.1.48', True), ('0.1.32', True),
                                  ('0.30.1', False), ('0.1.49', False), ('0.29.9', False), ('0.32.14', False),
                                  ('0.0.0', False), ('unknown', False)):
            with self.subTest(version=version):
                self.assertEqual(answer_model.undercounts_cached_prompt(version), expected)


class RecordTest(unittest.TestCase):
    def setUp(self):
        folder = tempfile.TemporaryDirectory()
        self.addCleanup(folder.cleanup)
        self.folder = Path(folder.name)
        self.result = self.folder / 'answer-result.json'
        self.grades = self.folder / 'answer-grades.json'

    def run_main(self, argv: list[str], host: str | None = None, cases: Path = HERE / 'cases.json',
                 folder: Path | None = None, client: AnswerModel | None = None):
        """answer_check.main writing into folder (default: this test's folder); (exit code, stdout, stderr)."""
        folder = folder if folder is not None else self.folder
        out, err = io.StringIO(), io.StringIO()
        client = client if client is not None else client_for(host) if host else None
        code = answer_check.main(argv, cases_path=cases, result_path=folder / 'answer-result.json',
                                 grades_path=folder / 'answer-grades.json', client=client, out=out, err=err)
        return code, out.getvalue(), err.getvalue()

    def uninterrupted(self) -> bytes:
        """The recording one run against steady_reply writes, made in a folder of its own."""
        folder = self.folder / 'uninterrupted'
        folder.mkdir()
        with FakeOllama(chat=steady_reply) as fake:
            code, out, err = self.run_main(['record'], fake.host, folder=folder)
        self.assertEqual(code, 0, err)
        return (folder / 'answer-result.json').read_bytes()

    def fail_at(self, number: int, **fake_options) -> str:
        """Record until call number fails with a 503, leaving its answers in the partial file; stderr."""
        def failing(body, n):
            return (503, {'error': 'server busy'}) if n == number else steady_reply(body, n)
        with FakeOllama(chat=failing, **fake_options) as fake:
            code, out, err = self.run_main(['record'], fake.host)
        self.assertEqual((code, len(fake.chats())), (2, number), err)
        return err

    def partial(self) -> dict:
        return json.loads((self.folder / 'answer-result.partial.json').read_text())

    def expected_chats(self) -> list[dict]:
        """Every body record must send, in order, from the real strategies, cases and counter."""
        bodies = []
        for strategy in STRATEGIES.values():
            for case in held_out_cases():
                messages = strategy(case, count_request)['messages']
                for seed in (1, 2, 3, 4, 5):
                    bodies.append({'model': 'gemma4:e2b', 'messages': messages, 'stream': False, 'think': False,
                                   'options': {'temperature': 1.0, 'top_k': 64, 'top_p': 0.95, 'seed': seed,
                                               'num_ctx': 384, 'num_predict': 96}})
        return bodies

    def test_record_sends_the_pinned_request_for_every_strategy_case_and_seed(self):
        with FakeOllama() as fake:
            code, out, err = self.run_main(['record'], fake.host)
        self.assertEqual(code, 0, err)
        # The loaded context is asked for once, after the first answer.
        self.assertEqual([(m, p) for m, p, _ in fake.requests],
                         [('GET', '/api/version'), ('GET', '/api/tags'), ('POST', '/api/chat'), ('GET', '/api/ps')]
                         + [('POST', '/api/chat')] * 119)
        self.assertEqual(fake.chats(), self.expected_chats())
        calls = [line for line in err.splitlines() if line.startswith('call ')]
        self.assertEqual(len(calls), 120)
        for number, line in enumerate(calls, 1):
            self.assertRegex(line, rf'^call {number} of 120: \S+ held-\S+ seed \d: \d+\.\d s, '
                                   r'about (\d+ min )?\d+ s left$')
        self.assertTrue(calls[-1].startswith('call 120 of 120: hybrid held-buried seed 5: '), calls[-1])
        self.assertTrue(calls[-1].endswith(', about 0 s left'), calls[-1])
        self.assertIn(f'the server loaded gemma4:e2b with a context of {LOADED_CONTEXT} tokens; num_ctx 384 only '
                      'decides which old messages it would drop', err)
        self.assertEqual(sorted(p.name for p in self.folder.iterdir()), ['answer-grades.json', 'answer-result.json'])
        recorded = json.loads(self.result.read_text())
        self.assertEqual(recorded['model'], {**load_model(), 'ollama_version': SERVER_VERSION,
                                             'loaded_context_length': LOADED_CONTEXT})
        self.assertEqual(list(recorded['answers']), ['recent', 'relevant', 'notes', 'hybrid'])
        flat = [a for cases in recorded['answers'].values() for answers in cases.values() for a in answers]
        sent = [raw for _, path, raw in fake.requests if path == '/api/chat']
        for number, (a, raw, body) in enumerate(zip(flat, sent, fake.chats()), 1):
            with self.subTest(call=number):
                self.assertEqual(a['answer'], f'answer {number}')
                self.assertEqual(a['request_sha256'], hashlib.sha256(raw).hexdigest())
                self.assertEqual(a['input_tokens'], count_request(body['messages']))
        grades = json.loads(self.grades.read_text())
        self.assertEqual((grades['answers_recorded'], grades['prompt_token_mismatches'],
                          grades['outdated_requests']), (120, [], []))

    def test_prompt_token_mismatch_is_reported_apart_from_the_grades(self):
        def truncating(body, number):
            status, payload = counted_reply(body, number)
            if number == 7:  # recent, held-old-decision, seed 2: the server cut the prompt
                payload['prompt_eval_count'] -= 7
            return status, payload
        with FakeOllama(chat=truncating) as fake:
            code, out, err = self.run_main(['record'], fake.host)
        self.assertEqual(code, 0, err)
        counted = count_request(fake.chats()[6]['messages'])
        grades = json.loads(self.grades.read_text())
        self.assertEqual(grades['prompt_token_mismatches'], [
            {'strategy': 'recent', 'case': 'held-old-decision', 'seed': 2,
             'prompt_tokens': counted - 7, 'input_tokens': counted, 'probably_cache_accounting': False}])
        self.assertIn(f'  recent held-old-decision seed 2: server read {counted - 7} tokens, '
                      f'the lab counted {counted}\n', out)

    def test_version_that_leaves_cached_tokens_out_is_named_before_the_first_call_and_marked(self):
        def cached(body, number):
            status, payload = steady_reply(body, number)
            if body['options']['seed'] > 1:  # the same prompt again: all but its last token come from the cache
                payload['prompt_eval_count'] = 1
            return status, payload
        with FakeOllama(chat=cached, version='0.30.0') as fake:
            code, out, err = self.run_main(['record'], fake.host)
        self.assertEqual(code, 0, err)
        lines = err.splitlines()
        note = ('note: Ollama 0.30.0 leaves cached prompt tokens out of prompt_eval_count, so the second and later '
                'seeds of each request will show as prompt-token mismatches; grading marks them so.')
        self.assertLess(lines.index(note), next(i for i, line in enumerate(lines) if line.startswith('call 1 ')))
        mismatches = json.loads(self.grades.read_text())['prompt_token_mismatches']
        self.assertEqual(len(mismatches), 96)
        self.assertTrue(all(m['probably_cache_accounting'] and m['seed'] > 1 for m in mismatches))
        self.assertEqual(out.count('(probably the accounting of Ollama 0.30.0, which leaves cached prompt tokens '
                                   'out)'), 96)

    def test_unfinished_reply_fails_the_call_and_nothing_from_it_is_kept(self):
        def runaway(body, number):
            return (200, unfinished('RabbitMQ RabbitMQ RabbitMQ')) if number == 7 else steady_reply(body, number)
        with FakeOllama(chat=runaway) as fake:
            code, out, err = self.run_main(['record'], fake.host)
        self.assertEqual((code, out, len(fake.chats())), (2, '', 7))
        self.assertEqual(err.splitlines()[-1],
                         f'answer_check.py: call 7 of 120 (recent held-old-decision seed 2): Ollama at {fake.host} '
                         'stopped before finishing the reply (done is false), so nothing from it is kept: run again, '
                         'and read the server log if it happens again; the 6 answers so far are kept in '
                         'answer-result.partial.json')
        self.assertFalse(self.result.exists())
        kept = self.partial()['answers']['recent']
        self.assertEqual({case: [a['seed'] for a in answers] for case, answers in kept.items()},
                         {'held-latest': [1, 2, 3, 4, 5], 'held-old-decision': [1]})
        self.assertNotIn('RabbitMQ', json.dumps(kept))

    def test_cut_off_answers_are_listed_and_counted_and_their_verdicts_stand(self):
        def answers(cut_off: set):
            def chat(body, number):
                status, payload = steady_reply(body, number)
                if number == 3:  # recent held-latest seed 3 names the reviewer before it is cut off
                    payload['message']['content'] = 'Mateo reviews the pricing page, and'
                payload['done_reason'] = 'length' if number in cut_off else 'stop'
                return status, payload
            return chat
        graded = {}
        for name, cut_off in (('none cut off', set()), ('three cut off', {3, 40, 41})):
            folder = self.folder / name
            folder.mkdir()
            with FakeOllama(chat=answers(cut_off)) as fake:
                code, out, err = self.run_main(['record'], fake.host, folder=folder)
            self.assertEqual(code, 0, err)
            graded[name] = json.loads((folder / 'answer-grades.json').read_text())
        grades = graded['three cut off']
        self.assertEqual(grades['cut_off_answers'], [{'strategy': 'recent', 'case': 'held-latest', 'seed': 3},
                                                     {'strategy': 'relevant', 'case': 'held-old-decision', 'seed': 5},
                                                     {'strategy': 'relevant', 'case': 'held-correction', 'seed': 1}])
        self.assertEqual(grades['cut_off_per_strategy'], {'recent': 1, 'relevant': 2, 'notes': 0, 'hybrid': 0})
        self.assertEqual(graded['none cut off']['cut_off_per_strategy'],
                         {'recent': 0, 'relevant': 0, 'notes': 0, 'hybrid': 0})
        self.assertEqual(grades['graded']['recent']['held-latest'][2],
                         {'seed': 3, 'verdict': 'pass', 'reason': 'every required fact'})
        for field in ('summary', 'graded'):
            self.assertEqual(grades[field], graded['none cut off'][field])
        self.assertIn('\nCut off at num_predict (graded as they stand): recent 1, relevant 2, notes 0, hybrid 0\n', out)

    def test_loaded_context_is_left_out_where_the_server_reports_none(self):
        with FakeOllama(context_length=None) as fake:
            code, out, err = self.run_main(['record'], fake.host)
        self.assertEqual(code, 0, err)
        self.assertEqual(json.loads(self.result.read_text())['model'],
                         {**load_model(), 'ollama_version': SERVER_VERSION})
        self.assertNotIn('the server loaded', err)

    def test_failing_api_ps_neither_loses_the_first_answer_nor_stops_the_recording(self):
        with FakeOllama(ps_status=500) as fake:
            code, out, err = self.run_main(['record'], fake.host)
        self.assertEqual(code, 0, err)
        self.assertEqual(len(fake.chats()), 120)
        self.assertEqual(json.loads(self.result.read_text())['model'],
                         {**load_model(), 'ollama_version': SERVER_VERSION})
        self.assertIn('the server did not say what context it loaded the model with (', err)
        self.assertIn('); recording goes on\n', err)

    def test_server_error_halfway_leaves_the_recording_byte_identical(self):
        previous = b'{"model": {}, "answers": {}}\n  previous recording, kept byte for byte \xc3\xa9\n'
        self.result.write_bytes(previous)

        def failing(body, number):
            if number == 61:
                return 503, {'error': 'server busy, please try again.  maximum pending requests exceeded'}
            return counted_reply(body, number)
        with FakeOllama(chat=failing) as fake:
            code, out, err = self.run_main(['record'], fake.host)
        self.assertEqual(code, 2)
        self.assertEqual(len(fake.chats()), 61)
        self.assertEqual(self.result.read_bytes(), previous)
        self.assertEqual(sorted(p.name for p in self.folder.iterdir()),
                         ['answer-result.json', 'answer-result.partial.json'])
        last = err.strip().splitlines()[-1]
        self.assertTrue(last.startswith(f'answer_check.py: call 61 of 120 (notes held-latest seed 1): Ollama at '
                                        f'{fake.host} is busy (503'), last)
        self.assertTrue(last.endswith('; the 60 answers so far are kept in answer-result.partial.json'), last)
        self.assertNotIn('Traceback', err)

    def test_rerun_after_a_failure_asks_only_for_the_missing_answers_and_writes_the_same_bytes(self):
        whole = self.uninterrupted()
        for number in (1, 50, 120):
            with self.subTest(failed_at=number):
                self.fail_at(number)
                with FakeOllama(chat=steady_reply) as fake:
                    code, out, err = self.run_main(['record'], fake.host)
                self.assertEqual(code, 0, err)
                self.assertEqual(fake.chats(), self.expected_chats()[number - 1:])
                if number > 1:
                    self.assertIn(f'reusing {number - 1} answers from answer-result.partial.json; asking for '
                                  f'{121 - number} of 120\n', err)
                self.assertEqual(self.result.read_bytes(), whole)
                self.assertFalse((self.folder / 'answer-result.partial.json').exists())

    def test_fresh_discards_the_kept_answers_and_asks_for_all_120(self):
        whole = self.uninterrupted()
        self.fail_at(50)
        with FakeOllama(chat=steady_reply) as fake:
            code, out, err = self.run_main(['record', '--fresh'], fake.host)
        self.assertEqual(code, 0, err)
        self.assertEqual(len(fake.chats()), 120)
        self.assertTrue(err.startswith('discarded answer-result.partial.json\n'), err)
        self.assertEqual(self.result.read_bytes(), whole)

    def test_kept_answers_from_another_server_version_are_not_reused(self):
        self.fail_at(50, version='0.99.0')
        with FakeOllama(chat=steady_reply) as fake:
            code, out, err = self.run_main(['record'], fake.host)
        self.assertEqual(code, 0, err)
        self.assertEqual(len(fake.chats()), 120)
        self.assertIn('answer-result.partial.json holds answers from digest b37049369adf on Ollama 0.99.0, not from '
                      'this server; none is reused\n', err)

    def test_ctrl_c_during_a_call_keeps_both_files_valid(self):
        previous = b'{"previous": "recording"}\n'
        self.result.write_bytes(previous)
        with FakeOllama(chat=steady_reply) as fake:
            client = client_for(fake.host)
            asked = client.answer

            def interrupted_at_10(*args, **kwargs):
                if len(fake.chats()) == 9:
                    raise KeyboardInterrupt
                return asked(*args, **kwargs)
            client.answer = interrupted_at_10
            code, out, err = self.run_main(['record'], client=client)
        self.assertEqual(code, 130)
        self.assertEqual(err.splitlines()[-1], 'answer_check.py: interrupted; answer-result.json is replaced only '
                                               'once every answer has arrived; the answers so far are kept in '
                                               'answer-result.partial.json for the next `record`')
        self.assertEqual(self.result.read_bytes(), previous)
        partial = answer_record.load_partial(self.folder / 'answer-result.partial.json')
        self.assertEqual(sum(len(a) for by_case in partial['answers'].values() for a in by_case.values()), 9)

    def test_ctrl_c_while_a_file_is_replaced_keeps_both_files_valid(self):
        # Each answer replaces the partial file once; answer-result.json is the 121st replacement.
        whole = self.uninterrupted()
        real_replace = os.replace
        for stop_at in (1, 2, 60, 121):
            with self.subTest(stop_at=stop_at):
                replaced = []

                def replace(source, target):
                    replaced.append(target)
                    if len(replaced) == stop_at:
                        raise KeyboardInterrupt
                    real_replace(source, target)
                with FakeOllama(chat=steady_reply) as fake, mock.patch.object(os, 'replace', replace):
                    code, out, err = self.run_main(['record'], fake.host)
                self.assertEqual(code, 130, err)
                self.assertFalse(self.result.exists())
                self.assertEqual([p.name for p in self.folder.iterdir() if p.name.endswith('.tmp')], [])
                partial = answer_record.load_partial(self.folder / 'answer-result.partial.json')
                kept = 0 if partial is None else sum(len(a) for by_case in partial['answers'].values()
                                                     for a in by_case.values())
                self.assertEqual(kept, min(stop_at - 1, 120))
                with FakeOllama(chat=steady_reply) as fake:
                    self.assertEqual(self.run_main(['record'], fake.host)[0], 0)
                self.assertEqual(len(fake.chats()), 120 - kept)
                self.assertEqual(self.result.read_bytes(), whole)
                self.result.unlink()

    def test_unreadable_partial_file_gives_one_line_and_fresh_recovers(self):
        partial = self.folder / 'answer-result.partial.json'
        partial.write_text('{"ollama_digest": ')
        with FakeOllama(chat=steady_reply) as fake:
            code, out, err = self.run_main(['record'], fake.host)
            self.assertEqual((code, fake.chats()), (2, []))
            self.assertTrue(err.endswith(f'answer_check.py: {partial}: not valid JSON (Expecting value: line 1 '
                                         f'column 19 (char 18)); discard it with `{PYTHON} answer_check.py record '
                                         '--fresh`\n'), err)
            self.assertEqual(self.run_main(['record', '--fresh'], fake.host)[0], 0)

    def test_non_pinned_digest_refuses_record_and_keeps_the_recording(self):
        self.result.write_text('kept\n')
        with FakeOllama(digest=OTHER) as fake:
            code, out, err = self.run_main(['record'], fake.host)
        self.assertEqual((code, fake.chats(), self.result.read_text()), (2, [], 'kept\n'))
        self.assertEqual(len(err.strip().splitlines()), 1)

    def test_server_that_is_down_prints_one_line_and_no_traceback(self):
        host = f'http://127.0.0.1:{closed_port()}'
        code, out, err = self.run_main(['record'], host)
        self.assertEqual((code, out), (2, ''))
        self.assertEqual(err, f'answer_check.py: no Ollama server answers at {host}: start it with '
                              '`ollama serve`, or set OLLAMA_HOST to the address it listens on\n')

    def test_recording_for_requests_that_changed_is_reported(self):
        with FakeOllama() as fake:
            self.assertEqual(self.run_main(['record'], fake.host)[0], 0)
        cases = json.loads((HERE / 'cases.json').read_text())
        for case in cases:
            if case['id'] == 'held-latest':
                case['current'] += ' Answer briefly.'
        changed = self.folder / 'cases.json'
        changed.write_text(json.dumps(cases))
        code, out, err = self.run_main([], cases=changed)
        self.assertEqual(code, 0, err)
        grades = json.loads(self.grades.read_text())
        self.assertEqual(grades['outdated_requests'],
                         [{'strategy': s, 'case': 'held-latest', 'seed': seed, 'reason': 'request changed'}
                          for s in STRATEGIES for seed in (1, 2, 3, 4, 5)])
        self.assertIn('20 answers recorded for requests that the current strategies', out)


def shipped_keys() -> dict:
    return json.loads((HERE / 'answer-keys.json').read_text())


def one_answer_recording(model: dict | None = None) -> dict:
    """A well-formed recording: two answers of recent to held-latest."""
    return {'model': model if model is not None else load_model(),
            'answers': {'recent': {'held-latest': [answer('Mateo.', 1), answer('Mateo reviews it.', 2)]}}}


class InputFilesTest(unittest.TestCase):
    """Every file a user can break gives exit 2 and one line naming it; nothing is written."""

    def setUp(self):
        folder = tempfile.TemporaryDirectory()
        self.addCleanup(folder.cleanup)
        self.folder = Path(folder.name)
        self.result = self.folder / 'answer-result.json'
        self.result.write_text(json.dumps({'model': load_model(), 'answers': {}}))
        self.grades = self.folder / 'answer-grades.json'

    def write(self, name: str, data) -> Path:
        path = self.folder / name
        if isinstance(data, bytes):
            path.write_bytes(data)
        else:
            path.write_text(data if isinstance(data, str) else json.dumps(data))
        return path

    def assert_one_line_error(self, expected_start: str, **paths) -> str:
        out, err = io.StringIO(), io.StringIO()
        code = answer_check.main([], **{'result_path': self.result, 'grades_path': self.grades, **paths},
                                 out=out, err=err)
        message = err.getvalue()
        self.assertEqual((code, out.getvalue()), (2, ''), message)
        self.assertTrue(message.startswith(f'answer_check.py: {expected_start}'), message)
        self.assertEqual(message.count('\n'), 1, message)
        self.assertNotIn('Traceback', message)
        self.assertFalse(self.grades.exists())
        return message

    def test_unreadable_json_files_give_exit_2_and_one_line_naming_the_file(self):
        for name, content, says in (('not-utf8.json', b'{"keys": "\xff\xfe"}', 'not UTF-8 text (byte 10'),
                                    ('nested.json', '[' * 100000, 'JSON nested too deeply'),
                                    ('broken.json', '{"keys": ', 'not valid JSON'),
                                    ('huge-int.json', '1' * 5000, 'not valid JSON')):
            for argument in ('keys_path', 'model_path', 'result_path'):
                with self.subTest(file=name, argument=argument):
                    bad = self.write(name, content)
                    self.assertIn(says, self.assert_one_line_error(f'{bad}: ', **{argument: bad}))

    def test_missing_file_and_folder_give_exit_2(self):
        missing = self.folder / 'nowhere.json'
        self.assert_one_line_error(f'{missing}: file not found', keys_path=missing)
        self.assert_one_line_error(f'{self.folder}: cannot be read', result_path=self.folder)
        unwritable = self.folder / 'no-such-folder' / 'answer-grades.json'
        self.assertIn('cannot be written', self.assert_one_line_error(f'{unwritable}: ', grades_path=unwritable))

    def test_bad_answer_model_json_gives_exit_2(self):
        pinned = load_model()
        for field, value in (('ollama_digest', 'b37049369adf'), ('ollama_tag', ''), ('seeds', [1, 2, 3, 4, True]),
                             ('trials', '5'), ('options', {'temperature': '1', 'top_k': 64, 'top_p': 0.95})):
            with self.subTest(field=field):
                bad = self.write('answer-model.json', {**pinned, field: value})
                self.assertIn(field, self.assert_one_line_error(f'{bad}: ', model_path=bad))

    def test_answer_model_main_exits_2_with_one_line(self):
        err = io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            code = answer_model.main([])  # OLLAMA_HOST is a closed loopback port for every test
        self.assertEqual(code, 2)
        self.assertTrue(err.getvalue().startswith('answer_model.py: no Ollama server answers at http://127.0.0.1:'))
        self.assertEqual(err.getvalue().count('\n'), 1)

    def test_usage_errors_exit_2(self):
        for module, argv in ((answer_check, ['grade']), (answer_check, ['record', 'again']), (answer_check, ['--fresh']),
                             (answer_model, ['--host'])):
            with self.subTest(module=module.__name__, argv=argv), contextlib.redirect_stderr(io.StringIO()):
                with self.assertRaises(SystemExit) as caught:
                    module.main(argv)
                self.assertEqual(caught.exception.code, 2)


class Rejecting(unittest.TestCase):
    """Base for tests of a loader that must refuse a file with one line starting with the file's path."""

    def rejection(self, loader, file_name: str, data) -> str:
        with tempfile.TemporaryDirectory() as folder:
            path = Path(folder) / file_name
            path.write_text(json.dumps(data))
            with self.assertRaises(AnswerCheckError) as caught:
                loader(path)
        message = str(caught.exception)
        self.assertTrue(message.startswith(f'{path}: '), message)
        self.assertNotIn('\n', message)
        return message


class KeysValidationTest(Rejecting):
    def load(self, keys: dict) -> str:
        return self.rejection(load_keys, 'answer-keys.json', keys)

    def test_key_fields_must_be_lists_of_regex_strings(self):
        for case_id, kind, value, expected in (
                ('held-latest', 'must', 'mateo', 'keys.held-latest.must must be a non-empty list of strings, '
                                                 'got "mateo"'),
                ('held-latest', 'must', [], 'keys.held-latest.must must be a non-empty list of strings, got []'),
                ('held-buried', 'must', [200], 'keys.held-buried.must must be a non-empty list of strings'),
                ('held-correction', 'stale', 'rabbitmq', 'keys.held-correction.stale must be a list of strings'),
                ('held-correction', 'stale', None, 'keys.held-correction.stale must be a list of strings, got null'),
                ('held-correction', 'stale', ['rabbit(mq'], "keys.held-correction.stale[0] 'rabbit(mq' is not a "
                                                            'valid regular expression (missing ), unterminated')):
            with self.subTest(case=case_id, kind=kind, value=value):
                keys = shipped_keys()
                keys['keys'][case_id][kind] = value
                self.assertIn(expected, self.load(keys))

    def test_keys_must_be_exactly_the_held_out_cases(self):
        keys = shipped_keys()
        del keys['keys']['held-buried']
        keys['keys']['dev-latest'] = {'must': ['mateo'], 'stale': []}
        self.assertIn("missing ['held-buried'], not held-out ['dev-latest']", self.load(keys))
        keys = shipped_keys()
        keys['keys']['held-latest']['also'] = []
        self.assertIn('keys.held-latest must have exactly "must" and "stale"', self.load(keys))
        self.assertIn('expected {"keys"', self.load({'keys': ['held-latest']}))

    def test_record_refuses_bad_keys_before_any_request(self):
        with tempfile.TemporaryDirectory() as folder:
            keys = shipped_keys()
            keys['keys']['held-latest']['must'] = 'mateo'
            path = Path(folder) / 'answer-keys.json'
            path.write_text(json.dumps(keys))
            err = io.StringIO()
            with FakeOllama() as fake:
                code = answer_check.main(['record'], keys_path=path, result_path=Path(folder) / 'result.json',
                                         grades_path=Path(folder) / 'grades.json', client=client_for(fake.host),
                                         out=io.StringIO(), err=err)
            self.assertEqual(sorted(p.name for p in Path(folder).iterdir()), ['answer-keys.json'])
        self.assertEqual((code, fake.requests), (2, []))
        self.assertIn('keys.held-latest.must must be a non-empty list of strings', err.getvalue())


class RecordingValidationTest(Rejecting):
    def load(self, recorded: dict) -> str:
        return self.rejection(load_recording, 'answer-result.json', recorded)

    def test_a_well_formed_recording_loads(self):
        recorded = one_answer_recording()
        recorded['answers']['recent']['held-latest'][1].update(
            done_reason=None, tool_calls=[{'function': {'name': 'lookup', 'arguments': {}}}])
        with tempfile.TemporaryDirectory() as folder:
            path = Path(folder) / 'answer-result.json'
            path.write_text(json.dumps(recorded))
            self.assertEqual(load_recording(path), recorded)

    def test_every_answer_field_has_its_type_checked(self):
        where = 'answers.recent.held-latest[1]'
        for field, value, expected in (
                ('seed', [1], 'seed: must be an integer, got [1]'),
                ('seed', True, 'seed: must be an integer, got true'),
                ('answer', None, 'answer: must be a string, got null'),
                ('tool_calls', None, 'tool_calls: must be a list of objects, got null'),
                ('tool_calls', ['lookup'], 'tool_calls: must be a list of objects, got ["lookup"]'),
                ('done_reason', 0, 'done_reason: must be a string or null, got 0'),
                ('prompt_tokens', -1, 'prompt_tokens: must be a non-negative integer, got -1'),
                ('answer_tokens', 9.0, 'answer_tokens: must be a non-negative integer, got 9.0'),
                ('input_tokens', '50', 'input_tokens: must be a non-negative integer, got "50"'),
                ('request_sha256', 'abc', 'request_sha256: must be 64 lowercase hex digits, got "abc"'),
                ('request_sha256', 'A' * 64, 'request_sha256: must be 64 lowercase hex digits')):
            with self.subTest(field=field, value=value):
                recorded = one_answer_recording()
                recorded['answers']['recent']['held-latest'][1][field] = value
                self.assertIn(f'{where}.{expected}', self.load(recorded))

    def test_strategies_cases_and_answer_lists_are_checked(self):
        for name, change, expected in (
                ('unknown strategy', lambda a: a.update(newest=a.pop('recent')),
                 'answers.newest: not a strategy in strategies.py (recent, relevant, notes, hybrid)'),
                ('development case', lambda a: a['recent'].update({'dev-latest': a['recent'].pop('held-latest')}),
                 'answers.recent.dev-latest: not a held-out case id'),
                ('answers not a list', lambda a: a['recent'].update({'held-latest': {'seed': 1}}),
                 'answers.recent.held-latest must be a non-empty list, got {"seed": 1}'),
                ('no answers', lambda a: a['recent'].update({'held-latest': []}),
                 'answers.recent.held-latest must be a non-empty list, got []'),
                ('missing field', lambda a: a['recent']['held-latest'][0].pop('input_tokens'),
                 "answers.recent.held-latest[0]: fields must be exactly"),
                ('extra field', lambda a: a['recent']['held-latest'][0].update(thinking=''),
                 "unexpected ['thinking']"),
                ('answer not an object', lambda a: a['recent']['held-latest'].append('Mateo.'),
                 'answers.recent.held-latest[2]: must be an object')):
            with self.subTest(name):
                recorded = one_answer_recording()
                change(recorded['answers'])
                self.assertIn(expected, self.load(recorded))

    def test_model_block_must_name_the_server_version(self):
        model = load_model()
        del model['ollama_version']
        self.assertIn('model.ollama_version must name the server', self.load(one_answer_recording(model)))

    def test_loaded_context_length_must_be_a_positive_integer(self):
        for value, got in ((0, '0'), (4096.0, '4096.0'), ('4096', '"4096"'), (True, 'true'), (None, 'null')):
            with self.subTest(value=value):
                model = {**load_model(), 'loaded_context_length': value}
                self.assertIn(f'model.loaded_context_length must be a positive integer, got {got}',
                              self.load(one_answer_recording(model)))

    def test_malformed_answer_exits_2_without_a_traceback(self):
        recorded = one_answer_recording()
        recorded['answers']['recent']['held-latest'][0]['seed'] = [1]
        with tempfile.TemporaryDirectory() as folder:
            result = Path(folder) / 'answer-result.json'
            result.write_text(json.dumps(recorded))
            err = io.StringIO()
            code = answer_check.main([], result_path=result, grades_path=Path(folder) / 'grades.json',
                                     out=io.StringIO(), err=err)
        self.assertEqual(code, 2)
        self.assertEqual(err.getvalue(), f'answer_check.py: {result}: answers.recent.held-latest[0].seed: '
                                         f'must be an integer, got [1]; record again with `{PYTHON} answer_check.py '
                                         'record`, or restore it from version control\n')


class PinnedBuildTest(unittest.TestCase):
    def grade_main(self, model: dict):
        with tempfile.TemporaryDirectory() as folder:
            result, grades = Path(folder) / 'answer-result.json', Path(folder) / 'answer-grades.json'
            result.write_text(json.dumps(one_answer_recording(model)))
            out, err = io.StringIO(), io.StringIO()
            code = answer_check.main([], result_path=result, grades_path=grades, out=out, err=err)
            written = json.loads(grades.read_text()) if grades.exists() else None
        return code, out.getvalue(), err.getvalue(), written, result

    def test_recording_from_another_build_is_refused_not_graded(self):
        pinned = load_model()
        for changed, model in (('ollama_digest', {**pinned, 'ollama_digest': OTHER}),
                               ('options', {**pinned, 'options': {**pinned['options'], 'temperature': 0.0}}),
                               ('seeds', {**pinned, 'seeds': [1.0, 2, 3, 4, 5]}),
                               ('license', {k: v for k, v in pinned.items() if k != 'license'}),
                               ('quantization, think', {**pinned, 'quantization': 'Q8_0', 'think': None})):
            with self.subTest(changed=changed):
                code, out, err, written, result = self.grade_main(model)
                self.assertEqual((code, out, written), (2, '', None))
                self.assertEqual(err, f'answer_check.py: {result}: recorded with a build other than the one '
                                      f'{HERE / "answer-model.json"} pins ({changed} differ), so its answers are '
                                      f'not graded; record again with `{PYTHON} answer_check.py record`, or restore '
                                      'it from version control\n')

    def test_another_server_version_with_the_pinned_build_is_graded(self):
        code, out, err, written, _ = self.grade_main({**load_model(), 'ollama_version': SERVER_VERSION})
        self.assertEqual(code, 0, err)
        self.assertEqual(written['model']['ollama_version'], SERVER_VERSION)
        self.assertEqual(written['summary']['recent']['pass'], 2)

    def test_the_context_the_server_loaded_is_graded_not_refused(self):
        model = {**load_model(), 'ollama_version': SERVER_VERSION, 'loaded_context_length': LOADED_CONTEXT}
        code, out, err, written, _ = self.grade_main(model)
        self.assertEqual(code, 0, err)
        self.assertEqual(written['model'], model)


class ShippedFilesTest(unittest.TestCase):
    def test_pinned_build_is_the_one_the_original_recorded(self):
        self.assertEqual(load_model(), {
            'checked_on': '2026-10-20', 'publisher_model': 'google/gemma-4-E2B-it', 'license': 'Apache-2.0',
            'ollama_tag': 'gemma4:e2b', 'ollama_digest': PINNED, 'ollama_version': '0.32.14',
            'quantization': 'Q4_K_M', 'parameters': '4.6B total (E2B: about 2B effective)',
            'options': {'temperature': 1.0, 'top_k': 64, 'top_p': 0.95}, 'think': False, 'trials': 5,
            'seeds': [1, 2, 3, 4, 5]})

    def test_shipped_recording_was_made_with_the_pinned_build(self):
        recorded = answer_check.load_recording()
        pinned = load_model()
        self.assertEqual({k: v for k, v in recorded['model'].items() if k != 'ollama_version'},
                         {k: v for k, v in pinned.items() if k != 'ollama_version'})

    def test_shipped_grades_match_a_fresh_grading(self):
        with tempfile.TemporaryDirectory() as folder:
            fresh = answer_check.grade_files(HERE / 'cases.json', HERE / 'answer-keys.json',
                                             HERE / 'answer-model.json', HERE / 'answer-result.json',
                                             Path(folder) / 'answer-grades.json')
        self.assertEqual(json.loads((HERE / 'answer-grades.json').read_text()), fresh)

    def test_the_partial_file_record_keeps_is_git_ignored_and_named_in_the_readme(self):
        name = answer_record.partial_path(answer_check.RESULT_PATH).name
        self.assertEqual(name, 'answer-result.partial.json')
        self.assertIn(name, (HERE / '.gitignore').read_text().splitlines())
        readme = (HERE / 'README.md').read_text(encoding='utf-8')
        self.assertIn(f'`{name}`', readme)
        self.assertIn('python answer_check.py record --fresh', readme)

    def test_thirty_of_the_120_requests_repeat_another_strategys_and_each_is_still_a_call_of_its_own(self):
        plan = answer_check.planned_requests(held_out_cases(), load_model(), STRATEGIES, count_request)
        shas = [answer_model.request_sha256(item['body']) for item in plan]
        self.assertEqual((len(shas), len(set(shas))), (120, 90))
        self.assertEqual(len({answer_record.plan_key(item) for item in plan}), 120)

    def test_nothing_recorded_says_so_and_shows_how_to_record(self):
        with tempfile.TemporaryDirectory() as folder:
            result = Path(folder) / 'answer-result.json'
            result.write_text(json.dumps({'model': load_model(), 'answers': {}}))
            out = io.StringIO()
            with contextlib.redirect_stderr(io.StringIO()):
                code = answer_check.main([], result_path=result, grades_path=Path(folder) / 'grades.json', out=out)
        self.assertEqual(code, 0)
        self.assertTrue(out.getvalue().startswith('Nothing is recorded: answer-result.json holds the pinned '
                                                  'model block and no answers.\n'))
        self.assertIn(f'run `{PYTHON} answer_check.py record` (120 calls)', out.getvalue())


if __name__ == '__main__':
    unittest.main()
