"""Tests for evaluate.py's command line: its options, --compare, --output, a signal mid-run and an ASCII-only stdout.

    .venv/bin/python -m unittest -v test_evaluate_command.py   (about 10 s)

Each test is named after the failure it pins: a report file --compare should refuse in one line but reads or
crashes on, an output that is an input or cannot be written, a stray temporary file, a traceback. Files are
only ever written into temporary directories.
"""
import copy
import json
import os
from pathlib import Path
import subprocess
import sys
import tempfile
import unittest

import evaluate
from prepared_folder import PREPARED_ENV
from test_support_fixtures import HERE, RECORDED, shipped_cases
from test_support_runs import in_process, lab_main


class CommandLineTest(unittest.TestCase):
    def run_on_file(self, option: str, text: str) -> tuple[Path, subprocess.CompletedProcess]:
        """Run evaluate.py with `option` naming a temporary file that holds `text`."""
        with tempfile.TemporaryDirectory() as folder:
            path = Path(folder) / 'input.json'
            path.write_text(text, encoding='utf-8')
            return path, in_process(evaluate, option, str(path))

    def compare_edited(self, change) -> tuple[Path, subprocess.CompletedProcess]:
        """`evaluate.py --compare` against the recorded report as `change` (a function of it) leaves it."""
        old = json.loads(RECORDED.read_text(encoding='utf-8'))
        change(old)
        return self.run_on_file('--compare', json.dumps(old))

    def test_case_error_exits_2_with_one_line_and_no_traceback(self):
        path, result = self.run_on_file('--cases', '[]x')
        self.assertEqual(result.returncode, 2)
        self.assertEqual(result.stdout, '')
        self.assertEqual(result.stderr, f'evaluate.py: {path}: invalid JSON at line 1 column 3: Extra data\n')

    def test_help_explains_the_options(self):
        result = in_process(evaluate, '--help')
        self.assertEqual(result.returncode, 0)
        for option in ('--cases', '--format', '--output', '--compare', '--show', '--strategy', '--prompt', '--full'):
            self.assertIn(option, result.stdout)

    def test_the_readme_table_is_what_format_table_prints(self):
        result = in_process(evaluate, '--format', 'table')
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn('\n' + result.stdout + '\n', (HERE / 'README.md').read_text(encoding='utf-8'))
        self.assertEqual(result.stdout.splitlines()[2], '| recent | dev | 2 of 7 | 1 of 6 | 0 | 51.3 |')
        self.assertEqual(result.stdout.splitlines()[-2:], [
            '| best possible (reads the labels) | dev | 7 of 7 | 6 of 6 | 0 | 65 |',
            '| best possible (reads the labels) | held-out | 6 of 7 | 5 of 6 | 0 | 62.8 |'])

    def test_compare_exits_0_when_nothing_changed(self):
        result = in_process(evaluate, '--compare', str(RECORDED))
        self.assertEqual((result.returncode, result.stdout), (0, f'no change against {RECORDED}\n'))

    def test_compare_names_the_changed_cases_and_fields(self):
        old = json.loads(RECORDED.read_text(encoding='utf-8'))
        row = old['cases']['notes'][1]  # dev-old-decision, as if an older version had missed its fact
        row.update(required_found=0, missing=['We chose PostgreSQL for the application.'], notes=0)
        old['cases']['relevant'][2]['stale_included'] = []  # ... and had not sent dev-correction's stale fact
        old['summary']['notes']['dev']['facts_found'] = 5
        with tempfile.TemporaryDirectory() as folder:
            path = Path(folder) / 'old.json'
            path.write_text(json.dumps(old), encoding='utf-8')
            result = in_process(evaluate, '--compare', str(path))
        self.assertEqual(result.returncode, 1)
        self.assertEqual(result.stdout.splitlines(), [
            "relevant dev-correction: stale facts appeared: ['We will use MySQL']",
            "notes dev-old-decision: facts gained: ['We chose PostgreSQL for the application.']",
            'notes dev-old-decision: notes 0 -> 1',
            'notes dev summary: facts_found 5 -> 6',
        ])

    def test_compare_refuses_a_file_that_is_not_a_report_even_null_instead_of_printing_the_report(self):
        for text in ('[1, 2]', 'null', '3', '"x"'):
            with self.subTest(text):
                path, result = self.run_on_file('--compare', text)
                self.assertEqual((result.returncode, result.stdout), (2, ''))
                self.assertEqual(result.stderr, f"evaluate.py: {path}: not an evaluate.py report: must be an object "
                                                f"with the fields ['cases', 'summary', 'best_possible'], got {text}\n")

    def test_compare_refuses_rows_without_the_report_fields(self):
        broken = {'cases': {'recent': [{'case': 'dev-latest'}]}, 'summary': {}, 'best_possible': {'cases': [],
                                                                                                'summary': {}}}
        path, result = self.run_on_file('--compare', json.dumps(broken))
        self.assertEqual(result.returncode, 2)
        self.assertEqual(result.stderr, f'evaluate.py: {path}: not an evaluate.py report: missing fields '
                                        'cases.recent[0].split, cases.recent[0].kind, cases.recent[0].turns, '
                                        'cases.recent[0].notes, cases.recent[0].input_tokens, '
                                        'cases.recent[0].within_budget, cases.recent[0].required_found, '
                                        'cases.recent[0].required_total, cases.recent[0].missing, '
                                        'cases.recent[0].stale_included\n')

    def test_compare_refuses_a_row_whose_case_is_not_a_string(self):
        path, result = self.compare_edited(lambda old: old['cases']['notes'][0].update(case=['dev-latest']))
        self.assertEqual((result.returncode, result.stderr),
                         (2, f'evaluate.py: {path}: not an evaluate.py report: field cases.notes[0].case must be a '
                             'string, got ["dev-latest"]\n'))

    def test_compare_refuses_a_best_possible_part_without_its_fields(self):
        path, result = self.compare_edited(lambda old: old['best_possible']['cases'][3].pop('fact_turns'))
        self.assertEqual((result.returncode, result.stderr),
                         (2, f'evaluate.py: {path}: not an evaluate.py report: missing field '
                             'best_possible.cases[3].fact_turns\n'))

    def test_compare_refuses_a_report_from_before_the_best_possible_instead_of_a_traceback(self):
        path, result = self.compare_edited(lambda old: old.pop('best_possible'))
        self.assertEqual((result.returncode, result.stdout), (2, ''))
        self.assertEqual(result.stderr,
                         f'evaluate.py: {path}: not an evaluate.py report: missing field best_possible\n')

    def test_compare_refuses_turns_that_are_not_turn_indices_instead_of_a_traceback(self):
        for where, change, expected in (
                ('cases.recent[1].turns', lambda old: old['cases']['recent'][1].update(turns='x'), '"x"'),
                ('best_possible.cases[2].fact_turns',
                 lambda old: old['best_possible']['cases'][2].update(fact_turns=['a']), '["a"]')):
            with self.subTest(where):
                path, result = self.compare_edited(change)
                self.assertEqual((result.returncode, result.stderr),
                                 (2, f'evaluate.py: {path}: not an evaluate.py report: field {where} must be a list '
                                     f'of turn indices, got {expected}\n'))

    def test_compare_with_a_table_format_is_a_usage_error(self):
        result = in_process(evaluate, '--compare', str(RECORDED), '--format', 'table')
        self.assertEqual(result.returncode, 2)
        self.assertIn('--compare prints changes, not a table', result.stderr)

    def test_output_that_cannot_be_written_exits_2_and_leaves_no_temporary_file(self):
        with tempfile.TemporaryDirectory() as folder:
            for target in (Path(folder) / 'missing' / 'report.json', Path(folder)):
                with self.subTest(target=target.name):
                    status, out, err = lab_main(evaluate, '--output', str(target))
                    self.assertEqual((status, out), (2, ''))
                    self.assertTrue(err.startswith(f'evaluate.py: {target}: cannot write the report: '), err)
                    self.assertEqual(err.count('\n'), 1)
            self.assertEqual(list(Path(folder).iterdir()), [])

    def test_output_writes_the_report_it_prints(self):
        with tempfile.TemporaryDirectory() as folder:
            path = Path(folder) / 'report.json'
            result = in_process(evaluate, '--output', str(path))
            self.assertEqual(result.returncode, 0, result.stderr)
            self.assertEqual(path.read_text(encoding='utf-8'), result.stdout)
            self.assertEqual(path.stat().st_mode & 0o777, 0o644)
            self.assertEqual(sorted(p.name for p in Path(folder).iterdir()), ['report.json'])

    def test_large_case_set_shows_progress_on_stderr_only(self):
        template = shipped_cases()['dev-latest']
        many = [dict(copy.deepcopy(template), id=f'copy-{n}') for n in range(101)]
        with tempfile.TemporaryDirectory() as folder:
            path = Path(folder) / 'many.json'
            path.write_text(json.dumps(many), encoding='utf-8')
            status, out, err = lab_main(evaluate, '--cases', str(path), '--format', 'table')
        self.assertEqual(status, 0, err)
        self.assertIn('evaluate.py: 101 of 101 cases\n', err)
        self.assertNotIn('of 101 cases', out)
        self.assertIn('| recent | dev | 101 of 101 | 101 of 101 | 0 |', out)


