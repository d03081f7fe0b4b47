"""Tests for every script's entry point: what a newcomer meets when a script runs.

    .venv/bin/python -m unittest -v test_cli.py   (about 30 s)

The lab's scripts are found, not listed: every tracked .py file other than a test whose source holds an
`if __name__ == '__main__':` block. So a rules file of the user's beside them (my_rules.py) is never taken
for a script, and a script that is added, renamed or merged away is checked or dropped by itself. Each
test is named after the failure it pins: a script that ends in a traceback (missing packages, a closed
stdout, Ctrl-C, a kill), a script without --help, a prepared folder only some scripts can find, answer files
refused for a byte-order mark. Scripts run as real child
processes (only InterruptTest drives evaluate.py's main in this process, to stop it at an exact step);
those that would write beside themselves run in a copy of the lab in a temp folder, reading the prepared
counter through CONTEXT_LAB_PREPARED. common.run's own cases, in this process, are test_common.py's; the
README's commands and the pages' are test_cli_readme.py's.
"""
import ast
import contextlib
import io
import json
import os
from pathlib import Path
import re
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
import unittest
from unittest import mock

import case_set
import common
import lab_files
import evaluate
from prepared_folder import PREPARED, PREPARED_ENV
import views
from test_support_fixtures import HERE, TempFolderTest
from test_support_runs import ctrl_c_reaches_children
from test_support_lab import SCRIPT_TIMEOUT, tracked

MAIN_BLOCK = re.compile(r'''^if __name__ == (['"])__main__\1:''', re.MULTILINE)
STANDARD_LIBRARY_ONLY = re.compile(r'\brun\(main\b[^)\n]*\bpackages=False')  # what such a script tells common.run
REQUIREMENTS_TEXT = (HERE / 'requirements.txt').read_text(encoding='utf-8')
# Every locked package but the counter's two (and what they need): the rules and the report must not need them.
NOT_FOR_THE_REPORT = ('matplotlib', 'wordllama', 'bm25s', 'Stemmer', 'gguf', 'huggingface_hub', 'httpx', 'httpx2',
                      'requests', 'numpy', 'hypothesis')


def lab_scripts() -> list[str]:
    """The scripts: tracked .py files, not tests, with a __main__ block."""
    return [path.name for path in tracked('*.py') if not path.name.startswith('test_')
            and MAIN_BLOCK.search(path.read_text(encoding='utf-8'))]


SCRIPTS = lab_scripts()
# Scripts that declare they need the standard library only, and so run without the locked packages.
BARE = [script for script in SCRIPTS if STANDARD_LIBRARY_ONLY.search((HERE / script).read_text(encoding='utf-8'))]
PACKAGED = [script for script in SCRIPTS if script not in BARE]
# A LoCoMo-shaped file of one conversation and one question, for locomo_cases.py.
LOCOMO = [{'sample_id': 'one', 'qa': [{'question': 'What is the cat called?', 'answer': 'Miso', 'evidence': ['D1:3'],
                                       'category': 4}],
           'conversation': {'speaker_a': 'Ann', 'speaker_b': 'Ben', 'session_1_date_time': '9:00 am on 1 May, 2023',
                            'session_1': [{'speaker': 'Ann', 'dia_id': 'D1:1', 'text': 'I adopted a cat.'},
                                          {'speaker': 'Ben', 'dia_id': 'D1:2', 'text': 'What is her name?'},
                                          {'speaker': 'Ann', 'dia_id': 'D1:3', 'text': 'Her name is Miso.'}]}}]


def missing_advice(script: str) -> str:
    """What a script started by an interpreter without any of the locked packages says, after its name."""
    pinned = common.requirement_pins(REQUIREMENTS_TEXT)
    missing = ', '.join(f'{name}=={version}' for name, version in pinned.items() if name not in common.TESTS_ONLY)
    return (f'{script}: {sys.executable} lacks the locked packages {missing}; in {HERE} run `{common.INSTALL}` and '
            'start the scripts with .venv/bin/python')


