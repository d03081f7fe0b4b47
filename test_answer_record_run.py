"""Tests for the recording run, `.venv/bin/python answer_check.py record`: what a whole run sends, records and
reports.

    .venv/bin/python -m unittest -v test_answer_record_run.py

Pinned: the 120 requests in order, progress on stderr and the time left, the note on the server's version and on
the context /api/ps reports, cut-off answers graded as they stand, and why answers failed. The fake reports each
prompt's size as the official chat template and tokenizer give it, not as the lab counts it, so the prompt-token
checks compare two independent counts (they skip, naming the file, where the official template is absent).
They run the real client and recording against a fake Ollama server on 127.0.0.1, as test_support_record.py
says; no model is called, no test can reach a real server, and every file a test writes is a temporary one.
"""
import hashlib
import json
import re
import subprocess
import time
import unittest
from unittest import mock

import answer_check
import answer_model
from answer_model import load_model
from strategies import RULES
from test_support import (FakeOllama, LOADED_CONTEXT, OTHER, SERVER_VERSION, closed_port, counted_reply, ollama_command,
                          only_loopback as setUpModule, reply, server_count)
from test_support_fixtures import HERE, held_out_cases
from test_support_oracle import NO_ORACLE, OFFICIAL_TEMPLATE
from test_support_record import AnswerRecordTest, steady_reply


def causes(passed: int, passed_fact_missing: int, model_failed: int, rule_failed: int, stale_carried: int) -> dict:
    """One rule's failure_causes, written out by hand."""
    return {'passed': passed, 'passed_fact_missing': passed_fact_missing, 'model_failed': model_failed,
            'rule_failed': rule_failed, 'stale_carried': stale_carried}


class RecordTest(AnswerRecordTest):
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
