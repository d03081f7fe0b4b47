"""The lab's files: JSON read from regular files only, outputs written whole, pinned downloads checked
(pip_download, check_file: prepare.py's and real_server.py's).

    check_fields(f'{path}: case {id}', case, {'id': TEXT, 'budget': {'margin': COUNT}})  # JSON checked field by field
    check_outputs([('--output', args.output)], [('--cases', args.cases)])  # no output is an input or the lab's own
    write_output(Path('report.json'), to_json(report), 'report')           # whole, or not at all

A write never destroys what is at the path: a symlink is followed, a pipe or device written into, a regular file
replaced by a renamed temporary file; a temporary file left by a writer that was killed outright is removed by the
next write (process_alive, which prepared_folder.py's folder swap asks too). Standard library only; it writes only
what it is asked to.
"""
import contextlib
import errno
import hashlib
import json
import os
from pathlib import Path
import re
import signal
import stat
import subprocess
import sys
import tempfile
import time

from common import HERE, LabError
from text import excerpt

NEW_FILE_MODE = 0o644  # a file the lab creates is meant to be read by anyone; an existing one keeps its mode
TEMPORARY = '.lab-tmp-'  # a write's temporary file is .NAME.lab-tmp-PID-XXXXXXXX.tmp beside NAME (.gitignore)
SPECIAL = {stat.S_IFIFO: 'a named pipe', stat.S_IFSOCK: 'a socket'}  # inputs refused; any other is 'a device'
# The lab's own files, which no output may replace (the recorded outputs a script writes are not among them).
LAB_FILES = ('*.py', '*.md', 'docs/*', '.ci/*', '.gitignore', 'requirements.*', 'cases.json', 'agent-cases.json',
             'continuation-cases.json', 'continuation-keys.json', 'answer-keys.json', 'memory-answer-keys.json',
             'tokenizer-manifest.json')
PREPARED_JSON = 'prepared.json'  # written last into a prepared counter folder: its presence means "complete"
PIPE_WAIT = 10  # seconds an output named pipe may wait for a reader before the write is refused
READ_MOST = 10**9  # bytes: LoCoMo's case set is 146 MB, and parsing takes several times a file's size in memory


class PrepareError(LabError):
    """A source that cannot serve the pinned bytes, or a folder that cannot be replaced."""


def read_json(path: Path, what: str, advice: str = ''):
    """The JSON in a file, as read_json_file reads it."""
    return read_json_file(path, what, advice)[0]


def read_json_file(path: Path, what: str, advice: str = '') -> tuple[object, str]:
    """(the JSON in a file read as read_text reads it, the SHA-256 of the very bytes parsed), or one LabError naming
    the file and what it was meant to be: in x.json '[1,' raises LabError('x.json: invalid JSON at line 1 column 4:
    Expecting value'). An object holding a key twice is refused, since JSON readers disagree on which value wins:
    '{"a": 1, "a": 2}' raises LabError('x.json: key 'a' appears twice in one object')."""
    try:
        text, sha256 = read_text(path, what)
        return parse_json(text, str(path), what), sha256
    except LabError as error:
        raise LabError(f'{error}; {advice}' if advice else str(error)) from None


def read_text(path: Path, what: str) -> tuple[str, str]:
    """(the text of a file, the SHA-256 of its bytes), or one LabError naming the file: a pipe, a device or a file
    over READ_MOST bytes is refused unread, and a byte-order mark is read as none."""
    path = Path(path)
    try:
        status = os.stat(path)
        kind = stat.S_IFMT(status.st_mode)
        if kind not in (stat.S_IFREG, stat.S_IFDIR):  # a pipe with no writer would hang, /dev/zero never end
            raise LabError(f'{path}: the {what} must be a file, not {SPECIAL.get(kind, "a device")}')
        if status.st_size > READ_MOST:
            raise LabError(f'{path}: the {what} is {status.st_size:,} bytes, more than the {READ_MOST:,} the lab reads')
        data = path.read_bytes()
        return data.decode('utf-8-sig'), hashlib.sha256(data).hexdigest()
    except MemoryError:
        problem = f'the {what} does not fit in the memory this process may use'
    except OSError as error:
        problem = f'cannot read the {what}: {error.strerror}'
    except UnicodeDecodeError as error:
        problem = f'the {what} is not UTF-8 text (byte {error.start})'
    raise LabError(f'{path}: {problem}')