def copy_lab(folder: Path) -> Path:
    """A copy of the lab's code and data files in folder/lab, without prepared/."""
    lab = folder / 'lab'
    lab.mkdir()
    for path in [*tracked('*.py', '*.json'), HERE / 'requirements.txt']:
        shutil.copy2(path, lab / path.name)
    return lab


def linked_prepared(folder: Path) -> Path:
    """folder/elsewhere holding links to the prepared files: a prepared folder that is not beside the scripts."""
    elsewhere = folder / 'elsewhere'
    elsewhere.mkdir()
    for path in PREPARED.iterdir():
        (elsewhere / path.name).symlink_to(path)
    return elsewhere


def child_env(prepared: Path | None = None) -> dict:
    """This environment without a developer's own CONTEXT_LAB_PREPARED; prepared, if given, in its place."""
    env = {name: value for name, value in os.environ.items() if name != PREPARED_ENV}
    if prepared is not None:
        env[PREPARED_ENV] = str(prepared)
    return env


def run_script(script_and_args: list[str], cwd: Path = HERE, prepared: Path | None = None, python_options=(), **kwargs):
    """Run a script as a user would; prepared, if given, is passed as CONTEXT_LAB_PREPARED."""
    return subprocess.run([sys.executable, *python_options, *script_and_args], cwd=cwd, env=child_env(prepared),
                          stdin=subprocess.DEVNULL, text=True, timeout=SCRIPT_TIMEOUT, check=False, **kwargs)


class ScriptsTest(unittest.TestCase):
    def test_the_scripts_are_found_by_their_main_block_and_no_module_without_a_command_is_one(self):
        # Were the search to find nothing, every test below that loops over the scripts would pass without a run.
        self.assertIn('evaluate.py', PACKAGED)
        self.assertIn('locomo_cases.py', BARE)  # converting counts nothing: it runs on any Python 3
        for module in ('common.py', 'case_set.py', 'strategies.py', 'views.py', 'field_rules.py', 'test_support.py'):
            self.assertNotIn(module, SCRIPTS)


class MissingPackagesTest(TempFolderTest):
    def test_every_script_that_needs_the_locked_packages_says_so_in_one_line_without_them(self):
        for script in PACKAGED:
            with self.subTest(script):
                # -S: no site-packages, like an interpreter the lock was never installed into
                result = run_script([script], python_options=['-S'], capture_output=True)
                self.assertEqual((result.returncode, result.stdout), (2, ''), result.stderr)
                self.assertEqual(result.stderr, missing_advice(script) + '\n')

    def test_help_without_the_locked_packages_prints_the_docstring_and_the_advice(self):
        for script in PACKAGED:
            docstring = ast.get_docstring(ast.parse((HERE / script).read_text(encoding='utf-8')), clean=False)
            for option in ('--help', '-h'):
                with self.subTest(script=script, option=option):
                    result = run_script([script, option], python_options=['-S'], capture_output=True)
                    self.assertEqual((result.returncode, result.stderr), (0, ''))
                    self.assertEqual(result.stdout, f'{(docstring or "").strip()}\n\n{missing_advice(script)}; '
                                                    'then --help lists every option\n')

    def test_a_script_of_the_standard_library_only_runs_without_the_packages(self):
        locomo, cases = self.tmp / 'locomo10.json', self.tmp / 'cases.json'
        locomo.write_text(json.dumps(LOCOMO), encoding='utf-8')
        logs, labels = self.tmp / 'logs.jsonl', self.tmp / 'labels.json'
        logs.write_text('{"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]}\n')
        labels.write_text(json.dumps([{'id': 'hi', 'conversation': 0, 'message': 1, 'split': 'dev', 'kind': 'greeting',
                                       'budget': {'context_limit': 384, 'max_new_tokens': 96, 'margin': 32},
                                       'required': ['Hi'], 'stale': []}]))
        arguments = {'locomo_cases.py': [str(locomo), '--output', str(cases)],  # any other runs without any
                     'chat_cases.py': [str(logs), '--labels', str(labels), '--output', str(self.tmp / 'chat.json')],
                     'memory_cases.py': ['--output', str(self.tmp / 'memory-cases.json')]}  # not the committed one
        for script in BARE:
            with self.subTest(script):
                result = run_script([script, *arguments.get(script, [])], prepared=PREPARED, python_options=['-S'],
                             capture_output=True)
                self.assertEqual(result.returncode, 0, result.stderr)
                self.assertNotIn('lacks', result.stderr)
        if 'locomo_cases.py' in BARE:
            self.assertEqual([case['id'] for case in case_set.load_cases(cases)], ['one-q0'])  # it did convert

    def test_the_rules_and_the_report_import_with_only_the_counters_packages(self):
        # A finder ahead of every other refuses the rest of the lock, as an interpreter without them would.
        code = textwrap.dedent(f'''\
            import importlib.abc, sys
            REFUSED = {set(NOT_FOR_THE_REPORT)!r}
            class Refuse(importlib.abc.MetaPathFinder):
                def find_spec(self, name, path=None, target=None):
                    if name.partition('.')[0] in REFUSED:
                        raise ModuleNotFoundError(f'No module named {{name!r}} (refused by the test)', name=name)
            sys.meta_path.insert(0, Refuse())
            import strategies, evaluate
            print('imported')
            ''')
        result = run_script(['-c', code], capture_output=True)
        self.assertEqual((result.returncode, result.stdout, result.stderr), (0, 'imported\n', ''))


