"""Tests for `answer_check.py` with one's own model, cases, rule and keys: pin -> record -> grade, as
docs/answer-check.md shows it, and the options that choose what is recorded.

    .venv/bin/python -m unittest -v test_answer_check_own.py

The model, cases, keys and rule are a user's own, written for these tests. Two tests pin a Llama and skip where
its counter is not prepared.
Commands run through common.run, as a user's do, against the fake Ollama server of test_support.py on
127.0.0.1; no model is called. Every file a test writes goes to a temporary directory; the shipped files are only
read. Every HTTP request in these tests is checked to go to 127.0.0.1, and OLLAMA_HOST points at a closed loopback
port, so no test can reach a real server.
"""
import contextlib
from datetime import date
import json
import os
import re
import shlex
import unittest
from unittest import mock
from unittest.mock import ANY

from answer_model import load_model
from lab_files import sha256_file
from test_support import DETAILS, FakeOllama, OTHER, SERVER_VERSION, only_loopback as setUpModule, reply
from test_support_fixtures import AnswerFilesTest, HERE, REDO, prepared_or_skip
from test_support_runs import run_answer_check
from tokenizer import counter


PY = ['.venv/bin/python', 'answer_check.py']  # how the docs start the answer check
# A user's own material, written for these tests: two held-out cases and a development one, their keys, and a
# rule that sends only the last turn of the conversation.
TURN = 'Answer only from the conversation.'
MY_CASES = [
    {'id': 'my-reviewer', 'split': 'held_out', 'kind': 'older fact', 'instructions': TURN,
     'current': 'Who reviews the release notes?', 'budget': {'context_limit': 384, 'max_new_tokens': 96, 'margin': 32},
     'history': [{'user': 'Who reviews the release notes?', 'assistant': 'Ana reviews the release notes.'},
                 {'user': 'And the blog?', 'assistant': 'Tom reviews the blog.'}],
     'required': ['Ana reviews the release notes.'], 'stale': []},
    {'id': 'my-port', 'split': 'held_out', 'kind': 'corrected fact', 'instructions': TURN,
     'current': 'Which port does the API use?', 'budget': {'context_limit': 384, 'max_new_tokens': 96, 'margin': 32},
     'history': [{'user': 'Which port?', 'assistant': 'The API listens on port 8080.'},
                 {'user': 'Change it?', 'assistant': 'We moved the API to port 9090.'}],
     'required': ['We moved the API to port 9090.'], 'stale': ['The API listens on port 8080.']},
    {'id': 'my-dev', 'split': 'dev', 'kind': 'older fact', 'instructions': TURN, 'current': 'Who signs off?',
     'budget': {'context_limit': 384, 'max_new_tokens': 96, 'margin': 32},
     'history': [{'user': 'Who signs off?', 'assistant': 'Lea signs off.'}], 'required': ['Lea signs off.'],
     'stale': []}]
MY_KEYS = {'keys': {'my-reviewer': {'must': [r'\bana\b'], 'stale': []},
                    'my-port': {'must': ['9090'], 'stale': ['8080']}, 'my-dev': {'must': ['lea'], 'stale': []}}}
MY_RULES = """
def last_turn(case, count):
    turn = case['history'][-1]
    return [{'role': 'system', 'content': case['instructions']}, {'role': 'user', 'content': turn['user']},
            {'role': 'assistant', 'content': turn['assistant']}, {'role': 'user', 'content': case['current']}]


RULES = {'last turn': last_turn}
"""


def reads_the_request(body: dict, number: int) -> tuple[int, dict]:
    """An answer that gives what the request says: the reviewer, the newer port, or that it cannot tell."""
    text = '\n'.join(message['content'] for message in body['messages'])
    answer = ('Ana reviews them.' if 'Ana reviews' in text else 'The API uses port 9090.' if '9090' in text
              else "The conversation doesn't say.")
    return 200, reply(answer, 40, 5)


