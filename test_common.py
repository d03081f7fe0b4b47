"""Tests for common.py: the entry point, the file writer and reader, and the figures several scripts share.

    .venv/bin/python -m unittest -v test_common.py   (about 10 s)

Each test is named after the failure it pins: a symlink (direct, relative, a
chain, dangling) turned into a regular file, a named pipe or device replaced by
a regular file, a directory or an unwritable folder written over, a file's
permissions lost; a package at another version taken for the pinned one, advice
that a new terminal cannot paste; an error, a Ctrl-C or a missing package that
ends in a traceback or the wrong exit status; a figure or a table that reads
wrong. Expected figures are worked out by hand. Everything is written in a
temporary folder, the device too: a /dev/null-like node made there (skipped
where no device can be made), never the machine's /dev/null, which a regression
would replace. The entry point as a real child process sees it (pipes, signals,
an interpreter without the packages) is tested in test_cli.py.
"""
import contextlib
import io
import json
import os
from pathlib import Path
import shlex
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import unittest
from unittest import mock

from case_set import load_cases
import common
from common import LabError, NEW_FILE_MODE, allowance, by_group, check_fits, counted, markdown_table, path_text, \
    pins, plain_number, read_json, summarize, turn_runs, write_atomically, write_output

HERE = Path(__file__).resolve().parent
BOM = b'\xef\xbb\xbf'


class TempFolderTest(unittest.TestCase):
    def setUp(self):
        temp = tempfile.TemporaryDirectory()
        self.addCleanup(temp.cleanup)
        self.tmp = Path(temp.name)


