"""What several scripts of the lab share, each idea defined once. Standard library only.

    import common
    common.run(main)                                  # a script's entry point: packages, errors, Ctrl-C, pipes
    common.allowance({'context_limit': 384, 'max_new_tokens': 96, 'margin': 32})   # -> 256
    common.check_outputs([('--output', args.output)], [('--cases', args.cases)])  # no output is an input
    common.write_output(Path('report.json'), common.to_json(report), 'report')    # whole, or not at all

Besides: JSON in (regular files only), the allowance, summaries of graded rows by group, escaped Markdown tables,
turns counted from 1. Importing it checks nothing (a script that starts checks its packages) and writes nothing.
"""
from collections.abc import Callable
import contextlib
import errno
import hashlib
import importlib.metadata
import json
import os
from pathlib import Path
import re
import shlex
import signal
import stat
import sys
import tempfile
import time

HERE = Path(__file__).resolve().parent
REQUIREMENTS = HERE / 'requirements.txt'  # the direct pins; requirements.lock holds them with every hash
INSTALL = 'python3 -m venv .venv && .venv/bin/python -m pip install --require-hashes -r requirements.lock'
TESTS_ONLY = frozenset({'hypothesis'})  # pinned for the test suite; no script imports it, so none asks for it
# A line of requirements.txt: a distribution name, optional extras, then what it asks of the version.
REQUIREMENT = re.compile(r'(?P<name>[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?)\s*(?:\[[^\]]*\])?'
                         r'\s*(?P<rest>(?:[=<>!~;].*)?)')
EXACT_PIN = re.compile(r'==\s*(?P<version>[^\s,;*]+)\s*')  # ==1.2.3, and nothing else, pins one version
EXIT_ERROR = 2  # a mistake the user can fix
EXIT_INTERRUPTED = 130  # 128 + SIGINT, what a shell reports for Ctrl-C
EXIT_READER_GONE = 128 + signal.SIGPIPE  # 141: stdout was closed before everything was written
NEW_FILE_MODE = 0o644  # a file the lab creates is meant to be read by anyone; an existing one keeps its mode
TEMPORARY = '.lab-tmp-'  # a write's temporary file is .NAME.lab-tmp-PID-XXXXXXXX.tmp beside NAME (.gitignore)
SPECIAL = {stat.S_IFIFO: 'a named pipe', stat.S_IFSOCK: 'a socket'}  # inputs refused; any other is 'a device'
PIPE_WAIT = 10  # seconds an output named pipe may wait for a reader before the write is refused
SPLITS = ('dev', 'held_out')  # reported separately, in this order
CASES = HERE / 'cases.json'  # the lab's twelve cases, every script's default
# Every module whose change can change a row; and, in a report with --rules, the module that runs rules files.
CODE_FILES = ('common.py', 'case_set.py', 'strategies.py', 'tokenizer.py', 'best_possible.py', 'evaluate.py')
RULES_CODE_FILE = 'rule_files.py'


class LabError(Exception):
    """A mistake the user can fix; the message names the file, case or field. `run` prints it in one line."""


def pins(text: str) -> dict[str, str | None]:
    """The distributions a requirements file names, with the version each pins (None: any version will do).

    pins('# comment\\ntokenizers==0.23.3   # counts tokens\\nnumpy>=2\\n') -> {'tokenizers': '0.23.3', 'numpy': None}
    """
    found = {}
    for number, line in enumerate(text.splitlines(), 1):
        line = line.split('#', 1)[0].strip()
        if not line:
            continue
        match = REQUIREMENT.fullmatch(line)
        if match is None:
            raise LabError(f'{REQUIREMENTS}: line {number}: {line!r} is not a requirement; expected name==version')
        exact = EXACT_PIN.fullmatch(match['rest'])
        found[match['name']] = exact['version'] if exact else None
    return found


def missing_packages() -> list[str]:
    """Pins this interpreter lacks or holds at another version: ['tokenizers==0.23.3 (it has 0.22.0)']."""
    try:
        text = REQUIREMENTS.read_text(encoding='utf-8')
    except (OSError, UnicodeDecodeError) as error:
        raise LabError(f'{REQUIREMENTS}: cannot be read ({getattr(error, "strerror", None) or error}); '
                       'restore it with git checkout') from None
    missing = []
    for name, version in pins(text).items():
        if name in TESTS_ONLY:
            continue
        wanted = f'{name}=={version}' if version else f'{name} (any version)'
        try:
            installed = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            missing.append(wanted)
            continue
        if version and installed != version:
            missing.append(f'{wanted} (it has {installed})')  # another version may count differently
    return missing


