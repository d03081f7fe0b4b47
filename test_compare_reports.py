"""Tests of compare_reports.py: the lines `.venv/bin/python evaluate.py --compare` prints for a changed report.

    .venv/bin/python -m unittest -v test_compare_reports.py

The command-line behaviour of --compare (exit codes, refusing a file that is
not a report) is tested with the other evaluate.py commands in test_evaluate.py.
"""
import copy
import json
from pathlib import Path
import random
import unittest

from compare_reports import MAX_LINE, compare, row_changes, turn_numbers

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



def large_report(seed: int) -> dict:
    """A report shaped like LoCoMo's: 400 cases of 300-turn conversations, each needing up to 30 long facts,
    with turns and missing facts drawn at random (seed decides), and one summary figure that differs by seed."""
    rng = random.Random(seed)
    rows, best = [], []
    for number in range(400):
        facts = [f'fact {number}.{index}: ' + 'a long utterance of a long conversation ' * 5 for index in range(30)]
        turns = sorted(rng.sample(range(300), rng.randint(0, 150)))
        missing = rng.sample(facts, rng.randint(0, 30))
        rows.append({'case': f'conv-{number // 100}-q{number}', 'split': 'held_out', 'kind': 'multi-hop',
                     'turns': turns, 'notes': 0, 'input_tokens': 3000, 'within_budget': True,
                     'required_found': 30 - len(missing), 'required_total': 30, 'missing': missing,
                     'stale_included': rng.sample(facts, rng.randint(0, 5))})
        best.append({**rows[-1], 'history_turns': 300, 'fact_turns': turns, 'stale_turns': [], 'not_searched': None})
    summary = {'held_out': {'cases': 400, 'facts_found': 5000 + seed}}
    return {'code_sha256': {'evaluate.py': f'{seed}' * 64, 'strategies.py': '0' * 64}, 'cases': {'relevant': rows},
            'summary': {'relevant': summary}, 'best_possible': {'cases': best, 'summary': summary}}


class LargeReportTest(unittest.TestCase):
    def test_no_line_passes_300_characters_on_a_locomo_sized_report(self):
        lines = compare(large_report(1), large_report(2))
        self.assertGreater(len(lines), 2000)  # the reports differ nearly everywhere
        self.assertEqual(MAX_LINE, 300)
        self.assertEqual([line for line in lines if len(line) > 300], [])
        self.assertEqual([line for line in lines if line.endswith('...')], [])  # shortened, not cut

    def test_long_lists_show_what_fits_and_count_the_rest(self):
        old, new = large_report(1), large_report(1)
        new['cases']['relevant'][0].update(turns=[*range(174, 215), 250], missing=[])
        old['cases']['relevant'][0]['turns'] = [*range(0, 300, 2)]
        facts_line, turns_line = compare(old, new)
        # 90 characters of runs: '1, 3, 5, 7, 9' is 13, and each two-digit turn adds 4, so 19 more fit: 11 to 47.
        self.assertEqual(turns_line, 'relevant conv-0-q0: kept turns 1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, '
                                     '27, 29, 31, 33, 35, 37, 39, 41, 43, 45, 47, ... (150 turns in all) '
                                     '-> turns 175-215, 251')
        gained = old['cases']['relevant'][0]['missing']
        # Each fact is cut to 57 characters and '...', 62 with its quotes: one fits in 90, the rest are counted.
        self.assertEqual(facts_line, f"relevant conv-0-q0: facts gained: ['{gained[0][:57]}...'] "
                                     f"and {len(gained) - 1} more")

    def test_the_code_hashes_change_one_line_per_file(self):
        self.assertEqual(compare(large_report(1), large_report(2), rows=False)[0],
                         f"code_sha256 evaluate.py: {'1' * 64} -> {'2' * 64}")

    def test_summary_only_prints_the_summaries_and_counts_the_rest(self):
        old, new = large_report(1), large_report(2)
        counted = len(compare(old, new)) - 3  # all but the hash line and the two summary lines
        self.assertEqual(compare(old, new, rows=False), [
            f"code_sha256 evaluate.py: {'1' * 64} -> {'2' * 64}",
            'relevant held_out summary: facts_found 5001 -> 5002',
            'best possible held_out summary: facts_found 5001 -> 5002',
            f'and {counted} changes case by case, not shown: run without --summary-only to see them'])


if __name__ == '__main__':
    unittest.main()
