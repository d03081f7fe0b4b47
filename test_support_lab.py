"""Test support: the lab's own files as git tracks them, for the tests that check every script or test file.

Imported by test files, never run on its own.
"""
from pathlib import Path
import subprocess

from test_support_fixtures import HERE

SCRIPT_TIMEOUT = 120  # seconds for a child process a test starts: git here, a lab script in test_cli


def tracked(*patterns: str) -> list[Path]:
    """The lab's own files in its top folder that match the patterns: what git tracks there, as it is now on disk.
    Outside a git checkout, every matching file (a rules file there still holds no __main__ block)."""
    try:
        listed = subprocess.run(['git', 'ls-files', '-z', '--', *patterns], cwd=HERE, capture_output=True,
                                check=True, timeout=SCRIPT_TIMEOUT).stdout.decode().split('\0')
    except (OSError, subprocess.CalledProcessError):
        listed = [path.name for pattern in patterns for path in HERE.glob(pattern)]
    return sorted(HERE / name for name in set(listed) if name and '/' not in name and (HERE / name).is_file())
