"""Tests of rule_timing.py: what is timed, in what order, and the table it prints (never the times themselves).

    .venv/bin/python -m unittest -v test_rule_timing.py
"""
import contextlib
import io
from pathlib import Path
import tempfile
import unittest

from case_set import load_cases
import rule_timing
from strategies import STRATEGIES

HERE = Path(__file__).resolve().parent
ONE_RULE = "from strategies import recent\n\nRULES = {'newest_turns': recent}\n"


class TimingTest(unittest.TestCase):
    def test_each_rule_runs_on_every_case_twice_in_order_and_its_passes_are_timed_apart(self):
        calls, ticks = [], iter(range(100))
        rules = {name: (lambda case, count, name=name: calls.append((name, case['id']))) for name in ('a', 'b')}
        cases = load_cases(HERE / 'cases.json')[:3]
        seconds = rule_timing.time_rules(cases, rules, clock=lambda: next(ticks))
        ids = [case['id'] for case in cases]
        self.assertEqual(calls, [(name, case) for name in ('a', 'b') for _ in range(2) for case in ids])
        # The clock is read at the start and end of each pass: 0-1, 2-3 for a; 4-5, 6-7 for b.
        self.assertEqual(seconds, {'a': (1, 1), 'b': (1, 1)})

    def test_the_table_has_a_row_per_rule_with_two_decimals(self):
        self.assertEqual(rule_timing.table({'recent': (1.234, 0.5), 'bm25': (0.015, 0.004)}),
                         '| Rule | First pass, CPU s | Second pass, CPU s |\n|---|---|---|\n'
                         '| recent | 1.23 | 0.50 |\n| bm25 | 0.01 | 0.00 |\n')


class CommandTest(unittest.TestCase):
    def test_the_command_times_the_four_then_a_rules_files_rules(self):
        with tempfile.TemporaryDirectory() as folder:
            rules = Path(folder) / 'one_rule.py'
            rules.write_text(ONE_RULE, encoding='utf-8')
            out, err = io.StringIO(), io.StringIO()
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                status = rule_timing.main(['--rules', str(rules)])
        self.assertEqual(status, 0, err.getvalue())
        rows = [line.split(' | ')[0].removeprefix('| ') for line in out.getvalue().splitlines()[2:]]
        self.assertEqual(rows, [*STRATEGIES, 'newest_turns'])
        self.assertEqual(err.getvalue(), 'rule_timing.py: timing 5 rules on 12 cases\n')

    def test_a_bad_case_set_is_one_line_and_exit_2(self):
        with tempfile.TemporaryDirectory() as folder:
            path = Path(folder) / 'cases.json'
            path.write_text('[]', encoding='utf-8')
            err = io.StringIO()
            with contextlib.redirect_stderr(err):
                status = rule_timing.main(['--cases', str(path)])
        self.assertEqual((status, err.getvalue()), (2, f'rule_timing.py: {path}: the case set is empty\n'))


if __name__ == '__main__':
    unittest.main()
