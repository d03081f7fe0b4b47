"""Tests for the budget sweep: its figures, its refusals, its table, its picture and its recording.

    .venv/bin/python -m unittest -v test_budget_sweep.py   (about 15 s)

Sweep figures are checked against figures worked out here, by hand and with a
count that renders each whole request and encodes it (no turn costs summed). The
recorded budget-sweep.json and budget-sweep.png are made again and compared byte
for byte (the JSON apart from its environment block, the Python that made it, as
evaluation-result.json is), and the README's sentence about them is worked out
from the recording.
Files are only ever written into temporary directories.
"""
import json
import os
from pathlib import Path
import subprocess
import sys
import tempfile
import unittest
from unittest import mock

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import to_rgb
import numpy

import best_possible
import budget_sweep
from best_possible import BEST
from budget_sweep import DEFAULT_LIMITS, SweepError, check_limits, parse_limits, picture, sweep_report, \
    sweep_table
from case_set import load_cases
from common import LabError
from lab_files import sha256_file, to_json
from shapes import build_request
from strategies import RULES
from test_support_fixtures import HERE, whole_count, with_recorded_environment
from test_support_runs import lab_main

CASES = HERE / 'cases.json'
# A rules file for the tests: one rule that sends the whole conversation, so it overflows small budgets.
EVERYTHING_RULES = '''from shapes import build_request

def everything(case, count):
    return build_request(case, list(range(len(case['history']))))

RULES = {'everything': everything}
'''


def points_by(report: dict) -> dict:
    """(context limit, rule) -> point."""
    return {(entry['context_limit'], entry['rule']): entry for entry in report['points']}


class SweepTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.folder = tempfile.TemporaryDirectory()
        cls.rules_path = Path(cls.folder.name) / 'everything_rules.py'
        cls.rules_path.write_text(EVERYTHING_RULES, encoding='utf-8')
        rules, files = budget_sweep.load_rule_files([cls.rules_path])
        cls.report = sweep_report(CASES, [170, 256, 640, 1024], rules, files, 'kind')
        cls.points = points_by(cls.report)
        cls.cases = load_cases(CASES)

    @classmethod
    def tearDownClass(cls):
        cls.folder.cleanup()

    def test_points_come_limit_by_limit_with_the_four_then_the_files_rules_then_the_best_possible(self):
        rules = [*RULES, 'everything', BEST]
        self.assertEqual([(entry['context_limit'], entry['rule']) for entry in self.report['points']],
                         [(limit, rule) for limit in (170, 256, 640, 1024) for rule in rules])
        self.assertEqual(self.report['context_limits'], [170, 256, 640, 1024])
        self.assertEqual(self.report['rule_files'], [{'file': 'everything_rules.py',
                                                      'sha256': sha256_file(self.rules_path)}])
        self.assertIn('rule_files.py', self.report['code_sha256'])

    def test_whole_conversations_fit_at_1024_so_recent_finds_every_fact(self):
        # Every conversation of cases.json, sent whole, is at most 632 tokens: under the 896 allowance.
        whole = [whole_count(build_request(case, list(range(len(case['history']))))) for case in self.cases]
        self.assertLessEqual(max(whole), 896)
        for rule in ('recent', 'everything'):
            entry = self.points[(1024, rule)]
            self.assertEqual((entry['facts_found'], entry['facts_total'], entry['complete_cases']), (14, 14, 12))
            self.assertEqual(entry['mean_input_tokens'], round(sum(whole) / 12, 1))
            self.assertEqual(entry['over_budget'], 0)

    def test_a_rule_that_overflows_is_counted_over_budget_not_refused(self):
        whole = [whole_count(build_request(case, list(range(len(case['history']))))) for case in self.cases]
        for limit in (170, 256, 640):
            entry = self.points[(limit, 'everything')]
            self.assertEqual(entry['over_budget'], sum(1 for tokens in whole if tokens > limit - 128), limit)
            self.assertEqual(entry['facts_found'], 14)

    def test_at_the_smallest_limit_only_the_bare_requests_fit(self):
        # 170 = dev-spread's bare request (42 tokens) + 96 for the answer + 32 margin: no turn fits anywhere.
        bare = [whole_count(build_request(case, [])) for case in self.cases]
        self.assertEqual(max(bare), 42)
        for rule in (*RULES, BEST):
            entry = self.points[(170, rule)]
            self.assertEqual((entry['facts_found'], entry['complete_cases']), (0, 0), rule)
            self.assertEqual(entry['mean_input_tokens'], round(sum(bare) / 12, 1), rule)

    def test_which_turn_holds_which_fact_is_worked_out_once_per_case_not_once_per_limit(self):
        with mock.patch.object(best_possible, 'turn_facts', wraps=best_possible.turn_facts) as spy:
            sweep_report(CASES, [256, 384, 512], {}, [])
        self.assertEqual(spy.call_count, 12)

    def test_progress_is_one_line_per_limit_with_times(self):
        lines = []
        sweep_report(CASES, [256, 512], {}, [], progress=lambda done, *_: lines.append(done))
        self.assertEqual(lines, ['12 cases read and checked at every limit',
                                 'which turn holds which fact, for 12 cases',
                                 'context limit 256 (128 input tokens): 5 rules on 12 cases',
                                 'context limit 512 (384 input tokens): 5 rules on 12 cases'])
        status, _, err = lab_main(budget_sweep, '--context-limits', '256',
                                  '--output', str(Path(self.folder.name) / 'p.json'))
        self.assertEqual(status, 0)
        self.assertRegex(err.splitlines()[-1], r'^budget_sweep.py: context limit 256 \(128 input tokens\): '
                                               r'5 rules on 12 cases in \d+\.\d s \(\d+\.\d s CPU\)$')


