"""Tests for the LoCoMo conversion, the memory-lean loader and the per-kind table.

    .venv/bin/python -m unittest -v test_locomo_cases.py
    LOCOMO10=/path/to/locomo10.json .venv/bin/python -m unittest -v test_locomo_cases.py   # also checks the docs

LoCoMo's data is not in this repository (CC BY-NC 4.0), so the conversion is
tested on a small file in its shape written here. With LOCOMO10 naming the real
file, two more tests convert it and check docs/locomo.md's and the README's
figures against it; without it, a test still checks that the README's figures
are the ones docs/locomo.md's tables hold.
Each test is named after the failure it pins; files are only ever written into
temporary directories.
"""
import ast
import hashlib
import json
import os
from pathlib import Path
import re
import subprocess
import sys
import tempfile
import unittest
from unittest import mock

from case_set import load_cases
from lab_files import read_json, read_json_file
from scorer import graded_row, totals
from locomo_cases import evidence_ids
from strategies import RULES, build_request
from test_support_fixtures import HERE
from tokenizer import counter
from views import report_table

LOCOMO_SHA256 = '79fa87e90f04081343b8c8debecb80a9a6842b76a7aa537dc9fdf651ea698ff4'
README = HERE / 'README.md'
PAGE = HERE / 'docs' / 'locomo.md'  # the conversion in detail and the full tables


def prose(path: Path) -> str:
    """A page's text with every run of whitespace one space: figures in running text, whatever the line breaks."""
    return ' '.join(path.read_text(encoding='utf-8').split())


def utterance(speaker: str, dia_id: str, text: str, **image) -> dict:
    return {'speaker': speaker, 'dia_id': dia_id, 'text': text, **image}


def question(text: str, category: int, evidence: list[str]) -> dict:
    if category == 5:
        return {'question': text, 'adversarial_answer': 'never said', 'evidence': evidence, 'category': category}
    return {'question': text, 'answer': f'gold: {text}', 'evidence': evidence, 'category': category}


def locomo_sample() -> list[dict]:
    """Two conversations in LoCoMo's shape, with every awkward form the real file has."""
    first = {
        'speaker_a': 'Ann', 'speaker_b': 'Ben',
        'session_1_date_time': '9:00 am on 1 May, 2023',
        'session_1': [utterance('Ann', 'D1:1', 'Hi Ben, I adopted a cat.'),
                      utterance('Ben', 'D1:2', 'Nice! What is her name?', img_url=['https://example.org/cat.jpg'],
                                blip_caption='a photo of a cat on a sofa', query='cat sofa'),
                      utterance('Ann', 'D1:3', 'Her name is Miso.')],  # ends on Ann: the turn has no reply
        'session_2_date_time': '2:00 pm on 3 May, 2023',
        'session_2': [utterance('Ben', 'D2:1', 'How is Miso settling in?'),  # Ben opens the session
                      utterance('Ann', 'D2:2', 'She sleeps all day.'),
                      utterance('Ben', 'D2:3', 'Cats do that.')],
        'session_3_date_time': '1:00 pm on 9 May, 2023',  # a date with no session, as in conv-26
    }
    second = {
        'speaker_a': 'Cy', 'speaker_b': 'Di',
        'session_1_date_time': '8:15 pm on 2 June, 2023',
        'session_1': [utterance('Cy', 'D1:1', 'I ran my first marathon on Sunday.'),
                      utterance('Di', 'D1:2', 'Congratulations! How long did it take?'),
                      utterance('Cy', 'D1:3', 'Four hours and ten minutes.'),
                      utterance('Di', 'D1:4', 'That is a great time.')],
    }
    return [
        {'sample_id': 'one', 'conversation': first, 'event_summary': {}, 'observation': {}, 'session_summary': {},
         'qa': [question('What is the cat called?', 4, ['D1:3']),
                question('When did Ann adopt the cat?', 2, ['D1:1; D2:2']),
                question('What does the cat do?', 1, ['D2:1 D1:2 D2:3']),
                question('What is the dog called?', 5, ['D1:1']),
                question('How does the cat spend its days?', 3, ['D:2:2']),
                question('What pet did Ann adopt?', 4, ['D', 'D1:1']),
                question('Where does the cat sleep?', 4, ['D9:9']),
                question('Who is Ann?', 4, []),
                question('When did Ben ask about Miso?', 2, ['D2:01']),
                question('What colour is the cat?', 4, ['D']),
                question('What breed is the cat?', 4, ['see D1:1'])]},
        {'sample_id': 'two', 'conversation': second, 'event_summary': {}, 'observation': {}, 'session_summary': {},
         'qa': [question('How long did the marathon take?', 4, ['D1:3', 'D1:3'])]},
    ]


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
EXPECTED_SUMMARY = ('locomo_cases.py: 2 conversations, 12 questions read, 7 cases written; skipped: '
                    '1 category not chosen, 2 no evidence id, 1 evidence names no utterance, 1 evidence not an id\n')


