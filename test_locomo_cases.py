"""Tests for the LoCoMo conversion, the memory-lean loader and the per-kind table.

    .venv/bin/python -m unittest -v test_locomo_cases.py

LoCoMo's data is not in this repository (CC BY-NC 4.0), so the conversion is
tested on a small file in its shape (test_support_locomo). The files it refuses are
test_locomo_cases_errors.py's; the docs' figures against the real file test_locomo_cases_docs.py's.
Each test is named after the failure it pins; files are only ever written into
temporary directories.
"""
import ast
import json
from pathlib import Path
import subprocess
import sys
import tempfile
import unittest
from unittest import mock

from case_set import load_cases
from lab_files import read_json_file
from scorer import graded_row, totals
from locomo_cases import evidence_ids
from strategies import RULES
from test_support_fixtures import HERE
from test_support_locomo import EXPECTED_SUMMARY, PAGE, convert, locomo_sample, prose
from tokenizer import counter
from views import report_table


# The instructions docs/locomo.md states: the lab's line on what the conversation is, then LoCoMo's own request for
# an answer (task_eval/hf_llm_utils.py) after "Based on it,", and for temporal questions the sentence LoCoMo adds.
LOCOMO_ASK = ('write a short answer for the following question in a few words. Do not write complete and lengthy '
              'sentences. Answer with exact words from the conversations whenever possible.')
DATE_ASK = 'Use DATE of CONVERSATION to answer with an approximate date.'
ASKED = ('The conversation below is between two people, the user and the assistant, over several dated sessions. '
         f'Based on it, {LOCOMO_ASK}')
BUDGET = {'context_limit': 4096, 'max_new_tokens': 512, 'margin': 64}
HISTORY_ONE = [
    {'user': 'Session 1, 9:00 am on 1 May, 2023\nHi Ben, I adopted a cat.',
     'assistant': 'Nice! What is her name? [shared an image: a photo of a cat on a sofa]'},
    {'user': 'Her name is Miso.', 'assistant': ''},
    {'user': 'Session 2, 2:00 pm on 3 May, 2023', 'assistant': 'How is Miso settling in?'},
    {'user': 'She sleeps all day.', 'assistant': 'Cats do that.'},
]
HISTORY_TWO = [
    {'user': 'Session 1, 8:15 pm on 2 June, 2023\nI ran my first marathon on Sunday.',
     'assistant': 'Congratulations! How long did it take?'},
    {'user': 'Four hours and ten minutes.', 'assistant': 'That is a great time.'},
]


def expected_case(case_id: str, kind: str, current: str, history: list[dict], required: list[str]) -> dict:
    instructions = f'{ASKED} {DATE_ASK}' if kind == 'temporal' else ASKED
    return {'id': case_id, 'split': 'held_out', 'kind': kind, 'instructions': instructions, 'current': current,
            'history': history, 'budget': BUDGET, 'required': required, 'stale': []}


EXPECTED_CASES = [
    expected_case('one-q0', 'single-hop', 'What is the cat called?', HISTORY_ONE, ['Her name is Miso.']),
    expected_case('one-q1', 'temporal', 'When did Ann adopt the cat?', HISTORY_ONE,
                  ['Hi Ben, I adopted a cat.', 'She sleeps all day.']),
    expected_case('one-q2', 'multi-hop', 'What does the cat do?', HISTORY_ONE,
                  ['How is Miso settling in?', 'Nice! What is her name?', 'Cats do that.']),
    expected_case('one-q4', 'open-domain', 'How does the cat spend its days?', HISTORY_ONE, ['She sleeps all day.']),
    expected_case('one-q5', 'single-hop', 'What pet did Ann adopt?', HISTORY_ONE, ['Hi Ben, I adopted a cat.']),
    expected_case('one-q8', 'temporal', 'When did Ben ask about Miso?', HISTORY_ONE, ['How is Miso settling in?']),
    expected_case('two-q0', 'single-hop', 'How long did the marathon take?', HISTORY_TWO,
                  ['Four hours and ten minutes.']),
]


