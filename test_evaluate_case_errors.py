"""Tests for the case set evaluate.py refuses: each invalid case file gets its own one-line message.

    .venv/bin/python -m unittest -v test_evaluate_case_errors.py   (a few seconds)

Each test is named after the failure it pins: a case set that loads though a field is missing, mistyped or
out of range, or that is refused with a message naming the wrong thing. Files are only ever written into
temporary directories.
"""
import copy
import json
from pathlib import Path
import tempfile
import unittest

from case_set import CaseError, load_cases
from common import LabError
from evaluate import report
from test_support_fixtures import HERE, shipped_cases


class CaseValidationTest(unittest.TestCase):
    def write(self, folder: str, data) -> Path:
        path = Path(folder) / 'cases.json'
        path.write_text(data if isinstance(data, str) else json.dumps(data), encoding='utf-8')
        return path

    def test_every_invalid_case_set_is_rejected_with_its_own_message(self):
        base = json.loads((HERE / 'cases.json').read_text(encoding='utf-8'))
        fields = "['id', 'split', 'kind', 'instructions', 'current', 'history', 'budget', 'required', 'stale']"

        def one(change):
            data = copy.deepcopy(base[:1])
            change(data[0])
            return data

        table_of_cases = [
            ('invalid JSON', '[{"id": ', 'invalid JSON at line 1 column 9: Expecting value'),
            ('top level not a list', '{"id": "x"}', 'the top level must be a list of cases, got dict'),
            ('case not an object', '[42]', 'case 0: expected an object, got int'),
            ('missing field', one(lambda c: c.pop('stale')),
             f"case dev-latest: must be an object with exactly the fields {fields}; missing ['stale'], unexpected []"),
            ('extra field', one(lambda c: c.update(answer='Friday')),
             f"case dev-latest: must be an object with exactly the fields {fields}; missing [], unexpected ['answer']"),
            ('id not a string', one(lambda c: c.update(id=7)),
             'case at index 0: field id must be a non-empty string, got 7'),
            ('question not a string', one(lambda c: c.update(current=['When?'])),
             'case dev-latest: field current must be a non-empty string, got ["When?"]'),
            ('unknown split', one(lambda c: c.update(split='test')),
             'case dev-latest: field split must be one of [\'dev\', \'held_out\'], got "test"'),
            ('history not a list', one(lambda c: c.update(history='hello')),
             'case dev-latest: field history must be a list of {"user", "assistant"} objects, got "hello"'),
            ('turn without assistant', one(lambda c: c['history'][1].pop('assistant')),
             "case dev-latest: field history[1] must be an object with exactly the fields ['user', 'assistant']; "
             "missing ['assistant'], unexpected []"),
            ('turn with a number', one(lambda c: c['history'][0].update(user=3)),
             'case dev-latest: field history[0].user must be a string, got 3'),
            ('budget field missing', one(lambda c: c['budget'].pop('margin')),
             "case dev-latest: field budget must be an object with exactly the fields ['context_limit', "
             "'max_new_tokens', 'margin']; missing ['margin'], unexpected []"),
            ('budget field misspelled', one(lambda c: c['budget'].update(marign=c['budget'].pop('margin'))),
             "case dev-latest: field budget must be an object with exactly the fields ['context_limit', "
             "'max_new_tokens', 'margin']; missing ['margin'], unexpected ['marign']"),
            ('budget not an object', one(lambda c: c.update(budget=[384, 96, 32])),
             "case dev-latest: field budget must be an object with exactly the fields ['context_limit', "
             "'max_new_tokens', 'margin'], got [384, 96, 32]"),
            ('empty history', one(lambda c: c.update(history=[])),
             'case dev-latest: field history is empty; the required facts must be stated in its messages'),
            ('stale fact also required', one(lambda c: c.update(stale=[c['required'][0]])),
             "case dev-latest: field stale: fact 'The release freeze starts on Thursday at noon.' is also required; a "
             'replaced fact cannot be one the question needs'),
            ('negative margin', one(lambda c: c['budget'].update(margin=-1)),
             'case dev-latest: field budget.margin must be a non-negative integer, got -1'),
            ('boolean limit', one(lambda c: c['budget'].update(context_limit=True)),
             'case dev-latest: field budget.context_limit must be a non-negative integer, got true'),
            ('no allowance left', one(lambda c: c['budget'].update(max_new_tokens=352)),
             'case dev-latest: field budget leaves no input allowance '
             '(context_limit - max_new_tokens - margin must be positive)'),
            ('no required fact', one(lambda c: c.update(required=[])),
             'case dev-latest: field required is empty; a case needs at least one required fact'),
            ('fact not a string', one(lambda c: c.update(stale=[3])),
             'case dev-latest: field stale must be a list of non-empty strings, got [3]'),
            ('required fact never stated', one(lambda c: c.update(required=['a fact the history never states'])),
             "case dev-latest: field required: fact 'a fact the history never states' "
             'does not occur in any message of the history'),
            ('stale fact never stated', one(lambda c: c.update(stale=['We chose Oracle'])),
             "case dev-latest: field stale: fact 'We chose Oracle' does not occur in any message of the history"),
            ('duplicate id', copy.deepcopy(base[:1]) * 2,
             'case dev-latest: field id is a duplicate; every case id must be unique'),
            ('empty case set', '[]', 'the case set is empty'),
            ('lone surrogate in the question', one(lambda c: c.update(current='When\ud800?')),
             'case dev-latest: field current holds a lone surrogate, which is not text'),
            ('integer too long to read', '[' + '7' * 5000 + ']',
             'the case set cannot be read as JSON: Exceeds the limit (4300 digits) for integer string '
             'conversion: value has 5000 digits; use sys.set_int_max_str_digits() to increase the limit'),
            ('thinking channel in a model turn',
             one(lambda c: c['history'][1].update(assistant='<|channel>thought\n<channel|>Noted.')),
             "case dev-latest: field history[1].assistant contains a thinking-channel marker "
             "['<|channel>', '<channel|>'], which the counter does not cover"),
        ]
        for name, data, message in table_of_cases:
            with self.subTest(name), tempfile.TemporaryDirectory() as folder:
                path = self.write(folder, data)
                with self.assertRaises(LabError) as caught:
                    load_cases(path)
                self.assertEqual(str(caught.exception), f'{path}: {message}')

    def test_a_case_set_that_is_not_utf8_is_rejected(self):
        with tempfile.TemporaryDirectory() as folder:
            path = Path(folder) / 'cases.json'
            path.write_bytes(b'\xff\xfe[]')
            with self.assertRaises(LabError) as caught:
                load_cases(path)
        self.assertEqual(str(caught.exception), f'{path}: the case set is not UTF-8 text (byte 0)')

    def test_a_budget_too_small_for_the_bare_request_is_rejected(self):
        data = json.loads((HERE / 'cases.json').read_text(encoding='utf-8'))[:1]
        data[0]['budget'] = {'context_limit': 40, 'max_new_tokens': 4, 'margin': 2}  # the bare request needs 35
        with tempfile.TemporaryDirectory() as folder:
            path = self.write(folder, data)
            with self.assertRaises(LabError) as caught:
                report(path)
        self.assertEqual(str(caught.exception), f'{path}: case dev-latest: field budget allows 34 input tokens, '
                                                'but the instructions and question alone need 35')

    def test_a_fact_split_across_two_messages_is_rejected(self):
        data = json.loads((HERE / 'cases.json').read_text(encoding='utf-8'))[:1]
        data[0]['required'] = ['noon. Thursday']  # the end of one message and the start of the next
        with tempfile.TemporaryDirectory() as folder, self.assertRaises(CaseError):
            load_cases(self.write(folder, data))

    def test_the_shipped_case_set_has_six_cases_per_split(self):
        splits = [case['split'] for case in shipped_cases().values()]
        self.assertEqual((splits.count('dev'), splits.count('held_out'), len(splits)), (6, 6, 12))


if __name__ == '__main__':
    unittest.main()