def convert(folder: str, data, *options: str) -> tuple[Path, subprocess.CompletedProcess]:
    """Write `data` (JSON, or text as it is) and run locomo_cases.py on it; returns the output path and the run."""
    source, output = Path(folder) / 'locomo10.json', Path(folder) / 'locomo-cases.json'
    source.write_text(data if isinstance(data, str) else json.dumps(data), encoding='utf-8')
    result = subprocess.run([sys.executable, 'locomo_cases.py', str(source), '--output', str(output), *options],
                            cwd=HERE, capture_output=True, text=True, timeout=120)
    return output, result


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


class BadInputTest(unittest.TestCase):
    def test_each_bad_input_exits_2_with_one_line_and_writes_nothing(self):
        def changed(change):
            data = locomo_sample()
            change(data)
            return data

        def conversation(data):
            return data[0]['conversation']

        table_of_inputs = [
            ('invalid JSON', '[{"sample_id": ', 'invalid JSON at line 1 column 16: Expecting value'),
            ('not a list', '{"sample_id": "one"}', "expected LoCoMo's shape, a non-empty list of samples"),
            ('sample not an object', '[7]', 'sample at index 0: expected an object, got int'),
            ('no sample id', changed(lambda d: d[1].pop('sample_id')),
             'sample at index 1: missing field sample_id'),
            ('repeated sample id', changed(lambda d: d[1].update(sample_id='one')),
             'sample one: field sample_id repeats an earlier sample'),
            ('no conversation', changed(lambda d: d[0].pop('conversation')),
             'sample one: missing field conversation'),
            ('qa not a list', changed(lambda d: d[1].update(qa={})),
             'sample two: field qa must be a list of questions, got {}'),
            ('no speaker_b', changed(lambda d: conversation(d).pop('speaker_b')),
             'sample one: missing field conversation.speaker_b'),
            ('no sessions', changed(lambda d: d[1].update(conversation={'speaker_a': 'Cy', 'speaker_b': 'Di'})),
             'sample two: field conversation holds no session_N list'),
            ('no session date', changed(lambda d: conversation(d).pop('session_2_date_time')),
             'sample one: missing field conversation.session_2_date_time'),
            ('empty session', changed(lambda d: conversation(d).update(session_2=[])),
             'sample one: field conversation.session_2 must be a non-empty list of utterances, got []'),
            ('unknown speaker', changed(lambda d: conversation(d)['session_1'][1].update(speaker='Bob')),
             'sample one: field conversation.session_1[1].speaker must be one of [\'Ann\', \'Ben\'], got "Bob"'),
            ('speaker twice in a row', changed(lambda d: conversation(d)['session_2'][1].update(speaker='Ben')),
             'sample one: field conversation.session_2[1].speaker repeats the previous speaker; '
             'LoCoMo alternates speakers'),
            ('no text', changed(lambda d: conversation(d)['session_1'][0].pop('text')),
             'sample one: missing field conversation.session_1[0].text'),
            ('caption not text', changed(lambda d: conversation(d)['session_1'][1].update(blip_caption=None)),
             'sample one: field conversation.session_1[1].blip_caption must be a non-empty string, got null'),
            ('bad utterance id', changed(lambda d: conversation(d)['session_1'][0].update(dia_id='1:1')),
             'sample one: field conversation.session_1[0].dia_id must be an id like D1:3, got "1:1"'),
            ('repeated utterance id', changed(lambda d: conversation(d)['session_2'][0].update(dia_id='D1:1')),
             "sample one: field conversation.session_2[0].dia_id repeats 'D1:1'"),
            ('utterance number past 4,300 digits', changed(lambda d: conversation(d)['session_1'][0].update(
                dia_id='D1:' + '9' * 5000)),  # int() would refuse it with a traceback
             f'sample one: field conversation.session_1[0].dia_id must be an id like D1:3, got "D1:{"9" * 33}...'),
            ('session number past 4,300 digits', changed(lambda d: d[1].update(conversation={
                'speaker_a': 'Cy', 'speaker_b': 'Di', 'session_' + '1' * 5000: []})),
             'sample two: field conversation holds no session_N list'),
            ('unknown category', changed(lambda d: d[1]['qa'][0].update(category=6)),
             'sample two: field qa[0].category must be one of [1, 2, 3, 4, 5], got 6'),
            ('category as a float', changed(lambda d: d[1]['qa'][0].update(category=4.0)),
             'sample two: field qa[0].category must be one of [1, 2, 3, 4, 5], got 4.0'),
            ('evidence not a list', changed(lambda d: d[1]['qa'][0].update(evidence='D1:3')),
             'sample two: field qa[0].evidence must be a list of utterance ids (strings), got "D1:3"'),
            ('evidence entry not a string', changed(lambda d: d[1]['qa'][0].update(evidence=[13])),
             'sample two: field qa[0].evidence must be a list of utterance ids (strings), got [13]'),
            ('no question', changed(lambda d: d[1]['qa'][0].pop('question')),
             'sample two: missing field qa[0].question'),
            ('lone surrogate in a text', changed(lambda d: conversation(d)['session_1'][2].update(text='Miso\ud800')),
             'sample one: question qa[0] as case one-q0: field history[1].user holds a lone surrogate, '
             'which is not text'),
            ('no usable question', changed(lambda d: [sample['qa'].clear() for sample in d]),
             'no question of categories [1, 2, 3, 4] has usable evidence; nothing written'),
        ]
        for name, data, message in table_of_inputs:
            with self.subTest(name), tempfile.TemporaryDirectory() as folder:
                output, result = convert(folder, data)
                source = Path(folder) / 'locomo10.json'
                self.assertEqual((result.returncode, result.stdout, result.stderr),
                                 (2, '', f'locomo_cases.py: {source}: {message}\n'))
                self.assertEqual(sorted(path.name for path in Path(folder).iterdir()), ['locomo10.json'])

    def test_missing_file_and_budget_without_allowance_exit_2_with_one_line(self):
        with tempfile.TemporaryDirectory() as folder:
            missing = Path(folder) / 'nowhere.json'
            result = subprocess.run([sys.executable, 'locomo_cases.py', str(missing), '--output',
                                     str(Path(folder) / 'out.json')], cwd=HERE, capture_output=True, text=True,
                                    timeout=120)
            self.assertEqual((result.returncode, result.stderr),
                             (2, f'locomo_cases.py: {missing}: cannot read the LoCoMo file: '
                                 'No such file or directory\n'))
            output, result = convert(folder, locomo_sample(), '--context-limit', '512')
            self.assertEqual((result.returncode, result.stderr),
                             (2, 'locomo_cases.py: the budget options: field budget leaves no input allowance '
                                 '(context_limit - max_new_tokens - margin must be positive)\n'))
            self.assertFalse(output.exists())

    def test_an_output_that_is_the_locomo_file_is_refused_and_the_download_stays(self):
        with tempfile.TemporaryDirectory() as folder:
            source = Path(folder) / 'locomo10.json'
            (Path(folder) / 'link.json').symlink_to('locomo10.json')
            for output in (source, Path(folder) / 'link.json'):
                with self.subTest(output.name):
                    text = json.dumps(locomo_sample())
                    source.write_text(text, encoding='utf-8')
                    result = subprocess.run([sys.executable, 'locomo_cases.py', str(source), '--output', str(output)],
                                            cwd=HERE, capture_output=True, text=True, timeout=120)
                    self.assertEqual((result.returncode, result.stdout, result.stderr), (2, '', (
                        f'locomo_cases.py: --output {output}: the same file as the LoCoMo file {source}, which this '
                        'run reads; write the output elsewhere\n')))
                    self.assertEqual(source.read_text(encoding='utf-8'), text)

    def test_an_evidence_number_past_4300_digits_is_skipped_as_not_an_id(self):
        data = locomo_sample()
        data[1]['qa'].append(question('How far?', 4, ['D1:' + '3' * 5000]))
        with tempfile.TemporaryDirectory() as folder:
            _, result = convert(folder, data)
        self.assertEqual((result.returncode, result.stderr), (0, EXPECTED_SUMMARY.replace(
            '12 questions', '13 questions').replace('1 evidence not an id', '2 evidence not an id')))

    def test_unknown_category_option_is_a_usage_error(self):
        for text in ('1,6', '1,x', '', '1,,2', '+2', '\u00b2'):  # '\u00b2' (superscript two) is a digit int() refuses
            with self.subTest(text=text), tempfile.TemporaryDirectory() as folder:
                output, result = convert(folder, locomo_sample(), '--categories', text)
                self.assertEqual(result.returncode, 2)
                self.assertIn(f'expected category numbers from [1, 2, 3, 4, 5] separated by commas, got {text!r}',
                              result.stderr)
        with tempfile.TemporaryDirectory() as folder:
            output, result = convert(folder, locomo_sample(), '--categories', ' 2 ,4')
        self.assertEqual(result.returncode, 0, result.stderr)


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