class RefusalTest(unittest.TestCase):
    def setUp(self):
        self.folder = tempfile.TemporaryDirectory()
        self.addCleanup(self.folder.cleanup)
        self.output = Path(self.folder.name) / 'sweep.json'

    def refused(self, argv: list[str], written: bool = False) -> str:
        """The one error line of a refused run (after any progress lines); nothing written unless `written`."""
        status, out, err = lab_main(budget_sweep, *argv, '--output', str(self.output))
        self.assertEqual((status, out), (2, ''))
        *progress, error = err.splitlines()
        for line in progress:
            self.assertRegex(line, r' in \d+\.\d s \(\d+\.\d s CPU\)$')
        self.assertEqual(self.output.exists(), written)
        return error

    def test_limits_must_be_distinct_positive_integers(self):
        self.assertEqual(parse_limits('1024, 256,512'), [256, 512, 1024])
        for text in ('0', '-256', '256.0', '1e3', '', '256,,512', 'abc', '٣٠٠', '+300'):
            with self.assertRaises(SweepError, msg=text):
                parse_limits(text)
        self.assertEqual(self.refused(['--context-limits', '256,0']),
                         "budget_sweep.py: --context-limits: '0' is not a positive integer of at most 9 digits "
                         '(give e.g. 256,512,1024)')
        # Past 4,300 digits int() itself refuses, with a traceback unless the length is checked first.
        self.assertEqual(self.refused(['--context-limits', '256,' + '9' * 5000]),
                         "budget_sweep.py: --context-limits: '999999999...' is not a positive integer of at most 9 "
                         'digits (give e.g. 256,512,1024)')
        self.assertEqual(self.refused(['--context-limits', '256,512,256']),
                         'budget_sweep.py: --context-limits: 256 is given twice')

    def test_a_limit_too_small_for_a_bare_request_names_the_case_and_the_smallest_limit_that_works(self):
        # dev-spread's bare request is the longest, 42 tokens; at 169 its allowance is 169 - 96 - 32 = 41.
        self.assertEqual(self.refused(['--context-limits', '169,512']),
                         f'budget_sweep.py: {CASES}: case dev-spread: field budget allows 41 input tokens, but the '
                         'instructions and question alone need 42; the smallest limit every case fits is 170')
        status, _, _ = lab_main(budget_sweep, '--context-limits', '170', '--output', str(self.output))
        self.assertEqual(status, 0)  # the limit the message names does work

    def test_the_case_named_is_the_first_that_needs_most_worked_out_by_hand(self):
        cases = load_cases(CASES)
        cases[1]['budget'] = dict(cases[1]['budget'], margin=40)  # needs 8 more than the others: the one named
        sizes = {case['current']: 60 if index in (3, 5) else 50 for index, case in enumerate(cases)}
        self.assertEqual(len(sizes), len(cases))  # every question differs

        def count(messages):  # 50 tokens for every bare request, 60 for those of cases[3] and cases[5]
            return sizes[messages[-1]['content']]

        # cases[1] needs 50 + 96 + 40 = 186, cases[3] and cases[5] 60 + 96 + 32 = 188, every other 178:
        # cases[3] is the first that needs most.
        with self.assertRaises(LabError) as raised:
            check_limits(Path('c.json'), cases, [187, 400], count)
        self.assertEqual(str(raised.exception), f"c.json: case {cases[3]['id']}: field budget allows 59 input tokens, "
                                                'but the instructions and question alone need 60; the smallest limit '
                                                'every case fits is 188')
        check_limits(Path('c.json'), cases, [188, 400], count)  # and that limit is refused for no case

    def test_cases_keeping_different_answer_and_margin_tokens_are_refused(self):
        cases = json.loads(CASES.read_text(encoding='utf-8'))
        cases[3]['budget']['margin'] = 64
        path = Path(self.folder.name) / 'mixed.json'
        path.write_text(json.dumps(cases), encoding='utf-8')
        self.assertEqual(self.refused(['--cases', str(path), '--context-limits', '512']),
                         f'budget_sweep.py: {path}: cases dev-latest and dev-pronoun keep 128 and 160 tokens for the '
                         'answer and margin; a sweep gives every case one context limit, so they must keep the same')

    def test_a_picture_that_is_neither_png_nor_svg_is_refused_before_the_sweep(self):
        self.assertEqual(self.refused(['--context-limits', '512', '--plot', str(Path(self.folder.name) / 'x.jpg')]),
                         f"budget_sweep.py: --plot {Path(self.folder.name) / 'x.jpg'}: the picture must be a "
                         '.png or .svg file')

    def test_a_rules_file_without_rules_is_refused_in_one_line(self):
        path = Path(self.folder.name) / 'empty_rules.py'
        path.write_text('X = 1\n', encoding='utf-8')
        self.assertIn('empty_rules.py', self.refused(['--context-limits', '512', '--rules', str(path)]))

    def test_an_unwritable_picture_is_one_line_and_the_sweep_json_is_not_written_either(self):
        plot = Path(self.folder.name) / 'missing-folder' / 'x.png'
        message = self.refused(['--context-limits', '512', '--plot', str(plot)])
        self.assertEqual(message, f'budget_sweep.py: {plot}: cannot write the picture: No such file or directory')
        self.assertEqual(list(Path(self.folder.name).iterdir()), [])

    def test_an_output_that_is_the_case_set_or_the_picture_is_refused_before_the_sweep(self):
        mine = Path(self.folder.name) / 'my.json'
        mine.write_bytes(CASES.read_bytes())
        status, out, err = lab_main(budget_sweep, '--cases', str(mine),
                                    '--output', str(Path(self.folder.name) / '.' / 'my.json'))
        self.assertEqual((status, out, err), (2, '', f'budget_sweep.py: --output {mine}: the same file as --cases '
                                                     f'{mine}, which this run reads; write the output elsewhere\n'))
        self.assertEqual(mine.read_bytes(), CASES.read_bytes())
        plot = Path(self.folder.name) / 'p.png'
        status, out, err = lab_main(budget_sweep, '--plot', str(plot), '--output', str(plot))
        self.assertEqual((status, out, err), (2, '', f'budget_sweep.py: --plot {plot}: the same file as --output '
                                                     f'{plot}, which this run also writes; write the output elsewhere\n'))
        self.assertEqual(sorted(path.name for path in Path(self.folder.name).iterdir()), ['my.json'])

    def test_a_case_file_whose_name_is_not_utf8_is_swept_and_recorded_under_its_escaped_name(self):
        # It once ran the whole sweep, then failed advising PYTHONIOENCODING, or wrote a raw 0xff into the JSON.
        folder = os.fsencode(self.folder.name)
        cases, plot = (Path(os.fsdecode(os.path.join(folder, name))) for name in (b'c\xff.json', b'p\xfe.png'))
        cases.write_bytes(CASES.read_bytes())
        finished = subprocess.run([sys.executable, str(HERE / 'budget_sweep.py'), '--cases', cases, '--context-limits',
                                   '256', '--plot', plot], capture_output=True, cwd=self.folder.name, timeout=120)
        self.assertEqual(finished.returncode, 0, finished.stderr)
        self.assertEqual(json.loads(finished.stdout.decode('utf-8'))['case_set'], 'c\\xff.json')  # strict UTF-8
        self.assertEqual(plot.read_bytes()[:8], b'\x89PNG\r\n\x1a\n')

    def test_the_command_refuses_without_a_traceback(self):
        finished = subprocess.run([sys.executable, str(HERE / 'budget_sweep.py'), '--context-limits', '12x'],
                                  capture_output=True, text=True, cwd=self.folder.name, timeout=120)
        self.assertEqual((finished.returncode, finished.stdout), (2, ''))
        self.assertEqual(finished.stderr, "budget_sweep.py: --context-limits: '12x' is not a positive integer "
                                          'of at most 9 digits (give e.g. 256,512,1024)\n')


