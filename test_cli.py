"""Tests for what a newcomer meets first: the README's commands, and every script's entry point.

    .venv/bin/python -m unittest -v test_cli.py   (about 15 s)

Each test is named after the failure it pins: a README command CI does not run as written, a script that
ends in a traceback (missing packages, a closed stdout, Ctrl-C), a script without --help, a prepared
folder only some scripts can find, a JSON file refused for its byte-order mark. Scripts that would write
beside themselves run in a copy of the lab in a temp folder, reading the prepared counter through
CONTEXT_LAB_PREPARED.
"""
import contextlib
import io
import json
import os
from pathlib import Path
import re
import shutil
import subprocess
import sys
import tempfile
import unittest
from unittest import mock

import answer_check
import case_set
import cli
import evaluate
import lab_files
import test_locomo_cases
from prepared_folder import PREPARED, PREPARED_ENV

HERE = Path(__file__).resolve().parent
SCRIPTS = sorted(path.name for path in HERE.glob('*.py') if not path.name.startswith('test_'))
TIMEOUT = 120
BOM = b'\xef\xbb\xbf'
# Standard library only: they check and move files and cases; they load no tokenizer.
NEEDS_NO_PACKAGE = {'prepared_folder.py', 'case_set.py', 'lab_files.py', 'folder_swap.py', 'compare_reports.py',
                    'locomo_cases.py'}
REQUIREMENTS_TEXT = (HERE / 'requirements.txt').read_text(encoding='utf-8')


def readme_commands() -> list[str]:
    """The shell commands of the README's Setup section, one per ```sh block."""
    text = (HERE / 'README.md').read_text(encoding='utf-8')
    section = text.split('\n## Setup\n', 1)[1].split('\n## ', 1)[0]
    return [block.strip() for block in re.findall(r'```sh\n(.*?)```', section, flags=re.DOTALL)]


def copy_lab(folder: Path) -> Path:
    """A copy of the lab's scripts and data files in folder/lab, without prepared/."""
    lab = folder / 'lab'
    lab.mkdir()
    for path in [*HERE.glob('*.py'), *HERE.glob('*.json'), HERE / 'requirements.txt']:
        shutil.copy2(path, lab / path.name)
    return lab


def linked_prepared(folder: Path) -> Path:
    """folder/elsewhere holding links to the prepared files: a prepared folder that is not beside the scripts."""
    elsewhere = folder / 'elsewhere'
    elsewhere.mkdir()
    for path in PREPARED.iterdir():
        (elsewhere / path.name).symlink_to(path)
    return elsewhere


def run(script_and_args: list[str], cwd: Path = HERE, prepared: Path | None = None, python_options=(), **kwargs):
    """Run a script as a user would; prepared, if given, is passed as CONTEXT_LAB_PREPARED."""
    env = {name: value for name, value in os.environ.items() if name != PREPARED_ENV}
    if prepared is not None:
        env[PREPARED_ENV] = str(prepared)
    return subprocess.run([sys.executable, *python_options, *script_and_args], cwd=cwd, env=env,
                          stdin=subprocess.DEVNULL, text=True, timeout=TIMEOUT, check=False, **kwargs)


class TempFolderTest(unittest.TestCase):
    def setUp(self):
        temp = tempfile.TemporaryDirectory()
        self.addCleanup(temp.cleanup)
        self.tmp = Path(temp.name)


class ReadmeCommandsTest(unittest.TestCase):
    def test_readme_has_a_setup_command_and_a_test_command_that_need_no_activated_venv(self):
        commands = readme_commands()
        self.assertEqual(len(commands), 2, commands)
        setup, tests = commands
        self.assertEqual([line for command in commands for line in command.splitlines()], commands)  # one line each
        steps = setup.split(' && ')
        self.assertEqual(steps[0], 'python3 -m venv .venv')
        for step in [*steps[1:], tests]:
            self.assertTrue(step.startswith('.venv/bin/python '), step)  # not `python`, not `activate`
        self.assertTrue(setup.endswith('evaluate.py --format table'), setup)  # ends in what a person reads

    def test_ci_runs_the_readme_commands_exactly_each_in_a_fresh_shell(self):
        ci = (HERE / '.ci' / 'run').read_text(encoding='utf-8')
        lines = ci.splitlines()
        positions = [lines.index(command) if command in lines else -1 for command in readme_commands()]
        self.assertNotIn(-1, positions, 'a README command is not a line of .ci/run')
        self.assertEqual(positions, sorted(positions))  # set-up first
        self.assertIn('env -i HOME="$HOME" PATH="$PATH" bash', ci)  # nothing of CI's own environment leaks in
        self.assertNotIn('bin/activate', ci)
        self.assertNotIn('VIRTUAL_ENV', ci)


