"""Tests for the views for people (views.py): the table, the turn map, colour, layout and --compare's lines.

    .venv/bin/python -m unittest -v test_views.py   (about 20 s)

Expected outputs are written out in full, by hand: the views are deterministic.
The commands run as subprocesses with stdout a pipe, which is the plain
(colourless) path, and once at a real pseudo-terminal. The README's and docs' turn maps
are checked against what the commands print. --compare's exit codes and
refusals are tested with evaluate.py's other options in test_evaluate_command.py. --show and --prompt are
test_views_show.py's; names that would forge a table row or a heading test_views_forged.py's. Files
are only ever written into temporary directories.
"""
import copy
import json
import os
import random
import re
import subprocess
import sys
import unittest
from unittest import mock

from scorer import graded_row
from scorer import BEST_GRADED
import evaluate
from strategies import RULES, build_request, notes
from test_support_fixtures import HERE, RECORDED, result, shipped_cases
from test_support_views import evaluate_once
from tokenizer import counter
from common import LabError
from views import MAX_LINE, compare, counter_note, display_lines, message_labels, report_table, request_text, \
    row_changes, turn_map, turn_numbers

DEV_CORRECTION_MAP = '''\
dev-correction (dev, corrected decision), 3 turns

| rule                             | 1! | 2+ | 3 | notes | facts found | stale facts sent |
|----------------------------------|----|----|---|-------|-------------|------------------|
| recent                           | .  | .  | . | 0     | 0 of 1      | 0                |
| relevant                         | x  | .  | . | 0     | 0 of 1      | 1                |
| notes                            | .  | .  | . | 3     | 1 of 1      | 1                |
| hybrid                           | x  | .  | . | 0     | 0 of 1      | 1                |
| best possible (reads the labels) | .  | x  | . | 0     | 1 of 1      | 0                |'''

HELD_SPREAD_MAP = '''\
held-spread (held-out, facts spread across turns), 4 turns

| rule                             | 1+ | 2 | 3+ | 4 | notes | facts found | stale facts sent |
|----------------------------------|----|---|----|---|-------|-------------|------------------|
| recent                           | .  | . | x  | x | 0     | 1 of 2      | 0                |
| relevant                         | .  | . | .  | . | 0     | 0 of 2      | 0                |
| notes                            | .  | . | x  | x | 1     | 2 of 2      | 0                |
| hybrid                           | .  | . | .  | x | 0     | 0 of 2      | 0                |
| best possible (reads the labels) | x  | . | x  | . | 0     | 2 of 2      | 0                |'''


class ColourTest(unittest.TestCase):
    def test_plain_output_through_a_pipe_has_no_escape_codes(self):
        result = evaluate_once('--show', 'dev-correction')
        self.assertNotIn('\x1b', result.stdout)

    def test_colour_only_at_a_terminal_without_no_color(self):
        args = evaluate.parse_args(['--show', 'dev-correction', '--strategy', 'relevant'])
        environment = {key: value for key, value in os.environ.items() if key != 'NO_COLOR'}
        for tty, env, wanted in ((True, environment, True), (True, dict(environment, NO_COLOR='1'), False),
                                 (True, dict(environment, NO_COLOR=''), False), (False, environment, False)):
            with self.subTest(tty=tty, no_color=env.get('NO_COLOR')), mock.patch.dict(os.environ, env, clear=True), \
                    mock.patch.object(sys.stdout, 'isatty', return_value=tty):
                self.assertEqual('\x1b[31m  ! stale fact: "We will use MySQL"\x1b[0m' in evaluate.show(args), wanted)

    @unittest.skipUnless(sys.platform != 'win32', 'needs a pseudo-terminal')
    def test_a_terminal_gets_colour_unless_no_color_is_set(self):
        import pty
        environment = {key: value for key, value in os.environ.items() if key != 'NO_COLOR'}
        for env, coloured in ((environment, True), (dict(environment, NO_COLOR='1'), False)):
            with self.subTest(no_color=env.get('NO_COLOR')):
                leader, follower = pty.openpty()
                # The output (under 1 KB) fits the terminal's buffer, so reading it after the run cannot block.
                subprocess.run([sys.executable, 'evaluate.py', '--show', 'dev-correction', '--strategy', 'relevant'],
                               cwd=HERE, stdout=follower, stderr=subprocess.DEVNULL, env=env, timeout=300)
                os.close(follower)
                seen = b''
                while True:
                    try:
                        chunk = os.read(leader, 65536)
                    except OSError:  # Linux reports the closed terminal as an error rather than end of file
                        break
                    if not chunk:
                        break
                    seen += chunk
                os.close(leader)
                self.assertIn(b'relevant on dev-correction', seen)
                self.assertEqual(b'\x1b[31m  ! stale fact: "We will use MySQL"\x1b[0m' in seen, coloured)

    def test_colour_marks_the_facts_in_red_and_green(self):
        case = shipped_cases()['dev-correction']
        selected = notes(case, counter())
        coloured = request_text(case, 'title', selected, graded_row(case, selected), full=False, colour=True)
        self.assertIn('\x1b[32m  + required fact: "Switch to PostgreSQL instead of MySQL."\x1b[0m', coloured)
        self.assertIn('\x1b[31m  ! stale fact: "We will use MySQL"\x1b[0m', coloured)
        plain = request_text(case, 'title', selected, graded_row(case, selected), full=False, colour=False)
        self.assertNotIn('\x1b', plain)


