"""Test support, no tests: running a script as a user runs it, in this process or in one of its own.

run_command runs a script's main through common.run, so a LabError is the one line a user reads and Ctrl-C exit
130; in_process shapes that as subprocess.run's result. evaluate_py starts a real process, for what only a process
shows: signals, pipes, encodings.
"""
import contextlib
import io
import os
import signal
import subprocess
import sys
import tempfile
from unittest import mock

import common
from test_support_oracle import HERE



@contextlib.contextmanager
def ctrl_c_reaches_children():
    """Start scripts inside this to send them Ctrl-C: a suite run as a background job (`... &`) ignores SIGINT,
    and so would every program it starts, while a handled signal starts as the default in a new program."""
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, before)


def run_command(main, argv: list[str], script: str) -> tuple[int, str, str]:
    """main run through common.run as `.venv/bin/python script argv` runs it: (exit status, stdout, stderr).

    A LabError is then the one line a user reads, and Ctrl-C exit 130 with the state the main reported. stderr
    also holds what reached file descriptor 2 meanwhile: what a rules process, which inherits it, wrote there.
    """
    out, err = io.StringIO(), io.StringIO()
    with (tempfile.TemporaryFile() as raw, mock.patch.object(sys, 'argv', [script, *argv]),
          mock.patch.object(signal, 'signal'), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err)):
        saved = os.dup(2)
        os.dup2(raw.fileno(), 2)
        try:
            common.run(main)
            raise AssertionError('common.run returned instead of exiting')
        except SystemExit as exit:  # run always ends in sys.exit
            code = exit.code
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        raw.seek(0)
        return code, out.getvalue(), err.getvalue() + raw.read().decode('utf-8', 'replace')


def in_process(script, *argv: str) -> subprocess.CompletedProcess:
    """`.venv/bin/python SCRIPT.py argv` for a script module, run by run_command in this process, so the counter is
    loaded once for the suite (about 2 s a run saved), shaped as subprocess.run's result."""
    name = f'{script.__name__}.py'
    return subprocess.CompletedProcess([name, *argv], *run_command(script.main, list(argv), name))


def lab_main(script, *argv: str) -> tuple[int, str, str]:
    """(exit status, stdout, stderr) of a script run in this process (in_process), its rules process real."""
    result = in_process(script, *argv)
    return result.returncode, result.stdout, result.stderr


def run_answer_check(argv: list[str], **options) -> tuple[int, str, str]:
    """`answer_check.py argv` with main's keyword options (its files, its client): (exit status, stdout, stderr)."""
    import answer_check  # here, not at the top: the oracle's users need no strategies

    return run_command(lambda args: answer_check.main(args, **options), argv, 'answer_check.py')


def evaluate_py(*args: str) -> subprocess.CompletedProcess:
    """`evaluate.py ARGS` in a process of its own (for what only a process shows: signals, pipes, encodings),
    reading the prepared folder this process reads."""
    return subprocess.run([sys.executable, 'evaluate.py', *args], cwd=HERE, capture_output=True, text=True,
                          timeout=300)
