"""Tests for prepare.py's folder swap: a run stopped or failing at any step leaves the prepared folder as it was,
or complete and new, and records what it prepared.

Run: .venv/bin/python -m unittest -v test_prepare_swap.py

prepare.py runs in this process, its Hub fetch replaced by local files; each filesystem step is counted, and one
fails or is followed by SIGINT. Every file lives in a temp folder.
"""
import contextlib
import io
import os
from pathlib import Path
import shutil
import signal
import sys
import unittest
from unittest import mock

import huggingface_hub

import common
import prepare
from lab_files import file_identity
from prepared_folder import check_prepared
from test_support_prepare import GOOD_HUB_FILES, HubTest, snapshot, write_prepared_dest


class StepInjector:
    """Counts the filesystem steps of a prepare.py run, and at step `at` (from 1) either fails with "No space
    left on device" instead of taking it, or takes it and then gets SIGINT, as Ctrl-C would deliver it: the
    interrupt lands between that step and the next."""

    STEPS = ((os, 'mkdir'), (os, 'replace'), (os, 'rename'), (os, 'chmod'), (shutil, 'rmtree'), (Path, 'write_text'))

    def __init__(self, at: int, kind: str):
        self.at, self.kind, self.taken, self.hit = at, kind, [], None

    def __enter__(self) -> 'StepInjector':
        self.stack = contextlib.ExitStack()
        for owner, name in self.STEPS:
            self.stack.enter_context(mock.patch.object(owner, name, self.wrap(name, getattr(owner, name))))
        return self

    def __exit__(self, *exc_info) -> None:
        self.stack.close()

    def wrap(self, name: str, real):
        def step(*args, **kwargs):
            self.taken.append(name)
            if len(self.taken) != self.at:
                return real(*args, **kwargs)
            self.hit = name
            if self.kind == 'failure':
                raise OSError(28, 'No space left on device')
            result = real(*args, **kwargs)
            os.kill(os.getpid(), signal.SIGINT)
            return result
        return step