def pages() -> list[Path]:
    """What a newcomer reads: the README and every reference page of docs/."""
    return [HERE / 'README.md', *sorted((HERE / 'docs').glob('*.md'))]


def shell_commands(text: str) -> list[str]:
    """Each command of a page: every command of a ```sh, ```bash or ```text block's lines (split at &&, ||, ;
    and |, without a leading `$ ` or VAR=value), and every inline code span.

    'a\n```sh\nX=1 python a.py && ls  # b\n```\n`python c.py`' -> ['python a.py', 'ls', 'python c.py']
    """
    blocks = re.findall(r'^```(?:sh|bash|text)\n(.*?)^```$', text, flags=re.DOTALL | re.MULTILINE)
    outside = re.sub(r'^```.*?^```$', '', text, flags=re.DOTALL | re.MULTILINE)
    commands = []
    for line in '\n'.join(blocks).splitlines():
        for part in re.split(r'&&|\|\||;|\|', line.split('  #')[0]):
            commands.append(re.sub(r'^(\$ )?(\w+=\S* )*', '', part.strip()))
    spans = [' '.join(span.split()) for span in re.findall(r'`([^`]+)`', outside)]
    return [command for command in commands + spans if command]


class PastedCommandsTest(unittest.TestCase):
    def test_shell_commands_of_a_page_are_found_in_blocks_and_spans(self):
        text = 'a\n```sh\nX=1 python a.py && ls  # b\n```\n```json\n["python j"]\n```\n`python\nc.py`'
        self.assertEqual(shell_commands(text), ['python a.py', 'ls', 'python c.py'])

    def test_no_page_gives_a_bare_python_command_a_fresh_terminal_lacks(self):
        for path in pages():
            with self.subTest(path.name):
                bare = [command for command in shell_commands(path.read_text(encoding='utf-8'))
                        if command.startswith('python ')]
                self.assertEqual(bare, [], f'{path.name}: write .venv/bin/python, not python')


    def test_no_script_gives_a_bare_python_command_in_its_docstring_help_or_messages(self):
        # Docstrings become --help texts; messages and help strings are literals in the source too.
        bare = re.compile(r'(?<![/\w.-])python (?=[\w-]+\.py\b|-m )')
        for path in sorted(HERE.glob('*.py')):
            with self.subTest(path.name):
                lines = [f'{number}: {line.strip()}' for number, line in
                         enumerate(path.read_text(encoding='utf-8').splitlines(), 1)
                         if bare.search(line) and 'python a.py' not in line and 'python c.py' not in line
                         and '`python -m pip`' not in line]
                self.assertEqual(lines, [], f'{path.name}: write .venv/bin/python, not python')


class MissingPackagesTest(unittest.TestCase):
    def test_every_script_without_the_locked_packages_says_so_in_one_line(self):
        pinned = cli.pins((HERE / 'requirements.txt').read_text(encoding='utf-8'))
        missing = ', '.join(f'{name}=={version}' for name, version in pinned.items()
                            if name != 'hypothesis')  # only the test suite needs it
        for script in sorted(set(SCRIPTS) - NEEDS_NO_PACKAGE):
            with self.subTest(script):
                # -S: no site-packages, like an interpreter the lock was never installed into
                result = run([script], python_options=['-S'], capture_output=True)
                self.assertEqual(result.returncode, 2, result.stderr)
                self.assertEqual(result.stdout, '')
                self.assertEqual(result.stderr, f'{script}: {sys.executable} lacks the locked packages {missing};'
                                 f' in {HERE} run `{cli.INSTALL}` and start the scripts with .venv/bin/python\n')

    def test_help_without_the_locked_packages_prints_the_docstring_and_the_advice(self):
        pinned = cli.pins((HERE / 'requirements.txt').read_text(encoding='utf-8'))
        missing = ', '.join(f'{name}=={version}' for name, version in pinned.items() if name != 'hypothesis')
        for script in ('evaluate.py', 'prepare.py'):
            for option in ('--help', '-h'):
                with self.subTest(script=script, option=option):
                    result = run([script, option], python_options=['-S'], capture_output=True)
                    self.assertEqual((result.returncode, result.stderr), (0, ''))
                    docstring = (HERE / script).read_text(encoding='utf-8').split('"""')[1].strip()
                    self.assertEqual(result.stdout, f'{docstring}\n\n{script}: {sys.executable} lacks the locked '
                                     f'packages {missing}; in {HERE} run `{cli.INSTALL}` and start the scripts '
                                     'with .venv/bin/python; then --help lists every option\n')

    def test_importing_a_module_without_the_packages_raises_with_the_same_advice(self):
        result = run(['-c', 'import evaluate'], python_options=['-S'], capture_output=True)
        self.assertEqual(result.returncode, 1)
        self.assertIn(f'ModuleNotFoundError: {sys.executable} lacks the locked packages tokenizers', result.stderr)


