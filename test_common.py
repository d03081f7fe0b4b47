"""Tests for common.py: the entry point and the locked packages.

    .venv/bin/python -m unittest -v test_common   (about 2 s)

Each test is named after the failure it pins: a package at another version taken for the pinned one, advice that a
new terminal cannot paste; an error, a Ctrl-C or a missing package that ends in a traceback or the wrong exit
status. The entry point as a real child process sees it (pipes, signals, an interpreter without the packages) is
tested in test_cli.py.
"""
import ast
import contextlib
import io
from pathlib import Path
import signal
import sys
import tempfile
import unittest
from unittest import mock

import common
from common import LabError, requirement_pins
from test_support_fixtures import HERE, TempFolderTest

# The lab's floors (docs/reviewing.md): the scripts a reader runs are the top floor, and no product module imports
# one; a library module may have a small __main__ of its own. Every module with a __main__ is named in one of the two.
SCRIPTS = frozenset({'answer_check', 'benchmark', 'budget_sweep', 'chat_cases', 'evaluate', 'locomo_cases',
                     'memory_answers', 'memory_eval', 'prepare', 'real_server', 'summary_record', 'summary_table'})
LIBRARIES_WITH_MAIN = frozenset({'continuation', 'memory_cases', 'prepared_folder', 'tokenizer'})




class RequirementsTest(TempFolderTest):
    def requirements(self, text: str) -> Path:
        """requirements.txt holding text, in place of the lab's for common.missing_packages."""
        path = self.tmp / 'requirements.txt'
        path.write_text(text, encoding='utf-8')
        patcher = mock.patch.object(common, 'REQUIREMENTS', path)
        patcher.start()
        self.addCleanup(patcher.stop)
        return path

    def test_pins_reads_names_and_versions_and_skips_comments(self):
        self.assertEqual(requirement_pins('# a comment\ntokenizers==0.23.3   # counts tokens\n\njinja2==3.1.6\n'),
                         {'tokenizers': '0.23.3', 'jinja2': '3.1.6'})

    def test_a_line_that_pins_no_exact_version_asks_for_the_package_at_any_version(self):
        self.assertEqual(requirement_pins('numpy>=2\nrich\nidna[all] == 3.10\nsix==1.*  # a wildcard pins nothing\n'),
                         {'numpy': None, 'rich': None, 'idna': '3.10', 'six': None})

    def test_a_line_that_names_no_package_is_refused_naming_the_file_and_the_line(self):
        for line in ('-r other.txt', 'git+https://example.org/x.git', '==1.0', 'two words'):
            with self.subTest(line), self.assertRaises(LabError) as raised:
                requirement_pins(f'# first line\n{line}\n')
            self.assertEqual(str(raised.exception), f'{common.REQUIREMENTS}: line 2: {line!r} is not a requirement; '
                                                    'expected name==version')

    def test_a_package_at_another_version_counts_as_missing(self):
        pinned = requirement_pins((HERE / 'requirements.txt').read_text(encoding='utf-8'))

        def installed(name: str) -> str:
            return '0.22.0' if name == 'tokenizers' else pinned[name]

        with mock.patch.object(common.importlib.metadata, 'version', side_effect=installed):
            self.assertEqual(common.missing_packages(), ['tokenizers==0.23.3 (it has 0.22.0)'])

    def test_a_package_asked_for_at_any_version_is_only_checked_to_be_present_and_test_pins_not_at_all(self):
        # pip is in every venv, at whatever version; hypothesis is pinned for the tests, which no script runs.
        self.requirements('pip>=1\nno-such-distribution-of-the-lab>=1\nhypothesis==0.0.1\n')
        self.assertEqual(common.missing_packages(), ['no-such-distribution-of-the-lab (any version)'])

    def test_a_missing_requirements_file_is_one_error_saying_how_to_restore_it(self):
        path = self.requirements('')
        path.unlink()
        with self.assertRaises(LabError) as raised:
            common.missing_packages()
        self.assertEqual(str(raised.exception),
                         f'{path}: cannot be read (No such file or directory); restore it with git checkout')


class PythonCommandTest(unittest.TestCase):
    def test_advice_names_the_labs_venv_python_so_it_works_pasted_in_a_new_terminal(self):
        with mock.patch.object(sys, 'executable', str(HERE / '.venv' / 'bin' / 'python')):
            self.assertEqual(common.python_command(), '.venv/bin/python')

    def test_advice_names_the_full_path_of_an_interpreter_outside_the_lab(self):
        with mock.patch.object(sys, 'executable', '/usr/bin/python3'):
            self.assertEqual(common.python_command(), '/usr/bin/python3')
        with mock.patch.object(sys, 'executable', '/opt/my python/bin/python3'):
            self.assertEqual(common.python_command(), "'/opt/my python/bin/python3'")