class TableTest(unittest.TestCase):
    def test_the_table_has_a_row_per_rule_and_a_column_per_allowance_worked_out_by_hand(self):
        points = [{'context_limit': limit, 'allowance': limit - 128, 'rule': rule, 'facts_found': found,
                   'facts_total': 14} for rule, founds in (('recent', (4, 6)), (BEST, (13, 14)))
                  for limit, found in zip((256, 1152), founds)]
        report = {'case_set': 'cases.json', 'context_limits': [256, 1152], 'points': points}
        self.assertEqual(sweep_table(report), '| Rule | 128 | 1,024 |\n|---|---|---|\n| recent | 4 | 6 |\n'
                         '| best possible | 13 | 14 |\n\nRequired facts found of 14 in cases.json, at each input '
                         'allowance (context limits 256, 1,152).\n')

    def test_a_rule_that_overflows_or_sends_stale_facts_is_marked_in_its_cells(self):
        # 'everything' finds all 14 facts at 128 tokens only by sending 6,000,036 tokens on average: 12 requests over.
        points = [{'context_limit': limit, 'allowance': limit - 128, 'rule': rule, 'facts_found': found,
                   'facts_total': 14, 'cases_with_stale_facts': stale, 'over_budget': over}
                  for rule, cells in (('recent', ((4, 0, 0), (6, 2, 0))), ('everything', ((14, 2, 12), (14, 2, 1))))
                  for limit, (found, stale, over) in zip((256, 1152), cells)]
        report = {'case_set': 'cases.json', 'context_limits': [256, 1152], 'points': points}
        self.assertEqual(sweep_table(report).splitlines(), [
            '| Rule | 128 | 1,024 |', '|---|---|---|', '| recent | 4 | 6 (2 stale) |',
            '| everything | 14 (2 stale, 12 over) | 14 (2 stale, 1 over) |', '',
            'Required facts found of 14 in cases.json, at each input allowance (context limits 256, 1,152); in '
            'brackets, the cases whose request carried a stale fact and the requests over the input allowance, '
            'graded all the same.'])


class PictureTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.report = sweep_report(CASES, [192, 384, 1024], {}, [], 'kind')

    def test_the_same_figures_give_the_same_bytes_and_one_changed_figure_other_bytes(self):
        for kind in ('png', 'svg'):
            first = picture(self.report, kind)
            self.assertEqual(picture(json.loads(json.dumps(self.report)), kind), first, kind)
            changed = json.loads(json.dumps(self.report))
            changed['points'][0]['facts_found'] += 1
            self.assertNotEqual(picture(changed, kind), first, kind)

    def test_the_picture_carries_no_date_or_software_stamp(self):
        png = picture(self.report, 'png')
        for chunk in (b'tEXt', b'iTXt', b'zTXt', b'tIME'):
            self.assertNotIn(chunk, png)
        svg = picture(self.report, 'svg').decode('utf-8')
        self.assertNotIn('<dc:date>', svg)
        self.assertNotIn('Matplotlib v', svg)

    def test_a_panel_per_kind_with_the_best_possible_dashed_on_a_log_axis_of_allowances(self):
        figure = budget_sweep.draw(self.report)
        panels = [axes for axes in figure.axes if axes.axison]
        self.assertEqual([axes.get_title() for axes in panels[:2]],
                         ['all cases (12 cases, 14 facts)', 'fact in the newest turn (2 cases, 2 facts)\n'
                                                            'recent = relevant = hybrid = best possible'])
        self.assertEqual(len(panels), 1 + len({case['kind'] for case in load_cases(CASES)}))  # 7 kinds
        first = panels[0]
        self.assertEqual(first.get_xscale(), 'log')
        self.assertEqual(list(first.get_xticks()), [64, 256, 896])
        self.assertEqual([label.get_text() for label in first.get_xticklabels()], ['64', '256', '896'])
        self.assertEqual(first.get_ylim(), (0, 100))
        lines = {line.get_label(): line for line in first.get_lines() if not line.get_label().startswith('_')}
        self.assertEqual(list(lines), [*RULES, BEST])
        self.assertEqual(lines[BEST].get_linestyle(), '--')
        self.assertEqual(lines['recent'].get_linestyle(), '-')
        recent = [entry for entry in self.report['points'] if entry['rule'] == 'recent']
        self.assertEqual(list(lines['recent'].get_ydata()), [100 * entry['facts_found'] / 14 for entry in recent])
        self.assertIn('cases.json', figure.get_suptitle())

    def test_points_with_stale_facts_or_requests_over_the_allowance_are_marked_and_the_legend_says_so(self):
        report = json.loads(json.dumps(self.report))
        for entry in report['points']:
            entry['over_budget'] = 5 if (entry['rule'], entry['allowance']) == ('recent', 64) else entry['over_budget']
        figure = budget_sweep.draw(report)
        lines = figure.axes[0].get_lines()
        colour = {line.get_label(): line.get_color() for line in lines}
        marks = [(line.get_label(), line.get_color(), list(zip(line.get_xdata(), line.get_ydata()))) for line in lines
                 if line.get_label().startswith('_')]
        recent = points_by(report)[192, 'recent']
        self.assertIn(('_over_budget', 'red', [(64, 100 * recent['facts_found'] / 14)]), marks)
        stale = [(entry['allowance'], 100 * entry['facts_found'] / 14) for entry in report['points']
                 if entry['cases_with_stale_facts'] and entry['rule'] == 'relevant']
        self.assertEqual(len(stale), 3)  # relevant sends a stale fact at every limit of cases.json
        self.assertIn(('_cases_with_stale_facts', colour['relevant'], stale), marks)
        self.assertEqual([text.get_text() for text in figure.legends[0].get_texts()][-2:],
                         ['stale facts sent', 'requests over the allowance'])
        unmarked = json.loads(json.dumps(self.report))
        for entry in unmarked['points']:
            entry['cases_with_stale_facts'] = 0
        self.assertEqual([text.get_text() for text in budget_sweep.draw(unmarked).legends[0].get_texts()],
                         [*RULES, BEST])

    def test_a_rule_whose_line_is_another_rules_stays_visible_and_is_named_under_the_title(self):
        # As under llama-3.1, where hybrid finds what relevant finds at every allowance: relevant's line lay under
        # hybrid's, and no pixel of its colour was left in the panel.
        report = json.loads(json.dumps(self.report))
        relevant = {entry['context_limit']: entry for entry in report['points'] if entry['rule'] == 'relevant'}
        report['points'] = [dict(relevant[entry['context_limit']], rule='hybrid') if entry['rule'] == 'hybrid' else
                            entry for entry in report['points']]
        for entry in report['points']:
            del entry['groups']
        figure = budget_sweep.draw(report)
        canvas = FigureCanvasAgg(figure)
        canvas.draw()
        box = figure.axes[0].get_window_extent()  # the panel only: the legend shows every colour anyway
        pixels = numpy.asarray(canvas.buffer_rgba())[::-1][int(box.y0):int(box.y1), int(box.x0):int(box.x1), :3]
        colours = {line.get_label(): line.get_color() for line in figure.axes[0].get_lines()}
        for rule in ('relevant', 'hybrid'):
            rgb = numpy.array(to_rgb(colours[rule])) * 255
            self.assertGreater(int((numpy.abs(pixels - rgb).sum(axis=2) < 40).sum()), 100, rule)
        self.assertEqual(figure.axes[0].get_title(), 'all cases (12 cases, 14 facts)\nrelevant = hybrid')
        self.assertEqual(picture(report, 'png'), picture(json.loads(json.dumps(report)), 'png'))

    def test_drawing_never_loads_pyplot(self):
        # pyplot would pick a backend, possibly an interactive one; the picture is drawn on a bare Figure.
        code = 'import sys, budget_sweep; print("matplotlib.pyplot" in sys.modules)'
        finished = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, cwd=HERE, timeout=120)
        self.assertEqual(finished.stdout, 'False\n', finished.stderr)


