"""Tests for the answer check for memory blocks: `.venv/bin/python memory_answers.py [record]`.

    .venv/bin/python -m unittest -v test_memory_answers

They run the real client and recording against the fake Ollama server of test_support.py on 127.0.0.1 (every HTTP
request is checked to go there, and OLLAMA_HOST points at a closed loopback port), with the real memory cases,
fills and prepared counter. Pinned: the 150 requests and the recording's exact shape, a stopped run resumed without
asking again for what it kept, Ctrl-C, --fresh, grades worked out by hand, a key expecting what no required fact
states, and the line printed when nothing is recorded. Every file a test writes goes to a temporary folder.
"""
import hashlib
import json
import os
from pathlib import Path
import tempfile
import unittest
from unittest import mock

from answer_model import load_model
from common import python_command
import memory_answers
from ollama_client import OllamaClient
from test_support import (FakeLlamaServer, FakeOllama, LLAMA_MODEL, LOADED_CONTEXT, SERVER_VERSION, client_for,
                          only_loopback as setUpModule, reply, server_count)
from test_support_fixtures import HERE
from test_support_oracle import NO_ORACLE, OFFICIAL_TEMPLATE
from test_support_runs import run_answer_check, run_command

FILLS = ['managed-all', 'managed-relevant', 'append-all']
CASES = json.loads((HERE / 'memory-cases.json').read_text(encoding='utf-8'))
ROWS = json.loads((HERE / 'memory-result.json').read_text(encoding='utf-8'))['questions']  # memory_eval's rows
QUESTION_IDS = {question['question']: question['id'] for question in CASES['questions']}
PYTHON_RECORD = f'{python_command()} memory_answers.py record'


def question_of(body: dict) -> str:
    return QUESTION_IDS[body['messages'][1]['content'].rsplit('Question: ', 1)[1]]


def steady(body: dict, number: int) -> tuple[int, dict]:
    """An answer that depends only on the request, so a resumed run can give it again."""
    sha = hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()
    return 200, reply(f'answer to {sha[:16]}', server_count(body['messages']) or 0, 3)


# Hand-made answers by question and seed; every other answer says the memory does not hold it.
HAND_MADE = {('ana-city', 1): 'Your home city is Lisbon.', ('ana-city', 2): 'Your home city is Porto.',
             ('ana-city', 3): 'You moved from Porto to Lisbon.', ('ana-city', 4): '',
             ('bob-desk-approval', 1): 'Ask your manager, Priya Shah.',
             ('cleo-desk-manager', 1): 'Your desk is 5-210 and your manager is Ines Moreau.',
             ('cleo-desk-manager', 2): 'Your desk is 5-210.'}


def hand_made(body: dict, number: int) -> tuple[int, dict]:
    text = HAND_MADE.get((question_of(body), body['options']['seed']), 'The memory does not say.')
    return 200, reply(text, server_count(body['messages']) or 0, 5)