class OutputIsInputTest(unittest.TestCase):
    def test_an_output_that_is_the_case_set_or_the_report_compared_with_is_refused_and_both_stay(self):
        with tempfile.TemporaryDirectory() as folder:
            mine, old = Path(folder) / 'my.json', Path(folder) / 'old.json'
            mine.write_bytes((HERE / 'cases.json').read_bytes())
            old.write_bytes(RECORDED.read_bytes())
            (Path(folder) / 'link.json').symlink_to('my.json')
            for args, output, what in (
                    (['--cases', str(mine)], Path(folder) / 'link.json', f'--cases {mine}'),
                    (['--compare', str(old)], Path(folder) / '.' / 'old.json', f'--compare {old}')):
                with self.subTest(what):
                    result = in_process(evaluate, *args, '--output', str(output))
                    self.assertEqual((result.returncode, result.stdout, result.stderr), (2, '', (
                        f'evaluate.py: --output {output}: the same file as {what}, which this run reads; write '
                        'the output elsewhere\n')))
            self.assertEqual(mine.read_bytes(), (HERE / 'cases.json').read_bytes())
            self.assertEqual(old.read_bytes(), RECORDED.read_bytes())
            self.assertEqual(sorted(path.name for path in Path(folder).iterdir()), ['link.json', 'my.json', 'old.json'])


