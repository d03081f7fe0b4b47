"""Tests for the recording run: `.venv/bin/python answer_check.py record`.

    .venv/bin/python -m unittest -v test_answer_record.py

They run the real requests-based client and the real recording, with the real
strategies, cases and prepared counter (so `.venv/bin/python prepare.py` must have run),
against the fake Ollama server of test_support.py, which this file starts on
127.0.0.1, through common.run as a user's command runs; no model is called. The fake reports each prompt's size as the
official chat template and tokenizer give it, not as the lab counts it, so the
prompt-token checks compare two independent counts (they skip, naming the file,
where the official template is absent). Pinned: the 120 requests in order, progress on
stderr, the note on the server's version and on the context /api/ps reports,
the partial file that lets a stopped run resume (after a server error, an
unfinished reply or Ctrl-C) and `--fresh` that discards it, cut-off answers
graded as they stand, and the recording left byte-identical until every answer
is in. Every file a test writes goes to a temporary directory; the shipped
files are only read. Every HTTP request the client makes in these tests is
checked to go to 127.0.0.1, and OLLAMA_HOST points at a closed loopback port,
so no test can reach a real server.
"""
import contextlib
import hashlib
import json
import os
from pathlib import Path
import re
import signal
import subprocess
import sys
import time
import unittest
from unittest import mock

import answer_check
import answer_keys
import answer_model
from answer_model import load_model
from ollama_client import OllamaClient
from strategies import RULES
from test_support import (FakeOllama, LOADED_CONTEXT, OTHER, PINNED, SERVER_VERSION, client_for, closed_port,
                          counted_reply, ollama_command, only_loopback as setUpModule, reply, server_count, unfinished)
from test_support_fixtures import AnswerFilesTest, HERE, PYTHON, held_out_cases
from test_support_oracle import NO_ORACLE, OFFICIAL_TEMPLATE
from test_support_runs import run_answer_check
from tokenizer import counter


def causes(passed: int, passed_fact_missing: int, model_failed: int, rule_failed: int, stale_carried: int) -> dict:
    """One rule's failure_causes, written out by hand."""
    return {'passed': passed, 'passed_fact_missing': passed_fact_missing, 'model_failed': model_failed,
            'rule_failed': rule_failed, 'stale_carried': stale_carried}


def steady_reply(body: dict, number: int) -> tuple[int, dict]:
    """An answer that depends only on the request, as a resumed run must be able to reproduce it."""
    sha = hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()
    return 200, reply(f'answer to {sha[:16]}', server_count(body['messages']) or 0, 3)


