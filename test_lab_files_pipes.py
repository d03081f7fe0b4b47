"""Tests for lab_files with named pipes and devices: as input refused at once, as output waited for a bounded
time; and evaluate.py's --output through a symlink and into a named pipe, end to end.

    .venv/bin/python -m unittest -v test_lab_files_pipes   (about 7 s)

Each test is named after the failure it pins. Every pipe and file is made in a temporary folder; /dev/zero is
only read.
"""
import os
from pathlib import Path
import resource
import shlex
import stat
import subprocess
import sys
import threading
import unittest
from unittest import mock

from common import LabError
import lab_files
from lab_files import write_output
from test_support_fixtures import HERE, TempFolderTest


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
        reader = subprocess.Popen(['sh', '-c',
                                   f'sleep 0.5; cat {shlex.quote(str(fifo))} > {shlex.quote(str(received))}'])
        write_output(fifo, 'x' * 200_000, 'report')  # more than a pipe holds: the reader reads as it is written
        self.assertEqual(reader.wait(timeout=30), 0)
        self.assertEqual(received.read_bytes(), b'x' * 200_000)


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


if __name__ == '__main__':
    unittest.main()
