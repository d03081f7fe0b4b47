"""What every script of the lab does at its entry point: check the locked packages, then run its main.

    .venv/bin/python cli.py   # does this interpreter have the packages the scripts need, at their pinned versions?

A script opens with

    import cli
    cli.require_packages(__name__)   # before it imports any locked package

and ends with

    if __name__ == '__main__':
        cli.run(main, 'nothing was written')

require_packages turns "this interpreter lacks a locked package" (a script
started with a Python other than the lab's .venv) into one line on stderr that
names the package and the command that installs the lock, and exit status 2.
Imported as a module instead of run, it raises ModuleNotFoundError with that
line, so a caller sees the same advice.

run passes the arguments to main and exits with what it returns. Ctrl-C is one
line on stderr and exit 130. A reader that stops reading early
(`.venv/bin/python evaluate.py | head -1`) ends the script quietly with exit
141, what a shell reports for a program ended by SIGPIPE, not with a
BrokenPipeError traceback, and not with a code a script also uses for a result
(evaluate.py --compare exits 1 for "something changed").

It writes nothing and changes nothing about what the scripts compute.
"""
from collections.abc import Callable
from functools import lru_cache
import importlib.metadata
import os
from pathlib import Path
import re
import shlex
import signal
import sys

HERE = Path(__file__).resolve().parent
REQUIREMENTS = HERE / 'requirements.txt'  # the direct pins; requirements.lock holds them with every hash
INSTALL = 'python3 -m venv .venv && .venv/bin/python -m pip install --require-hashes -r requirements.lock'
TESTS_ONLY = frozenset({'hypothesis'})  # pinned for the test suite; no script imports it, so none asks for it
EXIT_MISSING = 2  # as for any other error the user can act on
# A line of requirements.txt: a distribution name, optional extras, then what it asks of the version.
REQUIREMENT = re.compile(r'(?P<name>[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?)\s*(?:\[[^\]]*\])?'
                         r'\s*(?P<rest>(?:[=<>!~;].*)?)')
EXACT_PIN = re.compile(r'==\s*(?P<version>[^\s,;*]+)\s*')  # ==1.2.3, and nothing else, pins one version
HELP_OPTIONS = frozenset({'-h', '--help'})  # answered even without the packages, as argparse spells them
EXIT_INTERRUPTED = 130  # 128 + SIGINT, what a shell reports for Ctrl-C
EXIT_READER_GONE = 128 + signal.SIGPIPE  # 141: stdout was closed before everything was written


class RequirementsError(ValueError):
    """requirements.txt cannot be read, or holds a line that names no package; the message says which."""


def pins(text: str) -> dict[str, str | None]:
    """The distributions a requirements file names, with the version each pins (None: any version will do).

    pins('# comment\ntokenizers==0.23.3   # counts tokens\nnumpy>=2\n') -> {'tokenizers': '0.23.3', 'numpy': None}
    A line that pins nothing exactly (numpy>=2, numpy) is checked as far as it can be: present at any version.
    A line that names no package (-r other.txt, a URL) raises RequirementsError naming the line.
    """
    found = {}
    for number, line in enumerate(text.splitlines(), 1):
        line = line.split('#', 1)[0].strip()
        if not line:
            continue
        match = REQUIREMENT.fullmatch(line)
        if match is None:
            raise RequirementsError(f'line {number}: {line!r} is not a requirement; expected name==version')
        exact = EXACT_PIN.fullmatch(match['rest'])
        found[match['name']] = exact['version'] if exact else None
    return found


@lru_cache(maxsize=1)
def missing_packages() -> tuple[str, ...]:
    """The pins the scripts need that this interpreter lacks or holds at another version (checked once).

    A missing tokenizers gives 'tokenizers==0.23.3'; an installed 0.22.0 gives 'tokenizers==0.23.3 (it has
    0.22.0)': another version may count differently, so it is not the locked package. A missing package
    pinned at no exact version gives 'numpy (any version)'.
    """
    try:
        text = REQUIREMENTS.read_text(encoding='utf-8')
    except (OSError, UnicodeDecodeError) as error:
        raise RequirementsError(f'{REQUIREMENTS}: cannot be read ({getattr(error, "strerror", None) or error}); '
                                'restore it with git checkout') from None
    try:
        pinned = pins(text)
    except RequirementsError as error:
        raise RequirementsError(f'{REQUIREMENTS}: {error}') from None
    missing = []
    for name, version in pinned.items():
        if name in TESTS_ONLY:
            continue
        wanted = f'{name}=={version}' if version else f'{name} (any version)'
        try:
            installed = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            missing.append(wanted)
            continue
        if version and installed != version:
            missing.append(f'{wanted} (it has {installed})')
    return tuple(missing)


