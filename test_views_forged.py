"""Tests for names that forge a view: a case id, a kind or a rule name is free text (views.py).

    .venv/bin/python -m unittest -v test_views_forged.py   (a few seconds)

The tests give a name a newline and `|` (a forged table row) or U+202E (right-to-left override), and check that
the table, the turn map's and --show's headings and --compare show it escaped on its own line, the README's
table rows untouched; a report compared with whose best possible part is not what evaluate.py writes is refused
in one line.
"""
import copy
import json
from pathlib import Path
import re
import unittest

from case_set import load_cases
from strategies import RULES
from test_support_fixtures import HERE, RECORDED
from test_support_views import show_case
import views


# --- forged free text: names that would add table rows, break headings or reverse text ---------------------

RECORDED_REPORT = json.loads(RECORDED.read_text(encoding='utf-8'))
FORGED_ROW = '\n| forged | dev | 7 of 7 | 6 of 6 | 0 | 1 |'  # would read as a row of the README's table
OVERRIDE = '\u202e'  # right-to-left override: text after it prints reversed


def cells(line: str) -> int:
    """The cells of a Markdown table line: unescaped `|` separators less one."""
    return len(re.findall(r'(?<!\\)\|', line)) - 1


def readme_table() -> list[str]:
    text = (HERE / 'README.md').read_text(encoding='utf-8')
    start = text.index('| Strategy | Split |')
    return text[start:text.index('\n\n', start)].splitlines()


class ForgedTableTest(unittest.TestCase):
    def test_a_kind_holding_a_newline_and_a_pipe_stays_one_row_of_the_readme_table(self):
        report = copy.deepcopy(RECORDED_REPORT)
        for rows in [*report['cases'].values(), report['best_possible']['cases']]:
            for row in rows:
                row['kind'] += FORGED_ROW if row['case'] == 'dev-correction' else ''
        table = views.report_table(report, 'kind').splitlines()
        self.assertEqual({cells(line) for line in table}, {6})
        forged = [line for line in table if 'forged' in line]
        row = RECORDED_REPORT['cases']['recent'][2]  # dev-correction, the only case of its kind
        self.assertEqual(forged[0], f"| recent | {row['kind']}\\n\\| forged \\| dev \\| 7 of 7 \\| 6 of 6 \\| 0 \\| 1 "
                                    f"\\| | {row['required_found']} of 1 | 0 of 1 | 0 | {row['input_tokens']} |")
        self.assertEqual(len(forged), 5)  # one per rule and the best possible: none became a row of its own

    def test_a_rule_name_forging_a_row_leaves_the_readme_table_rows_as_they_are(self):
        report = copy.deepcopy(RECORDED_REPORT)
        name = 'mine' + FORGED_ROW
        report['cases'][name] = report['cases']['recent']
        report['summary'][name] = report['summary']['recent']
        table = views.report_table(report).splitlines()
        self.assertEqual([line for line in table if 'forged' not in line], readme_table())
        self.assertEqual([line for line in table if 'forged' in line],
                         [f'| mine\\n\\| forged \\| dev \\| 7 of 7 \\| 6 of 6 \\| 0 \\| 1 \\| | {split} | 2 of 7 | 1 of 6 '
                          f'| 0 | {mean} |' for split, mean in (('dev', '51.3'), ('held-out', '54.2'))])


class ForgedHeadingTest(unittest.TestCase):
    def test_a_newline_in_a_case_id_does_not_break_the_turn_map_heading(self):
        report = copy.deepcopy(RECORDED_REPORT)
        for rows in [*report['cases'].values(), report['best_possible']['cases']]:
            for row in rows:
                row['case'] = row['case'].replace('dev-latest', 'dev-latest\n# forged heading')
        text = views.turn_map(report)
        self.assertEqual(text.splitlines()[2], 'dev-latest\\n# forged heading (dev, fact in the newest turn), 2 turns')
        self.assertNotIn('\n# forged', text)

    def test_a_newline_and_an_override_in_a_case_id_stay_escaped_in_the_show_heading(self):
        case = load_cases(HERE / 'cases.json')[0]
        case = dict(case, id='dev-latest\nx' + OVERRIDE + 'yz')
        text = show_case(case, {'recent': RULES['recent']})
        self.assertEqual(text.splitlines()[0], 'recent on dev-latest\\nx\\u202eyz (dev, fact in the newest turn)')
        self.assertNotIn(OVERRIDE, text)


class ForgedCompareTest(unittest.TestCase):
    def test_an_override_in_a_case_id_or_a_rule_name_is_shown_escaped_never_raw(self):
        old = copy.deepcopy(RECORDED_REPORT)
        old['cases']['recent'][0]['case'] = 'dev-' + OVERRIDE + 'tsetal'  # would print as dev-latest
        old['cases']['rule' + OVERRIDE] = []
        old['summary']['rule' + OVERRIDE] = {}
        lines = views.compare(old, RECORDED_REPORT)
        self.assertEqual([line for line in lines if 'u202e' in line or OVERRIDE in line],
                         ['recent dev-\\u202etsetal: case removed', 'rule\\u202e: rule removed'])

    def test_a_best_possible_summary_that_is_not_figures_is_refused_in_one_line(self):
        old = copy.deepcopy(RECORDED_REPORT)
        old['best_possible']['summary'] = {'dev': 5}
        with self.assertRaises(views.ReportError) as raised:
            views.check_report(Path('old.json'), old)
        self.assertEqual(str(raised.exception), 'old.json: not an evaluate.py report: field best_possible.summary '
                                                'must map each split to its figures')

    def test_a_best_possible_without_its_cases_or_summary_is_refused_naming_the_part_that_is_missing(self):
        for part in ('cases', 'summary'):
            with self.subTest(part):
                old = copy.deepcopy(RECORDED_REPORT)
                del old['best_possible'][part]
                with self.assertRaises(views.ReportError) as raised:
                    views.check_report(Path('old.json'), old)
                self.assertEqual(str(raised.exception), f'old.json: not an evaluate.py report: missing field '
                                                        f'best_possible.{part}')

    def test_best_possible_cases_that_are_no_list_of_rows_are_refused(self):
        old = copy.deepcopy(RECORDED_REPORT)
        old['best_possible']['cases'] = {'dev-latest': {}}
        with self.assertRaises(views.ReportError) as raised:
            views.check_report(Path('old.json'), old)
        self.assertEqual(str(raised.exception), 'old.json: not an evaluate.py report: field best_possible.cases '
                                                'must be a list of rows')


if __name__ == '__main__':
    unittest.main()