class HelpTest(unittest.TestCase):
    def test_every_script_answers_help_with_its_usage(self):
        for script in SCRIPTS:
            with self.subTest(script):
                result = run_script([script, '--help'], capture_output=True)
                self.assertEqual((result.returncode, result.stderr), (0, ''))
                self.assertTrue(result.stdout.startswith(f'usage: {script} [-h]'), result.stdout[:200])


class ClosedStdoutTest(TempFolderTest):
    # Commands that print to stdout and write nothing; one whose script has gone is left out.
    COMMANDS = (['answer_check.py'], ['benchmark.py', '--generated', '1', '--turns', '3', '--no-sweep'],
                ['evaluate.py', '--compare', 'evaluation-result.json'],
                ['budget_sweep.py', '--context-limits', '256', '--format', 'table'])

    def run_with_closed_stdout(self, lab: Path, script_and_args: list[str]) -> subprocess.CompletedProcess:
        read_end, write_end = os.pipe()
        os.close(read_end)  # the reader is gone before the first line, as after `| head -0`
        try:
            return run_script(script_and_args, cwd=lab, prepared=PREPARED, stdout=write_end, stderr=subprocess.PIPE)
        finally:
            os.close(write_end)

    def test_reader_that_stops_reading_ends_each_script_quietly_with_the_shells_sigpipe_code(self):
        lab = copy_lab(self.tmp)
        for command in self.COMMANDS:
            if command[0] not in SCRIPTS:
                continue
            with self.subTest(' '.join(command)):
                result = self.run_with_closed_stdout(lab, command)
                # 141 as bash gives `yes | head -0`; not 1, which --compare uses for "something changed"
                self.assertEqual(result.returncode, 141, result.stderr)
                # Only the script's own progress lines may reach stderr (benchmark.py reports its steps).
                progress = [line for line in result.stderr.splitlines() if not line.startswith(f'{command[0]}: ')]
                self.assertEqual(progress, [])
                self.assertNotIn('Broken pipe', result.stderr)