def parse_json(text: str, where: str, what: str, line: bool = True):
    """The JSON value of a text, or one LabError at `where` (the error's column only, not line, if not `line`)."""
    try:
        return json.loads(text, object_pairs_hook=unique_keys)
    except MemoryError:
        problem = f'the {what} does not fit in the memory this process may use'
    except json.JSONDecodeError as error:
        problem = f'invalid JSON at {f"line {error.lineno} " if line else ""}column {error.colno}: {error.msg}'
    except DuplicateKey as error:
        problem = f'key {error.args[0]!r} appears twice in one object; a {what} names each key once'
    except ValueError as error:  # e.g. an integer longer than Python will convert
        problem = f'the {what} cannot be read as JSON: {error}'
    except RecursionError:
        problem = f'the {what} is nested too deeply to read'
    raise LabError(f'{where}: {problem}')


class DuplicateKey(ValueError):
    """A JSON object names a key twice (the key is its argument)."""


def unique_keys(pairs: list[tuple[str, object]]) -> dict:
    """object_pairs_hook: the object, unless a key repeats: [('a', 1), ('a', 2)] raises DuplicateKey('a')."""
    found = dict(pairs)
    if len(found) != len(pairs):
        raise DuplicateKey(next(key for index, (key, _) in enumerate(pairs) if key in dict(pairs[:index])))
    return found


# Kinds of a field's value, each (whether a value is one, what a message says it must be); JSON's true is no number.
ANY = (lambda v: True, 'any value')  # a field whose value another check reads
STRING = (lambda v: isinstance(v, str), 'a string')
TEXT = (lambda v: isinstance(v, str) and v.strip() != '', 'a non-empty string')
INTEGER = (lambda v: type(v) is int, 'an integer')
COUNT = (lambda v: type(v) is int and v >= 0, 'a non-negative integer')
POSITIVE = (lambda v: type(v) is int and v > 0, 'a positive integer')
NUMBER = (lambda v: type(v) in (int, float), 'a number')
BOOLEAN = (lambda v: type(v) is bool, 'true or false')
SHA256 = (lambda v: isinstance(v, str) and re.fullmatch('[0-9a-f]{64}', v) is not None, '64 lowercase hex digits')
OBJECT = (lambda v: isinstance(v, dict), 'an object')


def list_of(kind: tuple, what: str, distinct: bool = False) -> tuple:
    """A list of values of a kind (each distinct, if asked): list_of(STRING, 'a list of strings')."""
    return (lambda v: isinstance(v, list) and all(map(kind[0], v)) and (not distinct or len(set(v)) == len(v)), what)


def one_of(values, what: str = '') -> tuple:
    return (lambda v: v in values and type(v) in map(type, values), what or f'one of {list(values)}')


def at_most(most: int) -> tuple:
    return (lambda v: POSITIVE[0](v) and v <= most, f'a positive integer of at most {most}')


def or_null(kind: tuple) -> tuple:
    return (lambda v: v is None or kind[0](v), f'{kind[1]} or null')


def check_fields(where: str, record, spec: dict, advice: str = '', name: str = '', optional=(), exact: bool = True,
                 error: type = LabError) -> dict:
    """The record, or one `error` naming where it is, the field and what it must be. spec maps each field to its kind
    or to the spec of the object it holds; `optional` fields may be absent; exact: no other field. check_fields(
    'x.json: case a', {'id': 7}, {'id': TEXT}) raises "x.json: case a: field id must be a non-empty string, got 7"."""
    tail = f'; {advice}' if advice else ''
    subject = f'field {name} ' if name else ''
    fields = f'{"exactly " * exact}the fields {list(spec)}' + (f' ({", ".join(optional)} optional)' * bool(optional))
    if not isinstance(record, dict):
        got = excerpt(record)
        raise error(f'{where}: {subject}must be an object with {fields}, got {got}{tail}')
    missing = [field for field in spec if field not in record and field not in optional]
    unexpected = sorted(set(record) - set(spec)) if exact else []
    if exact and (missing or unexpected):
        raise error(f'{where}: {subject}must be an object with {fields}; missing {missing}, unexpected {unexpected}'
                    + tail)
    dotted = {field: f'{name}.{field}' if name else field for field in spec}
    if missing:  # an open record: only what is read is named
        raise error(f'{where}: missing field{"s" * (len(missing) > 1)} {", ".join(map(dotted.get, missing))}{tail}')
    for field, kind in ((field, kind) for field, kind in spec.items() if field in record):
        if isinstance(kind, dict):
            check_fields(where, record[field], kind, advice, dotted[field], exact=exact, error=error)
        elif not kind[0](record[field]):
            got = excerpt(record[field])
            raise error(f'{where}: field {dotted[field]} must be {kind[1]}, got {got}{tail}')
    return record