def python_command() -> str:
    """How a message should tell the user to start Python: the lab's own .venv/bin/python when that is the
    interpreter running (so the advice works pasted into a new terminal in the lab's folder), else the full
    path of the interpreter running, quoted for a shell: a bare `python` may not exist in a new terminal.
    """
    executable = Path(sys.executable)  # not resolved: .venv/bin/python is a link to the base interpreter
    return str(executable.relative_to(HERE)) if executable.is_relative_to(HERE) else shlex.quote(sys.executable)


def script_name() -> str:
    return Path(sys.argv[0]).name or 'python'


def require_packages(module_name: str) -> None:
    """Stop with one line if a locked package is missing: exit 2 when run as a script, else raise.

    A script asked for -h or --help still answers, with its docstring (its options need the packages to be
    listed) and the same advice, and exit 0: reading what a script does should not need the set-up.
    """
    try:
        missing = missing_packages()
    except RequirementsError as error:
        if module_name != '__main__':
            raise
        print(f'{script_name()}: {error}', file=sys.stderr)
        sys.exit(EXIT_MISSING)
    if not missing:
        return
    what = f"the locked package{'s' if len(missing) > 1 else ''} {', '.join(missing)}"
    advice = f'{sys.executable} lacks {what}; in {HERE} run `{INSTALL}` and start the scripts with .venv/bin/python'
    if module_name != '__main__':
        raise ModuleNotFoundError(advice, name=missing[0].split('==', 1)[0])
    if HELP_OPTIONS & set(sys.argv[1:]):
        print(f"{(sys.modules['__main__'].__doc__ or '').strip()}\n\n{script_name()}: {advice}; "
              'then --help lists every option')
        sys.exit(0)
    print(f'{script_name()}: {advice}', file=sys.stderr)
    sys.exit(EXIT_MISSING)


def run(main: Callable[[list[str]], int], interrupted: str = '') -> None:
    """Exit with main(arguments); Ctrl-C and a closed stdout end it without a traceback.

    interrupted says, after 'interrupted; ', what state a Ctrl-C leaves behind. A main whose state changes
    as it goes (a file written before the report is printed) re-raises KeyboardInterrupt with a message
    saying the state at that point, which is then said instead.
    """
    try:
        status = main(sys.argv[1:])
        sys.stdout.flush()  # a reader that left shows up here at the latest, while it can still be handled
    except KeyboardInterrupt as stop:
        state = stop.args[0] if stop.args and isinstance(stop.args[0], str) else interrupted
        print(f"{script_name()}: interrupted{'; ' + state if state else ''}", file=sys.stderr)
        sys.exit(EXIT_INTERRUPTED)
    except BrokenPipeError:
        # Python flushes stdout once more at exit, which would fail the same way; the signal module's
        # documentation advises pointing stdout at devnull first.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(EXIT_READER_GONE)
    sys.exit(status)


def module_main(description: str, command: str) -> Callable[[list[str]], int]:
    """The main of a module with no command of its own: `--help` says what it is, and what runs it.

    module_main('The exact best selection.', '.venv/bin/python evaluate.py') run with [] prints
    '<module>.py is run by another script: .venv/bin/python evaluate.py'.
    """
    def main(argv: list[str]) -> int:
        import argparse

        argparse.ArgumentParser(prog=script_name(), description=description,
                                epilog=f'Run it with: {command}').parse_args(argv)
        print(f'{script_name()} is run by another script: {command}')
        return 0
    return main


def main(argv: list[str]) -> int:
    import argparse

    argparse.ArgumentParser(
        prog='cli.py', description='Say whether this interpreter has the packages the scripts need, at the versions '
                                   'requirements.txt pins; '
                                   'the lab\'s scripts make the same check when they start.').parse_args(argv)
    require_packages('__main__')
    print(f'{sys.executable} has every package the scripts need, at the versions {REQUIREMENTS.name} pins')
    return 0


if __name__ == '__main__':
    run(main)
