"""Tests for the answer grader, the answer files and the pinned Ollama client.

    .venv/bin/python -m unittest -v test_answer_check.py

Grading tests hold the grader to hand-worked verdicts on the shipped answer-keys.json, one sentence for
each word and phrase of its lists, and to the recorded answer-grades.json. Client tests run the real
requests-based client against the fake Ollama server of test_support.py on 127.0.0.1; no model is
called. Commands run through common.run, as a user's do. The recording run (`answer_check.py record`) is
tested in test_answer_record.py. Every file a test writes goes to a temporary directory; the shipped files
are only read. Every HTTP request in these tests is checked to go to 127.0.0.1, and OLLAMA_HOST points at a
closed loopback port, so no test can reach a real server.
"""
import json
import os
from pathlib import Path
import re
import tempfile
import time
import unittest
from unittest import mock

import requests

import answer_check
from answer_check import grade, load_keys
import answer_model
from answer_model import AnswerModel, AnswerModelError, load_model, load_recording, ollama_host
from common import LabError, python_command
from strategies import RULES
from test_support import (LOADED_CONTEXT, OTHER, PINNED, SERVER_VERSION, TIMEOUT, AnswerFilesTest, FakeOllama,
                          NotOllama, client_for, closed_port, held_out_cases, ollama_command, only_loopback, reply,
                          run_answer_check, run_command, unfinished)

HERE = Path(__file__).parent
PYTHON = python_command()  # how the advice in messages starts Python: .venv/bin/python from the lab's venv
HELD_OUT = ['held-latest', 'held-old-decision', 'held-correction', 'held-pronoun', 'held-spread', 'held-buried']
REDO = f'record again with `{PYTHON} answer_check.py record`, or restore it from version control'


def setUpModule():
    only_loopback()


def shipped_keys() -> dict:
    return json.loads((HERE / 'answer-keys.json').read_text())


KEYS = shipped_keys()['keys']


def answer(text: str, seed: int = 1) -> dict:
    return {'seed': seed, 'answer': text, 'tool_calls': [], 'done_reason': 'stop', 'prompt_tokens': 50,
            'answer_tokens': 9, 'request_sha256': '0' * 64, 'input_tokens': 50}


def graded(case_id: str, text: str) -> tuple[str, str]:
    return grade(text, KEYS[case_id])


class KeysTest(unittest.TestCase):
    def test_keys_cover_exactly_the_held_out_cases(self):
        self.assertEqual(sorted(load_keys(HERE / 'answer-keys.json', HELD_OUT)), sorted(HELD_OUT))
        self.assertEqual(sorted(case['id'] for case in held_out_cases()), sorted(HELD_OUT))

    def test_keys_are_the_ones_fixed_before_the_first_answer(self):
        # Any change to a pattern regrades every recording: it has to be deliberate, here as in the file.
        self.assertEqual(load_keys(HERE / 'answer-keys.json', HELD_OUT), {
            'held-latest': {'must': ['mateo'], 'stale': []},
            'held-old-decision': {'must': ['object storage'], 'stale': []},
            'held-correction': {'must': ['redis'], 'stale': ['rabbitmq']},
            'held-pronoun': {'must': [r'\bthree\b|\b3\b'], 'stale': []},
            'held-spread': {'must': [r'\b14\b', r'\b30\b'], 'stale': []},
            'held-buried': {'must': [r'\b200\b'], 'stale': []}})

    def test_every_key_matches_the_case_facts_it_was_written_from(self):
        for case in held_out_cases():
            for kind, facts in (('must', case['required']), ('stale', case['stale'])):
                for pattern in KEYS[case['id']][kind]:
                    with self.subTest(case=case['id'], kind=kind, pattern=pattern):
                        self.assertTrue(any(re.search(pattern, fact, re.I) for fact in facts))


