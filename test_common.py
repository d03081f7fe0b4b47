"""Tests for lab_files.py: writing a file never destroys what the path is.

    .venv/bin/python -m unittest -v test_lab_files.py   (about 1 s)

Each test is named after the failure it pins: a symlink (direct, relative, a
chain, dangling) turned into a regular file, a named pipe or device replaced by
a regular file, a directory or an unwritable folder written over, a file's
permissions lost. Everything is written in a temporary folder, the device too: a
/dev/null-like node made there (skipped where no device can be made), never the
machine's /dev/null, which a regression would replace.
"""
import os
from pathlib import Path
import stat
import subprocess
import sys
import tempfile
import threading
import unittest

from lab_files import NEW_FILE_MODE, path_text, write_atomically

HERE = Path(__file__).resolve().parent


class WriteTest(unittest.TestCase):
    def setUp(self):
        temp = tempfile.TemporaryDirectory()
        self.addCleanup(temp.cleanup)
        self.tmp = Path(temp.name)

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



class EvaluateOutputTest(unittest.TestCase):
    """End to end: `evaluate.py --output` through a symlink and into a named pipe, as a user would run it."""

    def setUp(self):
        temp = tempfile.TemporaryDirectory()
        self.addCleanup(temp.cleanup)
        self.tmp = Path(temp.name)

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


if __name__ == '__main__':
    unittest.main()