def python_command() -> str:
    """How advice names Python: .venv/bin/python when that is running, else this interpreter's full path."""
    executable = Path(sys.executable)  # not resolved: .venv/bin/python is a link to the base interpreter
    return str(executable.relative_to(HERE)) if executable.is_relative_to(HERE) else shlex.quote(sys.executable)


def script_name() -> str:
    return Path(sys.argv[0]).name or 'python'


def package_advice(missing: list[str]) -> str:
    what = f"the locked package{'s' if len(missing) > 1 else ''} {', '.join(missing)}"
    return f'{sys.executable} lacks {what}; in {HERE} run `{INSTALL}` and start the scripts with .venv/bin/python'


def run(main: Callable[[list[str]], int], interrupted: str = '', packages: bool = True) -> None:
    """Exit with main(arguments), after checking the locked packages unless `packages=False`. A LabError is one
    line on stderr and exit 2, Ctrl-C exit 130 (after 'interrupted; ', `interrupted` or the KeyboardInterrupt's
    own text says what it left behind), a closed pipe exit 141. --help answers even without the packages."""
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # a kill is handled like Ctrl-C
    try:
        missing = missing_packages() if packages else []
        if missing and {'-h', '--help'} & set(sys.argv[1:]):
            print(f"{(sys.modules['__main__'].__doc__ or '').strip()}\n\n{script_name()}: "
                  f'{package_advice(missing)}; then --help lists every option')
            sys.exit(0)
        if missing:
            raise LabError(package_advice(missing))
        status = main(sys.argv[1:])
        sys.stdout.flush()  # a reader that left shows up here at the latest, while it can still be handled
    except (LabError, UnicodeEncodeError) as error:  # the latter: e.g. PYTHONIOENCODING=ascii and text that is not
        problem = printable(str(error)) if isinstance(error, LabError) else (  # one line, whatever a name holds
            f'the output cannot be written as {error.encoding} (it holds {error.object[error.start:error.end]!r}); '
            'set PYTHONIOENCODING=utf-8')
        print(f'{script_name()}: {problem}', file=sys.stderr)
        sys.exit(EXIT_ERROR)
    except KeyboardInterrupt as stop:
        state = stop.args[0] if stop.args and isinstance(stop.args[0], str) else interrupted
        print(f"{script_name()}: interrupted{'; ' + state if state else ''}", file=sys.stderr)
        sys.exit(EXIT_INTERRUPTED)
    except BrokenPipeError:
        # Python flushes stdout again at exit, which would fail the same way; point it at devnull first.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(EXIT_READER_GONE)
    sys.exit(status)


def read_json(path: Path, what: str, advice: str = ''):
    """The JSON in a file, or one LabError naming the file and what it was meant to be.

    read_json(Path('x.json'), 'case set') on '[1,' raises
    LabError('x.json: invalid JSON at line 1 column 4: Expecting value'). A byte-order mark is read as none.
    """
    path = Path(path)
    try:
        kind = stat.S_IFMT(os.stat(path).st_mode)
        if kind not in (stat.S_IFREG, stat.S_IFDIR):  # a pipe with no writer would hang, /dev/zero never end
            raise LabError(f'{path}: the {what} must be a file, not {SPECIAL.get(kind, "a device")}')
        text = path.read_text(encoding='utf-8-sig')
    except OSError as error:
        problem = f'cannot read the {what}: {error.strerror}'
    except UnicodeDecodeError as error:
        problem = f'the {what} is not UTF-8 text (byte {error.start})'
    else:
        try:
            return json.loads(text)
        except json.JSONDecodeError as error:
            problem = f'invalid JSON at line {error.lineno} column {error.colno}: {error.msg}'
        except ValueError as error:  # e.g. an integer longer than Python will convert
            problem = f'the {what} cannot be read as JSON: {error}'
        except RecursionError:
            problem = f'the {what} is nested too deeply to read'
    raise LabError(f'{path}: {problem}' + (f'; {advice}' if advice else ''))


