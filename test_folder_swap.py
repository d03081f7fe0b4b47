"""Tests for folder_swap.py: each test is named after the failure it pins.

Run: .venv/bin/python -m unittest -v test_folder_swap.py   (about a second; everything happens in a temp folder)

test_prepare.py's SwapTest fails or interrupts every step of a whole prepare.py run; these tests pin what that
loop cannot reach: a swap whose undo fails too, runs killed outright, parent folders a run made, and the held
signals themselves.
"""

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path
from unittest import mock

import folder_swap


def fill_with(files: dict[str, bytes]):
    def fill(workdir: Path, new: Path) -> None:
        for name, data in files.items():
            (new / name).write_bytes(data)
    return fill


def contents(folder: Path) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in folder.iterdir()}


class SwapFolderTest(unittest.TestCase):
    def setUp(self) -> None:
        temp = tempfile.TemporaryDirectory()
        self.addCleanup(temp.cleanup)
        self.tmp = Path(temp.name)
        self.target = self.tmp / "prepared"
        self.said: list[str] = []

    def test_new_folder_replaces_the_old_one_whole_with_its_mode(self) -> None:
        self.target.mkdir()
        (self.target / "stale.json").write_bytes(b"old")
        self.target.chmod(0o751)
        folder_swap.replace(self.target, fill_with({"tokenizer.json": b"new"}), self.said.append)
        self.assertEqual(contents(self.target), {"tokenizer.json": b"new"})
        self.assertEqual(self.target.stat().st_mode & 0o777, 0o751)
        self.assertEqual(os.listdir(self.tmp), ["prepared"])
        self.assertEqual(self.said, [])

    def test_failed_swap_whose_undo_fails_too_says_where_the_old_folder_is_and_keeps_it(self) -> None:
        self.target.mkdir()
        (self.target / "tokenizer.json").write_bytes(b"old")
        real_rename = os.rename
        calls = []

        def rename(src, dst):
            calls.append((Path(src).name, Path(dst).name))
            if len(calls) >= 2:  # the rename into place, and the one putting the old folder back
                raise OSError(5, "Input/output error")
            real_rename(src, dst)

        with mock.patch.object(os, "rename", rename), self.assertRaises(folder_swap.SwapError) as raised:
            folder_swap.replace(self.target, fill_with({"tokenizer.json": b"new"}), self.said.append)
        self.assertEqual(calls, [("prepared", "old"), ("new", "prepared"), ("old", "prepared")])
        (workdir,) = self.tmp.glob(".prepared.swap-*")
        self.assertEqual(str(raised.exception),
                         f"{self.target} could not be put back after a failed swap (Input/output error): the previous"
                         f" folder is now {workdir / 'old'}; move it back with mv")
        self.assertEqual(contents(workdir / "old"), {"tokenizer.json": b"old"})  # kept, not removed

    def test_failed_removal_names_the_folder_left_behind(self) -> None:
        with mock.patch.object(shutil, "rmtree", side_effect=PermissionError(13, "Permission denied", "x")):
            folder_swap.replace(self.target, fill_with({"tokenizer.json": b"new"}), self.said.append)
        (workdir,) = self.tmp.glob(".prepared.swap-*")
        self.assertEqual(self.said, [f"could not remove {workdir} (Permission denied: x); remove it yourself"])
        self.assertEqual(folder_swap.left_by_this_run(self.target), [workdir])
        self.assertEqual(contents(self.target), {"tokenizer.json": b"new"})

    def test_failed_fill_takes_back_the_parent_folders_it_made(self) -> None:
        target = self.tmp / "a" / "b" / "prepared"

        def fail(workdir: Path, new: Path) -> None:
            raise OSError(28, "No space left on device")

        with self.assertRaises(OSError):
            folder_swap.replace(target, fail, self.said.append)
        self.assertEqual(os.listdir(self.tmp), [])

    def test_file_where_the_folder_should_be_is_refused_and_kept(self) -> None:
        self.target.write_bytes(b"a file")
        with self.assertRaises(folder_swap.SwapError) as raised:
            folder_swap.replace(self.target, fill_with({}), self.said.append)
        self.assertEqual(str(raised.exception), f"{self.target} is not a folder")
        self.assertEqual(self.target.read_bytes(), b"a file")

    def test_folder_left_by_a_killed_run_is_removed_a_running_ones_kept_and_a_stranded_old_folder_put_back(self):
        dead = subprocess.Popen([sys.executable, "-c", "pass"])
        dead.wait()
        prefix = folder_swap.temporary_prefix(self.target)
        abandoned, alive = self.tmp / f"{prefix}{dead.pid}-abc", self.tmp / f"{prefix}{os.getpid()}-def"
        (abandoned / "old").mkdir(parents=True)  # killed between its two renames: the target is missing
        (abandoned / "old" / "tokenizer.json").write_bytes(b"old")
        (alive / "new").mkdir(parents=True)
        folder_swap.recover_abandoned(self.target, self.said.append)
        self.assertEqual(sorted(os.listdir(self.tmp)), sorted([alive.name, "prepared"]))
        self.assertEqual(contents(self.target), {"tokenizer.json": b"old"})
        self.assertEqual(self.said, [
            f"put {self.target} back from {abandoned / 'old'}, where a run stopped between two renames left it",
            f"removed {abandoned.name}, left in {self.tmp} by an earlier run that was stopped"])

    def test_signal_during_the_held_block_is_noted_not_raised_and_the_handler_comes_back(self) -> None:
        def not_held(signum, frame):  # what SIGTERM would do unheld, without ending the test run
            raise AssertionError("SIGTERM was acted on inside the held block")

        for signum, handler in ((signal.SIGINT, signal.default_int_handler), (signal.SIGTERM, not_held)):
            self.addCleanup(signal.signal, signum, signal.signal(signum, handler))
        with folder_swap.signals_held() as arrived:
            os.kill(os.getpid(), signal.SIGINT)
            os.kill(os.getpid(), signal.SIGTERM)
        self.assertEqual(arrived, [signal.SIGINT, signal.SIGTERM])
        self.assertIs(signal.getsignal(signal.SIGINT), signal.default_int_handler)
        with self.assertRaises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)


if __name__ == "__main__":
    unittest.main()