class ReadmeAgreesWithThePageTest(unittest.TestCase):
    """The README's short LoCoMo figures against docs/locomo.md's full tables (which RealFileTest measures)."""

    def page_tables(self) -> list[dict]:
        """docs/locomo.md's per-kind tables in page order (4,096, then 16,384): (strategy, kind) -> the other cells."""
        blocks = re.findall(r'^\| Strategy \| Kind \|.*\n\|[-|]+\|\n((?:\|.*\n)+)', PAGE.read_text(encoding='utf-8'),
                            flags=re.MULTILINE)
        self.assertEqual(len(blocks), 2)
        tables = []
        for block in blocks:
            rows = [[cell.strip() for cell in line.strip('|').split('|')] for line in block.splitlines()]
            tables.append({(row[0], row[1]): row[2:] for row in rows})
        return tables

    def sweep_table(self) -> dict:
        """docs/locomo.md's budget-sweep table: rule -> {allowance: evidence utterances found}."""
        block = re.search(r'^\| Rule \|(.*)\|\n\|[-|]+\|\n((?:\|.*\n)+)', PAGE.read_text(encoding='utf-8'),
                          flags=re.MULTILINE)
        rooms = [int(cell.strip().replace(',', '')) for cell in block[1].split('|')]
        rows = [[cell.strip() for cell in line.strip('|').split('|')] for line in block[2].splitlines()]
        return {row[0]: dict(zip(rooms, (int(cell.replace(',', '')) for cell in row[1:]))) for row in rows}

    def test_readme_sweep_figures_are_the_pages_and_agree_with_its_full_tables(self):
        sweep, (four, sixteen) = self.sweep_table(), self.page_tables()
        for room, table in ((3520, four), (15808, sixteen)):  # the allowances of 4,096 and 16,384
            for rule in ('recent', 'relevant', 'notes', 'hybrid', 'bm25', 'dense', 'fused'):
                with self.subTest(room=room, rule=rule):
                    found = sum(int(cells[0].split(' of ')[0]) for (name, _), cells in table.items() if name == rule)
                    self.assertEqual(sweep[rule][room], found)
        best = sweep['best possible']
        sentence = (f"at 3,520 input tokens `fused` finds {sweep['fused'][3520]:,} of the {best[3520]:,} evidence "
                    f"utterances where `relevant` finds {sweep['relevant'][3520]:,} and the best possible selection "
                    f'all of them. `bm25` leads at the smallest budget')
        self.assertIn(sentence, prose(README))
        smallest, largest = min(best), max(best)
        self.assertEqual(max(sweep, key=lambda rule: sweep[rule][smallest] if rule != 'best possible' else -1), 'bm25')
        self.assertEqual(max(sweep, key=lambda rule: sweep[rule][largest] if rule != 'best possible' else -1), 'dense')
        self.assertIn(f'`dense` is best at {largest:,}', prose(README))
        self.assertGreaterEqual(best[1472], best[3520] - 4)  # "almost everything by 1,472 tokens"

    def test_readme_totals_are_what_the_full_tables_hold(self):
        totals = []
        for table in self.page_tables():
            found = {name: sum(int(table[name, kind][0].split(' of ')[0]) for kind in
                               ('temporal', 'open-domain', 'multi-hop', 'single-hop'))
                     for name in ('recent', 'relevant', 'notes', 'hybrid')}
            totals.append(found)
        four, sixteen = totals
        evidence = sum(int(cells[0].split(' of ')[1]) for (name, _), cells in self.page_tables()[0].items()
                       if name == 'recent')
        sentence = (f"In total, at 4,096: `recent` finds {four['recent']:,} of the {evidence:,} evidence utterances, "
                    f"`relevant` {four['relevant']:,}, `notes` {four['notes']:,} and `hybrid` {four['hybrid']:,}; "
                    f"at 16,384: {sixteen['recent']:,}, {sixteen['relevant']:,}, {sixteen['notes']:,} and "
                    f"{sixteen['hybrid']:,}.")
        self.assertIn(sentence, prose(PAGE))
        summary = re.search(r'(\d+) questions read, (\d+) cases written', PAGE.read_text(encoding='utf-8'))
        questions, cases = map(int, summary.groups())
        self.assertIn(f'with {questions:,} questions whose evidence utterances are labelled', prose(README))
        self.assertIn(f'({cases:,} cases; LoCoMo labels no stale facts)', prose(README))