def to_json(value, indent: int = 2) -> str:
    """The lab's JSON text: indented, non-ASCII kept as it is, a newline at the end."""
    return json.dumps(value, indent=indent, ensure_ascii=False) + '\n'


def code_hashes(with_rules: bool, *more: str) -> dict[str, str]:
    """SHA-256 of each of CODE_FILES (and rule_files.py, and `more`), by name: what ties a record to its code."""
    return {name: sha256_file(HERE / name) for name in (*CODE_FILES, *[RULES_CODE_FILE][:with_rules], *more)}


def sha256_file(path: Path) -> str:
    with open(path, 'rb') as file:
        return hashlib.file_digest(file, 'sha256').hexdigest()


def path_text(path: Path) -> str:
    """A path as text any UTF-8 output accepts: path_text(Path(os.fsdecode(b'c\\xff.json'))) -> 'c\\\\xff.json'."""
    return os.fsencode(path).decode('utf-8', 'backslashreplace')


def file_identity(path: Path) -> tuple | None:
    """One file however it is spelt or linked: a regular file's (device, inode), else (no file yet) its folder's and
    its name; None for a pipe or device, which no write replaces."""
    with contextlib.suppress(OSError):  # a path that cannot be looked at is none; writing to it will say why
        real = os.path.realpath(path)
        if not os.path.exists(real):  # no file yet
            folder = os.stat(os.path.dirname(real))
            return folder.st_dev, folder.st_ino, os.path.basename(real)
        status = os.stat(real)
        return (status.st_dev, status.st_ino) if stat.S_ISREG(status.st_mode) else None


def check_outputs(outputs: list[tuple[str, Path | None]], inputs: list[tuple[str, Path | None]]) -> None:
    """Refuse, before anything is run, an output that is the same file as an input (or the lab's code) or as another
    output: check_outputs([('--output', Path('my.json'))], [('--cases', Path('./my.json'))]) raises LabError('--output
    my.json: the same file as --cases my.json, which this run reads; write the output elsewhere')."""
    lab = [(f"the lab's {name}", HERE / name)
           for name in (*CODE_FILES, RULES_CODE_FILE, 'tokenizer-manifest.json', script_name())]
    seen = {}
    for option, path in [*inputs, *lab]:
        if path is not None and len(identity := file_identity(path) or ()) == 2:
            seen.setdefault(identity, f'{option} {path}, which this run reads')
    for option, path in outputs:
        if path is None or (identity := file_identity(path)) is None:
            continue
        if identity in seen:
            raise LabError(f'{option} {path}: the same file as {seen[identity]}; write the output elsewhere')
        seen[identity] = f'{option} {path}, which this run also writes'


def remove_leftovers(target: Path) -> None:
    """Delete the temporary files of earlier writes to target whose writer is gone (killed outright mid-write):
    their names carry its pid."""
    leftover = re.compile(re.escape(f'.{target.name}{TEMPORARY}') + r'(\d{1,9})-[a-z0-9_]{8}\.tmp')
    for name in os.listdir(target.parent):
        if match := leftover.fullmatch(name):
            try:
                os.kill(int(match[1]), 0)  # signal 0 only asks whether the writer lives
            except OSError as error:  # EPERM: it lives, as someone else's process
                if error.errno == errno.ESRCH:
                    (target.parent / name).unlink(missing_ok=True)


def open_writer(path: Path, status: os.stat_result) -> int:
    """A pipe or device opened for writing, never created or truncated. A named pipe with no reader yet
    (ENXIO without blocking) is retried for PIPE_WAIT seconds, then refused: it would otherwise hang forever."""
    deadline = time.monotonic() + PIPE_WAIT
    while True:
        try:
            handle = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
            os.set_blocking(handle, True)  # from here on a slow reader is waited for, as by any writer
            return handle
        except OSError as error:
            if error.errno != errno.ENXIO or not stat.S_ISFIFO(status.st_mode):
                raise
            if time.monotonic() > deadline:
                raise OSError(errno.ENXIO, f'no process opened the named pipe for reading within {PIPE_WAIT} s; '
                              'start its reader first') from None
        time.sleep(0.05)


