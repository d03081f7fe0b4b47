"""Tests for the pinned Ollama client and the shape of a recording (answer_model.py).

    .venv/bin/python -m unittest -v test_answer_model.py

Client tests run the real requests-based client against the servers of test_support.py on 127.0.0.1: the
fake Ollama, another kind of server, and one that sends its reply a byte at a time or cuts it off. No model is
called. Every file a test writes goes to a temporary directory. Every HTTP request in these tests is checked to go
to 127.0.0.1, and OLLAMA_HOST points at a closed loopback port, so no test can reach a real server.
"""
import json
import os
from pathlib import Path
import tempfile
import time
import unittest
from unittest import mock

import requests

import answer_model
from answer_model import AnswerModel, AnswerModelError, load_model, load_recording, ollama_host
from common import python_command
from strategies import RULES
from test_support import (LOADED_CONTEXT, OTHER, PINNED, SERVER_VERSION, TIMEOUT, FakeOllama, NotOllama, RawServer,
                          Rejecting, client_for, closed_port, http_reply, ollama_command, only_loopback, reply,
                          recorded_answer as answer, run_answer_check, run_command, unfinished)

PYTHON = python_command()  # how the advice in messages starts Python: .venv/bin/python from the lab's venv
HELD_OUT = ['held-latest', 'held-old-decision', 'held-correction', 'held-pronoun', 'held-spread', 'held-buried']
REDO = f'record again with `{PYTHON} answer_check.py record`, or restore it from version control'
HI = [{'role': 'user', 'content': 'Hi'}]


def setUpModule():
    only_loopback()