class AnswerCheckPageTest(AnswerFilesTest):
    def test_the_pages_workflow_for_ones_own_model_cases_and_rule_runs_as_written(self):
        prepared_or_skip(self, 'llama-3.2')  # the counter of the page's llama3.2:1b
        page = (HERE / 'docs' / 'answer-check.md').read_text(encoding='utf-8')
        section = page.split('\n## Your own model, cases and rule\n')[1].split('\n## ')[0]
        files = re.findall(r'`([\w.-]+)`:\n\n```\w+\n(.*?)```', section, re.S)
        self.assertEqual([name for name, _ in files], ['my-cases.json', 'my_rules.py', 'my-keys.json'])
        for name, text in files:
            (self.folder / name).write_text(text)
        commands = [shlex.split(line, comments=True) for line in re.findall(r'```sh\n(.*?)```', section, re.S)[0]
                    .splitlines()]
        self.assertEqual([words[:3] for words in commands], [
            ['ollama', 'pull', 'llama3.2:1b'], [*PY, 'pin'], [*PY, 'record'], [*PY, '--cases']])
        with (FakeOllama(digest=OTHER, tags=('llama3.2:1b',), chat=reads_the_request, family='llama') as fake,
              mock.patch.dict(os.environ, {'OLLAMA_HOST': fake.host}), contextlib.chdir(self.folder)):
            for words in commands[1:]:  # as a user types them in the lab's folder; `ollama pull` needs a real server
                code, out, err = run_answer_check(words[2:])
                self.assertEqual(code, 0, err)
        self.assertEqual(sorted(path.name for path in self.folder.iterdir()), [
            'my-answers.grades.json', 'my-answers.json', 'my-cases.json', 'my-keys.json', 'my-model.json',
            'my_rules.py'])
        self.assertEqual(len(fake.chats()), 20)  # the four rules and `last turn`, two cases, two seeds
        self.assertEqual(json.loads((self.folder / 'my-model.json').read_text())['counter'], 'llama-3.2')
        grades = json.loads((self.folder / 'my-answers.grades.json').read_text())
        # By hand: the last turn holds the new port (2 passes) but not the reviewer (2 answers say it is missing,
        # and the request lacked the required fact: the rule's failure).
        self.assertEqual(grades['summary']['last turn'], {'pass': 2, 'fail': 2, 'incomplete': 0, 'said_missing': 2,
                                                          'stale_as_current': 0, 'cases_passed_every_trial': 1})
        self.assertEqual(grades['failure_causes']['last turn'], {
            'passed': 2, 'passed_fact_missing': 0, 'model_failed': 0, 'rule_failed': 2, 'stale_carried': 0})