class RecordingTest(unittest.TestCase):
    def test_readme_says_what_the_recorded_sweep_shows(self):
        report = json.loads((HERE / 'budget-sweep.json').read_text(encoding='utf-8'))
        found = {(entry['rule'], entry['allowance']): entry['facts_found'] for entry in report['points']}
        rooms = sorted({room for _, room in found})
        total = report['points'][0]['facts_total']
        jump = min(room for room in rooms if found['recent', room] > found['recent', rooms[0]] + 3)
        before = max(found['recent', room] for room in rooms if room < jump)
        ceiling = max(found[rule, room] for rule in ('relevant', 'hybrid') for room in rooms)
        others = [rule for rule in RULES if rule != 'notes']
        leads = min(room for room in rooms if all(found['notes', later] >= max(found[rule, later] for rule in others)
                                                  for later in rooms if later >= room))
        sentence = (f'`recent` finds at most {before} of the {total} facts until the long turns fit at {jump} input '
                    f'tokens, `relevant` and `hybrid` never pass {ceiling}, since no budget brings a fact that '
                    f'shares no word with the question, and `notes` finds as many as any rule from {leads} tokens on.')
        readme = ' '.join((HERE / 'README.md').read_text(encoding='utf-8').split())
        self.assertIn(sentence, readme)
        self.assertIn('![Required facts found at each input allowance on the twelve cases](budget-sweep.png)', readme)

    def test_the_command_with_no_options_remakes_the_recorded_json_and_picture_byte_for_byte_and_says_so(self):
        with tempfile.TemporaryDirectory() as folder:
            recording, drawing = Path(folder) / 'budget-sweep.json', Path(folder) / 'budget-sweep.png'
            with mock.patch.object(budget_sweep, 'RECORDING', recording), \
                    mock.patch.object(budget_sweep, 'PICTURE', drawing):
                status, out, _ = lab_main(budget_sweep)
            # A bare run prints what it recorded: the table, a column per allowance of DEFAULT_LIMITS less 128.
            self.assertEqual((status, out.splitlines()[0]), (0, '| Rule | 64 | 128 | 256 | 512 | 640 | 896 |'))
            recorded = (HERE / 'budget-sweep.json').read_text(encoding='utf-8')
            fresh = with_recorded_environment(json.loads(recording.read_text(encoding='utf-8')), json.loads(recorded))
            self.assertEqual(to_json(fresh), recorded,
                             'budget-sweep.json is out of date: re-record with .venv/bin/python budget_sweep.py')
            self.assertEqual(drawing.read_bytes(), (HERE / 'budget-sweep.png').read_bytes(),
                             'budget-sweep.png is out of date: re-record with .venv/bin/python budget_sweep.py')

    def test_the_recording_sweeps_the_default_limits_and_the_rules_separate_there(self):
        recorded = json.loads((HERE / 'budget-sweep.json').read_text(encoding='utf-8'))
        self.assertEqual(recorded['context_limits'], list(DEFAULT_LIMITS))
        for limit in DEFAULT_LIMITS[:-1]:  # at 1,024 everything fits, so several rules meet at 100%
            found = {entry['rule']: entry['facts_found'] for entry in recorded['points']
                     if entry['context_limit'] == limit}
            self.assertGreater(len(set(found.values())), 2, (limit, found))


if __name__ == '__main__':
    unittest.main()