class NoPackageTest(TempFolderTest):
    def arguments(self, script: str) -> list[str]:
        """Valid arguments for a script that needs some: locomo_cases.py converts a small LoCoMo-shaped file."""
        if script != 'locomo_cases.py':
            return []
        locomo = self.tmp / 'locomo10.json'
        locomo.write_text(json.dumps(test_locomo_cases.locomo_sample()), encoding='utf-8')
        return [str(locomo), '--output', str(self.tmp / 'cases.json')]

    def test_a_script_that_needs_no_package_runs_without_them(self):
        for script in sorted(NEEDS_NO_PACKAGE):
            with self.subTest(script):
                result = run([script, *self.arguments(script)], prepared=PREPARED, python_options=['-S'],
                             capture_output=True)
                self.assertEqual(result.returncode, 0, result.stderr)
                self.assertNotIn('lacks', result.stderr)
        self.assertTrue(case_set.load_cases(self.tmp / 'cases.json'))  # the conversion did run


class HelpTest(unittest.TestCase):
    def test_every_script_answers_help_with_its_usage(self):
        for script in SCRIPTS:
            with self.subTest(script):
                result = run([script, '--help'], capture_output=True)
                self.assertEqual((result.returncode, result.stderr), (0, ''))
                self.assertTrue(result.stdout.startswith(f'usage: {script} [-h]'), result.stdout[:200])


class ClosedStdoutTest(TempFolderTest):
    def run_with_closed_stdout(self, lab: Path, script_and_args: list[str]) -> subprocess.CompletedProcess:
        read_end, write_end = os.pipe()
        os.close(read_end)  # the reader is gone before the first line, as after `| head -0`
        try:
            return run(script_and_args, cwd=lab, prepared=PREPARED, stdout=write_end, stderr=subprocess.PIPE)
        finally:
            os.close(write_end)

    def test_reader_that_stops_reading_ends_each_script_quietly_with_the_shells_sigpipe_code(self):
        lab = copy_lab(self.tmp)
        for command in (['answer_check.py'], ['benchmark.py', '--cases', '1', '--turns', '3', '--no-sweep'],
                        ['evaluate.py'], ['evaluate.py', '--format', 'table'], ['tokenizer.py'],
                        ['evaluate.py', '--compare', 'evaluation-result.json']):
            with self.subTest(' '.join(command)):
                result = self.run_with_closed_stdout(lab, command)
                # 141 as bash gives `yes | head -0`; not 1, which --compare uses for "something changed"
                self.assertEqual(result.returncode, 141, result.stderr)
                # Only the script's own progress lines may reach stderr (benchmark.py reports its steps).
                progress = [line for line in result.stderr.splitlines() if not line.startswith(f'{command[0]}: ')]
                self.assertEqual(progress, [])
                self.assertNotIn('Broken pipe', result.stderr)


class LockedVersionTest(unittest.TestCase):
    def test_a_package_at_another_version_counts_as_missing(self):
        def installed(name: str) -> str:
            return '0.22.0' if name == 'tokenizers' else cli.pins(REQUIREMENTS_TEXT)[name]
        cli.missing_packages.cache_clear()
        self.addCleanup(cli.missing_packages.cache_clear)
        with mock.patch.object(cli.importlib.metadata, 'version', side_effect=installed):
            self.assertEqual(cli.missing_packages(), ('tokenizers==0.23.3 (it has 0.22.0)',))

    def test_pins_reads_names_and_versions_and_skips_comments(self):
        self.assertEqual(cli.pins('# a comment\ntokenizers==0.23.3   # counts tokens\n\njinja2==3.1.6\n'),
                         {'tokenizers': '0.23.3', 'jinja2': '3.1.6'})