class ClientTest(unittest.TestCase):
    def test_non_pinned_digest_is_refused_before_any_chat_request(self):
        with FakeOllama(digest=OTHER) as fake:
            client = client_for(fake.host)
            with self.assertRaises(AnswerModelError) as caught:
                client.answer([{'role': 'user', 'content': 'Hi'}], num_ctx=384, num_predict=96, seed=1)
        self.assertEqual(str(caught.exception),
                         f'Ollama at {fake.host} has gemma4:e2b with digest {OTHER}, but the pinned build is {PINNED}: '
                         'the tag has moved (`ollama pull gemma4:e2b` fetches whatever it points to today), and '
                         'answers from a new build need a deliberate change of the pin file and a new '
                         'recording; no chat request was sent')
        self.assertEqual([(m, p) for m, p, _ in fake.requests], [('GET', '/api/version'), ('GET', '/api/tags')])

    def test_model_that_is_not_pulled_is_refused_before_any_chat_request(self):
        with FakeOllama(tags=('llama3:8b',)) as fake:
            with self.assertRaises(AnswerModelError) as caught:
                client_for(fake.host).answer([{'role': 'user', 'content': 'Hi'}], 384, 96, 1)
        self.assertEqual(str(caught.exception),
                         f'Ollama at {fake.host} has no gemma4:e2b: run `ollama pull gemma4:e2b`, then check that '
                         'the ID column of `ollama list` starts with b37049369adf, the pinned build')
        self.assertEqual(fake.chats(), [])

    def test_machine_without_ollama_is_told_to_install_it_before_serving(self):
        host = f'http://127.0.0.1:{closed_port()}'
        with ollama_command(installed=False), self.assertRaises(AnswerModelError) as caught:
            client_for(host).verify()
        self.assertEqual(str(caught.exception),
                         f'no Ollama server answers at {host}, and no `ollama` command is on PATH: install Ollama '
                         '(from its download page), then start it with `ollama serve`, or set OLLAMA_HOST to the '
                         'address it listens on')

    def test_server_that_answers_but_is_not_ollama_is_named_so_without_pull_advice(self):
        with NotOllama() as other, self.assertRaises(AnswerModelError) as caught:
            client_for(other.host).verify()
        self.assertEqual(str(caught.exception),
                         f'the server at {other.host} is not Ollama: it answered /api/version with HTTP 404 (the body '
                         '"404 page not found"), where Ollama gives its version; set OLLAMA_HOST to the address '
                         '`ollama serve` listens on (by default http://127.0.0.1:11434)')

    def test_version_reply_without_a_version_is_not_ollama(self):
        for status, body, shown in ((200, b'{}', 'the body "{}"'),
                                    (200, b'{"version": ""}', 'the body "{"version": ""}"'),
                                    (200, b'<html>\n<p>Hi</p>\n</html>', 'the body "<html> <p>Hi</p> </html>"'),
                                    (401, b'{"error": "unauthorized"}', 'unauthorized'),
                                    (502, b'', 'an empty body')):
            with self.subTest(body=body), NotOllama(status, body) as other:
                with self.assertRaises(AnswerModelError) as caught:
                    client_for(other.host).verify()
                self.assertEqual(str(caught.exception).split(', where')[0],
                                 f'the server at {other.host} is not Ollama: it answered /api/version with HTTP '
                                 f'{status} ({shown})')

    def test_error_reply_without_an_error_field_names_its_body_not_none(self):
        for status in (404, 503, 400, 500):
            with self.subTest(status=status), FakeOllama(chat=lambda body, n: (status, {})) as fake:
                with self.assertRaises(AnswerModelError) as caught:
                    client_for(fake.host).answer([{'role': 'user', 'content': 'Hi'}], 384, 96, 1)
                self.assertIn('the body "{}"', str(caught.exception))
                self.assertNotIn('None', str(caught.exception))
                self.assertNotIn('pull', str(caught.exception))

    def test_timeout_gives_one_clear_message(self):
        def slow(body, number):
            time.sleep(1.0)
            return 200, reply('late')
        with FakeOllama(chat=slow) as fake, mock.patch.object(answer_model, 'CHAT_TIMEOUT', 0.2):
            with self.assertRaises(AnswerModelError) as caught:
                client_for(fake.host).answer([{'role': 'user', 'content': 'Hi'}], 384, 96, 1)
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
                    client_for(fake.host).answer([{'role': 'user', 'content': 'Hi'}], 384, 96, 1)
                message = str(caught.exception)
                self.assertIn(fake.host, message)
                self.assertIn(expected, message)
                self.assertNotIn('\n', message)

    def test_omitted_zero_counts_read_as_zero(self):
        with FakeOllama(chat=lambda body, n: (200, reply('', done_reason='length'))) as fake:
            got = client_for(fake.host).answer([{'role': 'user', 'content': 'Hi'}], 384, 96, 4)
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
                client_for(fake.host).answer([{'role': 'user', 'content': 'Hi'}], 384, 96, 1)
        self.assertEqual(str(caught.exception), f'Ollama at {fake.host} stopped before finishing the reply (done '
                                                'is false), so nothing from it is kept: run again, and read the '
                                                'server log if it happens again')

    def test_thinking_is_not_taken_for_the_answer(self):
        with FakeOllama(chat=lambda body, n: (200, reply('Mateo.', 20, 2, thinking='Mateo or Ana?'))) as fake:
            got = client_for(fake.host).answer([{'role': 'user', 'content': 'Hi'}], 384, 96, 1)
        self.assertEqual(got, {'seed': 1, 'answer': 'Mateo.', 'tool_calls': [], 'done_reason': 'stop',
                               'prompt_tokens': 20, 'answer_tokens': 2})

    def test_loaded_context_is_read_from_api_ps_where_reported(self):
        for context_length, expected in ((LOADED_CONTEXT, LOADED_CONTEXT), (None, None), (0, None)):
            with self.subTest(context_length=context_length), FakeOllama(context_length=context_length) as fake:
                client = client_for(fake.host)
                self.assertIsNone(client.loaded_context_length())  # nothing is loaded before a chat
                client.answer([{'role': 'user', 'content': 'Hi'}], 384, 96, 1)
                self.assertEqual(client.loaded_context_length(), expected)

    def test_versions_that_leave_cached_prompt_tokens_uncounted(self):
        for version, expected in (('0.30.0', True), ('0.30.0-rc5', True), ('0.1.48', True), ('0.1.32', True),
                                  ('0.30.1', False), ('0.1.49', False), ('0.29.9', False), ('0.32.14', False),
                                  ('0.0.0', False), ('unknown', False)):
            with self.subTest(version=version):
                self.assertEqual(answer_model.undercounts_cached_prompt(version), expected)

    def test_check_command_names_the_server_and_the_pinned_digest(self):
        with FakeOllama() as fake, mock.patch.dict(os.environ, {'OLLAMA_HOST': fake.host}):
            result = run_command(answer_model.main, [], 'answer_model.py')
        self.assertEqual(result, (0, f'Ollama {SERVER_VERSION} at {fake.host} has gemma4:e2b with the pinned digest '
                                     f'{PINNED}\n', ''))
        self.assertEqual([path for _, path, _ in fake.requests], ['/api/version', '/api/tags'])

    def test_reply_field_a_recording_would_refuse_fails_the_call_naming_the_field(self):
        for field, value, wanted in (('prompt_eval_count', -5, 'a non-negative integer'),
                                     ('prompt_eval_count', None, 'a non-negative integer'),
                                     ('eval_count', 'many', 'a non-negative integer'),
                                     ('done_reason', 5, 'a string or null')):
            with self.subTest(field=field, value=value):
                with FakeOllama(chat=lambda body, n: (200, {**reply('Mateo.', 20, 2), field: value})) as fake, \
                        self.assertRaises(AnswerModelError) as caught:
                    client_for(fake.host).answer(HI, 384, 96, 1)
                self.assertEqual(str(caught.exception), f'Ollama at {fake.host} answered /api/chat with {field} '
                                 f'{json.dumps(value)}, where an answer needs {wanted}, so nothing from it is kept: '
                                 'upgrade Ollama or read its log')
        for message, shown, wanted in (({'role': 'assistant', 'content': 'Mateo.', 'tool_calls': 'x'}, 'message.'
                                        'tool_calls "x"', 'a list of objects'),
                                       ({'role': 'assistant'}, 'message.content null', 'a string')):
            with self.subTest(message=message):
                with FakeOllama(chat=lambda body, n: (200, {**reply('Mateo.'), 'message': message})) as fake, \
                        self.assertRaises(AnswerModelError) as caught:
                    client_for(fake.host).answer(HI, 384, 96, 1)
                self.assertIn(f'answered /api/chat with {shown}, where an answer needs {wanted}', str(caught.exception))

    def test_reply_for_another_model_than_the_pinned_tag_is_refused(self):
        with FakeOllama(chat=lambda body, n: (200, {'model': 'llama3:8b', **reply('Mateo.')})) as fake:
            with self.assertRaises(AnswerModelError) as caught:
                client_for(fake.host).answer(HI, 384, 96, 1)
        self.assertEqual(str(caught.exception), f'Ollama at {fake.host} answered for the model "llama3:8b", not the '
                                                'pinned gemma4:e2b, so nothing from it is kept: check what serves at '
                                                'OLLAMA_HOST')

    def test_trickling_server_is_stopped_at_the_deadline_for_the_whole_reply(self):
        # One byte every 50 ms: no single read waits long, and the whole reply would take about 10 s.
        body = json.dumps({'model': 'gemma4:e2b', **reply('Mateo reviews the pricing page.')}).encode()
        for path, limit, call in (('/api/chat', 'CHAT_TIMEOUT', lambda client: client.answer(HI, 384, 96, 1)),
                                  ('/api/version', 'CHECK_TIMEOUT', lambda client: client.server_version())):
            with self.subTest(path=path), RawServer(http_reply(body), delay=0.05) as slow, \
                    mock.patch.object(answer_model, limit, 0.5), ollama_command(installed=False):
                client, started = client_for(slow.host), time.monotonic()
                client.version = 'checked'  # the chat is sent as after a passed check
                with self.assertRaises(AnswerModelError) as caught:
                    call(client)
                self.assertLess(time.monotonic() - started, 2.0)
            self.assertEqual(str(caught.exception), f'Ollama at {slow.host} did not answer {path} within 0.5 s: check '
                                                    'that the server is not stuck or overloaded, then run again')

    def test_reply_cut_off_is_named_so_not_as_a_server_to_find(self):
        for raw, detail in ((http_reply(b'{"version": "0.', length=100),
                             'Connection broken: IncompleteRead(15 bytes read, 85 more expected)'),
                            (b'', 'Connection aborted.')):
            with self.subTest(raw=raw), RawServer(raw) as broken, self.assertRaises(AnswerModelError) as caught:
                client_for(broken.host).verify()
            self.assertEqual(str(caught.exception), f'Ollama at {broken.host} broke off its reply to /api/version '
                                                    f'({detail}): run again, and read the server log if it happens '
                                                    'again')


