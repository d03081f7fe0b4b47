"""Reading and writing the lab's files: JSON in, whole files out.

    from lab_files import read_json, write_atomically
    read_json(Path('cases.json'), 'case set', ValueError)   # the parsed JSON, or one ValueError naming the file
    write_atomically(Path('report.json'), text)             # no reader ever sees half of it

Every script reads its JSON inputs and writes its outputs through these two
helpers, so each way a file can be unreadable or unwritable reaches the user as
one line. This module uses the standard library only and writes nothing on its own.
"""
import json
import os
from pathlib import Path
import tempfile


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


def write_atomically(path: Path, content: str | bytes) -> None:
    """Replace path with content (text, written as UTF-8, or bytes such as a picture) through a temporary
    file beside it, so no reader ever sees half a file.

    An OSError (or a UnicodeEncodeError for text that is not valid Unicode) reaches the caller, who knows
    what to tell the user; the temporary file is gone either way.
    """
    path = Path(path)
    data = content if isinstance(content, bytes) else content.encode('utf-8')
    temporary = None
    try:
        handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f'.{path.name}.', suffix='.tmp')
        with os.fdopen(handle, 'wb') as file:
            file.write(data)
        os.chmod(temporary, 0o644)  # mkstemp makes the file private; recorded files are meant to be read
        os.replace(temporary, path)
        temporary = None
    finally:
        if temporary:
            Path(temporary).unlink(missing_ok=True)


if __name__ == '__main__':
    import cli  # standard library only, like this module

    cli.run(cli.module_main("Reading the lab's JSON inputs and writing its outputs whole.",
                            '.venv/bin/python evaluate.py --output evaluation-result.json'))
