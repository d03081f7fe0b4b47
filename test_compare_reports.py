"""Tests of compare_reports.py: the lines `python evaluate.py --compare` prints for a changed report.

    python -m unittest -v test_compare_reports.py

The command-line behaviour of --compare (exit codes, refusing a file that is
not a report) is tested with the other evaluate.py commands in test_evaluate.py.
"""
import copy
import json
from pathlib import Path
import unittest

from compare_reports import compare, row_changes, turn_numbers

HERE = Path(__file__).resolve().parent
RECORDED = HERE / 'evaluation-result.json'


class CompareTest(unittest.TestCase):
    def test_compare_names_kept_turns_counting_from_1(self):
        old = json.loads(RECORDED.read_text(encoding='utf-8'))
        new = copy.deepcopy(old)
        new['cases']['recent'][1]['turns'] = [0, 2]  # dev-old-decision kept index 2; now indices 0 and 2
        new['best_possible']['cases'][2]['turns'] = []  # dev-correction's best kept index 1
        self.assertEqual(compare(old, new), ['recent dev-old-decision: kept turn 3 -> turns 1, 3',
                                             'best possible dev-correction: kept turn 2 -> no turns'])
        self.assertEqual(row_changes({**old['best_possible']['cases'][0], 'turns': None, 'missing': None},
                                     old['best_possible']['cases'][0]), ['kept no search -> turn 2'])

    def test_compare_with_a_report_from_before_the_best_possible_lists_its_rows_as_added(self):
        old = json.loads(RECORDED.read_text(encoding='utf-8'))
        new = copy.deepcopy(old)
        del old['best_possible']
        lines = compare(old, new)
        self.assertEqual(lines[:2], ['best possible dev-latest: case added', 'best possible dev-old-decision: case added'])
        self.assertEqual(len(lines), 12 + 2 * 7)  # twelve rows, seven figures for each split

    def test_turns_are_named_from_1_and_consecutive_turns_as_one_run(self):
        self.assertEqual([turn_numbers([]), turn_numbers([1]), turn_numbers([0, 2]), turn_numbers([0, 1]),
                          turn_numbers([*range(2, 15), 19]), turn_numbers([9, 7, 8, 0])],
                         ['no turns', 'turn 2', 'turns 1, 3', 'turns 1-2', 'turns 3-15, 20', 'turns 1, 8-10'])

    def test_identical_reports_give_no_line(self):
        recorded = json.loads(RECORDED.read_text(encoding='utf-8'))
        self.assertEqual(compare(recorded, copy.deepcopy(recorded)), [])

    def test_a_stale_fact_that_appears_is_named_with_its_strategy_and_case(self):
        old = json.loads(RECORDED.read_text(encoding='utf-8'))
        new = copy.deepcopy(old)
        old['cases']['relevant'][2]['stale_included'] = []  # dev-correction: relevant sends "We will use MySQL"
        self.assertEqual(compare(old, new), ["relevant dev-correction: stale facts appeared: ['We will use MySQL']"])


if __name__ == '__main__':
    unittest.main()