class ConversionTest(unittest.TestCase):
    def test_conversion_gives_exactly_the_expected_case_set(self):
        with tempfile.TemporaryDirectory() as folder:
            output, result = convert(folder, locomo_sample())
            self.assertEqual((result.returncode, result.stdout, result.stderr), (0, '', EXPECTED_SUMMARY))
            self.assertEqual(json.loads(output.read_text(encoding='utf-8')), EXPECTED_CASES)

    def test_instructions_are_locomos_request_for_a_short_answer_as_the_page_quotes_it(self):
        # Asked only to answer "from it", a small model wrote 300 characters where the gold answer is one word,
        # so LoCoMo's F1 measured length; LoCoMo asks for a few words, and for temporal questions a date.
        with tempfile.TemporaryDirectory() as folder:
            output, result = convert(folder, locomo_sample(), '--categories', '1,2,3,4,5')
            cases = json.loads(output.read_text(encoding='utf-8'))
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual({(case['kind'], case['instructions']) for case in cases},
                         {('temporal', f'{ASKED} {DATE_ASK}'), *((kind, ASKED) for kind in
                                                                 ('multi-hop', 'open-domain', 'single-hop',
                                                                  'adversarial'))})
        for wording in (LOCOMO_ASK, DATE_ASK, 'task_eval/hf_llm_utils.py'):
            self.assertTrue(wording in prose(PAGE), f'docs/locomo.md does not quote {wording!r}')

    def test_second_run_writes_identical_ascii_bytes(self):
        with tempfile.TemporaryDirectory() as folder:
            sample = locomo_sample()
            sample[1]['conversation']['session_1'][3]['text'] = 'That is a great time \U0001f3c3\u200d\u2640\ufe0f'
            output, first = convert(folder, sample)
            before = output.read_bytes()
            output, second = convert(folder, sample)
            self.assertEqual((first.returncode, second.returncode), (0, 0))
            self.assertEqual(output.read_bytes(), before)
            self.assertTrue(before.isascii())
            self.assertEqual(before.count(b'\n'), 2 + len(EXPECTED_CASES))  # one case a line between [ and ]
            self.assertIn('That is a great time \U0001f3c3\u200d\u2640\ufe0f',
                          json.loads(before)[-1]['history'][-1]['assistant'])

    def test_every_utterance_text_appears_exactly_once_unchanged(self):
        with tempfile.TemporaryDirectory() as folder:
            output, result = convert(folder, locomo_sample())
            converted = json.loads(output.read_text(encoding='utf-8'))
        self.assertEqual(result.returncode, 0, result.stderr)
        for sample in locomo_sample():
            # Every case of a conversation carries its whole history; its id starts with the sample id.
            histories = {json.dumps(case['history']) for case in converted
                         if case['id'].startswith(sample['sample_id'] + '-')}
            self.assertEqual(len(histories), 1, sample['sample_id'])
            said = '\n'.join(turn[role] for turn in json.loads(histories.pop()) for role in ('user', 'assistant'))
            for key, utterances in sample['conversation'].items():
                for item in utterances if key.startswith('session_') and isinstance(utterances, list) else []:
                    with self.subTest(sample=sample['sample_id'], utterance=item['dia_id']):
                        self.assertEqual(said.count(item['text']), 1)

    def test_the_output_loads_and_evaluate_runs_on_it(self):
        with tempfile.TemporaryDirectory() as folder:
            output, result = convert(folder, locomo_sample())
            self.assertEqual(len(load_cases(output)), len(EXPECTED_CASES))
            run = subprocess.run([sys.executable, 'evaluate.py', '--cases', str(output), '--format', 'table',
                                  '--group', 'kind'], cwd=HERE, capture_output=True, text=True, timeout=300)
        self.assertEqual(run.returncode, 0, run.stderr)
        # Each whole conversation fits in 3,520 tokens: recent and notes keep every turn and find every fact,
        # relevant and hybrid keep only turns sharing a word with the question ("Miso" is not "cat").
        self.assertEqual(run.stdout, '\n'.join([
            '| Strategy | Kind | Facts found | Complete cases | Cases with stale facts | Mean input tokens |',
            '|---|---|---|---|---|---|',
            '| recent | single-hop | 3 of 3 | 3 of 3 | 0 | 185.3 |',
            '| recent | temporal | 3 of 3 | 2 of 2 | 0 | 220.5 |',
            '| recent | multi-hop | 3 of 3 | 1 of 1 | 0 | 206 |',
            '| recent | open-domain | 1 of 1 | 1 of 1 | 0 | 208 |',
            '| relevant | single-hop | 0 of 3 | 0 of 3 | 0 | 110 |',
            '| relevant | temporal | 2 of 3 | 1 of 2 | 0 | 175 |',
            '| relevant | multi-hop | 1 of 3 | 0 of 1 | 0 | 134 |',
            '| relevant | open-domain | 0 of 1 | 0 of 1 | 0 | 136 |',
            '| notes | single-hop | 3 of 3 | 3 of 3 | 0 | 185.3 |',
            '| notes | temporal | 3 of 3 | 2 of 2 | 0 | 220.5 |',
            '| notes | multi-hop | 3 of 3 | 1 of 1 | 0 | 206 |',
            '| notes | open-domain | 1 of 1 | 1 of 1 | 0 | 208 |',
            '| hybrid | single-hop | 1 of 3 | 1 of 3 | 0 | 130 |',
            '| hybrid | temporal | 3 of 3 | 2 of 2 | 0 | 194 |',
            '| hybrid | multi-hop | 2 of 3 | 0 of 1 | 0 | 153 |',
            '| hybrid | open-domain | 1 of 1 | 1 of 1 | 0 | 155 |',
            # Every evidence turn fits, so the best possible selection finds every fact with the fewest turns.
            '| best possible (reads the labels) | single-hop | 3 of 3 | 3 of 3 | 0 | 107 |',
            '| best possible (reads the labels) | temporal | 3 of 3 | 2 of 2 | 0 | 146.5 |',
            '| best possible (reads the labels) | multi-hop | 3 of 3 | 1 of 1 | 0 | 190 |',
            '| best possible (reads the labels) | open-domain | 1 of 1 | 1 of 1 | 0 | 95 |']) + '\n')

    def test_options_set_budget_split_and_categories(self):
        with tempfile.TemporaryDirectory() as folder:
            output, result = convert(folder, locomo_sample(), '--context-limit', '16384', '--max-new-tokens', '256',
                                     '--margin', '0', '--categories', '5,2', '--split', 'dev')
            self.assertEqual(result.returncode, 0, result.stderr)
            cases = json.loads(output.read_text(encoding='utf-8'))
        self.assertEqual([(case['id'], case['kind'], case['split']) for case in cases],
                         [('one-q1', 'temporal', 'dev'), ('one-q3', 'adversarial', 'dev'),
                          ('one-q8', 'temporal', 'dev')])
        self.assertEqual(cases[0]['budget'], {'context_limit': 16384, 'max_new_tokens': 256, 'margin': 0})

    def test_malformed_evidence_strings_are_read_as_their_ids(self):
        self.assertEqual(evidence_ids(['D8:6; D9:17', 'D9:1 D4:4 D4:6', 'D:11:26', 'D', 'D30:05']),
                         [(8, 6), (9, 17), (9, 1), (4, 4), (4, 6), (11, 26), (30, 5)])
        self.assertEqual(evidence_ids(['D']), [])
        self.assertIsNone(evidence_ids(['D1:1', 'session 2']))