class WriteTest(TempFolderTest):
    def leftovers(self) -> list[str]:
        return sorted(path.name for path in self.tmp.rglob('*.tmp'))

    def test_an_existing_file_is_replaced_whole_and_keeps_its_mode(self):
        path = self.tmp / 'report.json'
        path.write_text('old contents, longer than the new ones\n', encoding='utf-8')
        path.chmod(0o600)
        write_atomically(path, 'new\n')
        self.assertEqual(path.read_bytes(), b'new\n')
        self.assertEqual(stat.S_IMODE(path.stat().st_mode), 0o600)
        self.assertEqual(self.leftovers(), [])

    def test_a_new_file_is_readable_by_anyone(self):
        path = self.tmp / 'new.json'
        write_atomically(path, 'é\n')
        self.assertEqual(path.read_bytes(), b'\xc3\xa9\n')  # UTF-8, whatever the locale
        self.assertEqual(stat.S_IMODE(path.stat().st_mode), 0o644)
        self.assertEqual(NEW_FILE_MODE, 0o644)

    def test_bytes_are_written_as_they_are(self):
        path = self.tmp / 'picture.png'
        write_atomically(path, b'\x89PNG\r\n\x1a\n\x00\xff')
        self.assertEqual(path.read_bytes(), b'\x89PNG\r\n\x1a\n\x00\xff')

    def test_a_symlink_stays_a_link_and_the_file_it_names_gets_the_text(self):
        target = self.tmp / 'kept' / 'report.json'
        target.parent.mkdir()
        target.write_text('old', encoding='utf-8')
        target.chmod(0o640)
        link = self.tmp / 'report.json'
        link.symlink_to(target)
        write_atomically(link, 'new')
        self.assertTrue(link.is_symlink())
        self.assertEqual(os.readlink(link), str(target))
        self.assertEqual(target.read_text(encoding='utf-8'), 'new')
        self.assertEqual(stat.S_IMODE(target.stat().st_mode), 0o640)
        self.assertEqual(self.leftovers(), [])

    def test_a_relative_symlink_is_resolved_from_its_own_folder_not_the_working_directory(self):
        (self.tmp / 'links').mkdir()
        (self.tmp / 'data').mkdir()
        target = self.tmp / 'data' / 'report.json'
        target.write_text('old', encoding='utf-8')
        link = self.tmp / 'links' / 'report.json'
        link.symlink_to(Path('..') / 'data' / 'report.json')
        write_atomically(link, 'new')
        self.assertEqual(os.readlink(link), '../data/report.json')
        self.assertEqual(target.read_text(encoding='utf-8'), 'new')

    def test_a_chain_of_links_is_followed_to_the_end_and_every_link_stays(self):
        target = self.tmp / 'report.json'
        target.write_text('old', encoding='utf-8')
        middle, first = self.tmp / 'middle', self.tmp / 'first'
        middle.symlink_to('report.json')
        first.symlink_to('middle')
        write_atomically(first, 'new')
        self.assertEqual((os.readlink(first), os.readlink(middle)), ('middle', 'report.json'))
        self.assertEqual(target.read_text(encoding='utf-8'), 'new')

    def test_a_dangling_symlink_creates_the_file_it_names(self):
        link = self.tmp / 'report.json'
        link.symlink_to('not-yet.json')
        write_atomically(link, 'new')
        self.assertTrue(link.is_symlink())
        self.assertEqual((self.tmp / 'not-yet.json').read_text(encoding='utf-8'), 'new')
        self.assertEqual(stat.S_IMODE((self.tmp / 'not-yet.json').stat().st_mode), 0o644)

    def test_a_symlink_loop_is_an_error_and_stays_as_it_was(self):
        loop = self.tmp / 'loop'
        loop.symlink_to('loop')
        with self.assertRaises(OSError):
            write_atomically(loop, 'new')
        self.assertEqual(os.readlink(loop), 'loop')
        self.assertEqual(self.leftovers(), [])

    def test_a_named_pipe_is_written_into_not_replaced(self):
        fifo = self.tmp / 'pipe'
        os.mkfifo(fifo)
        received = []
        reader = threading.Thread(target=lambda: received.append(fifo.read_bytes()), daemon=True)
        reader.start()
        write_atomically(fifo, 'through the pipe\n')
        reader.join(timeout=10)
        self.assertEqual(received, [b'through the pipe\n'])
        self.assertTrue(stat.S_ISFIFO(os.lstat(fifo).st_mode))
        self.assertEqual(self.leftovers(), [])

    def test_a_link_to_a_named_pipe_writes_into_the_pipe(self):
        fifo, link = self.tmp / 'pipe', self.tmp / 'link'
        os.mkfifo(fifo)
        link.symlink_to('pipe')
        received = []
        reader = threading.Thread(target=lambda: received.append(fifo.read_bytes()), daemon=True)
        reader.start()
        write_atomically(link, b'bytes')
        reader.join(timeout=10)
        self.assertEqual(received, [b'bytes'])
        self.assertTrue(link.is_symlink() and stat.S_ISFIFO(os.lstat(fifo).st_mode))

    def null_device(self) -> Path:
        """A character device like /dev/null (1, 3) in the temporary folder, so a regression that replaces
        devices replaces this one, never the machine's; the test is skipped where devices cannot be made."""
        device = self.tmp / 'null'
        try:
            os.mknod(device, stat.S_IFCHR | 0o666, os.makedev(1, 3))
            os.close(os.open(device, os.O_WRONLY))
        except PermissionError:  # no CAP_MKNOD, or a temporary folder mounted nodev
            self.skipTest('cannot make and open a device node in a temporary folder here')
        return device

    def test_a_device_is_written_into_and_stays_the_character_device(self):
        device = self.null_device()
        before = os.lstat(device)
        write_atomically(device, 'discarded\n')
        after = os.lstat(device)
        self.assertTrue(stat.S_ISCHR(after.st_mode))
        self.assertEqual((after.st_ino, after.st_rdev), (before.st_ino, before.st_rdev))
        self.assertEqual(self.leftovers(), [])

    def test_a_directory_is_refused_and_left_alone(self):
        folder = self.tmp / 'out'
        folder.mkdir()
        (folder / 'inside').write_text('kept', encoding='utf-8')
        with self.assertRaises(IsADirectoryError) as raised:
            write_atomically(folder, 'new')
        self.assertEqual((raised.exception.filename, raised.exception.strerror),
                         (str(folder), 'it is a directory; name a file in it'))
        self.assertEqual((folder / 'inside').read_text(encoding='utf-8'), 'kept')
        self.assertEqual(self.leftovers(), [])

    def test_a_link_to_a_directory_is_refused(self):
        (self.tmp / 'out').mkdir()
        (self.tmp / 'link').symlink_to('out')
        with self.assertRaises(IsADirectoryError):
            write_atomically(self.tmp / 'link', 'new')
        self.assertTrue((self.tmp / 'link').is_symlink())

    def test_a_folder_that_does_not_exist_is_an_error(self):
        with self.assertRaises(FileNotFoundError):
            write_atomically(self.tmp / 'missing' / 'report.json', 'new')
        self.assertEqual(list(self.tmp.iterdir()), [])

    def test_a_path_below_a_regular_file_is_an_error_and_the_file_is_kept(self):
        (self.tmp / 'file').write_text('kept', encoding='utf-8')
        with self.assertRaises(NotADirectoryError):
            write_atomically(self.tmp / 'file' / 'report.json', 'new')
        self.assertEqual((self.tmp / 'file').read_text(encoding='utf-8'), 'kept')

    @unittest.skipIf(os.geteuid() == 0, 'root writes into any folder, so no folder is unwritable to this test')
    def test_an_unwritable_folder_is_an_error_and_the_file_is_kept(self):
        path = self.tmp / 'report.json'
        path.write_text('kept', encoding='utf-8')
        self.tmp.chmod(0o555)
        self.addCleanup(self.tmp.chmod, 0o755)
        with self.assertRaises(PermissionError):
            write_atomically(path, 'new')
        self.assertEqual(path.read_text(encoding='utf-8'), 'kept')
        self.assertEqual(self.leftovers(), [])

    def test_text_that_is_not_unicode_writes_nothing(self):
        path = self.tmp / 'report.json'
        path.write_text('kept', encoding='utf-8')
        with self.assertRaises(UnicodeEncodeError):
            write_atomically(path, 'lone \ud800 surrogate')
        self.assertEqual(path.read_text(encoding='utf-8'), 'kept')
        self.assertEqual(self.leftovers(), [])


