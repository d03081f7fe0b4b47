"""Tests for the lab's Ollama client (ollama_client.py).

    .venv/bin/python -m unittest -v test_ollama_client.py

They run the real requests-based client against the servers of test_support.py on 127.0.0.1: the fake Ollama,
another kind of server, and one that sends its reply a byte at a time or cuts it off. No model is called. Every HTTP
request in these tests is checked to go to 127.0.0.1, and OLLAMA_HOST points at a closed loopback port, so no test
can reach a real server.
"""
import gzip
import json
import time
import unittest
from unittest import mock

import requests

from answer_model import chat_body, load_model
import ollama_client
from ollama_client import OllamaClient, OllamaError, ollama_host
from test_support import (FakeOllama, LOADED_CONTEXT, NotOllama, OTHER, PINNED, REQUEST_TIMEOUT, RawServer, client_for,
                          closed_port, http_reply, ollama_command, only_loopback as setUpModule, reply, unfinished)

HI = [{'role': 'user', 'content': 'Hi'}]


def hi(seed: int = 1) -> dict:
    """The /api/chat body that asks the pinned model Hi, as record plans it."""
    return chat_body(load_model(), HI, 384, 96, seed)



class ClientTest(unittest.TestCase):
    def test_non_pinned_digest_is_refused_before_any_chat_request(self):
        with FakeOllama(digest=OTHER) as fake:
            client = client_for(fake.host)
            with self.assertRaises(OllamaError) as caught:
                client.answer(hi())
        self.assertEqual(str(caught.exception),
                         f'Ollama at {fake.host} has gemma4:e2b with digest {OTHER}, but the pinned build is {PINNED}: '
                         'the tag has moved (`ollama pull gemma4:e2b` fetches whatever it points to today), and '
                         'answers from a new build need a deliberate change of the pin file and a new '
                         'recording; no chat request was sent')
        self.assertEqual([(m, p) for m, p, _ in fake.requests], [('GET', '/api/version'), ('GET', '/api/tags')])

    def test_model_that_is_not_pulled_is_refused_before_any_chat_request(self):
        with FakeOllama(tags=('llama3:8b',)) as fake:
            with self.assertRaises(OllamaError) as caught:
                client_for(fake.host).answer(hi())
        self.assertEqual(str(caught.exception),
                         f'Ollama at {fake.host} has no gemma4:e2b: run `ollama pull gemma4:e2b`, then check that '
                         'the ID column of `ollama list` starts with b37049369adf, the pinned build')
        self.assertEqual(fake.chats(), [])

    def test_machine_without_ollama_is_told_to_install_it_before_serving(self):
        host = f'http://127.0.0.1:{closed_port()}'
        with ollama_command(installed=False), self.assertRaises(OllamaError) as caught:
            client_for(host).verify()
        self.assertEqual(str(caught.exception),
                         f'no Ollama server answers at {host}, and no `ollama` command is on PATH: install Ollama '
                         '(from its download page), then start it with `ollama serve`, or set OLLAMA_HOST to the '
                         'address it listens on')

    def test_server_that_answers_but_is_not_ollama_is_named_so_without_pull_advice(self):
        with NotOllama() as other, self.assertRaises(OllamaError) as caught:
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
                with self.assertRaises(OllamaError) as caught:
                    client_for(other.host).verify()
                self.assertEqual(str(caught.exception).split(', where')[0],
                                 f'the server at {other.host} is not Ollama: it answered /api/version with HTTP '
                                 f'{status} ({shown})')

    def test_error_reply_without_an_error_field_names_its_body_not_none(self):
        for status in (404, 503, 400, 500):
            with self.subTest(status=status), FakeOllama(chat=lambda body, n: (status, {})) as fake:
                with self.assertRaises(OllamaError) as caught:
                    client_for(fake.host).answer(hi())
                self.assertIn('the body "{}"', str(caught.exception))
                self.assertNotIn('None', str(caught.exception))
                self.assertNotIn('pull', str(caught.exception))

    def test_timeout_gives_one_clear_message(self):
        def slow(body, number):
            time.sleep(1.0)
            return 200, reply('late')
        with FakeOllama(chat=slow) as fake, mock.patch.object(ollama_client, 'CHAT_TIMEOUT', 0.2):
            with self.assertRaises(OllamaError) as caught:
                client_for(fake.host).answer(hi())
        self.assertEqual(str(caught.exception), f'Ollama at {fake.host} did not answer /api/chat within 0.2 s: '
                                                'check that the server is not stuck or overloaded, then run again')

    def test_http_errors_give_one_clear_message(self):
        for status, error, expected in (
                (404, "model 'gemma4:e2b' not found", 'run `ollama pull gemma4:e2b`'),
                (400, 'invalid options', 'rejected /api/chat as a bad request (invalid options)'),
                (503, 'server busy, please try again.  maximum pending requests exceeded', 'is busy (503'),
                (500, 'llama runner process has terminated', 'answered HTTP 500 to /api/chat')):
            with self.subTest(status=status), FakeOllama(chat=lambda body, n: (status, {'error': error})) as fake:
                with self.assertRaises(OllamaError) as caught:
                    client_for(fake.host).answer(hi())
                message = str(caught.exception)
                self.assertIn(fake.host, message)
                self.assertIn(expected, message)
                self.assertNotIn('\n', message)

    def test_omitted_zero_counts_read_as_zero(self):
        with FakeOllama(chat=lambda body, n: (200, reply('', done_reason='length'))) as fake:
            got = client_for(fake.host).answer(hi(4))
        self.assertEqual(got, {'seed': 4, 'answer': '', 'tool_calls': [], 'done_reason': 'length',
                               'prompt_tokens': 0, 'answer_tokens': 0})

    def test_tests_reach_no_host_but_127_0_0_1(self):
        session = requests.Session()
        for url in ('http://localhost:11434/api/version', 'http://192.0.2.1:11434/api/version'):
            with self.subTest(url=url), self.assertRaises(AssertionError) as caught:
                session.get(url, timeout=REQUEST_TIMEOUT)
            self.assertIn('tests talk only to 127.0.0.1', str(caught.exception))
        # A client built without a host reads OLLAMA_HOST, which setUpModule set to a closed loopback port.
        self.assertTrue(OllamaClient(load_model()).host.startswith('http://127.0.0.1:'))

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
            with self.subTest(value=value), self.assertRaises(OllamaError) as caught:
                ollama_host(value)
            self.assertEqual(str(caught.exception), f'OLLAMA_HOST={value!r} cannot be read as an address '
                                                    f'({reason}): set it like http://127.0.0.1:11434')

    def refusal(self, chat) -> tuple[str, str]:
        """(the fake server's host, the refusal of one call to it, answered as chat(body, n) answers)."""
        with FakeOllama(chat=chat) as fake, self.assertRaises(OllamaError) as caught:
            client_for(fake.host).answer(hi())
        return fake.host, str(caught.exception)

    def test_unfinished_reply_is_not_an_answer(self):
        host, message = self.refusal(lambda body, n: (200, unfinished('the the the')))
        self.assertEqual(message, f'Ollama at {host} stopped before finishing the reply (done is false), so nothing '
                                  'from it is kept: run again, and read the server log if it happens again')

    def test_thinking_is_not_taken_for_the_answer(self):
        with FakeOllama(chat=lambda body, n: (200, reply('Mateo.', 20, 2, thinking='Mateo or Ana?'))) as fake:
            got = client_for(fake.host).answer(hi())
        self.assertEqual(got, {'seed': 1, 'answer': 'Mateo.', 'tool_calls': [], 'done_reason': 'stop',
                               'prompt_tokens': 20, 'answer_tokens': 2})

    def test_loaded_context_is_read_from_api_ps_where_reported(self):
        for context_length, expected in ((LOADED_CONTEXT, LOADED_CONTEXT), (None, None), (0, None)):
            with self.subTest(context_length=context_length), FakeOllama(context_length=context_length) as fake:
                client = client_for(fake.host)
                self.assertIsNone(client.loaded_context_length())  # nothing is loaded before a chat
                client.answer(hi())
                self.assertEqual(client.loaded_context_length(), expected)

    def test_reply_field_a_recording_would_refuse_fails_the_call_naming_the_field(self):
        for field, value, wanted in (('prompt_eval_count', -5, 'a non-negative integer'),
                                     ('prompt_eval_count', None, 'a non-negative integer'),
                                     ('eval_count', 'many', 'a non-negative integer'),
                                     ('done_reason', 5, 'a string or null')):
            with self.subTest(field=field, value=value):
                with FakeOllama(chat=lambda body, n: (200, {**reply('Mateo.', 20, 2), field: value})) as fake, \
                        self.assertRaises(OllamaError) as caught:
                    client_for(fake.host).answer(hi())
                self.assertEqual(str(caught.exception), f'Ollama at {fake.host} answered /api/chat with {field} '
                                 f'{json.dumps(value)}, where an answer needs {wanted}, so nothing from it is kept: '
                                 'upgrade Ollama or read its log')
        for message, shown, wanted in (({'role': 'assistant', 'content': 'Mateo.', 'tool_calls': 'x'}, 'message.'
                                        'tool_calls "x"', 'a list of objects'),
                                       ({'role': 'assistant'}, 'message.content null', 'a string')):
            with self.subTest(message=message):
                with FakeOllama(chat=lambda body, n: (200, {**reply('Mateo.'), 'message': message})) as fake, \
                        self.assertRaises(OllamaError) as caught:
                    client_for(fake.host).answer(hi())
                self.assertIn(f'answered /api/chat with {shown}, where an answer needs {wanted}', str(caught.exception))

    def test_reply_for_another_model_than_the_pinned_tag_is_refused(self):
        host, message = self.refusal(lambda body, n: (200, {'model': 'llama3:8b', **reply('Mateo.')}))
        self.assertEqual(message, f'Ollama at {host} answered for the model "llama3:8b", not the pinned gemma4:e2b, '
                                  'so nothing from it is kept: check what serves at OLLAMA_HOST')

    def test_trickling_server_is_stopped_at_the_deadline_for_the_whole_reply(self):
        # One byte every 50 ms: no single read waits long, and the whole reply would take about 10 s.
        body = json.dumps({'model': 'gemma4:e2b', **reply('Mateo reviews the pricing page.')}).encode()
        for path, limit, call in (('/api/chat', 'CHAT_TIMEOUT', lambda client: client.answer(hi())),
                                  ('/api/version', 'CHECK_TIMEOUT', lambda client: client.server_version())):
            with self.subTest(path=path), RawServer(http_reply(body), delay=0.05) as slow, \
                    mock.patch.object(ollama_client, limit, 0.5), ollama_command(installed=False):
                client, started = client_for(slow.host), time.monotonic()
                client.version = 'checked'  # the chat is sent as after a passed check
                with self.assertRaises(OllamaError) as caught:
                    call(client)
                self.assertLess(time.monotonic() - started, 2.0)
            self.assertEqual(str(caught.exception), f'Ollama at {slow.host} did not answer {path} within 0.5 s: check '
                                                    'that the server is not stuck or overloaded, then run again')

    def test_reply_cut_off_is_named_so_not_as_a_server_to_find(self):
        for raw, detail in ((http_reply(b'{"version": "0.', length=100),
                             'Connection broken: IncompleteRead(15 bytes read, 85 more expected)'),
                            (b'', 'Connection aborted.')):
            with self.subTest(raw=raw), RawServer(raw) as broken, self.assertRaises(OllamaError) as caught:
                client_for(broken.host).verify()
            self.assertEqual(str(caught.exception), f'Ollama at {broken.host} broke off its reply to /api/version '
                                                    f'({detail}): run again, and read the server log if it happens '
                                                    'again')

    def test_a_compressed_reply_is_inflated_only_up_to_the_limit_and_refused_naming_it(self):
        # 64 MiB of zeros compress to about 64 KB; the client must stop at 4 MiB instead of inflating them all.
        bomb = gzip.compress(b'0' * (64 << 20))
        raw = (b'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Encoding: gzip\r\n'
               b'Content-Length: %d\r\n\r\n' % len(bomb)) + bomb
        for path, call in (('/api/version', lambda client: client.verify()),
                           ('/api/chat', lambda client: client.answer(hi()))):
            with self.subTest(path=path), RawServer(raw) as server, self.assertRaises(OllamaError) as caught:
                client, started = client_for(server.host), time.monotonic()
                client.version = 'checked' if path == '/api/chat' else None  # sent as after a passed check
                call(client)
            self.assertLess(time.monotonic() - started, 2.0)
            self.assertEqual(str(caught.exception), f'Ollama at {server.host} answered {path} with more than 4 MiB '
                             'once decompressed, so the reply was refused: check what serves at OLLAMA_HOST')

    def test_a_redirect_is_an_error_naming_its_target_and_never_followed(self):
        with FakeOllama() as elsewhere:
            target = f'{elsewhere.host}/api/chat'
            raw = b'HTTP/1.1 307 Temporary Redirect\r\nLocation: %s\r\nContent-Length: 0\r\n\r\n' % target.encode()
            for path, call in (('/api/chat', lambda client: client.answer(hi())),
                               ('/api/version', lambda client: client.server_version()),
                               ('/api/tags', lambda client: client.tag_digest())):
                with self.subTest(path=path), RawServer(raw) as redirecting, self.assertRaises(OllamaError) as caught:
                    client = client_for(redirecting.host)
                    client.version = 'checked'  # the chat is sent as after a passed check of this server
                    call(client)
                self.assertEqual(str(caught.exception), f'Ollama at {redirecting.host} answered {path} with HTTP 307, '
                                 f'a redirect to {target}, which the lab never follows: set OLLAMA_HOST to the '
                                 'server that answers itself')
        self.assertEqual(elsewhere.requests, [])


if __name__ == '__main__':
    unittest.main()