class GoldAnswersTest(unittest.TestCase):
    def test_answers_holds_the_gold_answer_of_each_converted_question_as_text(self):
        data = locomo_sample()
        data[0]['qa'][1]['answer'] = 2023  # a few of LoCoMo's answers are years, as integers
        with tempfile.TemporaryDirectory() as folder:
            answers = Path(folder) / 'locomo-answers.json'
            output, result = convert(folder, data, '--answers', str(answers))
            self.assertEqual((result.returncode, result.stdout, result.stderr), (0, '', EXPECTED_SUMMARY))
            self.assertEqual(json.loads(output.read_text(encoding='utf-8')), EXPECTED_CASES)
            self.assertEqual(json.loads(answers.read_text(encoding='utf-8')), {'answers': {
                case['id']: '2023' if case['id'] == 'one-q1' else f'gold: {case["current"]}'
                for case in EXPECTED_CASES}})

    def test_a_question_without_a_usable_answer_is_refused_only_when_answers_are_asked_for(self):
        for answer in (None, True, '  ', ['x']):
            data = locomo_sample()
            data[1]['qa'][0]['answer'] = answer
            with self.subTest(answer=answer), tempfile.TemporaryDirectory() as folder:
                output, result = convert(folder, data, '--answers', str(Path(folder) / 'answers.json'))
                self.assertEqual((result.returncode, result.stdout), (2, ''))
                self.assertEqual(result.stderr, f'locomo_cases.py: {Path(folder) / "locomo10.json"}: sample two: '
                                 f'field qa[0].answer must be a non-empty string or an integer, got '
                                 f'{json.dumps(answer)}\n')
                self.assertEqual(sorted(path.name for path in Path(folder).iterdir()), ['locomo10.json'])
                self.assertEqual(convert(folder, data)[1].returncode, 0)