def stage(path: Path, data: bytes) -> tuple[int | str, Path | None]:
    """The first half of a write, changing nothing at path: (an open descriptor, None) for a pipe or device, else (a
    temporary file holding data with the mode and owner of the file path finally names, beside it, that file)."""
    try:
        status = os.stat(path)  # follows every link, as the kernel does, so /dev/stdout reads as what it is
    except FileNotFoundError:
        status = None
    if status is not None and stat.S_ISDIR(status.st_mode):
        raise IsADirectoryError(errno.EISDIR, 'it is a directory; name a file in it', str(path))
    if status is not None and not stat.S_ISREG(status.st_mode):
        return open_writer(path, status), None
    target = Path(os.path.realpath(path))
    remove_leftovers(target)
    handle, temporary = tempfile.mkstemp(dir=target.parent, prefix=f'.{target.name}{TEMPORARY}{os.getpid()}-',
                                         suffix='.tmp')
    try:
        with os.fdopen(handle, 'wb') as file:
            file.write(data)
        if status is not None and (status.st_uid, status.st_gid) != (os.geteuid(), os.getegid()):
            with contextlib.suppress(PermissionError):  # only root may give a file away; others keep their own
                os.chown(temporary, status.st_uid, status.st_gid)
        os.chmod(temporary, NEW_FILE_MODE if status is None else stat.S_IMODE(status.st_mode))
    except BaseException:
        os.unlink(temporary)
        raise
    return temporary, target


def write_atomically(path: Path, data: str | bytes, *more: tuple[Path, str | bytes]) -> None:
    """Write data (text as UTF-8, or bytes) to path whole, and each (path, data) of `more`, keeping what a path is: a
    regular file or the file a symlink names is replaced by a renamed temporary file with its mode and owner (a new
    one gets NEW_FILE_MODE), a device or pipe written into. All are staged first: if one cannot be, none is written."""
    files = [(Path(name), content.encode('utf-8') if isinstance(content, str) else bytes(content))
             for name, content in [(path, data), *more]]
    staged = []
    try:
        for name, content in files:
            staged.append(stage(name, content))
        for (handle, target), (name, content) in zip(staged, files):
            if target is None:
                with open(handle, 'wb', closefd=False) as file:
                    file.write(content)
            else:
                os.replace(handle, target)
    except OSError as error:
        error.output = name  # which path failed, for write_output's message
        raise
    finally:
        for handle, target in staged:
            os.close(handle) if target is None else Path(handle).unlink(missing_ok=True)


def write_output(path: Path, data: str | bytes, what: str, *more: tuple[Path, str | bytes, str]) -> None:
    """write_atomically for a script's outputs, each (path, data, what); a failure is one LabError naming the path
    and what it is: write_output(Path('/no/such/x.json'), '{}', 'report') raises
    LabError('/no/such/x.json: cannot write the report: No such file or directory')."""
    whats = {Path(name): what for name, _, what in [(path, data, what), *more]}
    try:
        write_atomically(path, data, *[(name, content) for name, content, _ in more])
    except OSError as error:
        raise LabError(f'{error.output}: cannot write the {whats[error.output]}: {error.strerror}') from None
    except KeyboardInterrupt:
        raise KeyboardInterrupt(f"while writing {', '.join(map(str, whats))}: a file there holds what it held or all "
                                'of the new contents, a pipe or device may have received part of them') from None


def add_input_options(parser, cases: Path | None = CASES, cases_help: str = 'case set (default: cases.json)') -> None:
    """--cases FILE and --rules FILE.py (repeatable), as every script that runs the rules spells them."""
    parser.add_argument('--cases', type=Path, default=cases, metavar='FILE', help=cases_help)
    parser.add_argument('--rules', type=Path, action='append', default=[], metavar='FILE.py',
                        help='a rules file (RULES, a dict of name -> rule; docs/rules.md) whose rules run after '
                             'the four; repeatable')


def allowance(case: dict) -> int:
    """Input tokens a request may use: {'context_limit': 384, 'max_new_tokens': 96, 'margin': 32} -> 256."""
    budget = case.get('budget', case)
    return budget['context_limit'] - budget['max_new_tokens'] - budget['margin']


