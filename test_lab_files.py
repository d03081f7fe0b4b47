"""Tests for lab_files.py: reading JSON, writing outputs whole, refusing an output that is an input (replacing a
folder whole: test_prepared_folder.py).

    .venv/bin/python -m unittest -v test_lab_files   (about 10 s)

Each test is named after the failure it pins: a symlink (direct, relative, a chain, dangling) turned into a regular
file, a named pipe or device replaced by a regular file, a directory or an unwritable folder written over, a file's
permissions lost, an output that replaces an input or one of the lab's own files, a key read twice. Everything is
written in a temporary folder, the device too: a /dev/null-like node made there (skipped where no device can be
made), never the machine's /dev/null, which a regression would replace.
"""
import json
import os
from pathlib import Path
import resource
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
from common import LabError
import lab_files
from lab_files import NEW_FILE_MODE, path_text, read_json, write_output
from test_support_fixtures import BOM, HERE, TempFolderTest





class WriteTest(TempFolderTest):
    def leftovers(self) -> list[str]:
        return sorted(path.name for path in self.tmp.rglob('*.tmp'))

    def test_an_existing_file_is_replaced_whole_and_keeps_its_mode(self):
        path = self.tmp / 'report.json'
        path.write_text('old contents, longer than the new ones\n', encoding='utf-8')
        path.chmod(0o600)
        write_output(path, 'new\n', 'report')
        self.assertEqual(path.read_bytes(), b'new\n')
        self.assertEqual(stat.S_IMODE(path.stat().st_mode), 0o600)
        self.assertEqual(self.leftovers(), [])

    def test_a_new_file_is_readable_by_anyone(self):
        path = self.tmp / 'new.json'
        write_output(path, 'é\n', 'report')
        self.assertEqual(path.read_bytes(), b'\xc3\xa9\n')  # UTF-8, whatever the locale
        self.assertEqual(stat.S_IMODE(path.stat().st_mode), 0o644)
        self.assertEqual(NEW_FILE_MODE, 0o644)

    def test_bytes_are_written_as_they_are(self):
        path = self.tmp / 'picture.png'
        write_output(path, b'\x89PNG\r\n\x1a\n\x00\xff', 'report')
        self.assertEqual(path.read_bytes(), b'\x89PNG\r\n\x1a\n\x00\xff')

    def test_a_symlink_stays_a_link_and_the_file_it_names_gets_the_text(self):
        target = self.tmp / 'kept' / 'report.json'
        target.parent.mkdir()
        target.write_text('old', encoding='utf-8')
        target.chmod(0o640)
        link = self.tmp / 'report.json'
        link.symlink_to(target)
        write_output(link, 'new', 'report')
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
        write_output(link, 'new', 'report')
        self.assertEqual(os.readlink(link), '../data/report.json')
        self.assertEqual(target.read_text(encoding='utf-8'), 'new')

    def test_a_chain_of_links_is_followed_to_the_end_and_every_link_stays(self):
        target = self.tmp / 'report.json'
        target.write_text('old', encoding='utf-8')
        middle, first = self.tmp / 'middle', self.tmp / 'first'
        middle.symlink_to('report.json')
        first.symlink_to('middle')
        write_output(first, 'new', 'report')
        self.assertEqual((os.readlink(first), os.readlink(middle)), ('middle', 'report.json'))
        self.assertEqual(target.read_text(encoding='utf-8'), 'new')

    def test_a_dangling_symlink_creates_the_file_it_names(self):
        link = self.tmp / 'report.json'
        link.symlink_to('not-yet.json')
        write_output(link, 'new', 'report')
        self.assertTrue(link.is_symlink())
        self.assertEqual((self.tmp / 'not-yet.json').read_text(encoding='utf-8'), 'new')
        self.assertEqual(stat.S_IMODE((self.tmp / 'not-yet.json').stat().st_mode), 0o644)

    def test_a_symlink_loop_is_an_error_and_stays_as_it_was(self):
        loop = self.tmp / 'loop'
        loop.symlink_to('loop')
        with self.assertRaises(LabError) as raised:
            write_output(loop, 'new', 'report')
        self.assertEqual(str(raised.exception),
                         f'{loop}: cannot write the report: Too many levels of symbolic links')
        self.assertEqual(os.readlink(loop), 'loop')
        self.assertEqual(self.leftovers(), [])

    def test_a_named_pipe_is_written_into_not_replaced(self):
        fifo = self.tmp / 'pipe'
        os.mkfifo(fifo)
        received = []
        reader = threading.Thread(target=lambda: received.append(fifo.read_bytes()), daemon=True)
        reader.start()
        write_output(fifo, 'through the pipe\n', 'report')
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
        write_output(link, b'bytes', 'report')
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
        write_output(device, 'discarded\n', 'report')
        after = os.lstat(device)
        self.assertTrue(stat.S_ISCHR(after.st_mode))
        self.assertEqual((after.st_ino, after.st_rdev), (before.st_ino, before.st_rdev))
        self.assertEqual(self.leftovers(), [])

    def test_a_directory_is_refused_and_left_alone(self):
        folder = self.tmp / 'out'
        folder.mkdir()
        (folder / 'inside').write_text('kept', encoding='utf-8')
        with self.assertRaises(LabError) as raised:
            write_output(folder, 'new', 'report')
        self.assertEqual(str(raised.exception),
                         f'{folder}: cannot write the report: it is a directory; name a file in it')
        self.assertEqual((folder / 'inside').read_text(encoding='utf-8'), 'kept')
        self.assertEqual(self.leftovers(), [])

    def test_a_link_to_a_directory_is_refused(self):
        (self.tmp / 'out').mkdir()
        (self.tmp / 'link').symlink_to('out')
        with self.assertRaises(LabError) as raised:
            write_output(self.tmp / 'link', 'new', 'report')
        self.assertEqual(str(raised.exception),
                         f"{self.tmp / 'link'}: cannot write the report: it is a directory; name a file in it")
        self.assertTrue((self.tmp / 'link').is_symlink())

    def test_a_folder_that_does_not_exist_is_an_error(self):
        path = self.tmp / 'missing' / 'report.json'
        with self.assertRaises(LabError) as raised:
            write_output(path, 'new', 'report')
        self.assertEqual(str(raised.exception), f'{path}: cannot write the report: No such file or directory')
        self.assertEqual(list(self.tmp.iterdir()), [])

    def test_a_path_below_a_regular_file_is_an_error_and_the_file_is_kept(self):
        (self.tmp / 'file').write_text('kept', encoding='utf-8')
        path = self.tmp / 'file' / 'report.json'
        with self.assertRaises(LabError) as raised:
            write_output(path, 'new', 'report')
        self.assertEqual(str(raised.exception), f'{path}: cannot write the report: Not a directory')
        self.assertEqual((self.tmp / 'file').read_text(encoding='utf-8'), 'kept')

    @unittest.skipIf(os.geteuid() == 0, 'root writes into any folder, so no folder is unwritable to this test')
    def test_an_unwritable_folder_is_an_error_and_the_file_is_kept(self):
        path = self.tmp / 'report.json'
        path.write_text('kept', encoding='utf-8')
        self.tmp.chmod(0o555)
        self.addCleanup(self.tmp.chmod, 0o755)
        with self.assertRaises(LabError) as raised:
            write_output(path, 'new', 'report')
        self.assertEqual(str(raised.exception), f'{path}: cannot write the report: Permission denied')
        self.assertEqual(path.read_text(encoding='utf-8'), 'kept')
        self.assertEqual(self.leftovers(), [])

    def test_text_that_is_not_unicode_writes_nothing(self):
        path = self.tmp / 'report.json'
        path.write_text('kept', encoding='utf-8')
        with self.assertRaises(UnicodeEncodeError):
            write_output(path, 'lone \ud800 surrogate', 'report')
        self.assertEqual(path.read_text(encoding='utf-8'), 'kept')
        self.assertEqual(self.leftovers(), [])


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