class WriteOutputTest(TempFolderTest):
    def test_an_output_that_cannot_be_written_is_one_lab_error_naming_the_path_and_what_it_was(self):
        missing, folder = self.tmp / 'missing' / 'report.json', self.tmp
        for path, problem in ((missing, 'No such file or directory'), (folder, 'it is a directory; name a file in it')):
            with self.subTest(problem), self.assertRaises(LabError) as raised:
                write_output(path, '{}\n', 'report')
            self.assertEqual(str(raised.exception), f'{path}: cannot write the report: {problem}')
        self.assertEqual(list(self.tmp.iterdir()), [])


class OutputIsInputTest(TempFolderTest):
    """check_outputs compares files, not spellings: another spelling, a symlink or a hard link of an input is it."""

    def test_an_output_that_is_an_input_under_another_spelling_or_link_is_refused_naming_both(self):
        cases = self.tmp / 'my.json'
        cases.write_text('[]', encoding='utf-8')
        (self.tmp / 'link.json').symlink_to('my.json')
        os.link(cases, self.tmp / 'hard.json')
        for output in (self.tmp / '.' / 'my.json', self.tmp / 'link.json', self.tmp / 'hard.json'):
            with self.subTest(output.name), self.assertRaises(LabError) as raised:
                common.check_outputs([('--output', output)], [('--compare', None), ('--cases', cases)])
            self.assertEqual(str(raised.exception), f'--output {output}: the same file as --cases {cases}, which '
                                                    'this run reads; write the output elsewhere')
        self.assertEqual(cases.read_text(encoding='utf-8'), '[]')

    def test_two_outputs_naming_one_new_file_are_refused_and_an_input_not_there_yet_is_none(self):
        folder = self.tmp / 'out'
        folder.mkdir()
        (self.tmp / 'alias').symlink_to('out')
        plot = self.tmp / 'alias' / 'p.png'
        with self.assertRaises(LabError) as raised:
            common.check_outputs([('--output', folder / 'p.png'), ('--plot', plot)], [('--cases', plot)])
        self.assertEqual(str(raised.exception), f'--plot {plot}: the same file as --output {folder / "p.png"}, which '
                                                'this run also writes; write the output elsewhere')
        common.check_outputs([('--output', folder / 'a.json'), ('--plot', None)], [('--cases', folder / 'b.json')])

    def test_the_labs_own_code_is_an_input_and_a_pipe_is_never_the_same_file(self):
        with self.assertRaises(LabError) as raised:
            common.check_outputs([('--output', HERE / 'case_set.py')], [])
        self.assertEqual(str(raised.exception), f"--output {HERE / 'case_set.py'}: the same file as the lab's "
                                                f"case_set.py {HERE / 'case_set.py'}, which this run reads; write the "
                                                'output elsewhere')
        os.mkfifo(self.tmp / 'pipe')
        common.check_outputs([('--output', self.tmp / 'pipe'), ('--plot', self.tmp / 'pipe')], [])
        (self.tmp / 'loop').symlink_to('loop')  # nothing to compare: the write itself will say what is wrong
        common.check_outputs([('--output', self.tmp / 'loop')], [('--cases', self.tmp / 'loop')])