class GradeTest(unittest.TestCase):
    def test_replaced_decision_presented_as_current_fails(self):
        # Each answer also names Redis, in another sentence: only splitting at . ! ? or a newline finds it.
        for text in ('We use RabbitMQ for the job queue.', 'The job queue is RabbitMQ.\nIt was decided early.',
                     'Redis streams now. We use RabbitMQ.', 'Redis? We use RabbitMQ.', 'Redis! We use RabbitMQ.',
                     'Redis streams now\nWe use RabbitMQ'):
            with self.subTest(text=text):
                self.assertEqual(graded('held-correction', text), ('fail', 'presents a replaced decision as current'))

    def test_correction_named_together_with_the_replaced_decision_passes(self):
        for text in ('Redis streams replaced RabbitMQ for the job queue.',
                     'Use Redis streams. RabbitMQ was the earlier choice.',
                     'Actually, the team switched from RabbitMQ to Redis streams.',
                     'The job queue uses Redis streams, not RabbitMQ.'):
            with self.subTest(text=text):
                self.assertEqual(graded('held-correction', text), ('pass', 'every required fact'))

    def test_each_word_that_marks_a_correction_keeps_the_replaced_decision_from_failing(self):
        # One sentence per word of the grader's list, naming RabbitMQ and no other word of the list.
        for sentence in ('RabbitMQ was replaced.', 'Instead of RabbitMQ, the queue moved.', 'It is not RabbitMQ.',
                         'RabbitMQ is no longer used.', 'We switched away from RabbitMQ.', 'The RabbitMQ plan changed.',
                         'Actually, RabbitMQ is gone.', 'RabbitMQ was the previous queue.',
                         'RabbitMQ was used originally.', 'RabbitMQ was the earlier queue.'):
            with self.subTest(sentence=sentence):
                self.assertEqual(graded('held-correction', f'{sentence} The job queue uses Redis streams.'),
                                 ('pass', 'every required fact'))
        self.assertEqual(graded('held-correction', 'RabbitMQ was the queue. The job queue uses Redis streams.'),
                         ('fail', 'presents a replaced decision as current'))

    def test_each_way_of_saying_the_fact_is_missing_counts_as_said_missing(self):
        # One answer per phrase of the grader's list, matching no other phrase of it.
        for text in ('I do not have that figure.', "The notes don't say.", "The conversation doesn't mention it.",
                     'It does not have a limit.', "They don't state the limit.", "It doesn't specify the limit.",
                     "The thread doesn't contain it.", 'The limit is not mentioned.', 'It is not stated.',
                     'It is not specified.', 'It is not provided.', 'It is not included.', 'It is not contained here.',
                     'No information on that.', 'There is not enough information.', 'Missing: the limit.',
                     'That is not in the conversation.', 'I cannot find it.', 'I cannot determine it.',
                     'Please provide context.', 'Please provide more context.', 'Please provide the conversation.'):
            with self.subTest(text=text):
                self.assertEqual(graded('held-buried', text), ('fail', 'says the fact is missing'))

    def test_sentences_that_do_not_name_both_facts_are_not_listed(self):
        for case_id, text in (('held-correction', 'We use RabbitMQ for the job queue.'),  # stale only: graded fail
                              ('held-correction', 'The job queue uses Redis streams.'),  # must only
                              ('held-correction', 'Use Redis streams. RabbitMQ was the earlier choice.'),
                              ('held-correction', 'Redis streams now.\nRabbitMQ is gone.'),  # split at a newline
                              ('held-correction', ''),
                              ('held-latest', 'Mateo, not Ana, reviews it.')):  # a case with no stale pattern
            with self.subTest(case=case_id, text=text):
                recorded = {'model': load_model(), 'answers': {'recent': {case_id: [answer(text)]}}}
                self.assertEqual(answer_check.grade_recording(recorded, KEYS, current={})['answers_to_read'], [])

    def test_answers_to_read_are_recorded_and_counted_in_the_table(self):
        # The original rule reads 'not ' as a correction: seed 1 passes although it keeps the replaced decision.
        recorded = {'model': load_model(), 'answers': {
            'recent': {'held-correction': [answer('The job queue uses RabbitMQ, not Redis streams.', 1),
                                           answer('We use RabbitMQ.', 2),
                                           answer('Redis replaced RabbitMQ. So: Redis, not RabbitMQ.', 3)],
                       'held-latest': [answer('Mateo.', 1)]}}}
        grades = answer_check.grade_recording(recorded, KEYS, current={})
        self.assertEqual(grades['answers_to_read'], [
            {'strategy': 'recent', 'case': 'held-correction', 'seed': 1,
             'sentence': 'The job queue uses RabbitMQ, not Redis streams.'},
            {'strategy': 'recent', 'case': 'held-correction', 'seed': 3, 'sentence': 'Redis replaced RabbitMQ.'},
            {'strategy': 'recent', 'case': 'held-correction', 'seed': 3, 'sentence': 'So: Redis, not RabbitMQ.'}])
        self.assertEqual([entry['verdict'] for entry in grades['graded']['recent']['held-correction']],
                         ['pass', 'fail', 'pass'])
        lines = answer_check.report(grades).split('\n\n')[0].splitlines()
        self.assertEqual(lines[-4], 'To read (a sentence names both the replaced and the current decision, so the '
                                    'grader cannot tell which it offers as current; verdicts stand as graded): '
                                    '2 answers')
        self.assertEqual(lines[-3:], [
            '  recent held-correction seed 1: The job queue uses RabbitMQ, not Redis streams.',
            '  recent held-correction seed 3: Redis replaced RabbitMQ.',
            '  recent held-correction seed 3: So: Redis, not RabbitMQ.'])

    def test_every_required_fact_passes(self):
        for case_id, text in (('held-latest', 'Mateo reviews the pricing page.'),
                              ('held-old-decision', 'Uploads go to object storage.'),
                              ('held-pronoun', 'The limit is 3 attempts.'),
                              ('held-pronoun', 'Three attempts.'),
                              ('held-spread', 'At least 14 characters; sessions expire after 30 minutes.'),
                              ('held-buried', 'The gateway must allow 200 connections.')):
            with self.subTest(case=case_id, text=text):
                self.assertEqual(graded(case_id, text), ('pass', 'every required fact'))

    def test_partial_facts_fail(self):
        for case_id, text in (('held-spread', 'Passwords need at least 14 characters.'),
                              ('held-spread', 'Sessions expire after 30 minutes.'),
                              ('held-buried', 'The gateway must allow 2000 connections.'),
                              ('held-pronoun', 'The limit is thirty attempts.')):
            with self.subTest(case=case_id, text=text):
                self.assertEqual(graded(case_id, text), ('fail', 'required fact absent'))

    def test_empty_answer_is_incomplete(self):
        for text in ('', '  \n', '\u2003'):
            with self.subTest(text=text):
                self.assertEqual(graded('held-latest', text), ('incomplete', 'no answer'))

    def test_summary_counts_each_outcome_per_strategy_and_the_table_shows_them(self):
        recorded = {'model': load_model(), 'answers': {
            'notes': {'held-correction': [answer('We use RabbitMQ.', seed) for seed in (1, 2)],
                      'held-latest': [answer('Mateo.', 1), answer('Mateo reviews it.', 2)]},
            'recent': {'held-latest': [answer('Mateo.', 1), answer('', 2)],
                       'held-buried': [answer("The conversation doesn't mention it.", 1),
                                       answer('The gateway allows 200.', 2)]}}}
        grades = answer_check.grade_recording(recorded, KEYS, current={})
        self.assertEqual(grades['summary'], {
            'notes': {'pass': 2, 'fail': 2, 'incomplete': 0, 'said_missing': 0, 'stale_as_current': 2,
                      'cases_passed_every_trial': 1},
            'recent': {'pass': 2, 'fail': 1, 'incomplete': 1, 'said_missing': 1, 'stale_as_current': 0,
                       'cases_passed_every_trial': 0}})
        self.assertEqual(answer_check.report(grades).splitlines()[:9], [
            '| Strategy | Pass | Fail | Of which said missing | Replaced decision as current '
            '| Cases passed in every trial |',
            '|---|---|---|---|---|---|',
            '| notes | 2 of 4 | 2 | 0 | 2 | 1 of 2 |',
            '| recent | 2 of 4 | 1 | 1 | 0 | 0 of 2 |',
            'Incomplete (empty answers): recent 1',
            'Cut off at num_predict (graded as they stand): notes 0, recent 0',
            'To read (a sentence names both the replaced and the current decision, so the grader cannot tell which '
            'it offers as current; verdicts stand as graded): 0 answers',
            '',
            "Every answer's prompt_tokens equal the counted input tokens."])