class NamesTest(unittest.TestCase):
    def test_no_top_level_name_is_one_another_product_module_defines(self):
        # locomo_cases.SPLIT was tokenizer.SPLIT's name, a regular expression: a reader of one would look up the other.
        def defined(path: Path) -> set[str]:
            names = set()
            for node in ast.parse(path.read_text(encoding='utf-8')).body:
                targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, 'target', node)]
                names |= {getattr(target, 'name', getattr(target, 'id', None)) for target in targets}
            return names - {None, 'main', 'parse_args'}  # every script's entry points

        mine = defined(HERE / 'locomo_cases.py')
        for path in HERE.glob('*.py'):
            if path.name.startswith('test_') or path.name == 'locomo_cases.py':
                continue
            with self.subTest(path.name):
                self.assertEqual(mine & defined(path), set())


def parts(value) -> list:
    """Every list, object and string of at least two characters inside a JSON value (shorter ones are shared
    by Python itself)."""
    if isinstance(value, dict):
        return [value, *(part for item in value.values() for part in parts(item))]
    if isinstance(value, list):
        return [value, *(part for item in value for part in parts(item))]
    return [value] if isinstance(value, str) and len(value) > 1 else []


class LeanLoadingTest(unittest.TestCase):
    def test_equal_texts_turns_and_histories_become_one_object(self):
        with tempfile.TemporaryDirectory() as folder:
            output, result = convert(folder, locomo_sample())
            parsed = json.loads(output.read_text(encoding='utf-8'))
            loaded = load_cases(output)
        self.assertEqual(loaded, parsed)  # the shared copy holds the same case set
        self.assertIsNot(parsed[0]['history'], parsed[1]['history'])  # plain parsing keeps a copy per case
        self.assertIs(loaded[0]['history'], loaded[5]['history'])
        self.assertIsNot(loaded[0]['history'], loaded[6]['history'])  # another conversation
        self.assertIs(loaded[1]['required'][1], loaded[3]['required'][0])  # 'She sleeps all day.' twice
        self.assertIs(loaded[0]['instructions'], loaded[6]['instructions'])
        self.assertIs(loaded[0]['budget'], loaded[6]['budget'])

    def test_loaded_cases_hold_no_object_of_the_parsed_json(self):
        # One string kept from the parsed JSON would keep the memory around it from being freed.
        parsed = []

        def read_and_keep(path, what):
            parsed.append(read_json_file(path, what))
            return parsed[-1]

        with tempfile.TemporaryDirectory() as folder:
            output, result = convert(folder, locomo_sample())
            with mock.patch('case_set.read_json_file', read_and_keep):
                loaded = load_cases(output)
        self.assertEqual(loaded, parsed[0][0])
        self.assertFalse({id(part) for part in parts(loaded)} & {id(part) for part in parts(parsed[0][0])})

    def test_running_every_rule_on_shared_histories_changes_no_case(self):
        # Cases of one conversation share one history object, so a strategy or the grader that changed a case
        # would change its neighbours too; after running them all, the loaded cases still equal the file.
        with tempfile.TemporaryDirectory() as folder:
            output, result = convert(folder, locomo_sample())
            parsed = json.loads(output.read_text(encoding='utf-8'))
            loaded = load_cases(output)
        for case in loaded:
            for rule in RULES.values():
                graded_row(case, rule(case, counter()))
        self.assertEqual(loaded, parsed)


