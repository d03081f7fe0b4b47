"""Tests for lab_files' paths: an output that is an input under another spelling or link, or one of the lab's own
files, is refused; a file name that is not UTF-8 is shown with its byte escaped.

    .venv/bin/python -m unittest -v test_lab_files_names

Each test is named after the failure it pins. Everything is written in a temporary folder.
"""
import os
from pathlib import Path
import subprocess
import sys
import tempfile
import unittest

from common import LabError
import lab_files
from lab_files import path_text
from test_support_fixtures import HERE, TempFolderTest


class OutputIsInputTest(TempFolderTest):
    """check_outputs compares files, not spellings: another spelling, a symlink or a hard link of an input is it."""

    def test_an_output_that_is_an_input_under_another_spelling_or_link_is_refused_naming_both(self):
        cases = self.tmp / 'my.json'
        cases.write_text('[]', encoding='utf-8')
        (self.tmp / 'link.json').symlink_to('my.json')
        os.link(cases, self.tmp / 'hard.json')
        for output in (self.tmp / '.' / 'my.json', self.tmp / 'link.json', self.tmp / 'hard.json'):
            with self.subTest(output.name), self.assertRaises(LabError) as raised:
                lab_files.check_outputs([('--output', output)], [('--compare', None), ('--cases', cases)])
            self.assertEqual(str(raised.exception), f'--output {output}: the same file as --cases {cases}, which '
                                                    'this run reads; write the output elsewhere')
        self.assertEqual(cases.read_text(encoding='utf-8'), '[]')

    def test_two_outputs_naming_one_new_file_are_refused_and_an_input_not_there_yet_is_none(self):
        folder = self.tmp / 'out'
        folder.mkdir()
        (self.tmp / 'alias').symlink_to('out')
        plot = self.tmp / 'alias' / 'p.png'
        with self.assertRaises(LabError) as raised:
            lab_files.check_outputs([('--output', folder / 'p.png'), ('--plot', plot)], [('--cases', plot)])
        self.assertEqual(str(raised.exception), f'--plot {plot}: the same file as --output {folder / "p.png"}, which '
                                                'this run also writes; write the output elsewhere')
        lab_files.check_outputs([('--output', folder / 'a.json'), ('--plot', None)], [('--cases', folder / 'b.json')])

    def test_the_labs_own_code_is_an_input_and_a_pipe_is_never_the_same_file(self):
        with self.assertRaises(LabError) as raised:
            lab_files.check_outputs([('--output', HERE / 'case_set.py')], [])
        self.assertEqual(str(raised.exception), f"--output {HERE / 'case_set.py'}: the same file as the lab's "
                                                f"case_set.py {HERE / 'case_set.py'}, which this run reads; write the "
                                                'output elsewhere')
        os.mkfifo(self.tmp / 'pipe')
        lab_files.check_outputs([('--output', self.tmp / 'pipe'), ('--plot', self.tmp / 'pipe')], [])
        (self.tmp / 'loop').symlink_to('loop')  # nothing to compare: the write itself will say what is wrong
        lab_files.check_outputs([('--output', self.tmp / 'loop')], [('--cases', self.tmp / 'loop')])

    def test_no_output_replaces_any_of_the_labs_files_or_lands_in_a_prepared_folder(self):
        # views.py, the README and the manifest are no script's input, yet replacing one breaks every later run.
        for name in ('views.py', 'README.md', 'docs/rules.md', 'answer-keys.json', 'memory-answer-keys.json',
                     'continuation-cases.json', 'continuation-keys.json', 'tokenizer-manifest.json'):
            with self.subTest(name), self.assertRaises(LabError) as raised:
                lab_files.check_outputs([('--output', HERE / name)], [])
            self.assertEqual(str(raised.exception), f"--output {HERE / name}: the same file as the lab's {name} "
                                                    f'{HERE / name}, which this run reads; write the output elsewhere')
        (self.tmp / 'prepared.json').write_text('{}', encoding='utf-8')  # what marks a prepared counter folder
        with self.assertRaises(LabError) as raised:
            lab_files.check_outputs([('--output', self.tmp / 'tokenizer.json')], [])
        self.assertEqual(str(raised.exception), f"--output {self.tmp / 'tokenizer.json'}: inside a prepared counter "
                                                'folder, which only prepare.py writes; write the output elsewhere')
        lab_files.check_outputs([('--output', HERE / 'evaluation-result.json')], [])  # a recorded output: its own


class NameNotUtf8Test(unittest.TestCase):
    """A case file whose name holds a byte that is not UTF-8 (0xff), as a Linux file name may."""

    def setUp(self):
        temp = tempfile.TemporaryDirectory()
        self.addCleanup(temp.cleanup)
        self.folder = os.fsencode(temp.name)

    def evaluate_py(self, name: bytes, *options: str) -> subprocess.CompletedProcess:
        # Strict UTF-8 on stdout and stderr, as under a desktop's en_US.UTF-8: a lone surrogate there would raise.
        env = {**os.environ, 'PYTHONIOENCODING': 'utf-8:strict'}
        return subprocess.run([sys.executable, 'evaluate.py', '--cases', self.folder + b'/' + name, *options],
                              cwd=HERE, env=env, capture_output=True, timeout=300)

    def test_the_name_is_shown_with_its_byte_escaped(self):
        self.assertEqual(path_text(Path(os.fsdecode(b'cases\xff.json'))), 'cases\\xff.json')
        self.assertEqual(path_text(Path('caf\u00e9.json')), 'caf\u00e9.json')  # UTF-8 names stay as they are

    def test_a_case_file_so_named_is_evaluated_and_recorded_under_the_escaped_name(self):
        named = Path(os.fsdecode(self.folder)) / os.fsdecode(b'cases\xff.json')
        named.write_bytes((HERE / 'cases.json').read_bytes())
        output = os.fsdecode(self.folder) + '/report.json'
        result = self.evaluate_py(b'cases\xff.json', '--output', output)
        self.assertEqual((result.returncode, result.stderr), (0, b''))
        self.assertIn(b'"case_set": "cases\\\\xff.json"', result.stdout)  # JSON escapes the backslash
        self.assertEqual(Path(output).read_bytes(), result.stdout)

    def test_an_unreadable_case_file_so_named_is_one_line(self):
        result = self.evaluate_py(b'missing\xff.json')
        self.assertEqual((result.returncode, result.stdout), (2, b''))
        self.assertTrue(result.stderr.startswith(b'evaluate.py: '), result.stderr)
        self.assertTrue(result.stderr.endswith(b'.json: cannot read the case set: No such file or directory\n'),
                        result.stderr)
        self.assertEqual(result.stderr.count(b'\n'), 1)


if __name__ == '__main__':
    unittest.main()
