"""Tests for the OpenAI-compatible client (openai_client.py): `answer_check.py pin --api openai`, check and record.

    .venv/bin/python -m unittest -v test_openai_client.py

They run the real client, recording and grading against test_support's fake llama-server on 127.0.0.1, which writes
its JSON as llama.cpp's tools/server does at build 11434 and counts each prompt with the official Gemma template (so
the count check compares the lab's count with an independent one; those tests skip without the template). Every file
a test writes goes to a temporary directory.
"""
from datetime import date
import hashlib
import json
import os
import re
import unittest
from unittest import mock

from answer_model import PARTIAL_SUFFIX, load_model
import ollama_client
from openai_client import BASE_URL_VARIABLE, KEY_VARIABLE, OpenAIClient, OpenAIError, split_base_url
from test_support import (FakeLlamaServer, LLAMA_BUILD, LLAMA_CONTEXT, LLAMA_MODEL, LLAMA_TEMPLATE, RawServer,
                          closed_port, completion, http_reply, llama_count, llama_error, only_loopback as setUpModule)
from test_support_fixtures import AnswerFilesTest
from test_support_oracle import NO_ORACLE, OFFICIAL_TEMPLATE
from test_support_runs import run_answer_check

PINNED_MODEL = {'id': LLAMA_MODEL, 'owned_by': 'llamacpp',  # what the fake's /v1/models says, less its created time
                'meta': {'vocab_type': 1, 'n_vocab': 262144, 'n_ctx': LLAMA_CONTEXT, 'n_ctx_train': 131072,
                         'n_params': 4647450147}}