class GroupByKindTest(unittest.TestCase):
    ROWS = [{'case': 'a', 'split': 'dev', 'kind': 'temporal', 'turns': [0], 'notes': 0, 'input_tokens': 40,
             'within_budget': True, 'required_found': 1, 'required_total': 1, 'missing': [], 'stale_included': []},
            {'case': 'b', 'split': 'dev', 'kind': 'multi-hop', 'turns': [], 'notes': 0, 'input_tokens': 20,
             'within_budget': True, 'required_found': 0, 'required_total': 2, 'missing': ['x', 'y'],
             'stale_included': []},
            {'case': 'c', 'split': 'held_out', 'kind': 'temporal', 'turns': [1], 'notes': 1, 'input_tokens': 61,
             'within_budget': True, 'required_found': 1, 'required_total': 2, 'missing': ['z'],
             'stale_included': ['old']}]

    def report(self) -> dict:
        summary = {split: totals([row for row in self.ROWS if row['split'] == split])
                   for split in ('dev', 'held_out')}
        return {'summary': {'recent': summary}, 'cases': {'recent': self.ROWS},
                'best_possible': {'label': 'best possible (reads the labels)', 'cases': [], 'summary': {}}}

    def test_table_by_kind_has_a_row_per_kind_in_case_order(self):
        self.assertEqual(report_table(self.report(), 'kind'), '\n'.join([
            '| Strategy | Kind | Facts found | Complete cases | Cases with stale facts | Mean input tokens |',
            '|---|---|---|---|---|---|',
            '| recent | temporal | 2 of 3 | 1 of 2 | 1 | 50.5 |',
            '| recent | multi-hop | 0 of 2 | 0 of 1 | 0 | 20 |']) + '\n')

    def test_table_by_split_is_unchanged_by_default(self):
        self.assertEqual(report_table(self.report()), '\n'.join([
            '| Strategy | Split | Facts found | Complete cases | Cases with stale facts | Mean input tokens |',
            '|---|---|---|---|---|---|',
            '| recent | dev | 1 of 3 | 1 of 2 | 0 | 30 |',
            '| recent | held-out | 1 of 2 | 0 of 1 | 1 | 61 |']) + '\n')

    def test_group_without_a_table_is_a_usage_error(self):
        result = subprocess.run([sys.executable, 'evaluate.py', '--group', 'kind'], cwd=HERE, capture_output=True,
                                text=True, timeout=60)
        self.assertEqual((result.returncode, result.stdout), (2, ''))
        self.assertIn('--group shapes the table; use it with --format table', result.stderr)


if __name__ == '__main__':
    unittest.main()