class RecordTest(AnswerFilesTest):
    def run_main(self, argv: list[str], host: str | None = None, cases: Path = HERE / 'cases.json',
                 folder: Path | None = None, client: OllamaClient | None = None):
        """answer_check.py writing into folder (default: this test's folder); (exit code, stdout, stderr)."""
        folder = folder if folder is not None else self.folder
        with mock.patch.dict(os.environ, {'OLLAMA_HOST': host} if host else {}):  # as a user's command finds it
            return run_answer_check(argv, cases_path=cases, result_path=folder / 'answer-result.json',
                                    grades_path=folder / 'answer-grades.json', client=client)

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

    def partial(self) -> list[dict]:
        """The lines of the partial recording: its model block, then one kept answer a line."""
        return [json.loads(line) for line in (self.folder / 'answer-result.partial.json').read_text().splitlines()]

    def kept(self) -> int:
        """How many whole answers the partial recording holds; 0 when there is none."""
        path, count = self.folder / 'answer-result.partial.json', 0
        for line in path.read_text().splitlines() if path.exists() else []:
            with contextlib.suppress(ValueError):  # a line cut off is no answer
                count += 'answer' in json.loads(line)
        return count

    def expected_chats(self) -> list[dict]:
        """Every body record must send, in order, from the real strategies, cases and counter."""
        bodies = []
        for strategy in RULES.values():
            for case in held_out_cases():
                messages = strategy(case, counter())['messages']
                for seed in (1, 2, 3, 4, 5):
                    bodies.append({'model': 'gemma4:e2b', 'messages': messages, 'stream': False, 'think': False,
                                   'options': {'temperature': 1.0, 'top_k': 64, 'top_p': 0.95, 'seed': seed,
                                               'num_ctx': 384, 'num_predict': 96}})
        return bodies

    def test_record_sends_the_pinned_request_for_every_strategy_case_and_seed(self):
        with FakeOllama() as fake:
            code, out, err = self.run_main(['record'], fake.host)
        self.assertEqual(code, 0, err)
        # The digest is read again after every answer; the loaded context is asked for once, after the first.
        self.assertEqual([(m, p) for m, p, _ in fake.requests],
                         [('GET', '/api/version'), ('GET', '/api/tags'), ('POST', '/api/chat'), ('GET', '/api/tags'),
                          ('GET', '/api/ps')] + [('POST', '/api/chat'), ('GET', '/api/tags')] * 119)
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
        for number, (a, raw) in enumerate(zip(flat, sent), 1):
            with self.subTest(call=number):
                self.assertEqual(a['answer'], f'answer {number}')
                self.assertEqual(a['request_sha256'], hashlib.sha256(raw).hexdigest())
        grades = json.loads(self.grades.read_text())
        self.assertEqual((grades['answers_recorded'], grades['outdated_requests']), (120, []))
        with self.subTest('the lab counts every prompt as the official template and tokenizer do'):
            if OFFICIAL_TEMPLATE is None:
                self.skipTest(NO_ORACLE)
            # The fake reports the official count (test_support.server_count), not the lab's.
            self.assertEqual([(a['input_tokens'], a['prompt_tokens']) for a in flat],
                             [(server_count(body['messages']),) * 2 for body in fake.chats()])
            self.assertEqual(grades['prompt_token_mismatches'], [])

    @unittest.skipIf(OFFICIAL_TEMPLATE is None, NO_ORACLE)
    def test_prompt_token_mismatch_is_reported_apart_from_the_grades(self):
        def truncating(body, number):
            status, payload = counted_reply(body, number)
            if number == 7:  # recent, held-old-decision, seed 2: the server cut the prompt
                payload['prompt_eval_count'] -= 7
            return status, payload
        with FakeOllama(chat=truncating) as fake:
            code, out, err = self.run_main(['record'], fake.host)
        self.assertEqual(code, 0, err)
        counted = server_count(fake.chats()[6]['messages'])  # the official count, which the lab's must equal
        grades = json.loads(self.grades.read_text())
        self.assertEqual(grades['prompt_token_mismatches'], [
            {'strategy': 'recent', 'case': 'held-old-decision', 'seed': 2,
             'prompt_tokens': counted - 7, 'input_tokens': counted, 'cause': 'truncation'}])
        # Named for what a count below the lab's means: the lab's count of that very request is the official one.
        self.assertIn("\n1 answer whose prompt_tokens differ from the lab's count (truncated: the server read fewer "
                      'tokens than the request holds, so it dropped part of it, as Ollama drops the oldest messages '
                      'once a prompt exceeds num_ctx, or a server cuts what exceeds the context it loaded):\n  recent '
                      f'held-old-decision seed 2: server read {counted - 7} tokens, the lab counted {counted}\n', out)

    @unittest.skipIf(OFFICIAL_TEMPLATE is None, NO_ORACLE)  # without it every seed-1 count would mismatch too
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
        self.assertTrue(all(m['cause'] == 'cache accounting' and m['seed'] > 1 for m in mismatches))
        self.assertIn("\n96 answers whose prompt_tokens differ from the lab's count (probably the accounting of Ollama "
                      '0.30.0, which leaves cached prompt tokens out):\n', out)

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

    def test_unreadable_partial_file_gives_one_line_and_fresh_recovers(self):
        partial = self.folder / 'answer-result.partial.json'
        partial.write_text('{"ollama_digest": ')
        with FakeOllama(chat=steady_reply) as fake:
            code, out, err = self.run_main(['record'], fake.host)
            self.assertEqual((code, fake.chats()), (2, []))
            self.assertTrue(err.endswith(f'answer_check.py: {partial}: cannot be read as a partial recording '
                                         '(Expecting value: line 1 column 19 (char 18)); discard it with '
                                         f'`{PYTHON} answer_check.py record --fresh`\n'), err)
            self.assertEqual(self.run_main(['record', '--fresh'], fake.host)[0], 0)

    def test_partial_file_that_opens_with_no_model_block_names_the_field_in_one_line(self):
        partial = self.folder / 'answer-result.partial.json'
        for header, problem in (('{"model": [1]}', 'line 1: field model must be an object, got [1]'),
                                ('{"modle": {}}', "line 1: must be an object with exactly the fields ['model']; "
                                                  "missing ['model'], unexpected ['modle']")):
            with self.subTest(header=header), FakeOllama(chat=steady_reply) as fake:
                partial.write_text(header + '\n')
                code, out, err = self.run_main(['record'], fake.host)
                self.assertEqual((code, fake.chats()), (2, []))
                self.assertEqual(err.splitlines()[-1], f'answer_check.py: {partial}: {problem}; '
                                 f'discard it with `{PYTHON} answer_check.py record --fresh`')

    def test_answer_that_is_not_unicode_stops_the_recording_with_one_line(self):
        def lone_surrogate(body, number):  # JSON may escape half of a UTF-16 pair, which UTF-8 cannot store
            return (200, reply('Mateo \ud800')) if number == 3 else steady_reply(body, number)
        with FakeOllama(chat=lone_surrogate) as fake:
            code, out, err = self.run_main(['record'], fake.host)
        partial = self.folder / 'answer-result.partial.json'
        self.assertEqual((code, out, len(fake.chats())), (2, '', 3))
        self.assertNotIn('Traceback', err)
        self.assertEqual(err.splitlines()[-1].split(' at ')[0], f'answer_check.py: {partial}: not written: the '
                         'data holds text that is not valid Unicode (surrogates not allowed')
        self.assertEqual(len(self.partial()), 4)  # the model block, two answers and the loaded context
        self.assertEqual(self.kept(), 2)  # the answers before it are kept, for the next run

    def test_non_pinned_digest_refuses_record_and_keeps_the_recording(self):
        self.result.write_text('kept\n')
        with FakeOllama(digest=OTHER) as fake:
            code, out, err = self.run_main(['record'], fake.host)
        self.assertEqual((code, fake.chats(), self.result.read_text()), (2, [], 'kept\n'))
        self.assertEqual(len(err.strip().splitlines()), 1)

    def test_server_that_is_down_prints_one_line_and_no_traceback(self):
        host = f'http://127.0.0.1:{closed_port()}'
        with ollama_command(installed=True):  # without it the line adds advice to install Ollama first
            code, out, err = self.run_main(['record'], host)
        self.assertEqual((code, out), (2, ''))
        self.assertEqual(err, f'answer_check.py: no Ollama server answers at {host}: start it with '
                              '`ollama serve`, or set OLLAMA_HOST to the address it listens on\n')

    def test_why_answers_failed_is_joined_with_the_request_sent_and_a_changed_request_is_left_out(self):
        # Every answer names Mateo, except for the job queue, where it gives the replaced RabbitMQ.
        def chat(body, number):
            queue = 'job queue' in body['messages'][-1]['content']
            return 200, reply('We use RabbitMQ.' if queue else 'Mateo.', server_count(body['messages']) or 0, 3)
        with FakeOllama(chat=chat) as fake:
            self.assertEqual(self.run_main(['record'], fake.host)[0], 0)
        # By hand, from evaluation-result.json's rows of the held-out cases: held-latest passes for every rule;
        # a failure is the rule's where its request lacked a required fact (recent: all five other cases;
        # relevant and hybrid: held-spread and held-buried; notes: held-correction), else the model's; relevant,
        # notes and hybrid carried the stale RabbitMQ fact that the job-queue answers give.
        self.assertEqual(json.loads(self.grades.read_text())['failure_causes'], {
            'recent': causes(5, 0, 0, 25, 0), 'relevant': causes(5, 0, 15, 10, 5), 'notes': causes(5, 0, 20, 5, 5),
            'hybrid': causes(5, 0, 15, 10, 5)})
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
                          for s in RULES for seed in (1, 2, 3, 4, 5)])
        self.assertIn('20 answers recorded for requests that the current strategies', out)
        self.assertEqual({name: counts['passed'] for name, counts in grades['failure_causes'].items()},
                         dict.fromkeys(RULES, 0))  # held-latest's requests changed: its passes are left out
        self.assertIn('\n| recent | 0 | 0 | 0 | 25 | 0 |\n', out)

    def test_a_pass_the_request_did_not_earn_is_counted_apart_per_rule_in_the_table_and_the_grades(self):
        # As a real small model answered held-pronoun: a 3 from arithmetic, given to every request.
        with FakeOllama(chat=lambda body, n: (200, reply('15 days * 3 retries per cycle = 40 times', 40, 9))) as fake:
            code, out, err = self.run_main(['record'], fake.host)
        self.assertEqual(code, 0, err)
        grades = json.loads(self.grades.read_text())
        # By hand, from the rows above: held-pronoun passes for every rule, and only recent's request lacked its
        # fact; every other answer fails, the rule's where its request lacked a required fact.
        self.assertEqual({name: s['pass'] for name, s in grades['summary'].items()}, dict.fromkeys(RULES, 5))
        self.assertEqual(grades['failure_causes'], {
            'recent': causes(0, 5, 5, 20, 0), 'relevant': causes(5, 0, 15, 10, 0), 'notes': causes(5, 0, 20, 5, 0),
            'hybrid': causes(5, 0, 15, 10, 0)})
        self.assertIn('| Rule | Passed, every required fact in the request | Passed, a required fact not in the '
                      'request (a guess, or what the model knew) | Failed, every required fact in the request (the '
                      'model) |', out)
        self.assertIn('\n| recent | 0 | 5 | 5 | 20 | 0 |\n', out)

    def sampled(self, argv: list[str], chat=steady_reply, **options) -> tuple:
        """record argv on one held-out case drawn by --sample 1 (20 calls): (exit status, stdout, stderr, fake)."""
        with FakeOllama(chat=chat, **options) as fake:
            return (*self.run_main(['record', '--sample', '1', *argv], fake.host), fake)

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

    def test_the_partial_file_grows_by_one_line_per_answer_and_is_never_rewritten(self):
        partial, seen = self.folder / 'answer-result.partial.json', []

        def watching(body, number):
            seen.append(partial.read_bytes())
            return steady_reply(body, number)
        code, out, err, fake = self.sampled([], watching)
        self.assertEqual(code, 0, err)
        self.assertTrue(all(after.startswith(before) for before, after in zip(seen, seen[1:])))
        # The model block; then the first answer and the context the server loaded; then one answer a call.
        self.assertEqual([after[len(before):].count(b'\n') for before, after in zip(seen, seen[1:])], [2] + [1] * 18)
        self.assertEqual(seen[0].count(b'\n'), 1)

    def stopped_at(self, call: int) -> tuple[bytes, Path, list[str]]:
        """(the whole recording made without a stop, the partial file of a run a busy server stopped at `call`, its
        lines)."""
        whole = self.uninterrupted_sample()
        self.assertEqual(self.sampled([], lambda body, n: (503, {'error': 'busy'}) if n == call else
                                      steady_reply(body, n))[0], 2)
        partial = self.folder / 'answer-result.partial.json'
        return whole, partial, partial.read_text().splitlines()

    def test_lines_that_are_no_kept_answer_cost_only_their_own(self):
        whole, partial, lines = self.stopped_at(12)
        lines[4] = '{"strategy": "recent", "case": "held-latest", "answer": {"seed": "3"}}'
        partial.write_text('\n'.join(lines)[:-20])  # and the last line cut off, as a kill while writing leaves it
        code, out, err, fake = self.sampled([])
        self.assertEqual(code, 0, err)
        self.assertEqual(len(fake.chats()), 20 - 11 + 2)
        self.assertIn('answer-result.partial.json: line 5 is not a kept answer (answer: must be an object with exactly '
                      'the fields', err)
        self.assertIn('answer-result.partial.json: line 13 is not a kept answer (', err)
        self.assertEqual(self.result.read_bytes(), whole)

    def test_kept_line_naming_its_rule_by_a_list_costs_its_answer_not_a_traceback(self):
        whole, partial, lines = self.stopped_at(4)
        entry = json.loads(lines[1])
        lines[1] = json.dumps({**entry, 'strategy': [entry['strategy']]})
        partial.write_text('\n'.join(lines) + '\n')
        code, out, err, fake = self.sampled([])
        self.assertEqual(code, 0, err)
        self.assertEqual(len(fake.chats()), 20 - 3 + 1)
        self.assertIn('answer-result.partial.json: line 2 is not a kept answer (line: field strategy must be a '
                      'non-empty string, got ["recent"]', err)
        self.assertEqual(self.result.read_bytes(), whole)

    def uninterrupted_sample(self) -> bytes:
        folder = self.folder / 'uninterrupted'
        folder.mkdir()
        with FakeOllama(chat=steady_reply) as fake:
            self.assertEqual(self.run_main(['record', '--sample', '1'], fake.host, folder=folder)[0], 0)
        return (folder / 'answer-result.json').read_bytes()

    def test_time_left_is_estimated_from_the_recent_calls_not_the_first(self):
        # A clock of the run's own: each of the first 10 calls takes 1 s, each later one 60 s (a machine that came
        # under load). After call 20 the ten recent calls took 60 s each, so 20 calls of 60 s are left: 20 min.
        # From every call so far it would be (10 * 1 + 10 * 60) / 20 * 20 = 610 s, 10 min 10 s.
        clock = mock.Mock(now=0.0)
        clock.monotonic = lambda: clock.now

        def timed(body, number):
            clock.now += 1 if number <= 10 else 60
            return steady_reply(body, number)
        with mock.patch.object(answer_model, 'time', clock):
            code, out, err, fake = self.sampled(['--sample', '2'], timed)  # 40 calls
        self.assertEqual(code, 0, err)
        calls = [line for line in err.splitlines() if line.startswith('call ')]
        self.assertEqual(calls[19].split(': ', 2)[2], '60.0 s, about 20 min 0 s left')
        self.assertEqual(calls[9].split(': ', 2)[2], '1.0 s, about 30 s left')

    def test_time_left_counts_the_seconds_spent_writing_too(self):
        one_seed = self.folder / 'one-seed.json'
        one_seed.write_text(json.dumps({**load_model(), 'seeds': [1], 'trials': 1}))
        real_append = answer_model.append

        def slow_disk(path, entry):
            time.sleep(0.5)
            real_append(path, entry)
        with mock.patch.object(answer_model, 'append', slow_disk):
            code, out, err, fake = self.sampled(['--model', str(one_seed)])
        self.assertEqual(code, 0, err)
        first = next(line for line in err.splitlines() if line.startswith('call 1 of 4: '))
        self.assertGreaterEqual(int(re.fullmatch(r'.*, about (\d+) s left', first)[1]), 2, first)  # 3 x 0.5 s or more

    def test_fresh_with_a_folder_for_the_partial_file_is_one_line_and_no_call(self):
        partial = self.folder / 'answer-result.partial.json'
        partial.mkdir()
        for argv in (['record', '--fresh'], ['record']):
            with self.subTest(argv=argv), FakeOllama() as fake:
                code, out, err = self.run_main(argv, fake.host)
            self.assertEqual((code, out, fake.requests, partial.is_dir()), (2, '', [], True))
            self.assertEqual(err, f'answer_check.py: {partial}: not a file, so it cannot keep the answers so far; '
                                  'move it away, then run again\n')

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


