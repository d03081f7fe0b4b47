"""Tests for what a newcomer reads first: the README's commands as CI runs them, and the commands every page pastes.

    .venv/bin/python -m unittest -v test_cli_readme.py   (under a second)

Each test is named after the failure it pins: a README command CI does not run as written or in another order,
a line CI runs that the README does not name, a page, docstring or message that gives a bare `python` command a
fresh terminal lacks. The scripts' own entry points are test_cli.py's.
"""
from pathlib import Path
import re
import unittest

import evaluate
import views
from test_support_fixtures import HERE
from test_support_lab import tracked


def readme_commands() -> list[str]:
    """The shell commands of the README's Setup section, one per ```sh block."""
    text = (HERE / 'README.md').read_text(encoding='utf-8')
    section = text.split('\n## Setup\n', 1)[1].split('\n## ', 1)[0]
    return [block.strip() for block in re.findall(r'```sh\n(.*?)```', section, flags=re.DOTALL)]


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


    def test_ci_prepares_the_other_counters_as_the_readme_says_before_the_tests(self):
        text = (HERE / 'README.md').read_text(encoding='utf-8')
        section = text.split("\n## Your model's counter\n", 1)[1].split('\n## ', 1)[0]
        prepare_all = '.venv/bin/python prepare.py --counter all'
        self.assertIn(prepare_all, re.findall(r'```sh\n(.*?)\n', section))
        lines = (HERE / '.ci' / 'run').read_text(encoding='utf-8').splitlines()
        setup, tests = readme_commands()
        self.assertLess(lines.index(setup), lines.index(prepare_all))
        self.assertLess(lines.index(prepare_all), lines.index(tests))

    def test_the_readme_says_every_line_ci_runs_the_older_word_and_set_ups_peak_memory(self):
        readme = ' '.join((HERE / 'README.md').read_text(encoding='utf-8').split())
        ci = (HERE / '.ci' / 'run').read_text(encoding='utf-8')
        said = readme.split('`.ci/run` runs', 1)[1].split('):', 1)[0]  # the sentence on the test command
        for command in re.findall(r"<<'README'\n(.*?)\nREADME\n", ci, flags=re.DOTALL):
            if command not in readme_commands():  # those two it calls the set-up line and this line
                self.assertIn(f'`{command}`', said)
        self.assertIn('the set-up line', said)
        # The word kept where the README says "rule": the table's first column and evaluate.py's option.
        word = re.search(r'keep the older word, \*(\w+)\*', readme)[1]
        self.assertEqual(views.TABLE_HEADER[0], word.capitalize())
        self.assertEqual(vars(evaluate.parse_args(['--show', 'dev-correction', f'--{word}', 'notes']))[word], 'notes')
        setup = readme.split('## Setup', 1)[1].split('```', 1)[0]
        self.assertRegex(setup, r'at most [\d,]+ KiB \([\d.]+ GiB\) of memory \(peak resident set, `/usr/bin/time '
                                r'-v`, \d{4}-\d\d-\d\d\)')


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

    def test_no_file_of_the_lab_gives_a_bare_python_command_in_its_docstring_help_or_messages(self):
        # Docstrings become --help texts; messages and help strings are literals in the source too.
        bare = re.compile(r'(?<![/\w.-])python (?=[\w-]+\.py\b|-m )')
        for path in tracked('*.py'):
            with self.subTest(path.name):
                lines = [f'{number}: {line.strip()}' for number, line in
                         enumerate(path.read_text(encoding='utf-8').splitlines(), 1)
                         if bare.search(line) and 'python a.py' not in line and 'python c.py' not in line
                         and '`python -m pip`' not in line]
                self.assertEqual(lines, [], f'{path.name}: write .venv/bin/python, not python')


if __name__ == '__main__':
    unittest.main()