class OwnModelCasesAndRulesTest(AnswerFilesTest):
    """pin -> record -> grade with a user's own model, case file, rules file and keys, as docs/answer-check.md
    shows it, through the real client and the fake server."""

    def setUp(self):
        super().setUp()
        for name, text in (('my-cases.json', json.dumps(MY_CASES)), ('my-keys.json', json.dumps(MY_KEYS)),
                           ('my_rules.py', MY_RULES)):
            (self.folder / name).write_text(text)
        self.own = ['--cases', str(self.folder / 'my-cases.json'), '--keys', str(self.folder / 'my-keys.json'),
                    '--rules', str(self.folder / 'my_rules.py')]

    def run_at(self, fake: FakeOllama, argv: list[str]) -> tuple:
        with mock.patch.dict(os.environ, {'OLLAMA_HOST': fake.host}):
            return run_answer_check(argv, result_path=self.result, grades_path=self.grades)

    def test_pin_record_and_grade_a_model_cases_and_rule_of_ones_own(self):
        pin, answers = self.folder / 'my-model.json', self.folder / 'my-answers.json'
        with FakeOllama(digest=OTHER, tags=('tiny:1b',), chat=reads_the_request) as fake:
            argv = ['pin', 'tiny:1b', '--output', str(pin), '--seeds', '7', '8', '--temperature', '0.5']
            # A model the lab has no counter for: one line, no pin, and no counter named unless asked for.
            self.assertEqual(self.run_at(fake, argv)[::2], (2, (
                'answer_check.py: the lab has no counter for tiny:1b (Ollama family gemma4), so it cannot size its '
                'requests; pin it with --counter NAME to count as another model does (--counter closest: the '
                'nearest of its family, if any)\n')))
            self.assertFalse(pin.exists())
            code, out, err = self.run_at(fake, [*argv, '--counter', 'closest'])
            self.assertEqual((code, err), (0, ''))
            self.assertEqual(out, f'{pin}: pins tiny:1b at digest {OTHER} on Ollama {SERVER_VERSION}, counted by '
                                  'gemma-4-e2b, not its own counter, so prompt_tokens will not be compared\n')
            self.assertEqual(json.loads(pin.read_text()), {
                'checked_on': date.today().isoformat(), 'license': 'Apache License',
                'publisher_model': DETAILS['family'], 'quantization': DETAILS['quantization_level'],
                'parameters': DETAILS['parameter_size'], 'ollama_tag': 'tiny:1b', 'ollama_digest': OTHER,
                'ollama_version': SERVER_VERSION, 'options': {'temperature': 0.5, 'top_k': 64, 'top_p': 0.95},
                'think': False, 'trials': 2, 'seeds': [7, 8], 'counter': 'gemma-4-e2b'})
            code, out, err = self.run_at(fake, ['record', '--model', str(pin), '--output', str(answers), *self.own])
        self.assertEqual(code, 0, err)
        self.assertIn('asking for 20 answers; the first call may also load the model\n', err)  # 5 rules x 2 x 2
        self.assertTrue(out.startswith('Answers of tiny:1b, counted by gemma-4-e2b, not its own counter:\n'), out[:80])
        self.assertIn('\nprompt_tokens are not compared: gemma-4-e2b is not the counter of tiny:1b.\n', out)
        chats = fake.chats()
        self.assertEqual([(c['model'], c['options']['temperature'], c['options']['seed']) for c in chats],
                         [('tiny:1b', 0.5, 7), ('tiny:1b', 0.5, 8)] * 10)
        self.assertEqual(chats[-2]['messages'], [  # the rule of my_rules.py, on my-port: its last turn only
            {'role': 'system', 'content': TURN}, {'role': 'user', 'content': 'Change it?'},
            {'role': 'assistant', 'content': 'We moved the API to port 9090.'},
            {'role': 'user', 'content': 'Which port does the API use?'}])
        grades = json.loads((self.folder / 'my-answers.grades.json').read_text())
        self.assertEqual(list(grades['summary']), ['recent', 'relevant', 'notes', 'hybrid', 'last turn'])
        self.assertEqual((grades['answers_recorded'], grades['outdated_requests']), (20, []))
        self.assertFalse(self.result.exists())  # the default recording is not touched
        for again in (['--model', str(pin)], []):  # the recording carries its pin: --model need not be repeated
            code, out, err = run_answer_check([*again, '--output', str(answers), *self.own])
            self.assertEqual((code, json.loads((self.folder / 'my-answers.grades.json').read_text())), (0, grades))
        # answer-model.json's fields, in order, and the counter
        self.assertEqual(list(json.loads(pin.read_text())), [*load_model(), 'counter'])
        with FakeOllama(digest='b' * 64, tags=('tiny:1b',)) as moved:  # the tag after another `ollama pull`
            code, out, err = self.run_at(moved, ['record', '--model', str(pin), '--output', str(answers), *self.own])
        self.assertEqual((code, moved.chats()), (2, []))
        self.assertIn(f'has tiny:1b with digest {"b" * 64}, but the pinned build is {OTHER}', err)

    def test_a_pin_of_llama_3_1_records_its_counter_and_record_sends_the_requests_that_counter_chooses(self):
        prepared_or_skip(self, 'llama-3.1')
        # Written for this test: an allowance of 200 - 96 - 31 = 73 tokens, which holds both turns as Gemma counts
        # them and only the last as Llama 3.1 does, whose dated system header costs some 20 tokens more.
        window = {'id': 'my-window', 'split': 'held_out', 'kind': 'older fact', 'instructions': TURN,
                  'current': 'When may we deploy?',
                  'budget': {'context_limit': 200, 'max_new_tokens': 96, 'margin': 31},
                  'history': [{'user': 'When may we deploy?', 'assistant': 'Deploys run on Tuesday afternoons.'},
                              {'user': 'And rollbacks?',
                               'assistant': 'Rollbacks need approval from the on-call lead.'}],
                  'required': ['Deploys run on Tuesday afternoons.'], 'stale': []}
        (self.folder / 'window.json').write_text(json.dumps([window]))
        (self.folder / 'window-keys.json').write_text(json.dumps({'keys': {'my-window': {'must': ['tuesday'],
                                                                                          'stale': []}}}))
        pin, answers = self.folder / 'llama.json', self.folder / 'window-answers.json'
        own = ['--cases', str(self.folder / 'window.json'), '--keys', str(self.folder / 'window-keys.json'),
               '--output', str(answers)]
        with FakeOllama(digest=OTHER, tags=('llama3.1:8b',), family='llama', chat=reads_the_request) as fake:
            code, out, err = self.run_at(fake, ['pin', 'llama3.1:8b', '--output', str(pin), '--seeds', '1'])
            self.assertEqual((code, out, err), (0, f'{pin}: pins llama3.1:8b at digest {OTHER} on Ollama '
                                                   f'{SERVER_VERSION}, counted by llama-3.1\n', ''))
            self.assertEqual(json.loads(pin.read_text())['counter'], 'llama-3.1')
            code, out, err = self.run_at(fake, ['record', '--model', str(pin), *own])
        self.assertEqual(code, 0, err)
        sent = fake.chats()[0]['messages']  # recent's, the first of four rules on one case with one seed
        self.assertEqual(sent, [{'role': 'system', 'content': TURN}, {'role': 'user', 'content': 'And rollbacks?'},
                                {'role': 'assistant', 'content': 'Rollbacks need approval from the on-call lead.'},
                                {'role': 'user', 'content': 'When may we deploy?'}])
        self.assertEqual(json.loads(answers.read_text())['answers']['recent']['my-window'][0]['input_tokens'],
                         counter('llama-3.1')(sent))
        self.assertTrue(out.startswith('Answers of llama3.1:8b, counted by llama-3.1:\n| Strategy |'), out[:80])
        code, out, err = run_answer_check(own)  # offline, under the pin the recording carries
        grades = json.loads((self.folder / 'window-answers.grades.json').read_text())
        self.assertEqual((code, grades['outdated_requests']), (0, []), err)  # the same requests, counted the same
        # The fake reports 40 for every prompt, fewer than Llama 3.1 counts for each: named as truncation.
        self.assertEqual({(m['cause'], m['prompt_tokens']) for m in grades['prompt_token_mismatches']},
                         {('truncation', 40)})

    def test_answers_that_match_no_planned_request_name_the_option_grading_needs(self):
        # Written for this test: my-cases.json without my-port, and keys for what is left.
        (self.folder / 'fewer-cases.json').write_text(json.dumps([MY_CASES[0], MY_CASES[2]]))
        (self.folder / 'fewer-keys.json').write_text(json.dumps(
            {'keys': {name: key for name, key in MY_KEYS['keys'].items() if name != 'my-port'}}))
        fewer = self.own[:-2]
        fewer[1], fewer[3] = str(self.folder / 'fewer-cases.json'), str(self.folder / 'fewer-keys.json')
        with FakeOllama(chat=reads_the_request) as fake:
            self.assertEqual(self.run_at(fake, ['record', *self.own])[0], 0)
        for argv, problem, advice in (
                (self.own[:-2], '10 answers that this run does not plan, such as last turn my-reviewer seed 1',
                 f'give the --rules it was recorded with, or {REDO}'),
                ([*fewer, *self.own[-2:]], '25 answers that this run does not plan, such as recent my-port seed 1',
                 f'it was recorded from a case file with sha256 {sha256_file(self.folder / "my-cases.json")[:12]}, '
                 f'not {fewer[1]}: give that one with --cases')):
            with self.subTest(argv=argv):
                code, out, err = run_answer_check(argv, result_path=self.result, grades_path=self.grades)
                self.assertEqual((code, out, err.count('\n')), (2, '', 1))
                self.assertTrue(err.startswith(f'answer_check.py: {self.result}: {problem}, '), err)
                self.assertTrue(err.endswith(f'; {advice}\n'), err)

    def test_an_output_that_is_one_of_the_runs_inputs_is_refused_and_left_whole(self):
        cases, keys, pin = (self.folder / name for name in ('my-cases.json', 'my-keys.json', 'my-model.json'))
        pin.write_text(json.dumps(load_model()))
        before = {path: path.read_bytes() for path in (cases, keys, pin)}
        with FakeOllama(chat=reads_the_request) as fake:
            for argv, refused in ((['record', '--output', str(cases), *self.own], f'--output {cases}: the same file '
                                   f'as --cases {cases}, which this run reads'),
                                  (['record', '--output', str(keys), *self.own], f'--output {keys}: the same file as '
                                   f'--keys {keys}, which this run reads'),
                                  (['pin', 'gemma4:e2b', '--model', str(pin), '--output', str(pin)],
                                   f'--output {pin}: the same file as --model {pin}, which this run reads')):
                with self.subTest(argv=argv[:2]):
                    code, out, err = self.run_at(fake, argv)
                    self.assertEqual((code, out, err), (2, '', f'answer_check.py: {refused}; write the output '
                                                                'elsewhere\n'))
            self.assertEqual(fake.chats(), [])
        self.assertEqual({path: path.read_bytes() for path in before}, before)
        self.assertEqual(sorted(p.name for p in self.folder.iterdir()),
                         ['my-cases.json', 'my-keys.json', 'my-model.json', 'my_rules.py'])

    def test_split_and_sample_choose_the_cases_record_sends_and_grading_expects(self):
        with FakeOllama(chat=reads_the_request) as fake:
            code, out, err = self.run_at(fake, ['record', '--split', 'all', '--sample', '2', *self.own])
            self.assertEqual(code, 0, err)
            sent = [c['messages'][-1]['content'] for c in fake.chats()]
            asked = list(dict.fromkeys(sent))
            self.assertEqual((len(sent), len(asked)), (5 * 2 * 5, 2))
            order = [case['current'] for case in MY_CASES]
            self.assertEqual(asked, sorted(asked, key=order.index))  # kept in file order
            self.assertEqual(self.run_at(fake, ['--split', 'all', '--sample', '2', *self.own])[0], 0)
            self.assertEqual(self.run_at(fake, self.own), (0, ANY, ''))  # the recording carries its split and sample
            code, out, err = self.run_at(fake, ['--split', 'all', '--sample', '1', *self.own])
            self.assertEqual((code, err), (2, f'answer_check.py: {self.result}: recorded with --split all --sample 2, '
                                              'which it carries: grade it without --split and --sample\n'))
            code, out, err = self.run_at(fake, ['record', '--split', 'dev', *self.own])
            self.assertEqual(code, 0, err)
            self.assertEqual({c['messages'][-1]['content'] for c in fake.chats()[50:]}, {'Who signs off?'})
            code, out, err = self.run_at(fake, ['record', '--split', 'held_out', '--sample', '3', *self.own])
        self.assertEqual(err, 'answer_check.py: --sample 3: expected 1 to 2, the number of chosen cases\n')

    def test_more_than_500_calls_need_yes(self):
        model = {**load_model(), 'seeds': list(range(1, 12)), 'trials': 11}
        (self.folder / 'eleven.json').write_text(json.dumps(model))
        keys = {'keys': {case['id']: {'must': [re.escape(case['required'][0])], 'stale': []}
                         for case in json.loads((HERE / 'cases.json').read_text())}}
        (self.folder / 'all-keys.json').write_text(json.dumps(keys))
        argv = ['record', '--model', str(self.folder / 'eleven.json'), '--split', 'all', '--keys',
                str(self.folder / 'all-keys.json')]
        with FakeOllama() as fake:
            code, out, err = self.run_at(fake, argv)
        self.assertEqual((code, out, fake.requests), (2, '', []))
        self.assertEqual(err, 'answer_check.py: record would make 528 calls (4 rules x 12 cases x 11 seeds); add '
                              '--yes to make them, or choose fewer with --sample N\n')
        code, out, err = run_answer_check([*argv, '--yes'])  # past the question: the closed port answers no call
        self.assertEqual(code, 2)
        self.assertIn('no Ollama server answers at', err)

    def test_pinning_a_tag_the_server_lacks_writes_nothing(self):
        pin = self.folder / 'my-model.json'
        with FakeOllama() as fake:
            code, out, err = self.run_at(fake, ['pin', 'tiny:1b', '--output', str(pin)])
        self.assertEqual((code, out, pin.exists()), (2, '', False))
        self.assertEqual(err, f'answer_check.py: Ollama at {fake.host} has no tiny:1b: run `ollama pull tiny:1b`\n')

    def test_the_default_pin_refuses_another_build_of_ones_own_server(self):
        with FakeOllama(digest=OTHER, tags=('tiny:1b',)) as fake:
            code, out, err = self.run_at(fake, ['record', *self.own])
        self.assertEqual((code, fake.chats()), (2, []))
        self.assertIn('has no gemma4:e2b', err)

    def test_options_that_do_not_go_together_are_usage_errors(self):
        for argv in (['pin'], ['pin', 'tiny:1b'], ['record', 'again'], ['--fresh'], ['--yes'], ['--seeds', '1'],
                     ['record', '--temperature', '0.5'], ['--grader', 'f1'], ['--split', 'test'],
                     ['record', '--counter', 'llama-3.1']):
            with self.subTest(argv=argv):
                code, out, err = run_answer_check(argv)
                self.assertEqual((code, out), (2, ''))
                self.assertIn('answer_check.py: error: ', err)


if __name__ == '__main__':
    unittest.main()