class RunTest(unittest.TestCase):
    """common.run in this process, with the package check stubbed: what main's outcome becomes."""

    def setUp(self):
        self.addCleanup(signal.signal, signal.SIGTERM, signal.getsignal(signal.SIGTERM))  # run() sets its own
        self.missing = []
        patcher = mock.patch.object(common, 'missing_packages', lambda: self.missing)
        patcher.start()
        self.addCleanup(patcher.stop)

    def outcome(self, main, interrupted: str = '', **options) -> tuple[int, str, str]:
        """(exit status, stdout, stderr) of run(main) started as evaluate.py."""
        out, err = io.StringIO(), io.StringIO()
        with mock.patch.object(sys, 'argv', ['evaluate.py']), contextlib.redirect_stdout(out), \
                contextlib.redirect_stderr(err), self.assertRaises(SystemExit) as exited:
            common.run(main, interrupted, **options)
        return exited.exception.code, out.getvalue(), err.getvalue()

    @staticmethod
    def raising(error: BaseException):
        def main(argv):
            raise error
        return main

    def test_a_ten_megabyte_error_is_one_line_cut_to_about_eight_thousand_characters_that_says_so(self):
        status, out, err = self.outcome(self.raising(LabError('x' * 10_000_000)))
        # 'evaluate.py: ', 7,970 of the x's, '… (9,992,030 more characters)' and the newline: 13 + 7970 + 29 + 1.
        self.assertEqual((status, out, len(err), err[-31:]), (2, '', 8013, 'x… (9,992,030 more characters)\n'))
        self.assertEqual(err.count('\n'), 1)

    def test_a_lab_error_is_one_line_naming_the_script_and_exit_2(self):
        self.assertEqual(self.outcome(self.raising(LabError('cases.json: the case set is empty'))),
                         (2, '', 'evaluate.py: cases.json: the case set is empty\n'))

    def test_a_lab_error_naming_a_newline_or_an_override_stays_one_line_showing_them_escaped(self):
        self.assertEqual(self.outcome(self.raising(LabError("c.json: no case 'a\nb\u202ec'"))),
                         (2, '', "evaluate.py: c.json: no case 'a\\nb\\u202ec'\n"))

    def test_ctrl_c_is_one_line_and_exit_130_saying_what_it_left_behind(self):
        for error, interrupted, line in (
                (KeyboardInterrupt(), 'nothing was written', 'evaluate.py: interrupted; nothing was written\n'),
                (KeyboardInterrupt(), '', 'evaluate.py: interrupted\n'),
                (KeyboardInterrupt('the report was written to r.json'), 'nothing was written',
                 'evaluate.py: interrupted; the report was written to r.json\n')):
            with self.subTest(line):
                self.assertEqual(self.outcome(self.raising(error), interrupted), (130, '', line))

    def test_the_status_main_returns_is_the_exit_status_and_main_gets_the_arguments(self):
        given = []
        with mock.patch.object(sys, 'argv', ['evaluate.py', '--compare', 'old.json']):
            out = io.StringIO()
            with contextlib.redirect_stdout(out), self.assertRaises(SystemExit) as exited:
                common.run(lambda argv: given.append(argv) or 1)
        self.assertEqual((exited.exception.code, given), (1, [['--compare', 'old.json']]))

    def test_a_missing_package_stops_the_script_before_main_in_one_line(self):
        self.missing = ['tokenizers==0.23.3']
        self.assertEqual(self.outcome(self.raising(AssertionError('main ran'))), (2, '', (
            f'evaluate.py: {sys.executable} lacks the locked package tokenizers==0.23.3; in {HERE} run '
            f'`{common.INSTALL}` and start the scripts with .venv/bin/python\n')))

    def test_a_script_of_the_standard_library_only_runs_whatever_packages_are_missing(self):
        self.missing = ['tokenizers==0.23.3']
        self.assertEqual(self.outcome(lambda argv: print('converted') or 0, packages=False), (0, 'converted\n', ''))


def import_graph(folder: Path) -> dict[str, set[str]]:
    """Each product module of folder (a top-level .py not named test_*) -> the product modules it imports, anywhere
    in its text: an import deferred into a function is an arrow too."""
    modules = {path.stem: path for path in folder.glob('*.py') if not path.stem.startswith('test_')}
    graph = {}
    for name, path in modules.items():
        nodes = list(ast.walk(ast.parse(path.read_text(encoding='utf-8'))))
        imported = {alias.name.split('.')[0] for node in nodes if isinstance(node, ast.Import) for alias in node.names}
        imported |= {node.module.split('.')[0] for node in nodes
                     if isinstance(node, ast.ImportFrom) and node.module and not node.level}
        graph[name] = (imported & set(modules)) - {name}
    return graph


def layering_faults(graph: dict[str, set[str]], scripts: frozenset) -> list[str]:
    """Each import of a script ('x -> script'), then the first circle found ('circle a -> b -> a'), in name order."""
    faults = [f'{module} -> {target}' for module in sorted(graph) for target in sorted(graph[module] & scripts)]
    done, path = set(), []

    def circle_from(module: str) -> list[str] | None:
        if module in path:
            return path[path.index(module):] + [module]
        if module in done:
            return None
        path.append(module)
        found = next(filter(None, map(circle_from, sorted(graph[module]))), None)
        path.pop(), done.add(module)
        return found
    found = next(filter(None, map(circle_from, sorted(graph))), None)
    return faults + ([f'circle {" -> ".join(found)}'] if found else [])


class LayeringTest(unittest.TestCase):
    def test_no_product_module_imports_a_script_or_closes_a_circle_of_imports(self):
        self.assertEqual(layering_faults(import_graph(HERE), SCRIPTS), [])

    def test_every_module_with_a_main_is_named_a_script_or_a_library_and_exists(self):
        mains = {path.stem for path in HERE.glob('*.py') if not path.stem.startswith('test_')
                 and "if __name__ == '__main__':" in path.read_text(encoding='utf-8')}
        self.assertEqual(mains, SCRIPTS | LIBRARIES_WITH_MAIN)

    def test_an_import_of_a_script_and_a_circle_are_named(self):
        files = {'low.py': 'import high\n', 'high.py': 'def f():\n    from low import x\n', 'run.py': 'import low\n',
                 'top.py': 'from run import main\n', 'test_top.py': 'import top\n'}  # a test may import anything
        with tempfile.TemporaryDirectory() as folder:
            for name, text in files.items():
                (Path(folder) / name).write_text(text, encoding='utf-8')
            graph = import_graph(Path(folder))
        self.assertEqual(layering_faults(graph, frozenset({'run', 'top'})),
                         ['top -> run', 'circle high -> low -> high'])


if __name__ == '__main__':
    unittest.main()