class TwoOutputsTest(TempFolderTest):
    def test_when_the_second_output_cannot_be_written_the_first_is_not_written_either(self):
        first = self.tmp / 'sweep.json'
        first.write_text('old', encoding='utf-8')
        with self.assertRaises(LabError) as raised:
            write_output(first, 'new', 'sweep', (self.tmp / 'missing' / 'p.png', b'png', 'picture'))
        self.assertEqual(str(raised.exception),
                         f"{self.tmp / 'missing' / 'p.png'}: cannot write the picture: No such file or directory")
        self.assertEqual(first.read_text(encoding='utf-8'), 'old')
        self.assertEqual(sorted(path.name for path in self.tmp.iterdir()), ['sweep.json'])


class PipeTest(TempFolderTest):
    """A named pipe: as input refused at once, as output waited for a bounded time, never forever."""

    def test_a_named_pipe_with_no_writer_as_input_is_refused_at_once_not_waited_on(self):
        fifo = self.tmp / 'cases.json'
        os.mkfifo(fifo)
        result = subprocess.run([sys.executable, 'evaluate.py', '--cases', str(fifo)], cwd=HERE, capture_output=True,
                                text=True, timeout=60)
        self.assertEqual((result.returncode, result.stdout, result.stderr),
                         (2, '', f'evaluate.py: {fifo}: the case set must be a file, not a named pipe\n'))

    def test_dev_zero_as_input_is_refused_instead_of_read_until_memory_runs_out(self):
        for option in ('--cases', '--compare'):
            with self.subTest(option):
                result = subprocess.run([sys.executable, 'evaluate.py', option, '/dev/zero'], cwd=HERE,
                                        capture_output=True, text=True, timeout=60)
                what = 'case set' if option == '--cases' else 'report to compare with'
                self.assertEqual((result.returncode, result.stderr),
                                 (2, f'evaluate.py: /dev/zero: the {what} must be a file, not a device\n'))

    def test_an_output_pipe_with_no_reader_is_refused_after_the_wait_and_nothing_is_left(self):
        fifo = self.tmp / 'report.json'
        os.mkfifo(fifo)
        with mock.patch.object(common, 'PIPE_WAIT', 0.3), self.assertRaises(LabError) as raised:
            write_output(fifo, '{}\n', 'report')
        self.assertEqual(str(raised.exception), f'{fifo}: cannot write the report: no process opened the named pipe '
                                                'for reading within 0.3 s; start its reader first')
        self.assertTrue(stat.S_ISFIFO(os.lstat(fifo).st_mode))

    def test_an_output_pipe_whose_reader_comes_late_gets_everything(self):
        fifo = self.tmp / 'report.json'
        os.mkfifo(fifo)
        received = self.tmp / 'received'
        reader = subprocess.Popen(['sh', '-c', f'sleep 0.5; cat {shlex.quote(str(fifo))} > {shlex.quote(str(received))}'])
        write_output(fifo, 'x' * 200_000, 'report')  # more than a pipe holds: the reader reads as it is written
        self.assertEqual(reader.wait(timeout=30), 0)
        self.assertEqual(received.read_bytes(), b'x' * 200_000)