class RequirementsLineTest(TempFolderTest):
    def test_a_line_that_pins_no_exact_version_asks_for_the_package_at_any_version(self):
        self.assertEqual(cli.pins('numpy>=2\nrich\nidna[all] == 3.10\nsix==1.*  # a wildcard pins nothing\n'),
                         {'numpy': None, 'rich': None, 'idna': '3.10', 'six': None})

    def test_a_line_that_names_no_package_is_refused_naming_the_line(self):
        for line in ('-r other.txt', 'git+https://example.org/x.git', '==1.0', 'two words'):
            with self.subTest(line):
                with self.assertRaises(cli.RequirementsError) as raised:
                    cli.pins(f'# first line\n{line}\n')
                self.assertEqual(str(raised.exception),
                                 f'line 2: {line!r} is not a requirement; expected name==version')

    def test_every_script_says_in_one_line_which_requirements_line_is_malformed(self):
        lab = copy_lab(self.tmp)
        with open(lab / 'requirements.txt', 'a', encoding='utf-8') as file:
            file.write('-r more-requirements.txt\n')
        lines = len(REQUIREMENTS_TEXT.splitlines()) + 1
        for script in ('evaluate.py', 'cli.py'):
            with self.subTest(script):
                result = run([script], cwd=lab, prepared=PREPARED, capture_output=True)
                self.assertEqual((result.returncode, result.stdout), (2, ''))
                self.assertEqual(result.stderr, f"{script}: {lab / 'requirements.txt'}: line {lines}: "
                                                "'-r more-requirements.txt' is not a requirement; expected "
                                                'name==version\n')

    def test_a_package_asked_for_at_any_version_is_only_checked_to_be_present(self):
        lab = copy_lab(self.tmp)
        with open(lab / 'requirements.txt', 'a', encoding='utf-8') as file:
            file.write('pip>=1\n')  # pip is in every venv, at whatever version
        result = run(['cli.py'], cwd=lab, capture_output=True)
        self.assertEqual((result.returncode, result.stderr), (0, ''))
        with open(lab / 'requirements.txt', 'a', encoding='utf-8') as file:
            file.write('no-such-distribution-of-the-lab>=1\n')
        result = run(['cli.py'], cwd=lab, capture_output=True)
        self.assertEqual(result.returncode, 2)
        self.assertIn('lacks the locked package no-such-distribution-of-the-lab (any version);', result.stderr)


class PythonCommandTest(unittest.TestCase):
    def test_advice_names_the_labs_venv_python_so_it_works_pasted_in_a_new_terminal(self):
        with mock.patch.object(sys, 'executable', str(HERE / '.venv' / 'bin' / 'python')):
            self.assertEqual(cli.python_command(), '.venv/bin/python')

    def test_advice_names_the_full_path_of_an_interpreter_outside_the_lab(self):
        with mock.patch.object(sys, 'executable', '/usr/bin/python3'):
            self.assertEqual(cli.python_command(), '/usr/bin/python3')
        with mock.patch.object(sys, 'executable', '/opt/my python/bin/python3'):
            self.assertEqual(cli.python_command(), "'/opt/my python/bin/python3'")