def check_fits(path: Path, case: dict, bare_tokens: int, hint: str = '') -> None:
    """Refuse a case whose instructions and question alone exceed its allowance: no rule could fit it."""
    if bare_tokens > allowance(case):
        raise LabError(f'{path}: case {case["id"]}: field budget allows {allowance(case)} input tokens, '
                       f'but the instructions and question alone need {bare_tokens}{hint}')


def summarize(rows: list[dict]) -> dict:
    """Totals of graded rows. Rows with 1 of 1 facts in 40 tokens and 0 of 2 in 51 give facts_found 1 of 3,
    fact_recall 0.333, complete_cases 1, mean_input_tokens 45.5."""
    facts = sum(row['required_total'] for row in rows)
    found = sum(row['required_found'] for row in rows)
    tokens = [row['input_tokens'] for row in rows]
    return {'cases': len(rows), 'facts_found': found, 'facts_total': facts, 'fact_recall': round(found / facts, 3),
            'complete_cases': sum(1 for row in rows if not row['missing']),
            'cases_with_stale_facts': sum(1 for row in rows if row['stale_included']),
            'over_budget': sum(1 for row in rows if not row['within_budget']),
            'mean_input_tokens': round(sum(tokens) / len(tokens), 1)}


def by_group(rows: list[dict], group: str, totals: Callable = summarize) -> dict:
    """totals() of the rows of each value of `group`: splits in SPLITS order, other groups in row order."""
    values = [split for split in SPLITS if any(row['split'] == split for row in rows)] if group == 'split' \
        else list(dict.fromkeys(row[group] for row in rows))
    return {value: totals([row for row in rows if row[group] == value]) for value in values}


def plain_number(value: float) -> str:
    """A mean as tables show it: 61.0 -> '61', 51.3 -> '51.3'."""
    return f'{value:.1f}'.removesuffix('.0')


def counted(number: int, noun: str) -> str:
    """counted(1, 'case') -> '1 case'; counted(1534, 'case') -> '1,534 cases'"""
    return f"{number:,} {noun}{'' if number == 1 else 's'}"


def printable(text: str) -> str:
    """Text that shows as itself on one line, control, bidirectional and other invisible characters escaped:
    printable('a\\nb\\u202ec') -> 'a\\\\nb\\\\u202ec'; printable('café') -> 'café'"""
    return ''.join(char if char.isprintable() else char.encode('unicode_escape').decode('ascii') for char in text)


def markdown_table(header: list[str], rows: list[list[str]], pad: bool = False) -> str:
    """A Markdown table, its columns padded to line up in a terminal if `pad`; a cell's `|` and invisible
    characters are escaped, so no name can end a cell or a row:
    markdown_table(['a', 'bb'], [['xyz', '1']], pad=True) -> '| a   | bb |\\n|-----|----|\\n| xyz | 1  |\\n'"""
    header, *rows = [[printable(cell).replace('|', '\\|') for cell in line] for line in [header, *rows]]
    widths = [max(len(line[column]) for line in [header, *rows]) if pad else 0 for column in range(len(header))]
    rule = '|' + '|'.join('-' * (width + 2) if pad else '---' for width in widths) + '|'
    lines = ['| ' + ' | '.join(cell.ljust(width) for cell, width in zip(cells, widths)) + ' |'
             for cells in [header, *rows]]
    return '\n'.join([lines[0], rule, *lines[1:]]) + '\n'


def turn_runs(indices) -> list[str]:
    """0-based turn indices as people count them, consecutive ones as one run: [2, 3, 4, 6] -> ['3-5', '7']."""
    runs: list[list[int]] = []
    for index in sorted(indices):
        if runs and index == runs[-1][1] + 1:
            runs[-1][1] = index
        else:
            runs.append([index, index])
    return [f'{first + 1}' if first == last else f'{first + 1}-{last + 1}' for first, last in runs]


def progress(script: str, done: int, total: int, what: str = 'cases', steps: int = 20) -> None:
    """'evaluate.py: 77 of 1534 cases' on stderr, about `steps` times in a run."""
    if done == total or done % max(1, total // steps) == 0:
        print(f'{script}: {done} of {total} {what}', file=sys.stderr, flush=True)