class MemoryAnswersTest(unittest.TestCase):
    def setUp(self):
        folder = tempfile.TemporaryDirectory()
        self.addCleanup(folder.cleanup)
        self.folder = Path(folder.name)
        self.result, self.grades = self.folder / 'memory-answer-result.json', self.folder / 'memory-answer-grades.json'

    def run_main(self, argv: list[str], client=None, **paths) -> tuple[int, str, str]:
        options = {'result_path': self.result, 'grades_path': self.grades, 'client': client, **paths}
        return run_command(lambda args: memory_answers.main(args, **options), argv, 'memory_answers.py')

    def record(self, chat=steady, argv=('record',)) -> tuple[int, str, str, FakeOllama]:
        with FakeOllama(chat=chat) as fake:
            return *self.run_main(list(argv), client_for(fake.host)), fake

    def test_record_asks_for_every_question_with_each_fill_and_seed_and_keeps_each_answer_as_sent(self):
        code, out, err, fake = self.record()
        self.assertEqual(code, 0, err)
        self.assertEqual(sorted(p.name for p in self.folder.iterdir()), [self.grades.name, self.result.name])
        chats, sent = fake.chats(), [raw for _, path, raw in fake.requests if path == '/api/chat']
        self.assertEqual(len(chats), 150)
        self.assertEqual(len([line for line in err.splitlines() if line.startswith('call ')]), 150)
        expected, answers = [], []
        for fill in FILLS:  # fill by fill, question by question in file order, seeds 1 to 5
            for question, row in zip(CASES['questions'], ROWS[fill]):
                for seed in (1, 2, 3, 4, 5):
                    options = {'temperature': 1.0, 'top_k': 64, 'top_p': 0.95, 'seed': seed, 'num_ctx': 512,
                               'num_predict': 96}
                    expected.append((question['id'], {'model': 'gemma4:e2b', 'stream': False, 'think': False,
                                                      'options': options}, row['lines']))
                    raw = sent[len(answers)]
                    answers.append({'seed': seed, 'answer': steady(chats[len(answers)], 0)[1]['message']['content'],
                                    'tool_calls': [], 'done_reason': 'stop',
                                    'prompt_tokens': server_count(chats[len(answers)]['messages']) or 0,
                                    'answer_tokens': 3, 'request_sha256': hashlib.sha256(raw).hexdigest(),
                                    'input_tokens': row['input_tokens']})
        # Each request is the instructions, then memory_eval's block of as many lines as its row graded.
        self.assertEqual([(question_of(body), {k: v for k, v in body.items() if k != 'messages'},
                           body['messages'][1]['content'].count('\n- ')) for body in chats], expected)
        self.assertTrue(all(body['messages'][0] == {'role': 'system', 'content': CASES['instructions']}
                            for body in chats))
        cases_sha256 = hashlib.sha256((HERE / 'memory-cases.json').read_bytes()).hexdigest()
        by_fill = {fill: {q['id']: answers[50 * f + 5 * i:50 * f + 5 * i + 5] for i, q in enumerate(CASES['questions'])}
                   for f, fill in enumerate(FILLS)}
        self.assertEqual(json.loads(self.result.read_text()), {
            'model': {**load_model(), 'ollama_version': SERVER_VERSION, 'loaded_context_length': LOADED_CONTEXT},
            'chosen': {'split': 'all', 'sample': None, 'cases_sha256': cases_sha256}, 'answers': by_fill})
        self.assertEqual(json.loads(self.grades.read_text())['answers_recorded'], 150)
        with self.subTest('the lab counts every request as the official template does'):
            if OFFICIAL_TEMPLATE is None:
                self.skipTest(NO_ORACLE)
            self.assertEqual(json.loads(self.grades.read_text())['prompt_token_mismatches'], [])

    def test_a_stopped_run_resumes_without_asking_again_for_the_answers_it_kept(self):
        self.assertEqual(self.record()[0], 0)
        whole = self.result.read_bytes()
        self.result.unlink()
        code, out, err, fake = self.record(lambda body, n: (503, {'error': 'busy'}) if n == 40 else steady(body, n))
        self.assertEqual((code, len(fake.chats())), (2, 40), err)
        self.assertIn('call 40 of 150 (managed-all cleo-name seed 5): ', err)
        self.assertFalse(self.result.exists())
        code, out, err, fake = self.record()
        self.assertEqual(code, 0, err)
        self.assertIn('reusing 39 answers from memory-answer-result.partial.json; asking for 111 of 150\n', err)
        self.assertEqual(len(fake.chats()), 111)
        self.assertEqual(self.result.read_bytes(), whole)  # as one uninterrupted run writes it

    def test_ctrl_c_keeps_the_answers_so_far_and_fresh_discards_them(self):
        with FakeOllama(chat=steady) as fake:
            client = client_for(fake.host)
            asked = client.answer
            client.answer = lambda *args: (_ for _ in ()).throw(KeyboardInterrupt) if len(fake.chats()) == 9 \
                else asked(*args)
            code, out, err = self.run_main(['record'], client)
        self.assertEqual((code, err.splitlines()[-1]), (130, (
            'memory_answers.py: interrupted; memory-answer-result.json is replaced only once every answer has arrived; '
            'the answers so far are kept in memory-answer-result.partial.json for the next `record`')))
        code, out, err, fake = self.record(argv=('record', '--fresh'))
        self.assertEqual((code, len(fake.chats())), (0, 150), err)
        self.assertTrue(err.startswith('discarded memory-answer-result.partial.json\n'), err)

    def test_refusals_name_this_script_s_record_command(self):
        self.result.with_suffix('.partial.json').write_text('not json\n')
        code, out, err, fake = self.record()
        self.assertEqual((code, fake.chats()), (2, []))
        self.assertTrue(err.rstrip('\n').endswith(f'discard it with `{PYTHON_RECORD} --fresh`'), err)
        self.result.with_suffix('.partial.json').unlink()
        self.assertEqual(self.record()[0], 0)
        recorded = json.loads(self.result.read_text())
        del recorded['answers']['managed-relevant']['bob-dinner'][2]
        self.result.write_text(json.dumps(recorded))
        code, out, err = self.run_main([])
        self.assertEqual((code, out), (2, ''))
        self.assertEqual(err, f'memory_answers.py: {self.result}: 1 answer missing, such as managed-relevant '
                              f'bob-dinner seed 3; record again with `{PYTHON_RECORD}`\n')

    def test_grading_with_model_refuses_a_recording_of_another_build_as_answer_check_does(self):
        # --model was taken, and ignored, when grading: the recording was graded whatever pin it named
        self.assertEqual(self.record()[0], 0)
        other = HERE / 'qwen-answer-model.json'
        code, out, err = self.run_main(['--model', str(other)])
        self.assertEqual((code, out), (2, ''))
        self.assertRegex(err, rf'^memory_answers\.py: {self.result}: recorded with a build other than the one '
                              rf'{other} pins \(api, .*\), so its answers are not graded')
        self.assertEqual(self.run_main(['--model', str(HERE / 'answer-model.json')])[0], 0)

    def test_hand_made_answers_get_the_verdicts_and_causes_worked_out_by_hand(self):
        code, out, err, fake = self.record(hand_made)
        self.assertEqual(code, 0, err)
        grades = json.loads(self.grades.read_text())
        # Each fill: ana-city seeds 1 and 3, bob-desk-approval seed 1 and cleo-desk-manager seed 1 pass; ana-city seed 4
        # is empty; the 43 saying the memory does not say it, ana-city seed 2 (Porto) and cleo-desk-manager seed 2 (no
        # manager) fail.
        row = {'pass': 4, 'fail': 45, 'incomplete': 1, 'said_missing': 43, 'stale_as_current': 1,
               'cases_passed_every_trial': 0}
        self.assertEqual(grades['summary'], dict.fromkeys(FILLS, row))
        self.assertEqual(grades['graded']['append-all']['ana-city'], [
            {'seed': 1, 'verdict': 'pass', 'reason': 'every required fact'},
            {'seed': 2, 'verdict': 'fail', 'reason': 'presents a replaced decision as current'},
            {'seed': 3, 'verdict': 'pass', 'reason': 'every required fact'},
            {'seed': 4, 'verdict': 'incomplete', 'reason': 'no answer'},
            {'seed': 5, 'verdict': 'fail', 'reason': 'says the fact is missing'}])
        # memory_eval's rows: cleo-name's fact is in no block; managed-relevant also misses ana-lunch's,
        # cleo-emergency's and Bob's manager, so its pass there is one no request earned; only append-all sends Porto.
        self.assertEqual(grades['failure_causes'], {
            'managed-all': {'passed': 4, 'passed_fact_missing': 0, 'model_failed': 41, 'rule_failed': 5,
                            'stale_carried': 0},
            'managed-relevant': {'passed': 3, 'passed_fact_missing': 1, 'model_failed': 27, 'rule_failed': 19,
                                 'stale_carried': 0},
            'append-all': {'passed': 4, 'passed_fact_missing': 0, 'model_failed': 41, 'rule_failed': 5,
                           'stale_carried': 1}})
        self.assertEqual(grades['answers_to_read'], [{'strategy': fill, 'case': 'ana-city', 'seed': 3,
                                                      'sentence': 'You moved from Porto to Lisbon.'} for fill in FILLS])
        self.assertIn('| managed-relevant | 4 of 50 | 45 | 43 | 1 | 0 of 10 |\n', out)

    def test_a_key_expecting_a_fact_no_required_fact_states_is_refused_in_one_line_before_any_call(self):
        keys = json.loads((HERE / 'memory-answer-keys.json').read_text())
        keys['keys']['bob-desk-approval']['must'] = ['facilities']  # the seed's key: an approver no fact names
        path = self.folder / 'keys.json'
        path.write_text(json.dumps(keys))
        code, out, err, fake = self.record(argv=('record', '--keys', str(path)))
        self.assertEqual((code, out, fake.requests), (2, '', []))
        self.assertEqual(err, f"memory_answers.py: {path}: keys.bob-desk-approval.must[0] 'facilities' matches none "
                              "of the case's required facts, so no request could earn it; a key expects only what a "
                              'required fact states\n')
        self.assertEqual(sorted(p.name for p in self.folder.iterdir()), ['keys.json'])

    def test_record_takes_another_pin_with_model_and_writes_where_output_says_its_grades_beside_it(self):
        pin, output = self.folder / 'my-model.json', self.folder / 'my-answers.json'
        pin.write_text(json.dumps({**load_model(), 'trials': 2, 'seeds': [7, 8]}))
        with FakeOllama(chat=steady) as fake, mock.patch.dict(os.environ, {'OLLAMA_HOST': fake.host}):
            code, out, err = self.run_main(['record', '--model', str(pin), '--output', str(output)],
                                           OllamaClient(load_model(pin)))  # the client record makes from --model
        self.assertEqual((code, len(fake.chats())), (0, 60), err)  # 10 questions x 3 fills x the pin's 2 seeds
        self.assertEqual({body['options']['seed'] for body in fake.chats()}, {7, 8})
        self.assertEqual(sorted(p.name for p in self.folder.iterdir()),
                         ['my-answers.grades.json', 'my-answers.json', 'my-model.json'])  # the defaults untouched
        self.assertEqual(json.loads(output.read_text())['model']['seeds'], [7, 8])
        code, again, err = self.run_main(['--output', str(output)])  # graded offline with the recording's own pin
        self.assertEqual((code, err, again), (0, '', out))

    def test_with_no_recording_one_line_says_nothing_is_recorded_and_how_to_record(self):
        code, out, err = self.run_main([])
        self.assertEqual((code, err), (0, ''))
        self.assertEqual(out, 'Nothing is recorded: there is no memory-answer-result.json. To record, start Ollama'
                              ', run `ollama pull gemma4:e2b`, then check that the ID column of `ollama list` starts '
                              f'with b37049369adf, the pinned build; then run `{PYTHON_RECORD}` (150 calls).\n')
        self.assertEqual(list(self.folder.iterdir()), [])

    def test_with_no_recording_an_openai_pin_names_its_server_not_an_ollama_tag(self):
        pin = self.folder / 'pin.json'
        with FakeLlamaServer() as fake:
            code, _, err = run_answer_check(['pin', LLAMA_MODEL, '--api', 'openai', '--base-url', fake.base_url,
                                             '--counter', 'gemma-4-e2b', '--output', str(pin), '--seeds', '1'])
        self.assertEqual((code, err), (0, ''))
        code, out, err = self.run_main(['--model', str(pin)])  # a KeyError on ollama_tag before
        self.assertEqual((code, err), (0, ''))
        self.assertEqual(out, 'Nothing is recorded: there is no memory-answer-result.json. To record, start the server '
                              f'at {fake.base_url} with {LLAMA_MODEL}; then run `{PYTHON_RECORD}` (30 calls).\n')


if __name__ == '__main__':
    unittest.main()
