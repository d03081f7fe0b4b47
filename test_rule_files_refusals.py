"""Tests for the rules files the lab refuses (rule_files.py): each in one line, naming the file, rule and case.

    .venv/bin/python -m unittest -v test_rule_files_refusals.py

Each test is named after the failure it pins: a file that cannot be imported or has no RULES, a name another
row takes, sys.exit at import or in a rule, a looping rule or import in every script that runs rules, a bad
--rule-timeout. Rules files are written into temporary folders only (test_support_rules.RulesFolder).
"""
from pathlib import Path
import time
import unittest

import answer_check
import benchmark
import budget_sweep
import evaluate
from test_support_fixtures import RECORDED
from test_support_runs import in_process, lab_main
from test_support_rules import README_RULES as MY_RULES, RulesFolder


class RefusalTest(RulesFolder):
    """Every refusal through the real command: exit 2, nothing on stdout, one line naming file, rule and case."""

    def refused(self, *paths: Path, extra: tuple = ()) -> str:
        result = in_process(evaluate, *[arg for path in paths for arg in ('--rules', str(path))], *extra)
        self.assertEqual((result.returncode, result.stdout), (2, ''), result.stderr)
        self.assertNotIn('Traceback', result.stderr)
        self.assertEqual(result.stderr.count('\n'), 1, result.stderr)
        return result.stderr

    def test_a_file_that_cannot_be_imported_is_one_line(self):
        path = self.write('x = 1\ndef rule(case, count)\n    return []\n')
        self.assertEqual(self.refused(path), f'evaluate.py: {path}: cannot import it: SyntaxError: expected \':\' '
                                             f'(rules.py, line 2) (line 2 of rules.py)\n')
        missing = Path(self.folder.name, 'absent.py')
        self.assertEqual(self.refused(missing), f'evaluate.py: {missing}: no such rules file\n')
        # Not .py: importlib finds no loader for it, and the refusal read "'NoneType' object has no attribute 'loader'".
        text = self.write('RULES = {}\n', 'rules.txt')
        self.assertEqual(self.refused(text), f'evaluate.py: {text}: a rules file is Python source, its name ending '
                                             'in .py\n')
        raising = self.write('import json\n\nVALUE = json.loads("{")\n', 'raising.py')
        self.assertRegex(self.refused(raising), r'cannot import it: JSONDecodeError: .* \(line 3 of raising\.py\)\n$')

    def test_a_file_without_a_rules_dict_is_one_line(self):
        for text, found in (('X = 1\n', 'none'), ('RULES = [len]\n', 'list')):
            path = self.write(text)
            self.assertEqual(self.refused(path), f'evaluate.py: {path}: expected RULES, a dict of name -> '
                                                 f'function(case, count); found {found}\n')

    def test_a_name_taken_by_a_built_in_the_best_possible_or_another_file_is_one_line(self):
        for name in ('recent', 'best possible', 'best possible (reads the labels)'):
            path = self.write(f'RULES = {{{name!r}: len}}\n')
            self.assertIn(f"{path}: rule {name!r}: a rule name must be printable ASCII without \"|\", single-spaced, "
                          "and none of the lab's", self.refused(path))
        # Two files may share a basename; two rules may not share a name.
        first = self.write('RULES = {"mine": len}\n', under='one')
        second = self.write('RULES = {"mine": len}\n', under='two')
        self.assertEqual(self.refused(first, second),
                         f'evaluate.py: {second}: rule mine: the name is taken by a rule of {first}\n')

    def test_a_return_value_the_counter_refuses_is_one_line_naming_file_rule_and_case(self):
        path = self.write('RULES = {"robot": lambda case, count: [{"role": "robot", "content": "hi"}], '
                          '"nothing": lambda case, count: None}\n')
        self.assertEqual(self.refused(path),
                         f"evaluate.py: {path}: rule robot: case dev-latest: returned a request the counter does not "
                         f"accept: message 0: unknown role 'robot'; expected one of ['system', 'user', 'assistant', "
                         "'tool']\n")
        path = self.write('RULES = {"nothing": lambda case, count: None}\n')
        self.assertEqual(self.refused(path), f"evaluate.py: {path}: rule nothing: case dev-latest: returned NoneType; "
                                             "expected a list of chat messages or a dict with 'messages'\n")

    def test_an_exception_in_a_rule_gives_the_last_line_of_the_rules_file_it_passed(self):
        path = self.write('''\
            from shapes import allowance


            def helper(case):
                return allowance({'budget': {}})


            def rule(case, count):
                if case['id'] == 'dev-pronoun':
                    return helper(case)
                return [{'role': 'user', 'content': case['current']}]


            RULES = {'mine': rule}
            ''')
        # The KeyError is raised inside common.py; the last line of the rules file on the way is line 5.
        self.assertEqual(self.refused(path), f"evaluate.py: {path}: rule mine: case dev-pronoun: the rule raised "
                                             f"KeyError: 'context_limit' (line 5 of rules.py)\n")

    def test_sys_exit_at_import_or_in_a_rule_is_exit_2_not_a_silent_no_change(self):
        # Under --compare exit 0 means "no change": a rule's exit must not be taken for one.
        at_import = self.write('import sys\nsys.exit(0)\n', 'at_import.py')
        self.assertEqual(lab_main(evaluate, '--rules', str(at_import), '--compare', str(RECORDED)),
                         (2, '', f'evaluate.py: {at_import}: cannot import it: SystemExit: 0 (line 2 of at_import.py)\n'))
        in_rule = self.write('import sys\nRULES = {"quits": lambda case, count: sys.exit(0)}\n', 'in_rule.py')
        self.assertEqual(lab_main(evaluate, '--rules', str(in_rule), '--compare', str(RECORDED)),
                         (2, '', f'evaluate.py: {in_rule}: rule quits: case dev-latest: the rule raised SystemExit: 0 '
                             '(line 2 of in_rule.py)\n'))

    def test_a_looping_rule_or_import_is_stopped_by_the_rule_timeout_in_every_script_that_runs_rules(self):
        looping = self.write('def rule(case, count):\n    while True:\n        pass\nRULES = {"loops": rule}\n')
        at_import = self.write('while True:\n    pass\n', 'at_import.py')
        limit = ' (--rule-timeout SECONDS sets the limit per case)'
        for script, extra in ((evaluate, ()), (evaluate, ('--show', 'dev-latest')),
                              (budget_sweep, ('--context-limits', '256')), (benchmark, ('--cases', 'cases.json'))):
            with self.subTest(script=script.__name__, extra=extra):
                started = time.monotonic()
                status, out, err = lab_main(script, '--rules', str(looping), '--rule-timeout', '0.3', *extra)
                self.assertLess(time.monotonic() - started, 30)
                self.assertEqual((status, out), (2, ''))
                self.assertEqual(err.splitlines()[-1],  # after the script's own progress lines
                                 f'{script.__name__}.py: {looping}: rule loops: case dev-latest: still running after '
                                 f'0.3 s{limit}')
                status, out, err = lab_main(script, '--rules', str(at_import), '--rule-timeout', '0.3', *extra)
                self.assertEqual((status, err), (2, f'{script.__name__}.py: {at_import}: still running after 0.3 s'
                                                    f'{limit}\n'))
        # answer_check imports the rules files before it grades or records, and names the option it has.
        self.assertEqual(lab_main(answer_check, '--rules', str(at_import), '--rule-timeout', '0.3'),
                         (2, '', f'answer_check.py: {at_import}: still running after 0.3 s{limit}\n'))

    def test_a_rule_timeout_that_is_not_a_positive_number_is_refused_by_the_option(self):
        for value in ('0', '-1', 'nan', 'inf', 'soon', '86401', '1e308'):  # 1e308 was an OverflowError in select
            result = in_process(evaluate, '--rule-timeout', value)
            self.assertEqual(result.returncode, 2)
            self.assertTrue(result.stderr.endswith(f"error: argument --rule-timeout: invalid seconds value: "
                                                   f"'{value}'\n"), result.stderr)

    def test_an_unknown_strategy_for_show_is_one_line_listing_the_rules(self):
        path = self.write(MY_RULES)
        self.assertEqual(self.refused(path, extra=('--show', 'dev-latest', '--strategy', 'nope')),
                         'evaluate.py: --strategy nope: no such rule; the rules are: recent, relevant, notes, hybrid, '
                         'question_words_first\n')


if __name__ == '__main__':
    unittest.main()
