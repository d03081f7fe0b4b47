"""Tests for a rules file's rules in the report and on the command line (`evaluate.py --rules FILE.py`).

    .venv/bin/python -m unittest -v test_rule_files_command.py

The README's own rules file runs as the README says; its rows join the recorded report's, and --show, --turns
and --compare work with them. Figures come from the recorded report or are worked out by hand. Rules files are
written into temporary folders only (test_support_rules.RulesFolder).
"""
import hashlib
import json
import os
from pathlib import Path
import subprocess
import sys
import unittest

from runner import CODE_FILES
import evaluate
from evaluate import report
from rule_files import load_rule_files
from test_support_fixtures import HERE, RECORDED
from test_support_runs import in_process
from test_support_rules import README_RULES as MY_RULES, RulesFolder, case_named
from tokenizer import counter
from views import report_table


# The README, whose "Write your own rule" section the reports below must agree with.
README = (HERE / 'README.md').read_text(encoding='utf-8')


class ReportTest(RulesFolder):
    def test_a_rules_file_whose_name_is_not_utf8_is_recorded_under_its_escaped_name(self):
        # A Linux file name may hold any byte; the report is JSON text, and stdout strict UTF-8 as on a desktop.
        folder = Path(self.write('RULES = {}\n')).parent
        os.rename(folder / 'rules.py', os.fsdecode(os.fsencode(folder) + b'/rules\xff.py'))
        result = subprocess.run([sys.executable, 'evaluate.py', '--rules', os.fsencode(folder) + b'/rules\xff.py'],
                                cwd=HERE, capture_output=True, timeout=300,
                                env={**os.environ, 'PYTHONIOENCODING': 'utf-8:strict'})
        self.assertEqual((result.returncode, result.stderr), (0, b''))
        self.assertEqual(json.loads(result.stdout)['rule_files'][0]['file'], 'rules\\xff.py')

    def test_without_rules_the_report_has_no_rules_key_and_with_them_the_four_rows_are_the_recorded_ones(self):
        recorded = json.loads(RECORDED.read_text(encoding='utf-8'))
        self.assertNotIn('rule_files', recorded)
        self.assertEqual(list(recorded['code_sha256']), list(CODE_FILES))
        path = self.write(MY_RULES, 'my_rules.py')
        result = report(HERE / 'cases.json', [path])
        self.assertEqual(list(result['cases']), ['recent', 'relevant', 'notes', 'hybrid', 'question_words_first'])
        for name in ('recent', 'relevant', 'notes', 'hybrid'):
            self.assertEqual(result['cases'][name], recorded['cases'][name])
            self.assertEqual(result['summary'][name], recorded['summary'][name])
        self.assertEqual(result['best_possible'], recorded['best_possible'])
        self.assertEqual(result['rule_files'], [{'file': 'my_rules.py',
                                                 'sha256': hashlib.sha256(MY_RULES.encode()).hexdigest()}])
        self.assertEqual(list(result['code_sha256']), [*CODE_FILES, 'rule_files.py', 'rules_process.py'])

    def test_over_budget_requests_are_counted_in_the_summary_and_said_under_the_table(self):
        path = self.write('from shapes import build_request\n'
                          'RULES = {"all": lambda case, count: build_request(case, range(len(case["history"])))}\n')
        result = report(HERE / 'cases.json', [path])
        # Every conversation holds a turn larger than the whole 256-token allowance (the README's case set).
        self.assertEqual([result['summary']['all'][split]['over_budget'] for split in ('dev', 'held_out')], [6, 6])
        self.assertTrue(report_table(result).endswith(
            '\nRequests over the input allowance (graded all the same): all dev: 6 of 6; all held-out: 6 of 6.\n'))
        self.assertNotIn('over the input allowance', report_table(json.loads(RECORDED.read_text(encoding='utf-8'))))

    def test_importing_a_rules_file_writes_no_bytecode_beside_it(self):
        path = self.write(MY_RULES, 'my_rules.py')
        load_rule_files([path])
        self.assertEqual(sorted(p.name for p in path.parent.iterdir()), ['my_rules.py'])

    def test_two_rules_files_with_a_helper_of_one_name_each_import_their_own(self):
        # The second file's `import helper` found the first's in sys.modules: 7 of 7 facts one way, 0 of 7 the other.
        at_import = 'import helper\nRULES = {NAME: lambda case, count: [{"role": "user", "content": helper.WHO}]}\n'
        in_rule = ('def rule(case, count):\n    import helper\n    return [{"role": "user", "content": helper.WHO}]\n'
                   'RULES = {NAME: rule, NAME + " too": rule}\n')  # two rules of one folder, one after the other
        for folder in ('a', 'b'):
            self.write(f'WHO = {folder!r}\n', 'helper.py', under=folder)
        for first, second in ((at_import, at_import), (in_rule, at_import), (in_rule, in_rule)):
            a = self.write(first.replace('NAME', '"from a"'), under='a')
            b = self.write(second.replace('NAME', '"from b"'), under='b')
            for paths in ([a, b], [b, a]):
                rules = load_rule_files(paths)[0]
                with self.subTest(first=first, second=second, order=paths):
                    self.assertEqual({name: rule(case_named('dev-latest'), counter())['messages'][0]['content']
                                      for name, rule in rules.items()}, {name: name[5] for name in rules})
                    self.assertEqual(len(rules), (first, second).count(in_rule) + 2)

    def test_two_files_with_one_basename_are_two_modules(self):
        one = self.write('RULES = {"first": lambda case, count: [{"role": "user", "content": "1"}]}\n', under='a')
        two = self.write('RULES = {"second": lambda case, count: [{"role": "user", "content": "2"}]}\n', under='b')
        rules, files = load_rule_files([one, two])
        case = case_named('dev-latest')
        self.assertEqual([rules[name](case, counter())['messages'][0]['content'] for name in rules], ['1', '2'])
        self.assertEqual([entry['file'] for entry in files], ['rules.py', 'rules.py'])