class InterruptTest(unittest.TestCase):
    def test_ctrl_c_is_one_line_and_exit_130(self):
        def interrupted_main(argv):
            raise KeyboardInterrupt

        err = io.StringIO()
        with mock.patch.object(sys, 'argv', ['evaluate.py']), contextlib.redirect_stderr(err):
            with self.assertRaises(SystemExit) as exited:
                cli.run(interrupted_main, 'nothing was written')
        self.assertEqual(exited.exception.code, 130)
        self.assertEqual(err.getvalue(), 'evaluate.py: interrupted; nothing was written\n')

    def test_ctrl_c_after_output_was_written_does_not_claim_nothing_was(self):
        def interrupted_print(*args):
            raise KeyboardInterrupt

        err = io.StringIO()
        with tempfile.TemporaryDirectory() as folder:
            output = Path(folder) / 'report.json'
            with mock.patch.object(sys, 'argv', ['evaluate.py', '--output', str(output), '--format', 'table']), \
                    mock.patch.object(evaluate, 'print_result', interrupted_print), contextlib.redirect_stderr(err):
                with self.assertRaises(SystemExit) as exited:
                    cli.run(evaluate.main, 'nothing was written')
            self.assertEqual(json.loads(output.read_text(encoding='utf-8'))['case_set'], 'cases.json')
        self.assertEqual(exited.exception.code, 130)
        self.assertEqual(err.getvalue(), f'evaluate.py: interrupted; the report was written to {output}, '
                                         'its printing cut short\n')

    def test_ctrl_c_while_writing_says_what_the_output_may_hold(self):
        def interrupted_write(*args):
            raise KeyboardInterrupt

        err = io.StringIO()
        with mock.patch.object(sys, 'argv', ['evaluate.py', '--output', 'report.json']), \
                mock.patch.object(lab_files, 'write_atomically', interrupted_write), contextlib.redirect_stderr(err):
            with self.assertRaises(SystemExit):
                cli.run(evaluate.main, 'nothing was written')
        self.assertEqual(err.getvalue(), 'evaluate.py: interrupted; while writing report.json: a file there holds '
                                         'what it held or all of the new contents, a pipe or device may have '
                                         'received part of them\n')


class PreparedElsewhereTest(TempFolderTest):
    """CONTEXT_LAB_PREPARED names the prepared folder for every script: prepare.py and those that count."""

    def test_scripts_read_the_counter_from_the_folder_the_variable_names(self):
        lab, elsewhere = copy_lab(self.tmp), linked_prepared(self.tmp)
        for command in (['tokenizer.py'], ['evaluate.py', '--format', 'table']):
            with self.subTest(' '.join(command)):
                result = run(command, cwd=lab, prepared=elsewhere, capture_output=True)
                self.assertEqual((result.returncode, result.stderr), (0, ''))
        result = run(['evaluate.py', '--format', 'table'], cwd=lab, prepared=elsewhere, capture_output=True)
        self.assertEqual(result.stdout, run(['evaluate.py', '--format', 'table'], capture_output=True).stdout)

    def test_prepare_finds_the_folder_the_variable_names_complete(self):
        lab, elsewhere = copy_lab(self.tmp), linked_prepared(self.tmp)
        result = run(['prepare.py'], cwd=lab, prepared=elsewhere, capture_output=True)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertTrue(result.stdout.startswith(f'{elsewhere} is already complete and valid'), result.stdout)
        self.assertFalse((lab / 'prepared').exists())

    def test_unprepared_folder_is_named_whichever_folder_it_is(self):
        lab, empty = copy_lab(self.tmp), self.tmp / 'empty'
        for prepared, folder in ((None, lab / 'prepared'), (empty, empty)):
            with self.subTest(str(folder)):
                result = run(['tokenizer.py'], cwd=lab, prepared=prepared, capture_output=True)
                self.assertEqual(result.returncode, 2)
                self.assertEqual(result.stderr, f'tokenizer.py: the tokenizer is not prepared '
                                 f'({folder / "prepared.json"} is missing): run `{sys.executable} prepare.py`\n')


class ByteOrderMarkTest(TempFolderTest):
    """JSON saved by an editor that writes a UTF-8 byte-order mark reads as the same JSON."""

    def with_bom(self, path: Path) -> Path:
        copy = self.tmp / path.name
        copy.write_bytes(BOM + path.read_bytes())
        return copy

    def test_case_file_and_report_with_a_bom_are_read(self):
        self.assertEqual(case_set.load_cases(self.with_bom(HERE / 'cases.json')), case_set.load_cases(HERE / 'cases.json'))
        report = HERE / 'evaluation-result.json'
        self.assertEqual(case_set.read_json(self.with_bom(report), 'report'), case_set.read_json(report, 'report'))

    def test_answer_files_with_a_bom_are_graded_as_without(self):
        names = ('cases.json', 'answer-keys.json', 'answer-model.json', 'answer-result.json')
        paths = [self.with_bom(HERE / name) for name in names]
        for path in paths[1:]:
            self.assertEqual(lab_files.read_json(path, 'answer file', ValueError),
                             json.loads((HERE / path.name).read_text(encoding='utf-8')))
        grades = answer_check.grade_files(*paths, self.tmp / 'grades.json')
        self.assertEqual(grades, json.loads((HERE / 'answer-grades.json').read_text(encoding='utf-8')))


if __name__ == '__main__':
    unittest.main()