class SignalTest(unittest.TestCase):
    def test_ctrl_c_and_a_kill_end_a_running_script_in_one_line_with_exit_130(self):
        for signum in (signal.SIGINT, signal.SIGTERM):
            with self.subTest(signal.Signals(signum).name):
                # Ten cases run for seconds; the first progress line, after two, says main is under way.
                with ctrl_c_reaches_children():
                    process = subprocess.Popen(
                        [sys.executable, 'benchmark.py', '--generated', '10', '--no-sweep'], cwd=HERE, env=child_env(),
                        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
                hung = threading.Timer(SCRIPT_TIMEOUT, process.kill)  # reading stderr has no timeout of its own
                hung.start()
                try:
                    first = process.stderr.readline()
                    process.send_signal(signum)
                    rest = process.stderr.read()
                    process.wait(timeout=SCRIPT_TIMEOUT)
                finally:
                    hung.cancel()
                    if process.poll() is None:
                        process.kill()
                        process.wait()
                    process.stderr.close()
                self.assertTrue(first.startswith('benchmark.py: full count: '), first)
                lines = rest.splitlines()
                self.assertEqual((process.returncode, lines[-1:]), (130, ['benchmark.py: interrupted']), rest)
                self.assertEqual([line for line in lines if not line.startswith('benchmark.py: ')], [])


class RequirementsLineTest(TempFolderTest):
    def test_every_script_says_in_one_line_which_requirements_line_is_malformed(self):
        lab = copy_lab(self.tmp)
        with open(lab / 'requirements.txt', 'a', encoding='utf-8') as file:
            file.write('-r more-requirements.txt\n')
        number = len(REQUIREMENTS_TEXT.splitlines()) + 1
        for script in PACKAGED:  # the others never read it
            with self.subTest(script):
                result = run_script([script], cwd=lab, prepared=PREPARED, capture_output=True)
                self.assertEqual((result.returncode, result.stdout), (2, ''))
                self.assertEqual(result.stderr, f"{script}: {lab / 'requirements.txt'}: line {number}: "
                                                "'-r more-requirements.txt' is not a requirement; expected "
                                                'name==version\n')


class InterruptTest(TempFolderTest):
    """evaluate.py's main under common.run, in this process: what a Ctrl-C says about --output."""

    def setUp(self):
        super().setUp()
        self.addCleanup(signal.signal, signal.SIGTERM, signal.getsignal(signal.SIGTERM))  # run_script() sets its own

    def interrupted_run(self, argv: list[str]) -> str:
        err = io.StringIO()
        with mock.patch.object(sys, 'argv', ['evaluate.py', *argv]), contextlib.redirect_stderr(err), \
                self.assertRaises(SystemExit) as exited:
            common.run(evaluate.main, 'nothing was written')
        self.assertEqual(exited.exception.code, 130)
        return err.getvalue()

    def test_ctrl_c_after_output_was_written_does_not_claim_nothing_was(self):
        output = self.tmp / 'report.json'
        with mock.patch.object(views, 'report_table', side_effect=KeyboardInterrupt):
            said = self.interrupted_run(['--output', str(output), '--format', 'table'])
        self.assertEqual(said, f'evaluate.py: interrupted; the report was written to {output}, '
                               'its printing cut short\n')
        self.assertEqual(json.loads(output.read_text(encoding='utf-8'))['case_set'], 'cases.json')

    def test_ctrl_c_while_writing_says_what_the_output_may_hold(self):
        output = self.tmp / 'report.json'
        with mock.patch.object(lab_files, 'stage', side_effect=KeyboardInterrupt):
            said = self.interrupted_run(['--output', str(output)])
        self.assertEqual(said, f'evaluate.py: interrupted; while writing {output}: a file there holds what it held '
                               'or all of the new contents, a pipe or device may have received part of them\n')
        self.assertEqual(list(self.tmp.iterdir()), [])


# The recorded report's table (README, "The first result"), written out: what any prepared folder must print.
RECORDED_TABLE = '''| Strategy | Split | Facts found | Complete cases | Cases with stale facts | Mean input tokens |
|---|---|---|---|---|---|
| recent | dev | 2 of 7 | 1 of 6 | 0 | 51.3 |
| recent | held-out | 2 of 7 | 1 of 6 | 0 | 54.2 |
| relevant | dev | 5 of 7 | 4 of 6 | 1 | 61 |
| relevant | held-out | 4 of 7 | 4 of 6 | 1 | 59.7 |
| notes | dev | 6 of 7 | 5 of 6 | 1 | 86.8 |
| notes | held-out | 6 of 7 | 5 of 6 | 1 | 97.7 |
| hybrid | dev | 5 of 7 | 4 of 6 | 1 | 67.3 |
| hybrid | held-out | 4 of 7 | 4 of 6 | 1 | 68.8 |
| best possible (reads the labels) | dev | 7 of 7 | 6 of 6 | 0 | 65 |
| best possible (reads the labels) | held-out | 6 of 7 | 5 of 6 | 0 | 62.8 |
'''


class PreparedElsewhereTest(TempFolderTest):
    """CONTEXT_LAB_PREPARED names the prepared folder for every script: prepare.py and those that count."""

    def test_scripts_read_the_counter_from_the_folder_the_variable_names(self):
        lab, elsewhere = copy_lab(self.tmp), linked_prepared(self.tmp)
        for command, printed in ((['tokenizer.py'], None), (['evaluate.py', '--format', 'table'], RECORDED_TABLE)):
            with self.subTest(' '.join(command)):
                result = run_script(command, cwd=lab, prepared=elsewhere, capture_output=True)
                self.assertEqual((result.returncode, result.stderr), (0, ''))
                if printed is not None:
                    self.assertEqual(result.stdout, printed)  # the recorded report's figures

    def test_prepare_finds_the_folder_the_variable_names_complete(self):
        lab, elsewhere = copy_lab(self.tmp), linked_prepared(self.tmp)
        result = run_script(['prepare.py'], cwd=lab, prepared=elsewhere, capture_output=True)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertTrue(result.stdout.startswith(f'{elsewhere} is already complete and valid'), result.stdout)
        self.assertFalse((lab / 'prepared').exists())

    def test_an_unprepared_folder_is_named_in_one_line_with_the_command_that_prepares_that_folder(self):
        lab, empty = copy_lab(self.tmp), self.tmp / 'empty'
        for script in ('tokenizer.py', 'evaluate.py'):
            for prepared, folder, where in ((None, lab / 'prepared', ''),
                                            (empty, empty, f'CONTEXT_LAB_PREPARED={empty} ')):
                with self.subTest(script=script, folder=str(folder)):
                    result = run_script([script], cwd=lab, prepared=prepared, capture_output=True)
                    self.assertEqual((result.returncode, result.stdout), (2, ''))
                    self.assertEqual(result.stderr, f'{script}: the tokenizer is not prepared ({folder}/prepared.json'
                                     f' is missing): run `{where}{sys.executable} prepare.py`\n')


class ByteOrderMarkTest(TempFolderTest):
    def test_answer_files_with_a_byte_order_mark_are_graded_as_without(self):
        import answer_check  # here, so that the entry-point tests above run even if the answer check is broken

        names = ('cases.json', 'answer-keys.json', 'answer-model.json', 'answer-result.json')
        paths = []
        for name in names:
            paths.append(self.tmp / name)
            paths[-1].write_bytes(b'\xef\xbb\xbf' + (HERE / name).read_bytes())
        with contextlib.redirect_stdout(io.StringIO()):
            answer_check.main(['--model', str(paths[2])], cases_path=paths[0], keys_path=paths[1],
                              result_path=paths[3], grades_path=self.tmp / 'grades.json')
        self.assertEqual(json.loads((self.tmp / 'grades.json').read_text(encoding='utf-8')),
                         json.loads((HERE / 'answer-grades.json').read_text(encoding='utf-8')))


if __name__ == '__main__':
    unittest.main()