class CommandTest(RulesFolder):
    def test_the_readme_rules_file_runs_as_the_readme_says(self):
        path = self.write(MY_RULES, 'my_rules.py')
        result = in_process(evaluate, '--rules', str(path), '--format', 'table')
        self.assertEqual((result.returncode, result.stderr), (0, ''))
        # Worked out from the turn maps: it keeps every turn that fits, question-word turns first, so it finds
        # what `relevant` finds plus dev-correction's turn 2, dev-no-overlap's turn 1 and held-spread's two facts.
        rows = ['| question_words_first | dev | 7 of 7 | 6 of 6 | 1 | 78.7 |',
                '| question_words_first | held-out | 6 of 7 | 5 of 6 | 1 | 80.3 |']
        self.assertIn('\n'.join(rows) + '\n', result.stdout)
        for row in rows:  # the README shows the same rows
            self.assertIn(f'`{row}`', README)
        self.assertIn('.venv/bin/python evaluate.py --rules my_rules.py --format table\n', README)
        self.assertEqual(result.stdout.count('\n'), 2 + 10 + 2)

    def test_show_and_turns_and_compare_work_with_a_rules_files_rule(self):
        path = self.write(MY_RULES, 'my_rules.py')
        shown = in_process(evaluate, '--rules', str(path), '--show', 'dev-correction',
                           '--strategy', 'question_words_first')
        self.assertEqual((shown.returncode, shown.stderr), (0, ''))
        self.assertTrue(shown.stdout.startswith('question_words_first on dev-correction (dev, corrected decision)\n'))
        self.assertIn('[turn 2, user] 12 tokens\n  + required fact: "Switch to PostgreSQL instead of MySQL."', shown.stdout)
        turns = in_process(evaluate, '--rules', str(path), '--format', 'turns')
        # dev-correction: turn 1 shares `use` with the question and comes first; turn 3 (a long log) does not
        # fit; turn 2 does, and brings the required fact beside the stale one.
        self.assertIn('| question_words_first             | x  | x  | . | 0     | 1 of 1      | 1                |',
                      turns.stdout)
        compared = in_process(evaluate, '--rules', str(path), '--compare', str(RECORDED))
        self.assertEqual(compared.returncode, 1)
        lines = compared.stdout.splitlines()
        shas = {name: hashlib.sha256((HERE / name).read_bytes()).hexdigest() for name in ('rule_files.py',
                                                                                          'rules_process.py')}
        self.assertEqual(lines[:2], [f'code_sha256 {name}: None -> {sha}' for name, sha in shas.items()])
        self.assertTrue(lines[2].startswith("rule_files: None -> [{'file': 'my_rules.py', 'sha256': '"))
        self.assertEqual(lines[3:], ['question_words_first: rule added'])
        written = Path(self.folder.name, 'with-rules.json')
        same = in_process(evaluate, '--rules', str(path), '--output', str(written))
        self.assertEqual(same.returncode, 0)
        unchanged = in_process(evaluate, '--rules', str(path), '--compare', str(written))
        self.assertEqual((unchanged.returncode, unchanged.stdout.startswith('no change against')), (0, True))

    def test_show_prompt_prints_the_best_possible_too(self):
        result = in_process(evaluate, '--show', 'dev-correction', '--prompt')
        self.assertEqual((result.returncode, result.stderr), (0, ''))
        self.assertIn('=== best possible (reads the labels): 57 input tokens ===\n<bos><|turn>system\n', result.stdout)
        self.assertEqual(result.stdout.count('=== '), 5)

    def test_a_message_the_standard_layout_cannot_label_is_labelled_by_its_index_from_0(self):
        path = self.write('RULES = {"bare": lambda case, count: [{"role": "user", "content": case["current"]}]}\n')
        result = in_process(evaluate, '--rules', str(path), '--show', 'dev-correction', '--strategy', 'bare')
        self.assertEqual((result.returncode, result.stderr), (0, ''))
        self.assertIn('\n[message 0, user] ', result.stdout)


if __name__ == '__main__':
    unittest.main()