class LeftoverTest(TempFolderTest):
    """Temporary files of a writer killed outright: removed by the next write unless their process lives."""

    def killed_mid_write(self, target: Path) -> str:
        """Run a child that stages a write to target and is killed with SIGKILL before it renames; its leftover."""
        child = subprocess.run([sys.executable, '-c', 'import os, signal, sys; import common; '
                                'common.stage(sys.argv[1], b"half"); os.kill(os.getpid(), signal.SIGKILL)',
                                str(target)], cwd=HERE, timeout=60)
        self.assertEqual(child.returncode, -signal.SIGKILL)
        left = [path.name for path in self.tmp.iterdir() if path.name != target.name]
        self.assertEqual(len(left), 1)
        self.assertRegex(left[0], rf'^\.{target.name}\.lab-tmp-\d+-[a-z0-9_]{{8}}\.tmp$')
        return left[0]

    def test_a_writer_killed_outright_leaves_a_file_the_next_write_removes(self):
        target = self.tmp / 'report.json'
        target.write_text('old', encoding='utf-8')
        self.killed_mid_write(target)
        write_output(target, 'new', 'report')
        self.assertEqual(sorted(path.name for path in self.tmp.iterdir()), ['report.json'])
        self.assertEqual(target.read_text(encoding='utf-8'), 'new')

    def test_a_temporary_file_of_a_living_writer_and_one_of_another_name_are_kept(self):
        target = self.tmp / 'report.json'
        other = self.killed_mid_write(self.tmp / 'other.json')
        living = f'.report.json.lab-tmp-{os.getpid()}-abcdefgh.tmp'
        (self.tmp / living).write_text('being written', encoding='utf-8')
        write_output(target, 'new', 'report')
        self.assertEqual(sorted(path.name for path in self.tmp.iterdir()), sorted([living, other, 'report.json']))

    def test_git_ignores_the_temporary_file_pattern(self):
        if subprocess.run(['git', 'rev-parse'], cwd=HERE, capture_output=True).returncode:
            self.skipTest('not a git checkout')
        name = f'.evaluation-result.json{common.TEMPORARY}123-abcdefgh.tmp'
        for path in (name, f'docs/.locomo-sweep.png{common.TEMPORARY}9-zz_0a1b2.tmp'):
            with self.subTest(path):
                self.assertEqual(subprocess.run(['git', 'check-ignore', '-q', '--no-index', path], cwd=HERE)
                                 .returncode, 0)

    def test_sigterm_during_a_write_removes_the_temporary_file_and_says_what_the_file_holds(self):
        target = self.tmp / 'report.json'
        target.write_text('old', encoding='utf-8')
        # A real SIGTERM, sent by the child to itself between staging and renaming.
        child = subprocess.run([sys.executable, '-c', 'import os, signal, sys; from pathlib import Path; import common\n'
                                'real = os.replace\n'
                                'def replace(*names):\n    os.kill(os.getpid(), signal.SIGTERM); real(*names)\n'
                                'os.replace = replace\n'
                                'common.run(lambda argv: common.write_output(Path(argv[0]), "new", "report"), '
                                'packages=False)', str(target)], cwd=HERE, capture_output=True, text=True, timeout=60)
        self.assertEqual((child.returncode, child.stderr), (130, (
            f'-c: interrupted; while writing {target}: a file there holds what it held or all of the new contents, '
            'a pipe or device may have received part of them\n')))
        self.assertEqual(sorted(path.name for path in self.tmp.iterdir()), ['report.json'])
        self.assertEqual(target.read_text(encoding='utf-8'), 'old')


class OwnerTest(TempFolderTest):
    @unittest.skipUnless(os.geteuid() == 0, 'only root can give a file to another owner')
    def test_writing_through_a_symlink_keeps_the_target_files_owner_and_mode(self):
        target, link = self.tmp / 'theirs.json', self.tmp / 'link.json'
        target.write_text('old', encoding='utf-8')
        os.chown(target, 1234, 5678)
        target.chmod(0o640)
        link.symlink_to(target.name)
        write_output(link, 'new', 'report')
        status = target.stat()
        self.assertEqual((status.st_uid, status.st_gid, stat.S_IMODE(status.st_mode)), (1234, 5678, 0o640))
        self.assertEqual((target.read_text(encoding='utf-8'), link.is_symlink()), ('new', True))


