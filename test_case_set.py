"""Tests for case_set.py's sharing: what LoCoMo's 1,534 questions on 10 conversations repeat is checked once.

    .venv/bin/python -m unittest -v test_case_set   (under a second)

What a case set may hold, and each refusal, is tested through evaluate.py (test_evaluate_case_errors.py); each
test here is named after the cost or the sharing that would be lost. Nothing is written to disk.
"""
import copy
from pathlib import Path
import unittest
from unittest import mock

import case_set
from case_set import CaseError, check_case, check_fits
from common import LabError
from test_support_fixtures import shipped_cases


class CheckedOnceTest(unittest.TestCase):
    def test_a_conversation_shared_by_several_questions_is_checked_once_and_refused_every_time(self):
        case = shipped_cases()['dev-correction']
        history, checked = case['history'], {}
        with mock.patch.object(case_set, 'check_fields', wraps=case_set.check_fields) as field_checks:
            for question in range(3):  # each case as parsed: equal texts, objects of its own
                check_case(f'case {question}', copy.deepcopy(dict(case, id=f'q{question}')), checked)
        turn_checks = [call for call in field_checks.call_args_list
                       if call.kwargs.get('name', '').startswith('history')]
        self.assertEqual((len(turn_checks), len(checked)), (len(history), 1))
        broken = dict(case, history=[*history[:-1], dict(history[-1], assistant='<|channel>x')])
        for _ in range(2):
            with self.assertRaisesRegex(CaseError, r'history\[2\]\.assistant contains a thinking-channel marker'):
                check_case('case q', copy.deepcopy(broken), checked)


class FitsTest(unittest.TestCase):
    def test_a_case_whose_instructions_and_question_alone_do_not_fit_is_refused_naming_it(self):
        case = {'id': 'dev-latest', 'instructions': 'i', 'current': 'q', 'history': [],
                'budget': {'context_limit': 40, 'max_new_tokens': 4, 'margin': 2}}
        check_fits(Path('c.json'), [case], lambda request: 34)  # exactly the allowance fits
        with self.assertRaises(LabError) as raised:
            check_fits(Path('c.json'), [case], lambda request: 35, '; try 41')
        self.assertEqual(str(raised.exception), 'c.json: case dev-latest: field budget allows 34 input tokens, '
                                                'but the instructions and question alone need 35; try 41')


if __name__ == '__main__':
    unittest.main()
