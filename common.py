"""A script's entry point and its shared options: the one way every script starts, fails and stops.

    import common
    common.run(main)                 # checks the locked packages; a LabError is one line and exit 2, Ctrl-C 130
    common.add_input_options(parser) # --cases FILE and --rules FILE.py, as every script that runs rules spells them
    common.tell('fetched them', 'prepare.py')   # 'prepare.py: fetched them' on stderr: the one way to tell the user

Files (reading JSON, writing outputs whole) are lab_files.py, text for people text.py, the lab's shapes shapes.py.
Standard library only. Importing it checks nothing (a script that starts checks its packages) and writes nothing.
"""
from collections.abc import Callable
import importlib.metadata
import os
from pathlib import Path
import re
import shlex
import signal
import sys

from text import printable

HERE = Path(__file__).resolve().parent
REQUIREMENTS = HERE / 'requirements.txt'  # the direct pins; requirements.lock holds them with every hash
INSTALL = 'python3 -m venv .venv && .venv/bin/python -m pip install --require-hashes -r requirements.lock'
TESTS_ONLY = frozenset({'hypothesis'})  # pinned for the test suite; no script imports it, so none asks for it
# A line of requirements.txt: a distribution name, optional extras, what it asks of the version (==1.2.3 pins it).
REQUIREMENT = re.compile(r'(?P<name>[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?)\s*(?:\[[^\]]*\])?'
                         r'\s*(?:==\s*(?P<version>[^\s,;*]+)\s*|[=<>!~;].*|)')
MESSAGE_CHARS = 8000  # an error line is cut to this length: a file's or a rule's text can be megabytes
DEFAULT_CASES = HERE / 'cases.json'  # the lab's twelve cases, every script's default


class LabError(Exception):
    """A mistake the user can fix; the message names the file, case or field. `run` prints it in one line."""


def requirement_pins(text: str) -> dict[str, str | None]:
    """The distributions a requirements file names, with the version each pins (None: any version will do):
    requirement_pins('tokenizers==0.23.3  # counts tokens\\nnumpy>=2\\n') -> {'tokenizers': '0.23.3', 'numpy': None}"""
    found = {}
    for number, line in enumerate(text.splitlines(), 1):
        if not (line := line.split('#', 1)[0].strip()):
            continue
        if (match := REQUIREMENT.fullmatch(line)) is None:
            raise LabError(f'{REQUIREMENTS}: line {number}: {line!r} is not a requirement; expected name==version')
        found[match['name']] = match['version']
    return found


def missing_packages() -> list[str]:
    """Pins this interpreter lacks or holds at another version, which may count differently:
    ['tokenizers==0.23.3 (it has 0.22.0)']."""
    try:
        text = REQUIREMENTS.read_text(encoding='utf-8')
    except (OSError, UnicodeDecodeError) as error:
        raise LabError(f'{REQUIREMENTS}: cannot be read ({getattr(error, "strerror", None) or error}); '
                       'restore it with git checkout') from None
    missing = []
    for name, version in requirement_pins(text).items():
        try:
            installed = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            installed = None
        if name not in TESTS_ONLY and (installed is None or version and installed != version):
            wanted = f'{name}=={version}' if version else f'{name} (any version)'
            missing.append(wanted + (f' (it has {installed})' if installed else ''))
    return missing


def python_command() -> str:
    """How advice names Python: .venv/bin/python when that is running, else this interpreter's full path."""
    executable = Path(sys.executable)  # not resolved: .venv/bin/python is a link to the base interpreter
    return str(executable.relative_to(HERE)) if executable.is_relative_to(HERE) else shlex.quote(sys.executable)


def cut(line: str, most: int = MESSAGE_CHARS) -> str:
    """A line of at most about `most` characters that says what it left out: cut('x' * 8500) -> 7,970 x's, then
    '… (530 more characters)'."""
    kept = most - 30  # room for the note
    return line if len(line) <= most else f'{line[:kept]}… ({len(line) - kept:,} more characters)'


def tell(line: str, script: str = '') -> None:
    """Tell the user one line on stderr, after 'script: ' when a script is named: the one way the lab does. Flushed,
    since a server's or pip's output may interleave with it."""
    print(f'{script}: {line}' if script else line, file=sys.stderr, flush=True)


def run(main: Callable[[list[str]], int], interrupted: str = '', packages: bool = True) -> None:
    """Exit with main(arguments), after checking the locked packages unless `packages=False`. A LabError is one
    line on stderr and exit 2, Ctrl-C exit 130 (after 'interrupted; ', `interrupted` or the KeyboardInterrupt's
    own text says what it left behind), a closed pipe exit 141. --help answers even without the packages."""
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # a kill is handled like Ctrl-C
    script = Path(sys.argv[0]).name or 'python'
    try:
        if packages and (missing := missing_packages()):
            advice = (f"{sys.executable} lacks the locked package{'s' if len(missing) > 1 else ''} "
                      f'{", ".join(missing)}; in {HERE} run `{INSTALL}` and start the scripts with .venv/bin/python')
            if {'-h', '--help'} & set(sys.argv[1:]):
                print(f"{(sys.modules['__main__'].__doc__ or '').strip()}\n\n{script}: {advice}; "
                      'then --help lists every option')
                sys.exit(0)
            raise LabError(advice)
        status = main(sys.argv[1:])
        sys.stdout.flush()  # a reader that left shows up here at the latest, while it can still be handled
    except (LabError, UnicodeEncodeError) as error:  # the latter: e.g. PYTHONIOENCODING=ascii and text that is not
        problem = cut(printable(str(error))) if isinstance(error, LabError) else (  # one line, of bounded length
            f'the output cannot be written as {error.encoding} (it holds {error.object[error.start:error.end]!r}); '
            'set PYTHONIOENCODING=utf-8')
        tell(problem, script)
        sys.exit(2)
    except KeyboardInterrupt as stop:
        state = stop.args[0] if stop.args and isinstance(stop.args[0], str) else interrupted
        tell(f"interrupted{'; ' + state if state else ''}", script)
        sys.exit(128 + signal.SIGINT)  # what a shell reports for Ctrl-C
    except BrokenPipeError:
        # Python flushes stdout again at exit, which would fail the same way; point it at devnull first.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(128 + signal.SIGPIPE)
    sys.exit(status)


def add_input_options(parser, cases: Path | None = DEFAULT_CASES,
                      cases_help: str = 'case set (default: cases.json)') -> None:
    parser.add_argument('--cases', type=Path, default=cases, metavar='FILE', help=cases_help)
    parser.add_argument('--rules', type=Path, action='append', default=[], metavar='FILE.py',
                        help='a rules file (RULES, a dict of name -> rule; docs/rules.md) whose rules run after '
                             'the four; repeatable')


def progress(script: str, done: int, total: int, steps: int = 20) -> None:
    """'evaluate.py: 77 of 1534 cases' on stderr, about `steps` times in a run."""
    if done == total or done % max(1, total // steps) == 0:
        tell(f'{done} of {total} cases', script)