class EvaluateOutputTest(TempFolderTest):
    """End to end: `evaluate.py --output` through a symlink and into a named pipe, as a user would run it."""

    def evaluate_py(self, output: Path, **kwargs) -> subprocess.Popen:
        return subprocess.Popen([sys.executable, 'evaluate.py', '--format', 'table', '--output', str(output)],
                                cwd=HERE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kwargs)

    def test_output_to_a_symlink_writes_the_named_file_and_keeps_the_link(self):
        (self.tmp / 'reports').mkdir()
        target = self.tmp / 'reports' / 'latest.json'
        target.write_text('old', encoding='utf-8')
        link = self.tmp / 'report.json'
        link.symlink_to('reports/latest.json')
        process = self.evaluate_py(link)
        out, err = process.communicate(timeout=300)
        self.assertEqual((process.returncode, err), (0, ''))
        self.assertEqual(os.readlink(link), 'reports/latest.json')
        recorded = (HERE / 'evaluation-result.json').read_text(encoding='utf-8')
        written = target.read_text(encoding='utf-8')
        # Equal to the recording but for the environment, which the recording keeps from its own run.
        self.assertEqual(written.split('"counter"')[1], recorded.split('"counter"')[1])
        self.assertTrue(out.startswith('| Strategy |'), out[:100])

    def test_output_to_a_named_pipe_is_read_by_the_reader_and_the_pipe_stays(self):
        fifo = self.tmp / 'report.pipe'
        os.mkfifo(fifo)
        received = []  # read by a thread, so a run that fails before opening the pipe cannot hang the test
        reader = threading.Thread(target=lambda: received.append(fifo.read_text(encoding='utf-8')), daemon=True)
        reader.start()
        process = self.evaluate_py(fifo)
        out, err = process.communicate(timeout=300)
        reader.join(timeout=10)
        self.assertEqual((process.returncode, err), (0, ''))
        received = received[0]
        self.assertTrue(stat.S_ISFIFO(os.lstat(fifo).st_mode))
        recorded = (HERE / 'evaluation-result.json').read_text(encoding='utf-8')
        self.assertEqual(received.split('"counter"')[1], recorded.split('"counter"')[1])
        self.assertEqual(sorted(path.name for path in self.tmp.iterdir()), ['report.pipe'])



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


class ReadJsonTest(TempFolderTest):
    def with_bom(self, path: Path) -> Path:
        copy = self.tmp / path.name
        copy.write_bytes(BOM + path.read_bytes())
        return copy

    def test_a_case_file_and_a_report_saved_with_a_byte_order_mark_read_as_without(self):
        self.assertEqual(load_cases(self.with_bom(HERE / 'cases.json')), load_cases(HERE / 'cases.json'))
        report = HERE / 'evaluation-result.json'
        self.assertEqual(read_json(self.with_bom(report), 'report'), json.loads(report.read_text(encoding='utf-8')))

    def test_an_unreadable_file_is_one_error_naming_it_what_it_was_meant_to_be_and_the_advice(self):
        missing, deep = self.tmp / 'old.json', self.tmp / 'deep.json'
        deep.write_text('[' * 100_000, encoding='utf-8')
        for path, advice, message in (
                (missing, 'run evaluate.py --output first', 'cannot read the report: No such file or directory; '
                                                            'run evaluate.py --output first'),
                (self.tmp, '', 'cannot read the report: Is a directory'),
                (deep, '', 'the report is nested too deeply to read')):
            with self.subTest(message), self.assertRaises(LabError) as raised:
                read_json(path, 'report', advice)
            self.assertEqual(str(raised.exception), f'{path}: {message}')


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
        self.assertEqual(pins('# a comment\ntokenizers==0.23.3   # counts tokens\n\njinja2==3.1.6\n'),
                         {'tokenizers': '0.23.3', 'jinja2': '3.1.6'})

    def test_a_line_that_pins_no_exact_version_asks_for_the_package_at_any_version(self):
        self.assertEqual(pins('numpy>=2\nrich\nidna[all] == 3.10\nsix==1.*  # a wildcard pins nothing\n'),
                         {'numpy': None, 'rich': None, 'idna': '3.10', 'six': None})

    def test_a_line_that_names_no_package_is_refused_naming_the_file_and_the_line(self):
        for line in ('-r other.txt', 'git+https://example.org/x.git', '==1.0', 'two words'):
            with self.subTest(line), self.assertRaises(LabError) as raised:
                pins(f'# first line\n{line}\n')
            self.assertEqual(str(raised.exception), f'{common.REQUIREMENTS}: line 2: {line!r} is not a requirement; '
                                                    'expected name==version')

    def test_a_package_at_another_version_counts_as_missing(self):
        pinned = pins((HERE / 'requirements.txt').read_text(encoding='utf-8'))

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


