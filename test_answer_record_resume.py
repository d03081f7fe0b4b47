"""Tests for a recording run that stops: after a server error, an unfinished reply, a reply the grader
refuses, a tag that moved, Ctrl-C or a kill, the answers so far are kept, the recording is left byte-identical, and
the next run asks only for what is missing (or, with `--fresh`, for everything).

    .venv/bin/python -m unittest -v test_answer_record_resume.py

They run the real client and recording against a fake Ollama server on 127.0.0.1, as test_support_record.py
says; no model is called, no test can reach a real server, and every file a test writes is a temporary one.
"""
import json
import os
import signal
import subprocess
import sys
import unittest
from unittest import mock

import answer_keys
import answer_model
from test_support import (FakeOllama, OTHER, PINNED, client_for, counted_reply, only_loopback as setUpModule, reply,
                          unfinished)
from test_support_fixtures import HERE, held_out_cases
from test_support_record import AnswerRecordTest, steady_reply


class RecordTest(AnswerRecordTest):
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
        kept = [line for line in self.partial() if 'answer' in line]
        self.assertEqual([(line['strategy'], line['case'], line['answer']['seed']) for line in kept],
                         [('recent', 'held-latest', seed) for seed in (1, 2, 3, 4, 5)]
                         + [('recent', 'held-old-decision', 1)])
        self.assertNotIn('RabbitMQ', json.dumps(kept))

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

    def test_grading_stopped_after_a_whole_recording_says_that_the_recording_is_written(self):
        # '|.' makes it match the required facts, as a must pattern has to; on 'aaa...!' the first branch runs away.
        keys = {'keys': {case['id']: {'must': ['(a+)+$|.'], 'stale': []} for case in held_out_cases()}}
        (self.folder / 'slow-keys.json').write_text(json.dumps(keys))

        def interrupted(*args):
            raise KeyboardInterrupt
        whole = 'answer-result.json holds every answer: grade it with the same command without `record`'
        for name, argv, patch, code, last in (
                ('Ctrl-C', [], mock.patch.object(answer_keys, 'answer_verdict', interrupted), 130,
                 f'answer_check.py: interrupted; {whole}'),
                ('a runaway key pattern', ['--keys', str(self.folder / 'slow-keys.json')],
                 mock.patch.object(answer_keys, 'PATTERN_SECONDS', 0.05, create=True), 2,
                 "answer_check.py: the key pattern '(a+)+$|.' ran past 0.05 s on a text of 23 characters and was "
                 f'stopped: it backtracks without bound (a repeat inside a repeat, as in (a+)+); rewrite it; {whole}')):
            with self.subTest(name), patch:
                self.result.unlink(missing_ok=True)
                code_got, out, err, fake = self.sampled(argv, lambda body, n: (200, reply('a' * 22 + '!')))
                self.assertEqual((code_got, out, err.splitlines()[-1]), (code, '', last))
                self.assertEqual(len(json.loads(self.result.read_text())['answers']), 4)
                self.assertFalse(self.grades.exists())

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
        self.assertEqual(self.kept(), 9)

    def test_ctrl_c_while_a_file_is_written_keeps_both_files_valid(self):
        # The partial file is replaced once, for its model block; answer-result.json is the second replacement.
        # In between, Ctrl-C cuts the line of the 60th answer half-way, as a kill while writing would.
        whole, real_replace, real_append = self.uninterrupted(), os.replace, answer_model.append
        for stop_at, kept in (('replace 1', 0), ('answer 60', 59), ('replace 2', 120)):
            with self.subTest(stop_at=stop_at):
                replaced, answered = [], []

                def replace(source, target):
                    replaced.append(target)
                    if stop_at == f'replace {len(replaced)}':
                        raise KeyboardInterrupt
                    real_replace(source, target)

                def append(path, entry):
                    if entry is not None and 'answer' in entry:
                        answered.append(entry)
                        if stop_at == f'answer {len(answered)}':
                            with open(path, 'ab') as file:
                                file.write(json.dumps(entry).encode()[:100])
                            raise KeyboardInterrupt
                    real_append(path, entry)
                with (FakeOllama(chat=steady_reply) as fake, mock.patch.object(os, 'replace', replace),
                      mock.patch.object(answer_model, 'append', append)):
                    code, out, err = self.run_main(['record'], fake.host)
                self.assertEqual(code, 130, err)
                self.assertFalse(self.result.exists())
                self.assertEqual([p.name for p in self.folder.iterdir() if p.name.endswith('.tmp')], [])
                self.assertEqual(self.kept(), kept)
                with FakeOllama(chat=steady_reply) as fake:
                    code, out, err = self.run_main(['record'], fake.host)
                self.assertEqual(code, 0, err)
                self.assertEqual(len(fake.chats()), 120 - kept)
                if stop_at == 'answer 60':  # the cut line costs its own answer and no other
                    self.assertIn('answer-result.partial.json: line 62 is not a kept answer (', err)
                self.assertEqual(self.result.read_bytes(), whole)
                self.result.unlink()

    def test_reply_field_the_grader_refuses_fails_that_call_and_keeps_the_answers_before_it(self):
        for field, value in (('prompt_eval_count', -5), ('prompt_eval_count', None), ('eval_count', 'many'),
                             ('done_reason', 5)):
            with self.subTest(field=field, value=value):
                (self.folder / 'answer-result.partial.json').unlink(missing_ok=True)

                def bad(body, number):
                    status, payload = steady_reply(body, number)
                    return status, {**payload, field: value} if number == 3 else payload
                code, out, err, fake = self.sampled([], bad)
                self.assertEqual((code, out, len(fake.chats())), (2, '', 3))
                self.assertRegex(err.splitlines()[-1], rf'^answer_check.py: call 3 of 20 \(recent \S+ seed 3\): '
                                 rf'Ollama at {fake.host} answered /api/chat with {field} {json.dumps(value)}, where '
                                 r'an answer needs .*; the 2 answers so far are kept in answer-result.partial.json$')
                self.assertEqual(self.kept(), 2)
        code, out, err, fake = self.sampled([])  # a rerun asks only for the other 18
        self.assertEqual((code, len(fake.chats())), (0, 18), err)

    def test_a_tag_that_moves_mid_run_even_and_back_fails_the_call_it_moved_in_and_keeps_those_before(self):
        previous = b'{"previous": "recording"}\n'
        for back_at in (None, 12):  # moved for good, or moved and moved back two answers later
            with self.subTest(back_at=back_at):
                self.result.write_bytes(previous)
                (self.folder / 'answer-result.partial.json').unlink(missing_ok=True)
                fakes = []

                def moving(body, number):
                    if number in (10, back_at):  # `ollama pull` in another terminal, half-way through
                        fakes[0].digest = OTHER if number == 10 else PINNED
                    return steady_reply(body, number)
                with FakeOllama(chat=moving) as fake:
                    fakes.append(fake)
                    code, out, err = self.run_main(['record', '--sample', '1'], fake.host)
                self.assertEqual((code, out, len(fake.chats())), (2, '', 10))
                self.assertEqual(err.splitlines()[-1], 'answer_check.py: call 10 of 20 (relevant held-pronoun seed 5): '
                                 f'Ollama at {fake.host} has gemma4:e2b with digest {OTHER}, but the pinned build '
                                 f'is {PINNED}: the tag moved while this answer was made, so it is not kept; the 9 '
                                 'answers so far are kept in answer-result.partial.json')
                self.assertEqual((self.result.read_bytes(), self.kept()), (previous, 9))

    def test_a_run_killed_outright_resumes_where_it_stopped(self):
        whole = self.uninterrupted_sample()
        child = []

        def killing(body, number):
            if number == 8:
                os.kill(child[0].pid, signal.SIGKILL)
                child[0].wait()
            return steady_reply(body, number)
        with FakeOllama(chat=killing) as fake:
            child.append(subprocess.Popen(
                [sys.executable, str(HERE / 'answer_check.py'), 'record', '--sample', '1', '--output',
                 str(self.result)], env={**os.environ, 'OLLAMA_HOST': fake.host}, stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL))
            self.assertEqual(child[0].wait(timeout=60), -signal.SIGKILL)
        self.assertEqual((self.result.exists(), self.kept()), (False, 7))
        code, out, err, fake = self.sampled([])
        self.assertEqual((code, len(fake.chats())), (0, 13), err)
        self.assertEqual(self.result.read_bytes(), whole)


if __name__ == '__main__':
    unittest.main()