def to_json(value, indent: int = 2) -> str:
    return json.dumps(value, indent=indent, ensure_ascii=False) + '\n'


def sha256_file(path: Path) -> str:
    with open(path, 'rb') as file:
        return hashlib.file_digest(file, 'sha256').hexdigest()


def check_file(path: Path, label: str, pin: dict, advice: str = 'refusing it') -> None:
    """Refuse a file whose size or sha256 is not the one `pin` gives (size first: it is free; an sdist pins none)."""
    if (size := path.stat().st_size) != pin.get('size', size):
        raise PrepareError(f"{label}: size is {size} bytes, expected {pin['size']}; {advice}")
    if (sha256 := sha256_file(path)) != pin['sha256']:
        raise PrepareError(f"{label}: sha256 is {sha256}, expected {pin['sha256']}; {advice}")


def run_group(command: list[str], env: dict | None = None, cwd: Path | None = None) -> tuple[str, int]:
    """Run a command in a session of its own, its output read through a pipe: (output, exit status). Ctrl-C reaches
    only this script, which then stops the command and every process it started before anything is removed."""
    process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True, errors='replace', env=env, cwd=cwd, start_new_session=True)
    try:
        return process.communicate()[0], process.returncode
    except BaseException:
        with contextlib.suppress(ProcessLookupError):  # the whole group may have ended just now
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        raise


def pip_download(workdir: Path, pinned: dict[str, str], options: list[str], what: str, advice: str,
                 elsewhere: str) -> Path:
    """pip download each pinned requirement ('name==version' -> sha256) into workdir/download, pip's TMPDIR inside
    workdir; pip refuses any other bytes. `what` names the download in messages, `advice` ends a failed one's and
    `elsewhere` says where else the folder can go."""
    downloads, tmp, requirements = workdir / 'download', workdir / 'pip-tmp', workdir / 'pinned-requirements.txt'
    requirements.write_text(''.join(f'{name} --hash=sha256:{sha256}\n' for name, sha256 in pinned.items()),
                            encoding='utf-8')
    tmp.mkdir()
    # pip's output comes through a pipe, which a full disk cannot refuse, read for ENOSPC.
    said, status = run_group([sys.executable, '-m', 'pip', 'download', '--no-deps', *options, '--require-hashes',
                              '--quiet', '--dest', str(downloads), '-r', str(requirements)],
                             env=os.environ | {'TMPDIR': str(tmp)})
    print(said, end='', file=sys.stderr, flush=True)
    if status != 0 and os.strerror(errno.ENOSPC) in said:
        raise PrepareError(f"pip download of {what} failed (exit {status}): the disk is full (pip's message is "
                           f'above); free space in {workdir.parent}, where pip downloads and builds, or {elsewhere}')
    if status != 0:
        raise PrepareError(f"pip download of {what} failed (exit {status}, pip's message is above); check pip's index "
                           f'configuration (pip config list){advice}')
    return downloads


def path_text(path: Path) -> str:
    """A path as text any UTF-8 output accepts: path_text(Path(os.fsdecode(b'c\\xff.json'))) -> 'c\\\\xff.json'."""
    return os.fsencode(path).decode('utf-8', 'backslashreplace')