class LayoutTest(unittest.TestCase):
    def test_turns_are_named_from_1_whatever_order_the_rule_kept_them_in(self):
        case = shipped_cases()['dev-spread']
        chosen = {'messages': build_request(case, [2, 0], ['- [turn 2, user] a note']), 'turns': [2, 0], 'notes': 1}
        self.assertEqual(message_labels(case, chosen),
                         ['system', 'turn 1, user', 'turn 1, assistant', 'turn 3, user', 'turn 3, assistant',
                          'notes and question, user'])

    def test_a_request_not_laid_out_as_the_four_lay_theirs_is_labelled_by_index_from_0_as_refusals_count(self):
        case = shipped_cases()['dev-spread']
        for messages, turns in (
                ([{'role': 'user', 'content': 'hi'}, {'role': 'assistant', 'content': 'hello'}], []),
                # turn 1 is claimed, but turn 2 was sent in its place
                (build_request(case, [1]), [0])):
            with self.subTest(messages=len(messages)):
                self.assertEqual(message_labels(case, {'messages': messages, 'turns': turns, 'notes': 0}),
                                 [f"message {n}, {message['role']}" for n, message in enumerate(messages)])

    def test_short_content_is_not_folded_and_long_content_keeps_its_first_and_last_lines(self):
        self.assertEqual(display_lines(' one\ntwo ', full=False), ['    one', '    two'])
        lines = '\n'.join(f'line {n}' for n in range(1, 21))
        self.assertEqual(display_lines(lines, full=False), [f'    {line}' for line in (
            'line 1', 'line 2', 'line 3', '… 15 more lines …', 'line 19', 'line 20')])
        self.assertEqual(len(display_lines(lines, full=True)), 20)

    def test_in_colour_a_message_line_that_reads_like_the_fold_is_not_dimmed_as_one(self):
        case = dict(shipped_cases()['dev-correction'], current='Which database?\n… 2 more lines …')
        selected = RULES['recent'](case, counter())
        coloured = request_text(case, 'title', selected, graded_row(case, selected), full=False, colour=True)
        self.assertIn('\n    Which database?\n    … 2 more lines …\n', coloured)
        self.assertNotIn('\x1b[2m', coloured)

    def test_a_count_the_message_sizes_do_not_reach_is_refused_as_every_run_refuses_it(self):
        case = shipped_cases()['dev-correction']
        chosen = notes(case, counter())  # 110 tokens
        row = dict(graded_row(case, chosen), input_tokens=115)  # as a counter that is not additive might count it
        with self.assertRaises(LabError) as raised:
            request_text(case, 'title', chosen, row, full=False, colour=False)
        self.assertEqual(str(raised.exception), 'case dev-correction: the request was counted 110 tokens as it was '
                                                'built and 115 whole; the counter cannot be summed turn by turn')


class TableTest(unittest.TestCase):
    def test_the_table_says_how_many_cases_were_not_searched(self):
        recorded = json.loads(RECORDED.read_text(encoding='utf-8'))
        for unsearched, figures in ((2, '5 of 7 | 4 of 4 (2 not searched) | 0 | 67.5'),
                                    (6, '0 of 7 | 0 of 0 (6 not searched) | 0 | -')):
            for row in recorded['best_possible']['cases'][:unsearched]:  # dev cases, as best_row leaves them
                row.update(dict.fromkeys(BEST_GRADED), required_total=row['required_total'],
                           not_searched='21 fact-holding turns without a stale fact; the exact search stops at 20')
            self.assertIn(f'| best possible (reads the labels) | dev | {figures} |\n', report_table(recorded))


class TurnMapTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.result = evaluate_once('--format', 'turns')

    def test_turn_map_of_two_cases(self):
        self.assertEqual(self.result.returncode, 0, self.result.stderr)
        blocks = self.result.stdout.split('\n\n')
        self.assertIn(DEV_CORRECTION_MAP, self.result.stdout)
        self.assertIn(HELD_SPREAD_MAP, self.result.stdout)
        self.assertTrue(blocks[0].startswith('Turns are numbered from 1.'))

    def test_docs_show_the_turn_map_of_the_development_cases(self):
        # The map is the legend, then per case a title and a table, each part after a blank line.
        legend, *parts = self.result.stdout.rstrip('\n').split('\n\n')
        dev = [f'{title}\n\n{table}' for title, table in zip(parts[::2], parts[1::2]) if ' (dev, ' in title]
        excerpt = '\n\n'.join([legend, *dev])
        self.assertEqual(len(dev), 6)
        self.assertTrue(excerpt + '\n' in (HERE / 'docs' / 'strategies.md').read_text(encoding='utf-8'),
                        'docs/strategies.md lacks the legend and dev maps of `evaluate.py --format turns`:\n' + excerpt)

    def test_readme_shows_the_legend_and_a_case_map_exactly_as_printed(self):
        readme = (HERE / 'README.md').read_text(encoding='utf-8')
        legend, *parts = self.result.stdout.rstrip('\n').split('\n\n')
        shown = re.findall(r'^(\S+ \([^)]*\), \d+ turns?)\n\n((?:\|.*\n)+)', readme, flags=re.MULTILINE)
        self.assertIn(legend + '\n', readme)
        self.assertEqual([title.split()[0] for title, _ in shown], ['dev-correction'])
        for title, table in shown:
            with self.subTest(title):
                self.assertIn(f'{title}\n\n{table}', self.result.stdout + '\n')

    def test_a_long_history_collapses_runs_of_alike_turns(self):
        best = {'case': 'long', 'split': 'held_out', 'kind': 'chat', 'history_turns': 50, 'fact_turns': [3, 47],
                'stale_turns': [10], 'turns': [3, 47], 'required_found': 2, 'required_total': 2,
                'stale_included': [], 'not_searched': None}
        recent = {'case': 'long', 'turns': list(range(45, 50)), 'notes': 2, 'required_found': 1,
                  'required_total': 2, 'stale_included': []}
        report = {'cases': {'recent': [recent]}, 'best_possible': {'label': 'best', 'cases': [best]}}
        self.assertEqual(turn_map(report).split('\n\n', 1)[1], '''\
long (held-out, chat), 50 turns

| rule   | 1-3 | 4+ | 5-10 | 11! | 12-45 | 46-47 | 48+ | 49-50 | notes | facts found | stale facts sent |
|--------|-----|----|------|-----|-------|-------|-----|-------|-------|-------------|------------------|
| recent | .   | .  | .    | .   | .     | x     | x   | x     | 2     | 1 of 2      | 0                |
| best   | .   | x  | .    | .   | .     | .     | x   | .     | 0     | 2 of 2      | 0                |
''')

    def test_a_row_that_was_not_searched_says_so_in_the_map(self):
        best = {'case': 'wide', 'split': 'dev', 'kind': 'many facts', 'history_turns': 2, 'fact_turns': [0, 1],
                'stale_turns': [], 'turns': None, 'required_found': None, 'required_total': 2,
                'stale_included': None, 'not_searched': '21 fact-holding turns without a stale fact'}
        report = {'cases': {}, 'best_possible': {'label': 'best', 'cases': [best]}}
        self.assertIn('| best | ?  | ?  |       | not searched: 21 fact-holding turns without a stale fact |'
                      '                  |\n',
                      turn_map(report))

    def test_an_invalid_request_is_marked_beside_its_facts_and_one_turn_is_not_turns(self):
        best = {'case': 'one', 'split': 'dev', 'kind': 'agent', 'history_turns': 1, 'fact_turns': [0],
                'stale_turns': [], 'turns': [0], 'required_found': 1, 'required_total': 1, 'stale_included': [],
                'not_searched': None}
        cut = {'case': 'one', 'turns': [0], 'notes': 0, 'invalid': 'the system message is not first',
               'required_found': 0, 'required_total': 1, 'stale_included': []}
        report = {'cases': {'trim-last': [cut]}, 'best_possible': {'label': 'best', 'cases': [best]}}
        legend, shown = turn_map(report).split('\n\n', 1)
        self.assertTrue(legend.endswith(' `invalid`: a provider would refuse the request (`--show` says why), so it '
                                        'carries no fact. Facts found and stale facts sent are the whole request\'s, '
                                        'the instructions and the question too.'), legend)
        self.assertEqual(shown, '''\
one (dev, agent), 1 turn

| rule      | 1+ | notes | facts found     | stale facts sent |
|-----------|----|-------|-----------------|------------------|
| trim-last | x  | 0     | 0 of 1, invalid | 0                |
| best      | x  | 0     | 1 of 1          | 0                |
''')


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

    def test_turns_are_named_from_1_and_consecutive_turns_as_one_run(self):
        self.assertEqual([turn_numbers([]), turn_numbers([1]), turn_numbers([0, 2]), turn_numbers([0, 1]),
                          turn_numbers([*range(2, 15), 19]), turn_numbers([9, 7, 8, 0])],
                         ['no turns', 'turn 2', 'turns 1, 3', 'turns 1-2', 'turns 3-15, 20', 'turns 1, 8-10'])
        self.assertEqual(turn_numbers(None), 'no search')  # a best-possible row that was not searched


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


class CounterNoteTest(unittest.TestCase):
    def test_only_another_counter_is_named(self):
        self.assertEqual(counter_note({'counter': {'name': 'llama-3.1', 'model': 'x'}}), ', counted by llama-3.1')
        self.assertEqual((counter_note({'counter': {'model': 'google/gemma-4-E2B-it'}}), counter_note({})), ('', ''))


if __name__ == '__main__':
    unittest.main()