class SignalTest(unittest.TestCase):
    def test_sigterm_mid_run_says_nothing_was_written_exits_130_and_leaves_no_file(self):
        template = shipped_cases()['dev-latest']
        many = [dict(copy.deepcopy(template), id=f'copy-{n}') for n in range(2000)]  # progress lines, then more
        with tempfile.TemporaryDirectory() as folder:
            path, output = Path(folder) / 'many.json', Path(folder) / 'report.json'
            path.write_text(json.dumps(many), encoding='utf-8')
            environment = {key: value for key, value in os.environ.items() if key != PREPARED_ENV}
            process = subprocess.Popen([sys.executable, 'evaluate.py', '--cases', str(path), '--output', str(output)],
                                       cwd=HERE, env=environment, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                       text=True)
            try:
                first = process.stderr.readline()  # main is grading: the first progress line
                process.terminate()  # a real SIGTERM
                out, rest = process.communicate(timeout=120)
            finally:
                if process.poll() is None:
                    process.kill()
                    process.wait()
            self.assertEqual(first, 'evaluate.py: 100 of 2000 cases\n')
            self.assertEqual((process.returncode, out, rest.splitlines()[-1]),
                             (130, '', 'evaluate.py: interrupted; nothing was written'))
            self.assertEqual([line for line in rest.splitlines() if not line.startswith('evaluate.py: ')], [])
            self.assertEqual(sorted(p.name for p in Path(folder).iterdir()), ['many.json'])


class EncodingTest(unittest.TestCase):
    def test_an_ascii_only_output_is_one_line_not_a_traceback(self):
        environment = {key: value for key, value in os.environ.items() if key != PREPARED_ENV}
        result = subprocess.run([sys.executable, 'evaluate.py', '--show', 'dev-latest', '--strategy', 'recent'],
                                cwd=HERE, capture_output=True, text=True, timeout=300,
                                env=environment | {'PYTHONIOENCODING': 'ascii'})
        self.assertEqual((result.returncode, result.stdout, result.stderr), (2, '', (
            "evaluate.py: the output cannot be written as ascii (it holds '\\xb7'); set PYTHONIOENCODING=utf-8\n")))


if __name__ == '__main__':
    unittest.main()