def file_identity(path: Path) -> tuple | None:
    """One file or folder however it is spelt or linked: its (device, inode), else (nothing there yet) its folder's
    and its name; None for a pipe or device, which no write replaces. A folder swapped in has another identity."""
    with contextlib.suppress(OSError):  # a path that cannot be looked at is none; writing to it will say why
        real = os.path.realpath(path)
        if not os.path.exists(real):  # no file yet
            folder = os.stat(os.path.dirname(real))
            return folder.st_dev, folder.st_ino, os.path.basename(real)
        status = os.stat(real)
        return (status.st_dev, status.st_ino) if stat.S_ISREG(status.st_mode) or stat.S_ISDIR(status.st_mode) else None


def output_help(what: str, never: str) -> str:
    """An --output option's help: what write_output does with what is at the path, and which file it never is."""
    return (f'{what} (replaced whole; a symlink is followed, a pipe or device written into, a named pipe once a reader '
            f'opens it within {PIPE_WAIT} s; never {never})')


def check_outputs(outputs: list[tuple[str, Path | None]], inputs: list[tuple[str, Path | None]]) -> None:
    """Refuse, before anything is run, an output that is the same file as an input, one of the lab's own files or
    another output, or that lies in a prepared counter folder: check_outputs([('--output', Path('my.json'))],
    [('--cases', Path('./my.json'))]) raises LabError('--output my.json: the same file as --cases my.json, which
    this run reads; write the output elsewhere')."""
    lab = [(f"the lab's {path.relative_to(HERE)}", path) for pattern in LAB_FILES for path in HERE.glob(pattern)]
    seen = {}
    for option, path in [*inputs, *lab]:
        if path is not None and len(identity := file_identity(path) or ()) == 2:
            seen.setdefault(identity, f'{option} {path}, which this run reads')
    for option, path in outputs:
        if path is None or (identity := file_identity(path)) is None:
            continue
        if identity in seen:
            raise LabError(f'{option} {path}: the same file as {seen[identity]}; write the output elsewhere')
        if os.path.isfile(Path(os.path.realpath(path)).parent / PREPARED_JSON):
            raise LabError(f'{option} {path}: inside a prepared counter folder, which only prepare.py writes; '
                           'write the output elsewhere')
        seen[identity] = f'{option} {path}, which this run also writes'


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
    leftover = re.compile(re.escape(f'.{target.name}{TEMPORARY}') + r'(\d{1,9})-[a-z0-9_]{8}\.tmp')
    for name in os.listdir(target.parent):  # an earlier write's temporary file whose writer (the pid) is gone
        if (match := leftover.fullmatch(name)) and not process_alive(match[1]):
            (target.parent / name).unlink(missing_ok=True)
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


def write_output(path: Path, data: str | bytes, what: str, *more: tuple[Path, str | bytes, str]) -> None:
    """Write data (text as UTF-8, or bytes) to path whole, and each (path, data, what) of `more`, as stage()
    finds each. All are staged first: if one cannot be, none is written. A failure is one LabError naming the
    path and what it is: write_output(Path('/no/such/x.json'), '{}', 'report') raises
    LabError('/no/such/x.json: cannot write the report: No such file or directory')."""
    files = [(Path(name), content.encode('utf-8') if isinstance(content, str) else bytes(content), what)
             for name, content, what in [(path, data, what), *more]]
    staged = []
    try:
        for name, content, what in files:
            staged.append(stage(name, content))
        for (handle, target), (name, content, what) in zip(staged, files):
            if target is None:
                with open(handle, 'wb', closefd=False) as file:
                    file.write(content)
            else:
                os.replace(handle, target)
    except OSError as error:
        raise LabError(f'{name}: cannot write the {what}: {error.strerror}') from None
    except KeyboardInterrupt:
        names = ', '.join(str(name) for name, _, _ in files)
        raise KeyboardInterrupt(f'while writing {names}: a file there holds what it held or all of the new '
                                'contents, a pipe or device may have received part of them') from None
    finally:
        for handle, target in staged:
            os.close(handle) if target is None else Path(handle).unlink(missing_ok=True)


def process_alive(pid: int | str) -> bool:
    """Whether a process with this pid lives (someone else's counts): the writer of a leftover may still write."""
    try:
        os.kill(int(pid), 0)  # signal 0 only asks whether the process is there
    except (ValueError, OverflowError, ProcessLookupError):  # not a pid, or no such process
        return False
    except PermissionError:
        pass  # someone else's process
    return True