class SwapTest(HubTest):
    """A run stopped or failing between any two steps of building the new folder and swapping it in leaves dest
    byte for byte as it was, or (once the swap is done) complete and new; never a mix, and no temporary folder
    unless the last line names it. prepare.py runs in this process, its Hub fetch replaced by local files."""

    # The steps of a run, worked out from the design: make the temporary folder and new/ in it, move the two
    # files in, write prepared.json, copy the old folder's mode, rename the old folder away and the new one into
    # place, remove the temporary folder. Without an old folder there is no mode to copy and nothing to rename away.
    STEPS = {'folder': ['mkdir', 'mkdir', 'replace', 'replace', 'write_text', 'chmod', 'rename', 'rename', 'rmtree'],
             'absent': ['mkdir', 'mkdir', 'replace', 'replace', 'write_text', 'rename', 'rmtree']}
    STEPS['symlink'] = STEPS['folder']

    def setUp(self) -> None:
        super().setUp()
        for signum in (signal.SIGINT, signal.SIGTERM):  # common.run makes SIGTERM act as Ctrl-C
            self.addCleanup(signal.signal, signum, signal.signal(signum, signal.default_int_handler))

    def download(self, repo: str, name: str, cache_dir: Path, **kwargs) -> str:
        """hf_hub_download's stand-in: the file, written beside the cache folder it was given (in workdir)."""
        (path := cache_dir.parent / name).write_bytes(GOOD_HUB_FILES[name])
        return str(path)

    def layout(self, kind: str) -> Path:
        """Make dest as kind says; return the folder a swap replaces (a symlink's target)."""
        for path in (self.dest, self.tmp / 'real', *self.tmp.glob('.prepared.swap-*')):  # the last run's
            if path.is_symlink() or path.is_file():
                path.unlink()
            elif path.exists():
                shutil.rmtree(path)
        target = self.tmp / 'real' / 'prepared' if kind == 'symlink' else self.dest
        if kind != 'absent':  # an old folder prepared for another manifest, with a mode of its own
            write_prepared_dest(target, '0' * 64)
            target.chmod(0o750)
        if kind == 'symlink':
            self.dest.symlink_to(target)
        return target

    def run_main(self, injector: StepInjector) -> tuple[int, str, str]:
        """prepare.py's entry point, run as the script runs it, in this process."""
        argv = ['prepare.py', '--manifest', str(self.tmp / 'manifest.json'), '--source', 'hub']
        out, err = io.StringIO(), io.StringIO()
        with contextlib.ExitStack() as stack:
            stack.enter_context(mock.patch.object(huggingface_hub, 'get_hf_file_metadata'))
            stack.enter_context(mock.patch.object(huggingface_hub, 'hf_hub_download', side_effect=self.download))
            stack.enter_context(mock.patch.object(sys, 'argv', argv))
            stack.enter_context(mock.patch.object(prepare, 'PREPARED', self.dest))  # as CONTEXT_LAB_PREPARED would
            stack.enter_context(contextlib.redirect_stdout(out))
            stack.enter_context(contextlib.redirect_stderr(err))
            exit = stack.enter_context(self.assertRaises(SystemExit))
            stack.enter_context(injector)
            common.run(prepare.main)
        return exit.exception.code, out.getvalue(), err.getvalue()

    def test_uninterrupted_run_takes_the_steps_worked_out_by_hand_and_keeps_the_folders_mode(self) -> None:
        for kind, steps in self.STEPS.items():
            with self.subTest(dest=kind):
                target = self.layout(kind)
                injector = StepInjector(0, 'failure')
                code, _, err = self.run_main(injector)
                self.assertEqual((code, injector.taken), (0, steps), err)
                if kind != 'absent':
                    self.assertEqual(target.stat().st_mode & 0o777, 0o750)

    def test_interrupt_or_failure_at_any_step_leaves_dest_as_it_was_or_complete(self) -> None:
        runs = 0
        for kind, steps in self.STEPS.items():
            for failing in ('interrupt', 'failure'):
                for at in range(1, len(steps) + 1):
                    with self.subTest(dest=kind, step=at, what=failing):
                        self.check_one_run(kind, failing, at)
                        runs += 1
        self.assertEqual(runs, 2 * (9 + 9 + 7))

    def check_one_run(self, kind: str, failing: str, at: int) -> None:
        target = self.layout(kind)
        before, before_identity = snapshot(target), file_identity(target)
        injector = StepInjector(at, failing)
        code, out, err = self.run_main(injector)
        last = err.splitlines()[-1] if err else ''
        self.assertEqual(injector.hit, self.STEPS[kind][at - 1])
        self.assertEqual(self.dest.is_symlink(), kind == 'symlink')
        # From the first rename to the end, signals are held: an interrupt there lets the run finish. A failure
        # there is undone, except in the last step, the removal, which comes after the swap.
        first_rename = self.STEPS[kind].index('rename') + 1
        finishes = at >= first_rename if failing == 'interrupt' else injector.hit == 'rmtree'
        self.assertEqual(code == 0, finishes, err)
        if code == 0:  # dest is the complete new folder
            self.assertEqual(check_prepared(self.dest, self.manifest, self.manifest_sha, 'hub'), ('hub', ''))
            self.assertNotEqual(file_identity(target), before_identity)
            self.assertTrue(out.startswith('prepared from hub in '), out)
        else:
            self.assertEqual(snapshot(target), before)
            self.assertEqual(file_identity(target), before_identity)
            self.assertEqual(out, '')
            if failing == 'interrupt':
                self.assertEqual((code, last), (130, f'prepare.py: interrupted; {self.dest} is as it was and no'
                                                      ' temporary files are left'))
            else:
                self.assertEqual(code, 2, err)
                self.assertTrue(last.startswith(f'prepare.py: error: cannot prepare {self.dest} ([Errno 28] No space'
                                                ' left on device)'), last)
        left = sorted(target.parent.glob('.prepared.swap-*'))
        if injector.hit == 'rmtree' and failing == 'failure':  # the removal failed: the message names what stays
            self.assertEqual(len(left), 1)
            self.assertIn(f'prepare.py: could not remove {left[0]} ([Errno 28] No space left on device); remove it '
                          'yourself', err)
            shutil.rmtree(left[0])
        else:
            self.assertEqual(left, [])
        self.assertNotIn('Traceback', err)


if __name__ == '__main__':
    unittest.main()