@unittest.skipUnless(os.environ.get('LOCOMO10'), 'set LOCOMO10 to the downloaded locomo10.json to check the docs')
class RealFileTest(unittest.TestCase):
    """docs/locomo.md's and the README's LoCoMo figures, measured again from the real file (a few minutes; not in
    CI, which lacks it)."""

    def convert(self, folder: str, *options: str) -> tuple[Path, str]:
        source = Path(os.environ['LOCOMO10'])
        self.assertEqual(hashlib.sha256(source.read_bytes()).hexdigest(), LOCOMO_SHA256)
        output = Path(folder) / 'locomo-cases.json'
        result = subprocess.run([sys.executable, 'locomo_cases.py', str(source), '--output', str(output), *options],
                                cwd=HERE, capture_output=True, text=True, timeout=300)
        self.assertEqual(result.returncode, 0, result.stderr)
        return output, result.stderr

    def test_summary_line_and_counts_match_a_conversion_of_the_real_file(self):
        with tempfile.TemporaryDirectory() as folder:
            _, stderr = self.convert(folder)
        self.assertIn(stderr.strip(), PAGE.read_text(encoding='utf-8'))
        questions, cases = map(int, re.search(r'(\d+) questions read, (\d+) cases written', stderr).groups())
        self.assertIn(f'with {questions:,} questions whose evidence utterances are labelled', prose(README))
        self.assertIn(f'({cases:,} cases; LoCoMo labels no stale facts)', prose(README))

    def test_tables_and_figures_are_what_evaluate_gives_for_the_real_file(self):
        page = PAGE.read_text(encoding='utf-8')
        found, totals, best_most, whole = {}, set(), 0, []
        for context in ('4096', '16384'):
            with self.subTest(context=context), tempfile.TemporaryDirectory() as folder:
                output, _ = self.convert(folder, '--context-limit', context)
                report_path = Path(folder) / 'report.json'
                result = subprocess.run([sys.executable, 'evaluate.py', '--cases', str(output), '--rules',
                                         'field_rules.py', '--format', 'table', '--group', 'kind',
                                         '--output', str(report_path)],
                                        cwd=HERE, capture_output=True, text=True, timeout=1800)
                self.assertEqual(result.returncode, 0, result.stderr)
                self.assertIn('\n' + result.stdout + '\n', page)
                report = read_json(report_path, 'report')
                found[context] = [f"{sum(row['required_found'] for row in rows):,}" for rows in report['cases'].values()]
                totals.add(sum(row['required_total'] for row in report['cases']['recent']))
                best_most = max(best_most, *(row['input_tokens'] for row in report['best_possible']['cases']))
                if context == '4096':
                    whole = self.whole_conversations(load_cases(output))
        self.assertEqual(len(totals), 1)
        four, sixteen = found['4096'], found['16384']
        turns, tokens = zip(*whole)
        in_total = (f'In total, at 4,096: `recent` finds {four[0]} of the {totals.pop():,} evidence utterances, '
                    f'`relevant` {four[1]}, `notes` {four[2]} and `hybrid` {four[3]}; at 16,384: {sixteen[0]}, '
                    f'{sixteen[1]}, {sixteen[2]} and {sixteen[3]}.')
        field = (f'at 4,096, `bm25` {four[4]}, `dense` {four[5]} and `fused` {four[6]}; at 16,384: {sixteen[4]}, '
                 f'{sixteen[5]} and {sixteen[6]}.')
        self.assertIn(field, prose(PAGE))
        size = (f'({min(turns)} to {max(turns)} turns here; as one request with this lab\'s counter, '
                f'{min(tokens):,} to {max(tokens):,} tokens)')
        self.assertIn(in_total, prose(PAGE))
        for path in (README, PAGE):
            with self.subTest(path.name):
                self.assertIn(size, prose(path))
        self.assertIn(f'at most {best_most:,} in any case', prose(PAGE))

    def test_the_sweep_table_and_picture_are_what_budget_sweep_gives_for_the_real_file(self):
        command = re.search(r'^\.venv/bin/python (budget_sweep\.py --cases locomo-cases\.json .*)$',
                            README.read_text(encoding='utf-8'), flags=re.MULTILINE)[1].split()
        with tempfile.TemporaryDirectory() as folder:
            cases, _ = self.convert(folder)
            picture = Path(folder) / 'locomo-sweep.png'
            options = {'--cases': str(cases), '--output': str(Path(folder) / 'locomo-sweep.json'),
                       '--plot': str(picture)}
            argv = [options.get(before, word) for before, word in zip([None, *command], command)]
            result = subprocess.run([sys.executable, *argv], cwd=HERE, capture_output=True, text=True, timeout=1800)
            self.assertEqual(result.returncode, 0, result.stderr)
            self.assertIn('\n' + result.stdout + '\n', PAGE.read_text(encoding='utf-8'))
            self.assertEqual(picture.read_bytes(), (HERE / 'docs' / 'locomo-sweep.png').read_bytes())

    def whole_conversations(self, cases: list[dict]) -> list[tuple[int, int]]:
        """(turns, tokens of the whole conversation as one request) for each distinct conversation."""
        seen = {}
        for case in cases:
            history = case['history']
            if id(history) not in seen:  # load_cases shares one history among the cases of a conversation
                seen[id(history)] = (len(history), counter()(build_request(case, range(len(history)))))
        return list(seen.values())


if __name__ == '__main__':
    unittest.main()
