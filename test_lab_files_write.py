"""Tests for lab_files.write_output: an output written whole, where the path leads, or not at all.

    .venv/bin/python -m unittest -v test_lab_files_write

Each test is named after the failure it pins: a symlink (direct, relative, a chain, dangling) turned into a regular
file, a named pipe or device replaced by a regular file, a directory or an unwritable folder written over, a file's
permissions or owner lost, a first output written where the second cannot be, the temporary file of a writer
killed outright left behind. Everything is written in a temporary folder, the device too: a /dev/null-like node
made there (skipped where no device can be made), never the machine's /dev/null, which a regression would replace.
(Replacing a folder whole: test_prepared_folder.py.)
"""
import os
from pathlib import Path
import signal
import stat
import subprocess
import sys
import threading
import unittest

from common import LabError
import lab_files
from lab_files import NEW_FILE_MODE, write_output
from test_support_fixtures import HERE, TempFolderTest


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
        child = subprocess.run([sys.executable, '-c', 'import os, signal, sys; from pathlib import Path; '
                                'import common, lab_files\n'
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


if __name__ == '__main__':
    unittest.main()