def one_answer_recording(model: dict | None = None) -> dict:
    """A well-formed recording: two answers of recent to held-latest."""
    return {'model': model if model is not None else load_model(),
            'answers': {'recent': {'held-latest': [answer('Mateo.', 1), answer('Mateo reviews it.', 2)]}}}



class RecordingValidationTest(Rejecting):
    def load(self, recorded: dict) -> str:
        return self.rejection(lambda path: load_recording(path, RULES, HELD_OUT, 'recording', REDO),
                              'answer-result.json', recorded)

    def test_a_well_formed_recording_loads(self):
        recorded = one_answer_recording()
        recorded['answers']['recent']['held-latest'][1].update(
            done_reason=None, tool_calls=[{'function': {'name': 'lookup', 'arguments': {}}}])
        with tempfile.TemporaryDirectory() as folder:
            path = Path(folder) / 'answer-result.json'
            path.write_text(json.dumps(recorded))
            self.assertEqual(load_recording(path, RULES, HELD_OUT, 'recording', REDO), recorded)

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
                 'answers.newest: not a rule of this run (recent, relevant, notes, hybrid)'),
                ('development case', lambda a: a['recent'].update({'dev-latest': a['recent'].pop('held-latest')}),
                 'answers.recent.dev-latest: not one of the chosen case ids'),
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
            code, out, err = run_answer_check([], result_path=result, grades_path=Path(folder) / 'grades.json')
        self.assertEqual((code, out), (2, ''))
        self.assertEqual(err, f'answer_check.py: {result}: answers.recent.held-latest[0].seed: must be an integer, '
                              f'got [1]; record again with `{PYTHON} answer_check.py record`, or restore it from '
                              'version control\n')


if __name__ == '__main__':
    unittest.main()