class OpenAITest(AnswerFilesTest):
    def pin(self, fake, *extra: str) -> tuple[int, str, str]:
        return run_answer_check(['pin', LLAMA_MODEL, '--api', 'openai', '--base-url', fake.base_url, '--counter',
                                 'gemma-4-e2b', '--output', str(self.folder / 'pin.json'), '--seeds', '1', '2', *extra])

    def pin_m(self, base_url: str) -> tuple[int, str, str]:
        """pin of model id 'm' at base_url, counted as qwen-2.5, into this test's folder: the refusals' shared call."""
        return run_answer_check(['pin', 'm', '--api', 'openai', '--base-url', base_url, '--counter', 'qwen-2.5',
                                 '--output', str(self.folder / 'pin.json')])

    def record(self, *extra: str) -> tuple[int, str, str]:
        """record of one sampled held-out case (4 rules x 2 seeds = 8 calls) under the pin, into this test's folder."""
        return run_answer_check(['record', '--model', str(self.folder / 'pin.json'), '--sample', '1', '--output',
                                 str(self.result), *extra])

    def test_pin_records_what_llama_server_reveals_and_its_documented_options(self):
        with FakeLlamaServer() as fake:
            code, out, err = self.pin(fake, '--repeat-penalty', '1.1')
        self.assertEqual((code, err), (0, ''))
        self.assertEqual(out, f'{self.folder / "pin.json"}: pins {LLAMA_MODEL} at {fake.base_url} (file {LLAMA_MODEL}, '
                              f'build {LLAMA_BUILD}), counted by gemma-4-e2b\n')
        self.assertEqual(json.loads((self.folder / 'pin.json').read_text()), {
            'checked_on': date.today().isoformat(), 'api': 'openai', 'base_url': fake.base_url,
            'model_id': LLAMA_MODEL, 'server': {
                'model': PINNED_MODEL, 'model_file': LLAMA_MODEL, 'build': LLAMA_BUILD,
                'chat_template_sha256': hashlib.sha256(LLAMA_TEMPLATE.encode()).hexdigest()},
            'options': {'temperature': 1.0, 'top_p': 0.95, 'top_k': 64, 'repeat_penalty': 1.1},  # answer-model.json's
            'trials': 2, 'seeds': [1, 2], 'counter': 'gemma-4-e2b'})

    def test_props_whose_generation_settings_are_no_object_still_pin_and_raise_nothing_else(self):
        # A server's reply is untrusted: a string there ended pin in AttributeError
        real = OpenAIClient._send

        def send(client, path, data, timeout):
            status, body, payload = real(client, path, data, timeout)
            return status, body, {**payload, 'default_generation_settings': 'none'} if path == '/props' else payload
        with FakeLlamaServer() as fake, mock.patch.object(OpenAIClient, '_send', send):
            code, out, err = self.pin(fake)
        self.assertEqual((code, err), (0, ''))
        self.assertIn(f'(file {LLAMA_MODEL}, build {LLAMA_BUILD})', out)

    def test_a_server_without_props_gets_no_top_k_and_refuses_repeat_penalty(self):
        with FakeLlamaServer(props=False) as fake:
            refused = self.pin(fake, '--repeat-penalty', '1.1')
            code, _, err = self.pin(fake)
        self.assertEqual(refused, (2, '', f'answer_check.py: the server at {fake.base_url[:-3]} is not llama.cpp\'s '
                                          '(it has no /props), so it documents no repeat_penalty: pin without them\n'))
        pinned = json.loads((self.folder / 'pin.json').read_text())
        self.assertEqual((code, pinned['server'], pinned['options']),
                         (0, {'model': PINNED_MODEL}, {'temperature': 1.0, 'top_p': 0.95}), err)

    def test_pin_needs_a_counter_and_a_served_model_id(self):
        with FakeLlamaServer() as fake:
            no_counter = run_answer_check(['pin', LLAMA_MODEL, '--api', 'openai', '--base-url', fake.base_url,
                                           '--output', str(self.folder / 'pin.json')])
            fake.alias = 'served-under-an-alias'
            no_model = self.pin(fake)
        self.assertEqual(no_counter, (2, '', "answer_check.py: pin --api openai needs --counter NAME, the lab's "
                                             'counter of the model the server serves: record holds it to the server\'s '
                                             'own count where the server can count\n'))
        self.assertEqual(no_model, (2, '', f'answer_check.py: the server at {fake.base_url[:-3]} serves no model '
                                           f"'{LLAMA_MODEL}' (/v1/models lists \"served-under-an-alias\"): pin one of "
                                           'those, or start the server with that model\n'))
        self.assertFalse((self.folder / 'pin.json').exists())

    def test_the_key_comes_from_the_environment_and_is_never_written_or_told(self):
        with FakeLlamaServer(key='sekret-123') as fake:
            with mock.patch.dict(os.environ, {KEY_VARIABLE: ''}):
                refused = self.pin(fake)
            with mock.patch.dict(os.environ, {KEY_VARIABLE: 'sekret-123'}):
                code, out, err = self.pin(fake)
        self.assertEqual(refused, (2, '', f'answer_check.py: the server at {fake.base_url[:-3]} refused /v1/models '
                                          f'(401: Invalid API Key): set {KEY_VARIABLE} to its key\n'))
        self.assertEqual(code, 0, err)
        self.assertNotIn('sekret', (self.folder / 'pin.json').read_text() + out + err)
        self.assertEqual({auth for *_, auth in fake.requests[-2:]}, {'Bearer sekret-123'})

    def test_a_key_with_a_line_end_is_refused_without_quoting_it(self):
        # requests refused the header with the key quoted in its message, which the lab printed
        with FakeLlamaServer(key='sekret-123') as fake:
            for key in ('sekret-123\n', ' sekret-123', 'sekret-123é'):
                with self.subTest(key=key), mock.patch.dict(os.environ, {KEY_VARIABLE: key}):
                    self.assertEqual(self.pin(fake), (2, '', f'answer_check.py: {KEY_VARIABLE} holds a character a '
                                     'key has not (a space, a line end, a control or non-ASCII character), so it '
                                     'was not sent: set it to the key alone\n'))
        self.assertEqual(fake.requests, [])

    @unittest.skipIf(OFFICIAL_TEMPLATE is None, NO_ORACLE)
    def test_record_counts_every_request_on_the_server_first_then_asks_in_its_own_fields(self):
        with FakeLlamaServer() as fake:
            self.assertEqual(self.pin(fake, '--repeat-penalty', '1.1')[0], 0)
            fake.requests.clear()
            code, out, err = self.record()
        self.assertEqual(code, 0, err)
        paths = fake.paths()
        counts = [index for index, path in enumerate(paths) if path.endswith('/input_tokens')]
        self.assertEqual(paths[:2], ['/v1/models', '/props'])  # the pinned model found again before anything else
        self.assertLess(max(counts), paths.index('/v1/chat/completions'))  # every count before the first answer
        self.assertIn('the server counts 3 distinct requests as the lab does\n', err)  # notes' and hybrid's agree
        body = fake.chats()[0]
        self.assertEqual(set(body) - {'messages'}, {'model', 'stream', 'seed', 'temperature', 'top_p', 'top_k',
                                                    'repeat_penalty', 'max_tokens'})
        self.assertEqual((body['model'], body['seed'], body['repeat_penalty'], body['stream']), (LLAMA_MODEL, 1, 1.1,
                                                                                                False))
        recorded = json.loads(self.result.read_text())
        grades = json.loads(self.result.with_suffix('.grades.json').read_text())
        self.assertEqual(recorded['model'], {**load_model(self.folder / 'pin.json'),
                                             'loaded_context_length': LLAMA_CONTEXT})
        self.assertEqual((grades['answers_recorded'], grades['prompt_token_mismatches']), (8, []))
        self.assertFalse(self.result.with_suffix(PARTIAL_SUFFIX).exists())

    @unittest.skipIf(OFFICIAL_TEMPLATE is None, NO_ORACLE)
    def test_a_count_mismatch_is_one_line_naming_the_request_and_spends_no_answer(self):
        with FakeLlamaServer(count=lambda body: llama_count(body) + 1) as fake:
            self.assertEqual(self.pin(fake)[0], 0)
            code, out, err = self.record()
        match = re.fullmatch(r'answer_check\.py: recent (held-\S+) seed 1: the server counts (\d+) prompt tokens, the '
                             r'lab counted (\d+) with gemma-4-e2b, so no answer was asked for: pin the counter of the '
                             r'model this server serves \(--counter\)\n', err)
        self.assertIsNotNone(match, err)
        self.assertEqual((code, int(match[2]) - int(match[3]), fake.chats()), (2, 1, []))

    @unittest.skipIf(OFFICIAL_TEMPLATE is None, NO_ORACLE)
    def test_a_prompt_read_short_is_named_truncation_where_the_server_cannot_count_first(self):
        def cut(body, number):
            return 200, completion(f'answer {number}', llama_count(body) - (5 if number == 3 else 0))
        with FakeLlamaServer(chat=cut, counts=False) as fake:
            self.assertEqual(self.pin(fake)[0], 0)
            code, out, err = self.record()
        self.assertEqual(code, 0, err)
        [mismatch] = json.loads(self.result.with_suffix('.grades.json').read_text())['prompt_token_mismatches']
        self.assertEqual((mismatch['strategy'], mismatch['seed'], mismatch['input_tokens'] - mismatch['prompt_tokens'],
                          mismatch['cause']), ('relevant', 1, 5, 'truncation'))
        self.assertIn("1 answer whose prompt_tokens differ from the lab's count (truncated: ", out)

    def test_record_refuses_a_server_whose_model_moved_before_any_chat(self):
        with FakeLlamaServer() as fake:
            fake.alias = 'local'
            self.assertEqual(run_answer_check(['pin', 'local', '--api', 'openai', '--base-url', fake.base_url,
                                               '--counter', 'gemma-4-e2b', '--output',
                                               str(self.folder / 'pin.json')])[0], 0)
            fake.model_file = 'other-model-Q8_0.gguf'  # restarted with another file under the same alias
            code, out, err = self.record()
            checked = run_answer_check(['check', '--model', str(self.folder / 'pin.json')])
        refusal = (f'the server at {fake.base_url[:-3]} no longer serves the pinned model: its model_file is '
                   f'"other-model-Q8_0.gguf", the pin has "{LLAMA_MODEL}"; answers from another model need a new pin '
                   'and a new recording; no chat request was sent')
        self.assertEqual((code, out, err, fake.chats()), (2, '', f'answer_check.py: {refusal}\n', []))
        self.assertEqual(checked, (2, '', f'answer_check.py: {refusal}\n'))

    @unittest.skipIf(OFFICIAL_TEMPLATE is None, NO_ORACLE)  # record's count check needs the server's own count
    def test_a_reply_for_another_model_is_refused_and_nothing_of_it_kept(self):
        def renamed(body, number):
            fake.alias = 'other'  # the reply names the model the server serves now, not the pinned one
            return 200, completion('answer', llama_count(body))
        with FakeLlamaServer(chat=renamed) as fake:
            self.assertEqual(self.pin(fake)[0], 0)
            code, out, err = self.record()
        self.assertEqual((code, len(fake.chats())), (2, 1))
        self.assertRegex(err.splitlines()[-1], r'^answer_check\.py: call 1 of 8 \(recent held-\S+ seed 1\): the '
                         rf'server at {fake.base_url[:-3]} answered for the model "other", not the pinned '
                         rf"{re.escape(LLAMA_MODEL)}, so nothing from it is kept: check what serves at the pin's "
                         r'base_url; no answer is kept$')

    def test_check_names_what_the_server_serves(self):
        with FakeLlamaServer() as fake:
            self.assertEqual(self.pin(fake)[0], 0)
            checked = run_answer_check(['check', '--model', str(self.folder / 'pin.json')])
        self.assertEqual(checked, (0, f'the server at {fake.base_url[:-3]} serves {LLAMA_MODEL} as pinned (file '
                                      f'{LLAMA_MODEL}, build {LLAMA_BUILD})\n', ''))

    @unittest.skipIf(OFFICIAL_TEMPLATE is None, NO_ORACLE)
    def test_a_failed_call_keeps_the_answers_so_far_and_the_next_record_resumes(self):
        def fails_third(body, number):
            return (llama_error(500, 'failed to decode', 'server_error') if number == 3 else
                    (200, completion(f'answer {number}', llama_count(body))))
        with FakeLlamaServer(chat=fails_third) as fake:
            self.assertEqual(self.pin(fake)[0], 0)
            first = self.record()
            asked = len(fake.chats())
            second = self.record()
        self.assertEqual(first[0], 2)
        self.assertRegex(first[2].splitlines()[-1], r'^answer_check\.py: call 3 of 8 \(relevant held-\S+ seed 1\): '
                         rf'the server at {fake.base_url[:-3]} answered HTTP 500 to /v1/chat/completions \(failed '
                         r'to decode\): read the server log; the 2 answers so far are kept in '
                         r'answer-result\.partial\.json$')
        self.assertEqual((second[0], len(fake.chats()) - asked), (0, 6), second[2])

    def test_a_redirect_is_refused_naming_the_base_url(self):
        raw = b'HTTP/1.1 302 Found\r\nLocation: http://127.0.0.1:1/v1/models\r\nContent-Length: 0\r\n\r\n'
        with RawServer(raw) as server:
            code, out, err = self.pin_m(f'{server.host}/v1')
        self.assertEqual((code, err), (2, f'answer_check.py: the server at {server.host} answered /v1/models with '
                                          'HTTP 302, a redirect to http://127.0.0.1:1/v1/models, which the lab never '
                                          "follows: set the pin's base_url to the server that answers itself\n"))

    def test_a_server_that_trickles_is_stopped_at_the_deadline(self):
        with RawServer(http_reply(b'{"object": "list", "data": []}'), delay=0.2) as server, \
                mock.patch.object(ollama_client, 'CHECK_TIMEOUT', 0.5):
            code, _, err = self.pin_m(f'{server.host}/v1')
        self.assertEqual((code, err), (2, f'answer_check.py: the server at {server.host} did not answer /v1/models '
                                          'within 0.5 s: check that the server is not stuck or overloaded, then run '
                                          'again\n'))

    def test_no_server_and_a_reply_that_is_not_json_are_one_line(self):
        port = closed_port()
        code, _, err = self.pin_m(f'http://127.0.0.1:{port}/v1')
        self.assertEqual((code, err), (2, f'answer_check.py: nothing answers at http://127.0.0.1:{port}: start the '
                                          "server, or set the pin's base_url to the address it listens on\n"))
        with RawServer(http_reply(b'<html>')) as server:
            code, _, err = self.pin_m(server.host)
        self.assertEqual((code, err), (2, f"answer_check.py: the server at {server.host} did not answer /models with a "
                                          "JSON object ('<html>'): check that the base URL is an OpenAI-compatible "
                                          'server\n'))

    def test_pin_takes_the_base_url_from_the_environment_as_the_seed_sets_it(self):
        with FakeLlamaServer() as fake, mock.patch.dict(os.environ, {BASE_URL_VARIABLE: fake.base_url}):
            code, out, err = run_answer_check(['pin', LLAMA_MODEL, '--api', 'openai', '--counter', 'gemma-4-e2b',
                                               '--output', str(self.folder / 'pin.json')])
        self.assertEqual((code, load_model(self.folder / 'pin.json')['base_url']), (0, fake.base_url), err)

    def test_base_urls_read_as_the_seed_writes_them(self):
        self.assertEqual([split_base_url(url) for url in ('http://localhost:8080/v1', 'http://127.0.0.1:8080/v1/',
                                                          'https://[::1]/v1', 'http://127.0.0.1:9')],
                         [('http://localhost:8080', '/v1'), ('http://127.0.0.1:8080', '/v1'), ('https://[::1]', '/v1'),
                          ('http://127.0.0.1:9', '')])
        for bad in ('localhost:8080', '127.0.0.1', 'http://127.0.0.1:port/v1', 'ftp://h/v1'):
            with self.subTest(bad=bad), self.assertRaises(OpenAIError):
                split_base_url(bad)


if __name__ == '__main__':
    unittest.main()