class ClientTest(unittest.TestCase):
    def test_non_pinned_digest_is_refused_before_any_chat_request(self):
        with FakeOllama(digest=OTHER) as fake:
            client = client_for(fake.host)
            with self.assertRaises(AnswerModelError) as caught:
                client.answer([{'role': 'user', 'content': 'Hi'}], num_ctx=384, num_predict=96, seed=1)
        self.assertEqual(str(caught.exception),
                         f'Ollama at {fake.host} has gemma4:e2b with digest {OTHER}, but the pinned build is {PINNED}: '
                         'the tag has moved (`ollama pull gemma4:e2b` fetches whatever it points to today), and '
                         'answers from a new build need a deliberate change of answer-model.json and a new '
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


def one_answer_recording(model: dict | None = None) -> dict:
    """A well-formed recording: two answers of recent to held-latest."""
    return {'model': model if model is not None else load_model(),
            'answers': {'recent': {'held-latest': [answer('Mateo.', 1), answer('Mateo reviews it.', 2)]}}}


class InputFilesTest(AnswerFilesTest):
    """Every file a user can break gives exit 2 and one line naming it; nothing is written."""

    def setUp(self):
        super().setUp()
        self.result.write_text(json.dumps({'model': load_model(), 'answers': {}}))

    def write(self, name: str, data) -> Path:
        path = self.folder / name
        path.write_text(data if isinstance(data, str) else json.dumps(data))
        return path

    def assert_one_line_error(self, expected_start: str, **paths) -> str:
        code, out, err = run_answer_check([], **{'result_path': self.result, 'grades_path': self.grades, **paths})
        self.assertEqual((code, out), (2, ''), err)
        self.assertTrue(err.startswith(f'answer_check.py: {expected_start}'), err)
        self.assertEqual(err.count('\n'), 1, err)
        self.assertFalse(self.grades.exists())
        return err

    def test_unreadable_json_file_gives_exit_2_and_one_line_naming_the_file(self):
        for argument in ('keys_path', 'model_path', 'result_path'):
            with self.subTest(argument=argument):
                bad = self.write('broken.json', '{"keys": ')
                message = self.assert_one_line_error(f'{bad}: ', **{argument: bad})
                self.assertIn('invalid JSON at line 1 column 10', message)

    def test_missing_file_and_folder_give_exit_2(self):
        missing = self.folder / 'nowhere.json'
        self.assert_one_line_error(f'{missing}: cannot read the answer keys: No such file or directory',
                                   keys_path=missing)
        self.assert_one_line_error(f'{self.folder}: cannot read the recording: Is a directory',
                                   result_path=self.folder)
        unwritable = self.folder / 'no-such-folder' / 'answer-grades.json'
        self.assert_one_line_error(f'{unwritable}: cannot write the answer grades: No such file or directory',
                                   grades_path=unwritable)

    def test_bad_answer_model_json_gives_exit_2(self):
        pinned = load_model()
        for field, value in (('ollama_digest', 'b37049369adf'), ('ollama_tag', ''), ('seeds', [1, 2, 3, 4, True]),
                             ('trials', '5'), ('options', {'temperature': '1', 'top_k': 64, 'top_p': 0.95})):
            with self.subTest(field=field):
                bad = self.write('answer-model.json', {**pinned, field: value})
                self.assertIn(field, self.assert_one_line_error(f'{bad}: ', model_path=bad))

    def test_answer_model_command_exits_2_with_one_line(self):
        code, out, err = run_command(answer_model.main, [], 'answer_model.py')  # OLLAMA_HOST: a closed port
        self.assertEqual((code, out), (2, ''))
        self.assertTrue(err.startswith('answer_model.py: no Ollama server answers at http://127.0.0.1:'), err)
        self.assertEqual(err.count('\n'), 1)

    def test_usage_errors_exit_2(self):
        for main, argv in ((answer_check.main, ['grade']), (answer_check.main, ['record', 'again']),
                           (answer_check.main, ['--fresh']), (answer_model.main, ['--host'])):
            with self.subTest(main=main.__module__, argv=argv):
                self.assertEqual(run_command(main, argv, f'{main.__module__}.py')[0], 2)


class Rejecting(unittest.TestCase):
    """Base for tests of a loader that must refuse a file with one line starting with the file's path."""

    def rejection(self, loader, file_name: str, data) -> str:
        with tempfile.TemporaryDirectory() as folder:
            path = Path(folder) / file_name
            path.write_text(json.dumps(data))
            with self.assertRaises(LabError) as caught:
                loader(path)
        message = str(caught.exception)
        self.assertTrue(message.startswith(f'{path}: '), message)
        self.assertNotIn('\n', message)
        return message


class KeysValidationTest(Rejecting):
    def load(self, keys: dict) -> str:
        return self.rejection(lambda path: load_keys(path, HELD_OUT), 'answer-keys.json', keys)

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
            with FakeOllama() as fake:
                code, out, err = run_answer_check(['record'], keys_path=path, client=client_for(fake.host),
                                                  result_path=Path(folder) / 'result.json',
                                                  grades_path=Path(folder) / 'grades.json')
            self.assertEqual(sorted(p.name for p in Path(folder).iterdir()), ['answer-keys.json'])
        self.assertEqual((code, fake.requests), (2, []))
        self.assertIn('keys.held-latest.must must be a non-empty list of strings', err)


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
            code, out, err = run_answer_check([], result_path=result, grades_path=Path(folder) / 'grades.json')
        self.assertEqual((code, out), (2, ''))
        self.assertEqual(err, f'answer_check.py: {result}: answers.recent.held-latest[0].seed: must be an integer, '
                              f'got [1]; record again with `{PYTHON} answer_check.py record`, or restore it from '
                              'version control\n')


class PinnedBuildTest(unittest.TestCase):
    def grade_main(self, model: dict):
        with tempfile.TemporaryDirectory() as folder:
            result, grades = Path(folder) / 'answer-result.json', Path(folder) / 'answer-grades.json'
            result.write_text(json.dumps(one_answer_recording(model)))
            code, out, err = run_answer_check([], result_path=result, grades_path=grades)
            written = json.loads(grades.read_text()) if grades.exists() else None
        return code, out, err, written, result

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

    def test_shipped_grades_match_a_fresh_grading(self):
        with tempfile.TemporaryDirectory() as folder:
            fresh = answer_check.grade_files(HERE / 'cases.json', HERE / 'answer-keys.json',
                                             HERE / 'answer-model.json', HERE / 'answer-result.json',
                                             Path(folder) / 'answer-grades.json')
        self.assertEqual(json.loads((HERE / 'answer-grades.json').read_text()), fresh)

    def test_nothing_recorded_says_so_and_shows_how_to_record(self):
        with tempfile.TemporaryDirectory() as folder:
            result = Path(folder) / 'answer-result.json'
            result.write_text(json.dumps({'model': load_model(), 'answers': {}}))
            code, out, err = run_answer_check([], result_path=result, grades_path=Path(folder) / 'grades.json')
        self.assertEqual(code, 0, err)
        self.assertTrue(out.startswith('Nothing is recorded: answer-result.json holds the pinned '
                                       'model block and no answers.\n'))
        self.assertIn(f'run `{PYTHON} answer_check.py record` (120 calls)', out)


if __name__ == '__main__':
    unittest.main()
