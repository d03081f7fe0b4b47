"""Reading and writing the lab's files: JSON in, whole files out.

    from lab_files import read_json, write_atomically
    read_json(Path('cases.json'), 'case set', ValueError)   # the parsed JSON, or one ValueError naming the file
    write_atomically(Path('report.json'), text)             # no reader ever sees half of it

Every script reads its JSON inputs and writes its outputs through these two
helpers, so each way a file can be unreadable or unwritable reaches the user as
one line. Writing never destroys what the path is: a symlink stays a link (the file
it names is replaced), a pipe or device is written into, a directory is refused.
This module uses the standard library only and writes nothing on its own.
"""
import errno
import json
import os
from pathlib import Path
import stat
import tempfile

NEW_FILE_MODE = 0o644  # a file the lab creates is meant to be read by anyone; an existing one keeps its mode


def read_json(path: Path, what: str, error_type: type[Exception], advice: str = ''):
    """The JSON in a file the user gave or the lab ships; every way it can be unreadable is one error_type.

    The message names the file and what it was meant to be, and ends with the advice, if any:
    read_json(Path('x.json'), 'case set', ValueError) on '[1,' raises
    ValueError('x.json: invalid JSON at line 1 column 4: Expecting value'). A byte-order mark, as some
    Windows editors write, is read as no mark.
    """
    path = Path(path)
    try:
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
    raise error_type(f'{path}: {problem}' + (f'; {advice}' if advice else ''))


def path_text(path: Path) -> str:
    """A path as text any UTF-8 output accepts: a byte that is not UTF-8 shows as an escape.

    path_text(Path(os.fsdecode(b'cases\\xff.json'))) -> 'cases\\\\xff.json' (a backslash, then xff)
    """
    return os.fsencode(path).decode('utf-8', 'backslashreplace')


def write_atomically(path: Path, data: str | bytes) -> None:
    """Write data (text as UTF-8, or bytes) to path whole, without destroying what the path is.

    What is at the path decides how:
      a regular file, or nothing yet: a temporary file beside it is renamed over it, so no reader ever
          sees half a file; an existing file keeps its permission bits, a new one gets NEW_FILE_MODE;
      a symbolic link (also a chain of links, or one relative to its folder): the file it finally names
          is replaced that way and the link stays a link; a link that names nothing yet creates that file;
      a device, named pipe or other file that is not regular (/dev/null, a FIFO): it is opened and written
          into, never replaced or removed;
      a directory: refused with IsADirectoryError.
    An OSError (or a UnicodeEncodeError for text that is not valid Unicode, raised before anything is
    touched) reaches the caller, who knows what to tell the user; the temporary file is gone either way.
    """
    data = data.encode('utf-8') if isinstance(data, str) else bytes(data)
    path = Path(path)
    try:
        status = os.stat(path)  # follows every link, as the kernel does, so /dev/stdout reads as what it is
    except FileNotFoundError:
        status = None  # a new file, or a link that names no file yet
    if status is not None and stat.S_ISDIR(status.st_mode):
        raise IsADirectoryError(errno.EISDIR, 'it is a directory; name a file in it', str(path))
    if status is not None and not stat.S_ISREG(status.st_mode):
        write_into(path, data)
    else:
        mode = NEW_FILE_MODE if status is None else stat.S_IMODE(status.st_mode)
        replace_file(Path(os.path.realpath(path)), data, mode)


def interrupted_while_writing(path: Path) -> str:
    """What a Ctrl-C during write_atomically(path, ...) may leave, for the message that reports it."""
    return (f'while writing {path}: a file there holds what it held or all of the new contents, '
            'a pipe or device may have received part of them')


def write_output(path: Path, data: str | bytes, what: str, error_type: type[Exception]) -> None:
    """write_atomically for a script's --output: a failure is one error_type naming the path and what it is
    meant to be, and a Ctrl-C during the write says what may be there (interrupted_while_writing).

    write_output(Path('/no/such/x.json'), '{}', 'report', ValueError) raises
    ValueError('/no/such/x.json: cannot write the report: No such file or directory').
    """
    try:
        write_atomically(path, data)
    except OSError as error:
        raise error_type(f'{path}: cannot write the {what}: {error.strerror}') from None
    except KeyboardInterrupt:
        raise KeyboardInterrupt(interrupted_while_writing(path)) from None


def write_into(path: Path, data: bytes) -> None:
    """Write data into a device or pipe as it stands: no creating, truncating, renaming or removing."""
    handle = os.open(path, os.O_WRONLY)
    with os.fdopen(handle, 'wb') as file:
        file.write(data)


def replace_file(target: Path, data: bytes, mode: int) -> None:
    """Put data at target (no link, a regular file or nothing yet) through a renamed temporary file."""
    temporary = None
    try:
        handle, temporary = tempfile.mkstemp(dir=target.parent, prefix=f'.{target.name}.', suffix='.tmp')
        with os.fdopen(handle, 'wb') as file:
            file.write(data)
        os.chmod(temporary, mode)  # mkstemp makes the file private
        os.replace(temporary, target)
        temporary = None
    finally:
        if temporary:
            Path(temporary).unlink(missing_ok=True)


if __name__ == '__main__':
    import cli  # standard library only, like this module

    cli.run(cli.module_main("Reading the lab's JSON inputs and writing its outputs whole.",
                            '.venv/bin/python evaluate.py --output evaluation-result.json'))