class FiguresTest(unittest.TestCase):
    ROWS = [{'case': 'a', 'split': 'held_out', 'kind': 'temporal', 'input_tokens': 40, 'within_budget': True,
             'required_found': 1, 'required_total': 1, 'missing': [], 'stale_included': []},
            {'case': 'b', 'split': 'dev', 'kind': 'multi-hop', 'input_tokens': 51, 'within_budget': False,
             'required_found': 0, 'required_total': 2, 'missing': ['x', 'y'], 'stale_included': ['old']}]

    def test_the_allowance_is_the_limit_less_the_answer_and_the_margin_for_a_case_or_a_budget(self):
        budget = {'context_limit': 384, 'max_new_tokens': 96, 'margin': 32}
        self.assertEqual((allowance(budget), allowance({'id': 'x', 'budget': budget})), (256, 256))

    def test_a_case_whose_instructions_and_question_alone_do_not_fit_is_refused_naming_it(self):
        case = {'id': 'dev-latest', 'budget': {'context_limit': 40, 'max_new_tokens': 4, 'margin': 2}}
        check_fits(Path('c.json'), case, 34)  # exactly the allowance fits
        with self.assertRaises(LabError) as raised:
            check_fits(Path('c.json'), case, 35, '; try 41')
        self.assertEqual(str(raised.exception), 'c.json: case dev-latest: field budget allows 34 input tokens, '
                                                'but the instructions and question alone need 35; try 41')

    def test_a_summary_worked_out_by_hand(self):
        self.assertEqual(summarize(self.ROWS), {
            'cases': 2, 'facts_found': 1, 'facts_total': 3, 'fact_recall': 0.333, 'complete_cases': 1,
            'cases_with_stale_facts': 1, 'over_budget': 1, 'mean_input_tokens': 45.5})

    def test_splits_come_in_the_labs_order_and_other_groups_in_row_order(self):
        self.assertEqual(list(by_group(self.ROWS, 'split')), ['dev', 'held_out'])  # held_out comes first in the rows
        self.assertEqual(list(by_group(self.ROWS, 'kind')), ['temporal', 'multi-hop'])
        self.assertEqual(by_group(self.ROWS, 'kind', len), {'temporal': 1, 'multi-hop': 1})

    def test_means_print_without_exponents_or_trailing_zeros(self):
        for value, text in ((61.0, '61'), (51.3, '51.3'), (123456.7, '123456.7'), (2000000.0, '2000000')):
            with self.subTest(value):
                self.assertEqual(plain_number(value), text)

    def test_counts_read_as_words_with_thousands_separators(self):
        self.assertEqual([counted(1, 'case'), counted(0, 'fact'), counted(1534, 'case')],
                         ['1 case', '0 facts', '1,534 cases'])

    def test_a_table_lines_up_its_columns_only_when_padded(self):
        self.assertEqual(markdown_table(['a', 'bb'], [['xyz', '1']]), '| a | bb |\n|---|---|\n| xyz | 1 |\n')
        self.assertEqual(markdown_table(['a', 'bb'], [['xyz', '1']], pad=True),
                         '| a   | bb |\n|-----|----|\n| xyz | 1  |\n')

    def test_turns_are_counted_from_1_and_consecutive_turns_are_one_run(self):
        self.assertEqual(turn_runs([6, 2, 3, 4]), ['3-5', '7'])
        self.assertEqual((turn_runs([]), turn_runs([0])), ([], ['1']))


if __name__ == '__main__':
    unittest.main()