def memory_limit(size: int):
    """A preexec_fn that gives the child at most `size` bytes of address space."""
    return lambda: resource.setrlimit(resource.RLIMIT_AS, (size, size))


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

    def test_a_case_file_too_large_for_the_memory_is_one_line_not_a_memory_error_traceback(self):
        # Sparse files take no disk; the limit is the address space a user's shell may set (ulimit -v).
        for size, problem in ((3 * 10**9, 'is 3,000,000,000 bytes, more than the 1,000,000,000 the lab reads'),
                              (900 * 10**6, 'does not fit in the memory this process may use')):
            with self.subTest(size):
                huge = self.tmp / 'cases.json'
                with open(huge, 'wb') as file:
                    file.truncate(size)
                result = subprocess.run([sys.executable, 'evaluate.py', '--cases', str(huge)], cwd=HERE, timeout=60,
                                        capture_output=True, text=True, preexec_fn=memory_limit(2**30))
                self.assertEqual((result.returncode, result.stdout, result.stderr),
                                 (2, '', f'evaluate.py: {huge}: the case set {problem}\n'))

    def test_an_output_pipe_with_no_reader_is_refused_after_the_wait_and_nothing_is_left(self):
        fifo = self.tmp / 'report.json'
        os.mkfifo(fifo)
        with mock.patch.object(lab_files, 'PIPE_WAIT', 0.3), self.assertRaises(LabError) as raised:
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
        child = subprocess.run([sys.executable, '-c', 'import os, signal, sys; import lab_files; '
                                'lab_files.stage(sys.argv[1], b"half"); os.kill(os.getpid(), signal.SIGKILL)',
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
        name = f'.evaluation-result.json{lab_files.TEMPORARY}123-abcdefgh.tmp'
        for path in (name, f'docs/.locomo-sweep.png{lab_files.TEMPORARY}9-zz_0a1b2.tmp'):
            with self.subTest(path):
                self.assertEqual(subprocess.run(['git', 'check-ignore', '-q', '--no-index', path], cwd=HERE)
                                 .returncode, 0)

    def test_sigterm_during_a_write_removes_the_temporary_file_and_says_what_the_file_holds(self):
        target = self.tmp / 'report.json'
        target.write_text('old', encoding='utf-8')
        # A real SIGTERM, sent by the child to itself between staging and renaming.
        child = subprocess.run([sys.executable, '-c', 'import os, signal, sys; from pathlib import Path; import common, lab_files\n'
                                'real = os.replace\n'
                                'def replace(*names):\n    os.kill(os.getpid(), signal.SIGTERM); real(*names)\n'
                                'os.replace = replace\n'
                                'common.run(lambda argv: lab_files.write_output(Path(argv[0]), "new", "report"), '
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


class CheckFieldsTest(unittest.TestCase):
    def refusal(self, record, spec, **options) -> str:
        with self.assertRaises(LabError) as raised:
            lab_files.check_fields('x.json: case a', record, spec, **options)
        return str(raised.exception)

    def test_a_missing_and_an_extra_key_are_named_in_the_fields_order_and_sorted(self):
        self.assertEqual(self.refusal({'z': 1, 'a': 1, 'c': 2}, dict.fromkeys('cba', lab_files.ANY)),
                         "x.json: case a: must be an object with exactly the fields ['c', 'b', 'a']; missing ['b'], "
                         "unexpected ['z']")

    def test_exactly_the_fields_in_another_order_is_the_record_itself(self):
        record = {'b': 1, 'a': 2}
        self.assertIs(lab_files.check_fields('x', record, dict.fromkeys('ab', lab_files.COUNT)), record)

    def test_a_value_that_is_no_object_is_named_as_json(self):
        self.assertEqual(self.refusal([1, True], {'a': lab_files.ANY}, advice='fix it'),
                         "x.json: case a: must be an object with exactly the fields ['a'], got [1, true]; fix it")

    def test_an_optional_field_may_be_absent_but_not_wrong(self):
        spec = {'a': lab_files.TEXT, 'b': lab_files.POSITIVE}
        self.assertEqual(lab_files.check_fields('x', {'a': 'y'}, spec, optional=['b']), {'a': 'y'})
        self.assertEqual(self.refusal({'a': 'y', 'b': 0}, spec, optional=['b']),
                         'x.json: case a: field b must be a positive integer, got 0')
        self.assertEqual(self.refusal({}, spec, optional=['b']), "x.json: case a: must be an object with exactly the "
                         "fields ['a', 'b'] (b optional); missing ['a'], unexpected []")

    def test_a_nested_field_is_named_by_its_path_and_an_open_record_may_hold_more(self):
        spec = {'pin': {'size': lab_files.INTEGER, 'sha256': lab_files.SHA256}}
        self.assertEqual(self.refusal({'pin': {'size': 3, 'sha256': 'A' * 64}, 'more': 1}, spec, exact=False),
                         f'x.json: case a: field pin.sha256 must be 64 lowercase hex digits, got "{"A" * 36}...')
        self.assertEqual(self.refusal({'pin': {'size': 3}}, spec, exact=False),
                         'x.json: case a: missing field pin.sha256')
        self.assertEqual(self.refusal({}, spec, exact=False), 'x.json: case a: missing field pin')

    def test_the_kinds_refuse_what_json_would_confuse(self):
        for kind, value in ((lab_files.NUMBER, True), (lab_files.COUNT, 1.0), (lab_files.one_of((1, 2)), 1.0),
                            (lab_files.one_of((1, 2)), True), (lab_files.TEXT, ' '), (lab_files.at_most(3), 4),
                            (lab_files.list_of(lab_files.STRING, 'distinct', distinct=True), ['a', 'a']),
                            (lab_files.or_null(lab_files.STRING), 0)):
            with self.subTest(kind=kind[1], value=value):
                self.assertFalse(kind[0](value))
        self.assertTrue(lab_files.or_null(lab_files.STRING)[0](None))

    def test_the_error_is_the_callers_kind(self):
        with self.assertRaises(KeyError):
            lab_files.check_fields('x', {'a': 1}, {'a': lab_files.TEXT}, error=KeyError)


class ReadJsonTest(TempFolderTest):
    def test_a_key_given_twice_is_refused_naming_it_instead_of_the_last_value_winning(self):
        # With the last value winning, this case's stale fact would silently stop being graded.
        path = self.tmp / 'cases.json'
        path.write_text('[{"id": "x", "stale": ["We will use MySQL"], "stale": []}]', encoding='utf-8')
        with self.assertRaises(LabError) as raised:
            load_cases(path)
        self.assertEqual(str(raised.exception), f"{path}: key 'stale' appears twice in one object; a case set names "
                                                'each key once')

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


if __name__ == '__main__':
    unittest.main()
