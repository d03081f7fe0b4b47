"""Tests for budget_sweep.py on agent cases: every point holds the figures evaluate.py reports, invalid requests too.

    .venv/bin/python -m unittest -v test_budget_sweep_agents   (about ten seconds)

test_budget_sweep.py tests the sweep on the pair cases of cases.json; this file, on agent-cases.json with
agent_rules.py, where trim-last sends requests a provider would refuse. Each test is named after the figure that
would be wrong. Nothing is written to disk.
"""
import unittest

import budget_sweep
from budget_sweep import sweep_report, sweep_table
import evaluate
from scorer import totals
from test_support_fixtures import HERE

CASES, RULES_FILE = HERE / 'agent-cases.json', HERE / 'agent_rules.py'


class InvalidRequestsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        rules, files = budget_sweep.load_rule_files([RULES_FILE])
        cls.report = sweep_report(CASES, [512, 2048], rules, files, 'split')  # 512: the cases' own context limit
        cls.evaluated = evaluate.report(CASES, [RULES_FILE])

    def test_each_point_at_the_case_sets_own_limit_holds_evaluate_pys_figures_invalid_requests_too(self):
        points = {entry['rule']: entry for entry in self.report['points'] if entry['context_limit'] == 512}
        for rule, rows in self.evaluated['cases'].items():
            figures = totals(rows)
            self.assertEqual({key: points[rule][key] for key in figures if key in points[rule]},
                             {key: figures[key] for key in points[rule] if key in figures}, rule)
            self.assertEqual(points[rule]['invalid_requests'], figures['invalid_requests'], rule)
        self.assertEqual((points['trim-last']['invalid_requests'], points['trim-last']['facts_found']), (12, 0))

    def test_the_table_and_the_picture_say_which_points_sent_invalid_requests(self):
        table = sweep_table(self.report).splitlines()
        self.assertIn('| trim-last | 0 (12 invalid) | 14 (2 stale) |', table)
        self.assertTrue(table[-1].endswith('graded all the same, and the invalid requests, which reach no fact.'))
        figure = budget_sweep.draw(self.report)
        marks = [list(zip(line.get_xdata(), line.get_ydata())) for line in figure.axes[0].get_lines()
                 if line.get_label() == '_invalid_requests']
        self.assertEqual(marks, [[(384, 0.0)]])  # trim-last's point at the 384-token allowance, at 0 %
        self.assertIn('invalid requests (no fact counted)', [text.get_text() for text in figure.legends[0].get_texts()])


if __name__ == '__main__':
    unittest.main()