class ShippedFilesTest(unittest.TestCase):
    def test_the_partial_file_record_keeps_is_git_ignored_under_any_name_and_named_in_the_answer_check_page(self):
        name = answer_check.RESULT_PATH.with_suffix(answer_check.PARTIAL_SUFFIX).name
        self.assertEqual(name, 'answer-result.partial.json')
        if not (HERE / '.git').exists():
            self.skipTest('not a git checkout, so nothing is ignored')
        for partial in (name, 'my-answers.partial.json', 'locomo-answers.partial.json'):
            with self.subTest(partial=partial):
                ignored = subprocess.run(['git', 'check-ignore', '--no-index', '-q', partial], cwd=HERE, timeout=60)
                self.assertEqual(ignored.returncode, 0, f'{partial} is not git-ignored')
        page = (HERE / 'docs' / 'answer-check.md').read_text(encoding='utf-8')
        self.assertIn(f'`{name}`', page)
        self.assertIn('\n.venv/bin/python answer_check.py record --fresh ', page)

    def test_thirty_of_the_120_requests_repeat_another_strategys_and_each_is_still_a_call_of_its_own(self):
        plan = answer_check.planned_requests(held_out_cases(), RULES, load_model())
        bodies = [json.dumps(item['body'], sort_keys=True) for item in plan]
        self.assertEqual((len(bodies), len(set(bodies))), (120, 90))
        self.assertEqual(len({item['key'] for item in plan}), 120)


if __name__ == '__main__':
    unittest.main()
