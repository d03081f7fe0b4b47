"""Tests for prepare.py: each test is named after the failure it pins.

Run: .venv/bin/python -m unittest -v test_prepare.py   (about 15 s; no network: the "Hub" is a local fake server)

The Hub tests run prepare.py in a subprocess, because huggingface_hub reads HF_ENDPOINT when it is imported;
the fake Hub speaks the wire format hf_hub_download uses (HEAD then GET on /{repo}/resolve/{revision}/{file},
X-Repo-Commit, ETag, Content-Length, and for LFS-style files a redirect to a CDN on another origin with
X-Linked-Etag / X-Linked-Size). Both the Hub and its CDN listen on 127.0.0.1 only, each on its own port. Where
pip would run, a stand-in found first through PYTHONPATH runs instead. The PyPI tests stage small archives
built here, holding a tiny GGUF written by the gguf package and three test vectors whose ids were worked out
by hand. Every file lives in a temp folder.
"""
import contextlib
from functools import partial
import hashlib
import io
import json
import os
from pathlib import Path
import shutil
import signal
import subprocess
import sys
import tarfile
import threading
import time
import unittest
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from unittest import mock
from urllib.parse import urlsplit

from gguf import GGUFWriter
import httpx2
import huggingface_hub
from tokenizers import Tokenizer

import common
import prepare
from lab_files import file_identity
from prepared_folder import PREPARED, PREPARED_ENV, check_prepared, counter_folder, read_manifest, replace_folder
from test_support import closed_port
from test_support_fixtures import HERE, MANIFEST as REAL_MANIFEST, TempFolderTest, sha256
from test_support_runs import ctrl_c_reaches_children

PREPARE_SAYS = partial(common.tell, script=prepare.SCRIPT)  # the lines prepare.py says while it replaces a folder
REPO, REVISION = REAL_MANIFEST['publisher_model'], REAL_MANIFEST['revision']
MEMBER_PATHS = {key: member['path'] for key, member in REAL_MANIFEST['pypi_mirror']['members'].items()}
GOOD_HUB_FILES = {
    'tokenizer.json': b'{"version": "1.0", "note": "a small stand-in for the real tokenizer"}\n',
    'chat_template.jinja': b"{{ bos_token }}{% for m in messages %}{{ m['content'] }}{% endfor %}\n",
}
LFS_FILES = {'tokenizer.json'}  # on the real Hub this one is an LFS file served through a CDN redirect
# A tiny Gemma-like vocab: ids 0-4 are control/unknown tokens, then a few pieces and two merges.
TINY_TOKENS = ['<pad>', '<eos>', '<bos>', '<unk>', '<start_of_turn>', 'a', 'b', 'ab', '\u2581', '\u2581ab']
TINY_TYPES = [3, 3, 3, 2, 3, 1, 1, 1, 1, 1]
TINY_MERGES = ['a b', '\u2581 ab']
TINY_INP = f"\n{REAL_MANIFEST['pypi_mirror']['vector_separator']}\n".join(['ab', ' ab<start_of_turn>a', 'b a']).encode()
# Worked out by hand: 'ab' merges to 7; ' ab' is '\u2581ab' (9), then the control token whole (4) and 'a' (5);
# 'b a' is 'b' (6), '\u2581' (8), 'a' (5): the merge '\u2581 ab' needs a 'b' after 'a'.
TINY_OUT = b'7\n9 4 5\n6 8 5\n'
TIMEOUT = 60
FAILING_PIP = 'import sys; sys.exit(3)\n'
# Fails as pip does when the disk fills up: a real ENOSPC from writing to /dev/full, reported in pip's words.
FULL_DISK_PIP = """
import sys
try:
    with open('/dev/full', 'wb') as file:
        file.write(b'x' * 65536)
except OSError as error:
    print(f'ERROR: Could not install packages due to an OSError: {error}', file=sys.stderr)
    sys.exit(1)
"""
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

# "Downloads" the sdist FAKE_SDIST names into pip's --dest, as pip download does, and logs each run.
COPYING_PIP = """
import os, shutil, sys
dest = sys.argv[sys.argv.index('--dest') + 1]
os.makedirs(dest, exist_ok=True)
shutil.copy(os.environ['FAKE_SDIST'], dest)
with open(os.environ['FAKE_PIP_LOG'], 'a') as log:
    log.write('downloaded\\n')
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


class FakeHub:
    """A Hugging Face Hub stand-in that records every request it gets: the Hub itself, and the CDN its LFS
    redirects point to on another origin; both on 127.0.0.1, each on its own port."""

    def __init__(self, files: dict[str, bytes]):
        self.files = files
        self.requests: list[tuple[str, str, dict]] = []
        self.server = ThreadingHTTPServer(('127.0.0.1', 0), HubHandler)
        self.cdn = ThreadingHTTPServer(('127.0.0.1', 0), HubHandler)
        self.threads = []
        for server in (self.server, self.cdn):
            server.hub = self
            self.threads.append(threading.Thread(target=server.serve_forever, daemon=True))
        self.endpoint = f'http://127.0.0.1:{self.server.server_address[1]}'
        self.cdn_url = f'http://127.0.0.1:{self.cdn.server_address[1]}/cdn/'

    def __enter__(self) -> 'FakeHub':
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc_info) -> None:
        for server, thread in zip((self.server, self.cdn), self.threads):
            server.shutdown()
            server.server_close()
            thread.join(timeout=5)


class HubHandler(BaseHTTPRequestHandler):
    protocol_version = 'HTTP/1.1'

    def log_message(self, *args) -> None:  # keep the test output clean
        pass

    def do_HEAD(self) -> None:
        self.answer(send_body=False)

    def do_GET(self) -> None:
        self.answer(send_body=True)

    def answer(self, send_body: bool) -> None:
        hub: FakeHub = self.server.hub
        hub.requests.append((self.command, self.path, {k.lower(): v for k, v in self.headers.items()}))
        path = urlsplit(self.path).path
        resolve = f'/{REPO}/resolve/{REVISION}/'
        name, blob = path.removeprefix(resolve), path.removeprefix('/cdn/')
        by_sha = {sha256(data): data for data in hub.files.values()}
        if self.server is hub.server and path.startswith(resolve) and name in hub.files:
            body = hub.files[name]
            git_oid = hashlib.sha1(b'blob %d\0' % len(body) + body).hexdigest()
            headers = {'X-Repo-Commit': REVISION, 'ETag': f'"{git_oid}"'}
            if name in LFS_FILES:  # like the real Hub: redirect to the CDN, metadata in X-Linked-* headers
                headers |= {'X-Linked-Etag': f'"{sha256(body)}"', 'X-Linked-Size': str(len(body)),
                            'Location': hub.cdn_url + sha256(body)}
                self.send(302, headers, b'', send_body)
            else:
                self.send(200, headers, body, send_body)
        elif self.server is hub.cdn and path.startswith('/cdn/') and blob in by_sha:
            self.send(200, {'ETag': f'"{blob}"'}, by_sha[blob], send_body)
        else:
            self.send(404, {'X-Error-Code': 'EntryNotFound'}, b'not found', send_body)

    def send(self, status: int, headers: dict[str, str], body: bytes, send_body: bool) -> None:
        self.send_response(status)
        for key, value in headers.items():
            self.send_header(key, value)
        self.send_header('Content-Length', str(len(body)))
        self.end_headers()
        if send_body:
            self.wfile.write(body)


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


def error_line(test: unittest.TestCase, result: subprocess.CompletedProcess) -> str:
    """The one error line of a failed run: the last line of stderr, after any progress, and no traceback."""
    test.assertNotIn('Traceback', result.stderr)
    lines = result.stderr.splitlines()
    test.assertEqual([line for line in lines if line.startswith('prepare.py: error:')], lines[-1:], result.stderr)
    return lines[-1]


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
                              capture_output=True, text=True, timeout=TIMEOUT, check=False)


class HubSourceTest(HubTest):
    def test_matching_hub_files_are_prepared_and_recorded_without_a_token(self) -> None:
        with FakeHub(GOOD_HUB_FILES) as hub:
            result = self.run_prepare(hub.endpoint)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(sorted(os.listdir(self.dest)), ['chat_template.jinja', 'prepared.json', 'tokenizer.json'])
        for name, data in GOOD_HUB_FILES.items():
            self.assertEqual((self.dest / name).read_bytes(), data)
        record = json.loads((self.dest / 'prepared.json').read_text(encoding='utf-8'))
        files = {name: {'size': len(data), 'sha256': sha256(data)} for name, data in GOOD_HUB_FILES.items()}
        self.assertEqual(record, {'source': 'hub', 'publisher_model': REPO, 'revision': REVISION,
                                  'manifest_sha256': self.manifest_sha, 'files': files, 'vectors_checked': 0})
        self.assertIn('prepared from hub', result.stdout)
        self.assertIn(str(self.dest.resolve()), result.stdout)
        self.assertTrue(any(method == 'GET' and path.startswith('/cdn/') for method, path, _ in hub.requests))
        self.assertEqual([path for _, path, headers in hub.requests if 'authorization' in headers], [])

    def test_tampered_hub_file_is_refused_naming_it_and_nothing_is_written(self) -> None:
        good = GOOD_HUB_FILES['chat_template.jinja']
        tampered = GOOD_HUB_FILES | {'chat_template.jinja': good.replace(b'bos_token', b'eos_token')}  # same size
        with FakeHub(tampered) as hub:
            result = self.run_prepare(hub.endpoint)
        self.assertEqual(result.returncode, 2)
        error = error_line(self, result)
        self.assertIn('chat_template.jinja from the Hub', error)
        self.assertIn(f"sha256 is {sha256(tampered['chat_template.jinja'])}, expected {sha256(good)}", error)
        self.assert_nothing_written()

    def test_failed_hub_run_leaves_the_previous_valid_prepared_folder_untouched(self) -> None:
        old = {'tokenizer.json': b'old tokenizer', 'vocab-vectors.inp': b'old inp', 'vocab-vectors.out': b'old out'}
        self.dest.mkdir()
        for name, data in old.items():
            (self.dest / name).write_bytes(data)
        (self.dest / 'prepared.json').write_text('{"source": "pypi"}', encoding='utf-8')
        before = snapshot(self.dest)
        tampered = GOOD_HUB_FILES | {'tokenizer.json': GOOD_HUB_FILES['tokenizer.json'] + b' '}
        with FakeHub(tampered) as hub:
            result = self.run_prepare(hub.endpoint, '--source', 'hub')
        self.assertEqual(result.returncode, 2)
        sizes = len(tampered['tokenizer.json']), len(GOOD_HUB_FILES['tokenizer.json'])
        self.assertIn('tokenizer.json from the Hub ({}): size is {} bytes, expected {}'.format(REPO, *sizes),
                      error_line(self, result))
        self.assertEqual(snapshot(self.dest), before)

    def test_forced_hub_that_cannot_be_reached_fails_at_once_with_one_line(self) -> None:
        started = time.monotonic()
        result = self.run_prepare(f'http://127.0.0.1:{closed_port()}', '--source', 'hub')
        self.assertLess(time.monotonic() - started, 15)  # no ~25 s retry back-off before giving up
        self.assertEqual(result.returncode, 2)
        error = error_line(self, result)
        self.assertTrue(error.startswith(f'prepare.py: error: cannot reach the Hugging Face Hub for {REPO}'), error)
        self.assertTrue(error.endswith('; run without --source hub to use the PyPI mirror'), error)
        self.assert_nothing_written()  # the folder it made for the download is taken back

    def test_hub_that_cannot_be_reached_falls_back_to_pypi_when_no_source_is_forced(self) -> None:
        result = self.run_prepare(f'http://127.0.0.1:{closed_port()}')
        self.assertEqual(result.returncode, 2)
        self.assertRegex(result.stderr, f'prepare.py: cannot reach the Hugging Face Hub for {REPO} \\(ConnectError: '
                                        '.*\\); using the PyPI mirror instead\n')
        self.assertEqual(error_line(self, result),
                         'prepare.py: error: pip download of the llama-cpp-python==0.3.36 sdist failed (exit 3, '
                         "pip's message is above); check pip's index configuration (pip config list) or try "
                         '--source hub')
        self.assert_nothing_written()

    def test_a_full_disk_during_pip_download_says_the_disk_is_full_not_to_check_the_index(self) -> None:
        result = self.run_prepare(f'http://127.0.0.1:{closed_port()}', '--source', 'pypi', pip=FULL_DISK_PIP)
        self.assertEqual(result.returncode, 2)
        self.assertIn('\nERROR: Could not install packages due to an OSError: [Errno 28] No space left on device\n',
                      result.stderr)  # pip's own message, passed on
        self.assertEqual(error_line(self, result), (
            'prepare.py: error: pip download of the llama-cpp-python==0.3.36 sdist failed (exit 1): the disk is full '
            f"(pip's message is above); free space in {self.tmp}, where pip downloads and builds, or "
            f'{prepare.ELSEWHERE}'))
        self.assert_nothing_written()

    def test_hub_answer_other_than_unreachable_is_an_error_not_a_fallback(self) -> None:
        with FakeHub({}) as hub:  # answers 404 to everything
            result = self.run_prepare(hub.endpoint)
        self.assertEqual(result.returncode, 2)
        error = error_line(self, result)
        self.assertTrue(error.startswith(f'prepare.py: error: the Hugging Face Hub did not serve {REPO}@{REVISION}/'
                                         'tokenizer.json: '), error)
        self.assertTrue(error.endswith(' (use --source pypi to prepare from the PyPI mirror instead)'), error)
        self.assertNotIn('PyPI mirror instead\n', result.stderr)
        self.assert_nothing_written()

    def test_forcing_the_other_source_re_prepares_and_drops_its_files(self) -> None:
        self.dest.mkdir()
        for name in ('tokenizer.json', 'vocab-vectors.inp', 'vocab-vectors.out'):
            (self.dest / name).write_bytes(b'from pypi')
        (self.dest / 'prepared.json').write_text('{"source": "pypi"}', encoding='utf-8')
        with FakeHub(GOOD_HUB_FILES) as hub:
            result = self.run_prepare(hub.endpoint, '--source', 'hub')
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(sorted(os.listdir(self.dest)), ['chat_template.jinja', 'prepared.json', 'tokenizer.json'])
        self.assertEqual(json.loads((self.dest / 'prepared.json').read_text(encoding='utf-8'))['source'], 'hub')

    def test_folder_holding_what_prepare_did_not_write_is_refused_not_replaced(self) -> None:
        (self.dest / 'chat_template.jinja').mkdir(parents=True)  # a folder under one of its file names
        (self.dest / 'chat_template.jinja' / 'notes.txt').write_bytes(b'mine')
        (self.dest / 'notes.txt').write_bytes(b'mine too')
        before = snapshot(self.dest)
        with FakeHub(GOOD_HUB_FILES) as hub:
            result = self.run_prepare(hub.endpoint)
        self.assertEqual(result.returncode, 2, result.stderr)
        self.assertEqual(error_line(self, result),
                         f'prepare.py: error: {self.dest} also holds chat_template.jinja/, notes.txt, which prepare.py'
                         ' did not write; it replaces the folder as a whole, so move that away or set'
                         ' CONTEXT_LAB_PREPARED to a folder in a place you can write to (prepare.py makes or replaces'
                         ' it; every script then reads the counter from there)')
        self.assertEqual(hub.requests, [])  # refused before any download
        self.assertEqual(snapshot(self.dest), before)
        self.assertEqual(sorted(os.listdir(self.tmp)), ['fake-pip', 'manifest.json', 'prepared'])

    def test_second_run_on_a_valid_folder_makes_no_request(self) -> None:
        write_prepared_dest(self.dest, self.manifest_sha)
        before = snapshot(self.dest)
        with FakeHub(GOOD_HUB_FILES) as hub:
            for extra in ([], ['--source', 'hub']):
                result = self.run_prepare(hub.endpoint, *extra)
                self.assertEqual(result.returncode, 0, result.stderr)
                self.assertEqual(result.stdout, f'{self.dest} is already complete and valid (source: hub: '
                                                'tokenizer.json, chat_template.jinja); nothing downloaded\n')
        self.assertEqual(hub.requests, [])
        self.assertEqual(snapshot(self.dest), before)

    def test_truncated_record_is_prepared_again_printing_why(self) -> None:
        write_prepared_dest(self.dest, self.manifest_sha)
        record_path = self.dest / 'prepared.json'
        record_path.write_text(record_path.read_text(encoding='utf-8')[:40], encoding='utf-8')
        with FakeHub(GOOD_HUB_FILES) as hub:
            result = self.run_prepare(hub.endpoint)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn(f'prepare.py: preparing {self.dest}: {record_path}: invalid JSON at line 1 column ', result.stderr)
        self.assertTrue(result.stdout.startswith('prepared from hub in '), result.stdout)
        self.assertEqual(result.stdout.count('\n'), 1, result.stdout)  # progress is on stderr, the result alone here
        self.assertEqual(check_prepared(self.dest, self.manifest, self.manifest_sha), ('hub', ''))

    def test_hub_download_that_breaks_off_is_one_clear_error_not_a_fallback(self) -> None:
        broken = {
            'connection dropped': httpx2.RemoteProtocolError('peer closed connection without sending complete body'),
            'size check failed': OSError('Consistency check failed: file should be of size 9 but has size 5\nRetry'),
        }
        for kind, error in broken.items():
            with self.subTest(kind), contextlib.ExitStack() as stack:
                stack.enter_context(mock.patch.object(huggingface_hub, 'get_hf_file_metadata'))
                stack.enter_context(mock.patch.object(huggingface_hub, 'hf_hub_download', side_effect=error))
                stack.enter_context(contextlib.redirect_stderr(io.StringIO()))
                with self.assertRaises(prepare.PrepareError) as raised:
                    prepare.stage_from_hub(self.tmp, self.manifest, self.manifest_sha)
                self.assertNotIsInstance(raised.exception, prepare.HubUnreachable)
                self.assertEqual(str(raised.exception), f'the Hugging Face Hub did not serve {REPO}@{REVISION}/'
                                 f"tokenizer.json: {str(error).splitlines()[0]} (use --source pypi to prepare from"
                                 ' the PyPI mirror instead)')

    def test_folder_that_cannot_be_made_suggests_the_environment_variable(self) -> None:
        (self.tmp / 'a-file').write_bytes(b'')
        dest = self.tmp / 'a-file' / 'prepared'
        with self.assertRaises(prepare.PrepareError) as raised, contextlib.redirect_stderr(io.StringIO()) as said:
            prepare.prepare(dest, 'hub', self.manifest, self.manifest_sha, prepare.DEFAULT, prepare.Archive(dest))
        self.assertNotIn('could not remove', said.getvalue())  # no temporary folder was made, so none is left
        message = str(raised.exception)
        self.assertTrue(message.startswith(f'cannot prepare {dest} ([Errno 20] Not a directory: '), message)
        self.assertTrue(message.endswith(f"); prepare.py builds the new folder beside it, in {self.tmp / 'a-file'},"
                                         ' and renames it into place, so check that folder (free space, permissions,'
                                         ' nothing in the way) or set CONTEXT_LAB_PREPARED to a folder in a place you'
                                         ' can write to (prepare.py makes or replaces it; every script then reads'
                                         ' the counter from there)'), message)


class StepInjector:
    """Counts the filesystem steps of a prepare.py run, and at step `at` (from 1) either fails with "No space
    left on device" instead of taking it, or takes it and then gets SIGINT, as Ctrl-C would deliver it: the
    interrupt lands between that step and the next."""

    STEPS = ((os, 'mkdir'), (os, 'replace'), (os, 'rename'), (os, 'chmod'), (shutil, 'rmtree'), (Path, 'write_text'))

    def __init__(self, at: int, kind: str):
        self.at, self.kind, self.taken, self.hit = at, kind, [], None

    def __enter__(self) -> 'StepInjector':
        self.stack = contextlib.ExitStack()
        for owner, name in self.STEPS:
            self.stack.enter_context(mock.patch.object(owner, name, self.wrap(name, getattr(owner, name))))
        return self

    def __exit__(self, *exc_info) -> None:
        self.stack.close()

    def wrap(self, name: str, real):
        def step(*args, **kwargs):
            self.taken.append(name)
            if len(self.taken) != self.at:
                return real(*args, **kwargs)
            self.hit = name
            if self.kind == 'failure':
                raise OSError(28, 'No space left on device')
            result = real(*args, **kwargs)
            os.kill(os.getpid(), signal.SIGINT)
            return result
        return step


class SwapTest(HubTest):
    """A run stopped or failing between any two steps of building the new folder and swapping it in leaves dest
    byte for byte as it was, or (once the swap is done) complete and new; never a mix, and no temporary folder
    unless the last line names it. prepare.py runs in this process, its Hub fetch replaced by local files."""

    # The steps of a run, worked out from the design: make the temporary folder and new/ in it, move the two
    # files in, write prepared.json, copy the old folder's mode, rename the old folder away and the new one into
    # place, remove the temporary folder. Without an old folder there is no mode to copy and nothing to rename away.
    STEPS = {'folder': ['mkdir', 'mkdir', 'replace', 'replace', 'write_text', 'chmod', 'rename', 'rename', 'rmtree'],
             'absent': ['mkdir', 'mkdir', 'replace', 'replace', 'write_text', 'rename', 'rmtree']}
    STEPS['symlink'] = STEPS['folder']

    def setUp(self) -> None:
        super().setUp()
        for signum in (signal.SIGINT, signal.SIGTERM):  # common.run makes SIGTERM act as Ctrl-C
            self.addCleanup(signal.signal, signum, signal.signal(signum, signal.default_int_handler))

    def download(self, repo: str, name: str, cache_dir: Path, **kwargs) -> str:
        """hf_hub_download's stand-in: the file, written beside the cache folder it was given (in workdir)."""
        (path := cache_dir.parent / name).write_bytes(GOOD_HUB_FILES[name])
        return str(path)

    def layout(self, kind: str) -> Path:
        """Make dest as kind says; return the folder a swap replaces (a symlink's target)."""
        for path in (self.dest, self.tmp / 'real', *self.tmp.glob('.prepared.swap-*')):  # the last run's
            if path.is_symlink() or path.is_file():
                path.unlink()
            elif path.exists():
                shutil.rmtree(path)
        target = self.tmp / 'real' / 'prepared' if kind == 'symlink' else self.dest
        if kind != 'absent':  # an old folder prepared for another manifest, with a mode of its own
            write_prepared_dest(target, '0' * 64)
            target.chmod(0o750)
        if kind == 'symlink':
            self.dest.symlink_to(target)
        return target

    def run_main(self, injector: StepInjector) -> tuple[int, str, str]:
        """prepare.py's entry point, run as the script runs it, in this process."""
        argv = ['prepare.py', '--manifest', str(self.tmp / 'manifest.json'), '--source', 'hub']
        out, err = io.StringIO(), io.StringIO()
        with contextlib.ExitStack() as stack:
            stack.enter_context(mock.patch.object(huggingface_hub, 'get_hf_file_metadata'))
            stack.enter_context(mock.patch.object(huggingface_hub, 'hf_hub_download', side_effect=self.download))
            stack.enter_context(mock.patch.object(sys, 'argv', argv))
            stack.enter_context(mock.patch.object(prepare, 'PREPARED', self.dest))  # as CONTEXT_LAB_PREPARED would
            stack.enter_context(contextlib.redirect_stdout(out))
            stack.enter_context(contextlib.redirect_stderr(err))
            exit = stack.enter_context(self.assertRaises(SystemExit))
            stack.enter_context(injector)
            common.run(prepare.main)
        return exit.exception.code, out.getvalue(), err.getvalue()

    def test_uninterrupted_run_takes_the_steps_worked_out_by_hand_and_keeps_the_folders_mode(self) -> None:
        for kind, steps in self.STEPS.items():
            with self.subTest(dest=kind):
                target = self.layout(kind)
                injector = StepInjector(0, 'failure')
                code, _, err = self.run_main(injector)
                self.assertEqual((code, injector.taken), (0, steps), err)
                if kind != 'absent':
                    self.assertEqual(target.stat().st_mode & 0o777, 0o750)

    def test_interrupt_or_failure_at_any_step_leaves_dest_as_it_was_or_complete(self) -> None:
        runs = 0
        for kind, steps in self.STEPS.items():
            for failing in ('interrupt', 'failure'):
                for at in range(1, len(steps) + 1):
                    with self.subTest(dest=kind, step=at, what=failing):
                        self.check_one_run(kind, failing, at)
                        runs += 1
        self.assertEqual(runs, 2 * (9 + 9 + 7))

    def check_one_run(self, kind: str, failing: str, at: int) -> None:
        target = self.layout(kind)
        before, before_identity = snapshot(target), file_identity(target)
        injector = StepInjector(at, failing)
        code, out, err = self.run_main(injector)
        last = err.splitlines()[-1] if err else ''
        self.assertEqual(injector.hit, self.STEPS[kind][at - 1])
        self.assertEqual(self.dest.is_symlink(), kind == 'symlink')
        # From the first rename to the end, signals are held: an interrupt there lets the run finish. A failure
        # there is undone, except in the last step, the removal, which comes after the swap.
        first_rename = self.STEPS[kind].index('rename') + 1
        finishes = at >= first_rename if failing == 'interrupt' else injector.hit == 'rmtree'
        self.assertEqual(code == 0, finishes, err)
        if code == 0:  # dest is the complete new folder
            self.assertEqual(check_prepared(self.dest, self.manifest, self.manifest_sha, 'hub'), ('hub', ''))
            self.assertNotEqual(file_identity(target), before_identity)
            self.assertTrue(out.startswith('prepared from hub in '), out)
        else:
            self.assertEqual(snapshot(target), before)
            self.assertEqual(file_identity(target), before_identity)
            self.assertEqual(out, '')
            if failing == 'interrupt':
                self.assertEqual((code, last), (130, f'prepare.py: interrupted; {self.dest} is as it was and no'
                                                      ' temporary files are left'))
            else:
                self.assertEqual(code, 2, err)
                self.assertTrue(last.startswith(f'prepare.py: error: cannot prepare {self.dest} ([Errno 28] No space'
                                                ' left on device)'), last)
        left = sorted(target.parent.glob('.prepared.swap-*'))
        if injector.hit == 'rmtree' and failing == 'failure':  # the removal failed: the message names what stays
            self.assertEqual(len(left), 1)
            self.assertIn(f'prepare.py: could not remove {left[0]} ([Errno 28] No space left on device); remove it '
                          'yourself', err)
            shutil.rmtree(left[0])
        else:
            self.assertEqual(left, [])
        self.assertNotIn('Traceback', err)


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


class SdistTest(TinyVocabTest):
    """The PyPI source after pip's download: a tiny sdist is checked, its members extracted and checked, the
    tokenizer built from its GGUF and checked against the vectors and the pin, and dest replaced."""

    def sdist_and_manifest(self, members: dict[str, bytes], pinned: dict[str, bytes] | None = None,
                           extra: list[tuple[str, bytes]] = (), symlinks: list[tuple[str, str]] = ()):
        """A tiny sdist holding these members (after any extra entries), and a manifest that pins it, the
        members given as pinned (default: the good ones) and the tokenizer.json built from the tiny GGUF."""
        sdist = self.tmp / 'tiny_sdist-1.0.tar.gz'
        data = write_sdist(sdist, [*extra, *((MEMBER_PATHS[key], body) for key, body in members.items())], symlinks)
        manifest, manifest_sha = write_manifest(self.tmp, sdist=data, members=pinned or self.good, built=self.built)
        return sdist, manifest, manifest_sha

    def run_sdist(self, sdist: Path, manifest: dict, manifest_sha: str) -> str:
        """Stage the sdist into dest as prepare.py does after pip; its PrepareError's message, or '' if it worked."""
        with contextlib.redirect_stderr(io.StringIO()):
            try:
                replace_folder(self.dest, lambda workdir: prepare.stage_from_sdist(
                    sdist, workdir, manifest, manifest_sha, prepare.DEFAULT, {}), PREPARE_SAYS)
            except prepare.PrepareError as error:
                return str(error)
        return ''

    def test_matching_sdist_builds_the_tokenizer_and_records_every_vector(self) -> None:
        sdist, manifest, manifest_sha = self.sdist_and_manifest(self.good)
        self.assertEqual(self.run_sdist(sdist, manifest, manifest_sha), '')
        expected = ['prepared.json', 'tokenizer.json', 'vocab-vectors.inp', 'vocab-vectors.out']
        self.assertEqual(sorted(os.listdir(self.dest)), expected)
        self.assertEqual((self.dest / 'vocab-vectors.inp').read_bytes(), TINY_INP)
        self.assertEqual((self.dest / 'vocab-vectors.out').read_bytes(), TINY_OUT)
        # The installed tokenizer, read by the tokenizers library itself: the tiny vocabulary's ids, and the ids
        # worked out by hand for the three vectors (both merges used).
        installed = Tokenizer.from_file(str(self.dest / 'tokenizer.json'))
        self.assertEqual(installed.get_vocab(with_added_tokens=True), {token: i for i, token in enumerate(TINY_TOKENS)})
        self.assertEqual([installed.encode(text, add_special_tokens=False).ids for text in ('ab', ' ab<start_of_turn>a',
                                                                                             'b a')],
                         [[7], [9, 4, 5], [6, 8, 5]])
        record = json.loads((self.dest / 'prepared.json').read_text(encoding='utf-8'))
        self.assertEqual((record['source'], record['vectors_checked'], record['manifest_sha256']),
                         ('pypi', 3, manifest_sha))
        self.assertEqual(record['files']['tokenizer.json'], {'size': len(self.built), 'sha256': sha256(self.built)})
        self.assertEqual(check_prepared(self.dest, manifest, manifest_sha, 'pypi'), ('pypi', ''))

    def test_sdist_whose_sha256_differs_from_the_manifest_is_refused(self) -> None:
        sdist, manifest, manifest_sha = self.sdist_and_manifest(self.good)
        manifest['pypi_mirror']['sdist_sha256'] = '0' * 64
        self.assertEqual(self.run_sdist(sdist, manifest, manifest_sha),
                         f"{sdist.name}: sha256 is {sha256(sdist.read_bytes())}, expected {'0' * 64}; refusing it "
                         '(manifest pypi_mirror.sdist_sha256)')
        self.assert_nothing_written()

    def test_corrupted_member_is_refused_naming_it_and_nothing_is_written(self) -> None:
        bad_inp = TINY_INP.replace(b'ab', b'ba', 1)  # same size, other bytes
        sdist, manifest, manifest_sha = self.sdist_and_manifest(self.good | {'vectors_input': bad_inp})
        self.assertEqual(self.run_sdist(sdist, manifest, manifest_sha),
                         f"{MEMBER_PATHS['vectors_input']} (in {sdist.name}): sha256 is {sha256(bad_inp)}, expected "
                         f'{sha256(TINY_INP)}; refusing it')
        self.assert_nothing_written()

    def test_path_traversal_member_is_never_extracted(self) -> None:
        # '../../evil' from the extraction folder (.prepared.swap-*/members, beside dest) would land in self.tmp.
        sdist, manifest, manifest_sha = self.sdist_and_manifest(self.good, extra=[('../../evil', b'escaped')])
        self.assertEqual(self.run_sdist(sdist, manifest, manifest_sha), '')
        self.assertEqual(list(self.tmp.rglob('evil')), [])
        self.assertEqual(sorted(os.listdir(self.dest)),
                         ['prepared.json', 'tokenizer.json', 'vocab-vectors.inp', 'vocab-vectors.out'])

    def test_member_that_is_a_symlink_is_refused(self) -> None:
        members = {key: data for key, data in self.good.items() if key != 'vectors_output'}
        links = [(MEMBER_PATHS['vectors_output'], '/etc/passwd')]
        sdist, manifest, manifest_sha = self.sdist_and_manifest(members, symlinks=links)
        self.assertEqual(self.run_sdist(sdist, manifest, manifest_sha),
                         f"{sdist.name}: member {MEMBER_PATHS['vectors_output']} is not a regular file; refusing it")
        self.assert_nothing_written()

    def test_missing_member_is_refused_naming_it(self) -> None:
        members = {key: data for key, data in self.good.items() if key != 'vocab'}
        sdist, manifest, manifest_sha = self.sdist_and_manifest(members)
        self.assertEqual(self.run_sdist(sdist, manifest, manifest_sha),
                         f"{sdist.name}: member {MEMBER_PATHS['vocab']} is missing from the archive")
        self.assert_nothing_written()

    def test_vector_that_does_not_encode_as_expected_is_refused(self) -> None:
        bad = self.good | {'vectors_output': TINY_OUT.replace(b'9 4 5', b'9 4 6')}
        sdist, manifest, manifest_sha = self.sdist_and_manifest(bad, pinned=bad)
        self.assertEqual(self.run_sdist(sdist, manifest, manifest_sha),
                         "test vector 1 ' ab<start_of_turn>a': built tokenizer gives [9, 4, 5], llama.cpp expects "
                         '[9, 4, 6]; refusing the built tokenizer.json')
        self.assert_nothing_written()

    def test_vector_count_other_than_the_manifest_is_refused(self) -> None:
        sdist, manifest, manifest_sha = self.sdist_and_manifest(self.good)
        manifest['pypi_mirror']['test_vectors'] = 46
        inp, out = (Path(MEMBER_PATHS[key]).name for key in ('vectors_input', 'vectors_output'))
        self.assertEqual(self.run_sdist(sdist, manifest, manifest_sha),
                         f'test vectors: {inp} has 3 strings and {out} has 3 id lines, expected 46 of each (manifest '
                         'pypi_mirror.test_vectors)')
        self.assert_nothing_written()

    def test_built_tokenizer_other_than_the_pin_is_refused_after_the_vectors_pass(self) -> None:
        pin = REAL_MANIFEST['pypi_mirror']['built_tokenizer']
        for field, value, mismatch in [
            ('sha256', '0' * 64, f"sha256 is {sha256(self.built)}, expected {'0' * 64}"),
            ('size', len(self.built) + 1, f'size is {len(self.built)} bytes, expected {len(self.built) + 1}'),
        ]:
            with self.subTest(field):
                sdist, manifest, manifest_sha = self.sdist_and_manifest(self.good)
                manifest['pypi_mirror']['built_tokenizer'][field] = value
                with mock.patch.object(prepare, 'check_vectors', wraps=prepare.check_vectors) as vectors:
                    message = self.run_sdist(sdist, manifest, manifest_sha)
                vectors.assert_called_once()  # it was built and passed every vector, and still refused
                self.assertTrue(message.startswith(f'the tokenizer.json built from the GGUF: {mismatch}; refusing it '
                                                   '(manifest pypi_mirror.built_tokenizer). Rebuilding it byte for '
                                                   f"byte needs {pin['built_with']}; this environment has "
                                                   'tokenizers=='), message)
                self.assertNotIn('\n', message)
                self.assert_nothing_written()


class CounterSdistTest(TinyVocabTest):
    """Another counter from the same sdist: its vocab, test vectors and official template are checked, the tokenizer
    is built once for every counter of that vocab, and each counter gets a folder and record of its own."""

    TEMPLATE = b"{{ bos_token }}{% for m in messages %}{{ m['content'] }}{% endfor %}\n"

    def counter_manifest(self, suffix: str = '<start_of_turn>model\n') -> tuple[Path, dict, str]:
        """A tiny sdist holding the tiny vocab and a template, and a manifest with counters tiny-a and tiny-b of
        that vocab, whose chat format ends in `suffix`."""
        sdist = self.tmp / 'tiny_sdist-1.0.tar.gz'
        data = write_sdist(sdist, [*((MEMBER_PATHS[key], body) for key, body in self.good.items()),
                                   ('tiny/template.jinja', self.TEMPLATE)])
        manifest = write_manifest(self.tmp, sdist=data, members=self.good, built=self.built)[0]
        pin = {'size': len(self.built), 'sha256': sha256(self.built)}
        manifest['vocabs'] = {'tiny': {
            'members': {key: {'path': MEMBER_PATHS[key], 'size': len(body), 'sha256': sha256(body)}
                        for key, body in self.good.items()}, 'built_tokenizer': pin,
            'vocab_tokens': len(TINY_TOKENS), 'bpe_merges': len(TINY_MERGES), 'special_token_types': [3],
            'test_vectors': 3, 'split': [], 'ignore_merges': False, 'nfc': False, 'prepend_space': False,
            'rstrip': [], 'added_tokens': []}}
        form = {'prefix': '<bos>', 'suffix': suffix, 'close': '<eos>', 'trim': True, 'no_system': None,
                'drop_empty_system': False, 'open': {role: f'<start_of_turn>{role}' for role in ('system', 'user',
                                                                                                  'assistant')}}
        template = {'path': 'tiny/template.jinja', 'size': len(self.TEMPLATE), 'sha256': sha256(self.TEMPLATE)}
        for name in ('tiny-a', 'tiny-b'):
            manifest['counters'][name] = {'publisher_model': f'lab/{name}', 'vocab': 'tiny', 'template': template,
                                          'fixed_inputs': {}, 'format': form, 'not_counted': []}
        data = json.dumps(manifest, indent=2).encode()
        (self.tmp / 'manifest.json').write_bytes(data)
        return sdist, manifest, sha256(data)

    def test_counters_of_one_vocab_build_it_once_and_each_gets_its_checked_folder(self) -> None:
        sdist, manifest, manifest_sha = self.counter_manifest()
        built = {}
        with mock.patch.object(prepare, 'build_tokenizer', wraps=prepare.build_tokenizer) as build, \
                contextlib.redirect_stderr(io.StringIO()):
            for name in ('tiny-a', 'tiny-b'):
                folder = counter_folder(name, self.dest)
                replace_folder(folder, lambda workdir: prepare.stage_from_sdist(sdist, workdir, manifest, manifest_sha, name,
                                                                         built), PREPARE_SAYS)
        build.assert_called_once()
        for name in ('tiny-a', 'tiny-b'):
            folder = self.tmp / f'prepared-{name}'
            self.assertEqual(sorted(os.listdir(folder)), ['chat_template.jinja', 'prepared.json', 'tokenizer.json',
                                                          'vocab-vectors.inp', 'vocab-vectors.out'])
            self.assertEqual((folder / 'chat_template.jinja').read_bytes(), self.TEMPLATE)
            self.assertEqual((folder / 'tokenizer.json').read_bytes(), self.built)
            record = json.loads((folder / 'prepared.json').read_text(encoding='utf-8'))
            self.assertEqual((record['counter'], record['publisher_model']), (name, f'lab/{name}'))
            self.assertEqual(check_prepared(folder, manifest, manifest_sha, name=name), ('pypi', ''))
        self.assertEqual(check_prepared(self.tmp / 'prepared-tiny-a', manifest, manifest_sha, name='tiny-b'),
                         (None, 'it was prepared for another counter (tiny-a)'))

    def test_counter_whose_format_writes_a_token_the_vocab_lacks_is_refused_and_nothing_is_written(self) -> None:
        sdist, manifest, manifest_sha = self.counter_manifest(suffix='<start_of_turn>model\n<think>\n\n</think>\n\n')
        folder = counter_folder('tiny-a', self.dest)
        with contextlib.redirect_stderr(io.StringIO()), self.assertRaises(prepare.PrepareError) as caught:
            replace_folder(folder, lambda workdir: prepare.stage_from_sdist(
                sdist, workdir, manifest, manifest_sha, 'tiny-a', {}), PREPARE_SAYS)
        self.assertEqual(str(caught.exception), f"counter tiny-a: its chat format writes </think>, which "
                                                f"{Path(MEMBER_PATHS['vocab']).name} holds as no special token; "
                                                'refusing the counter rather than estimating its counts')
        self.assertFalse(folder.exists())
        self.assertEqual([name for name in os.listdir(self.tmp) if name.startswith('.prepared')], [])

    def test_the_archive_set_up_downloaded_is_kept_checked_and_reused_not_downloaded_again(self) -> None:
        sdist, manifest, _ = self.counter_manifest()
        manifest['counters'] = {name: manifest['counters'][name] for name in (prepare.DEFAULT, 'tiny-a', 'tiny-b')}
        (self.tmp / 'manifest.json').write_bytes(data := json.dumps(manifest).encode())  # no other vocab to refer to
        log, kept = self.tmp / 'pip.log', self.tmp / '.prepared.archive' / sdist.name
        env = os.environ | {'PYTHONPATH': str(fake_pip(self.tmp / 'fake', COPYING_PIP)), 'FAKE_SDIST': str(sdist),
                            'FAKE_PIP_LOG': str(log), PREPARED_ENV: str(self.dest)}

        def run(*args: str) -> str:
            result = subprocess.run([sys.executable, 'prepare.py', '--manifest', str(self.tmp / 'manifest.json'),
                                     *args], cwd=HERE, env=env, capture_output=True, text=True, timeout=TIMEOUT,
                                    stdin=subprocess.DEVNULL)
            self.assertEqual(result.returncode, 0, result.stderr)
            return result.stderr

        said = run('--source', 'pypi')  # set-up, where the Hub cannot be reached
        self.assertIn(f'prepare.py: kept it as {kept} for later runs (git-ignored; remove it to free the space)\n', said)
        self.assertEqual((log.read_text(encoding='utf-8'), kept.read_bytes()), ('downloaded\n', sdist.read_bytes()))
        said = run('--counter', 'tiny-a')
        self.assertIn(f'prepare.py: using {kept}, kept by an earlier run: its sha256 is the pinned one\n', said)
        self.assertEqual(log.read_text(encoding='utf-8'), 'downloaded\n')  # not downloaded again
        kept.write_bytes(sdist.read_bytes().replace(b'\0', b'\1', 1))  # same size, another sha256: downloaded again
        self.assertNotIn('using', run('--counter', 'tiny-b'))
        self.assertEqual((log.read_text(encoding='utf-8'), kept.read_bytes()), ('downloaded\n' * 2, sdist.read_bytes()))
        for name in (prepare.DEFAULT, 'tiny-a', 'tiny-b'):
            self.assertEqual(check_prepared(counter_folder(name, self.dest), manifest, sha256(data), name=name),
                             ('pypi', ''))
        self.assertEqual([name for name in os.listdir(self.tmp) if '.swap-' in name], [])
        if subprocess.run(['git', 'rev-parse'], cwd=HERE, capture_output=True).returncode == 0:
            self.assertEqual(subprocess.run(['git', 'check-ignore', '-q', '--no-index', f'.prepared.archive/{sdist.name}'],
                                            cwd=HERE).returncode, 0)

    def test_unknown_counter_or_one_asked_of_the_hub_is_one_line_before_anything_is_fetched(self) -> None:
        for args, message in (
                (['--counter', 'llama-4'], f"--counter llama-4: no such counter; the counters are: "
                                           f"{', '.join(REAL_MANIFEST['counters'])} (or all)"),
                (['--counter', 'llama-3.1', '--source', 'hub'], '--source hub: only gemma-4-e2b is on the Hub; the '
                                                                'other counters come from the PyPI archive')):
            with self.subTest(args[1]):
                result = subprocess.run([sys.executable, str(HERE / 'prepare.py'), *args], capture_output=True,
                                        text=True, timeout=TIMEOUT, check=False,
                                        env=os.environ | {PREPARED_ENV: str(self.dest)})
                self.assertEqual((result.returncode, result.stdout, result.stderr),
                                 (2, '', f'prepare.py: error: {message}\n'))
                self.assert_nothing_written()


def running(pid: int) -> bool:
    """Whether process pid is alive (a zombie waiting to be reaped is not); Linux /proc."""
    try:
        stat = Path(f'/proc/{pid}/stat').read_text(encoding='utf-8')
    except FileNotFoundError:
        return False
    return stat.rsplit(')', 1)[1].split()[0] != 'Z'


class InterruptedPipTest(DestFolderTest):
    def test_ctrl_c_during_pip_download_leaves_no_temporary_files_and_no_process(self) -> None:
        self.interrupt_during_pip(signal.SIGINT)  # what Ctrl-C sends; pip, in its own session, gets nothing

    def test_sigterm_or_a_closed_terminal_during_pip_download_clean_up_as_ctrl_c_does(self) -> None:
        for signum in (signal.SIGTERM, signal.SIGHUP):
            with self.subTest(signal.Signals(signum).name):
                self.interrupt_during_pip(signum)

    def interrupt_during_pip(self, signum: int) -> None:
        for folder in (self.dest, self.tmp / 'fake', self.tmp / 'system-tmp'):  # from an earlier signal's run
            shutil.rmtree(folder, ignore_errors=True)
        system_tmp, marker = self.tmp / 'system-tmp', self.tmp / 'marker'
        marker.unlink(missing_ok=True)
        system_tmp.mkdir()
        env = os.environ | {'PYTHONPATH': str(fake_pip(self.tmp / 'fake', WAITING_PIP)), 'TMPDIR': str(system_tmp),
                            'FAKE_PIP_MARKER': str(marker), PREPARED_ENV: str(self.dest)}
        with ctrl_c_reaches_children():
            process = subprocess.Popen([sys.executable, 'prepare.py', '--source', 'pypi'],
                                       cwd=HERE, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                       stderr=subprocess.PIPE, text=True)
        self.addCleanup(process.kill)
        deadline = time.monotonic() + TIMEOUT
        while not marker.exists() or marker.read_text(encoding='utf-8').count('\n') < 3:
            self.assertLess(time.monotonic(), deadline, 'the fake pip never started')
            self.assertIsNone(process.poll(), process.stderr.read() if process.poll() is not None else '')
            time.sleep(0.1)
        pip_tmp, *pids = marker.read_text(encoding='utf-8').split()
        for pid in map(int, pids):  # should the test fail before they are stopped, stop them anyway
            self.addCleanup(lambda pid=pid: running(pid) and os.kill(pid, signal.SIGKILL))
        self.assertEqual(Path(pip_tmp).parent.parent, self.tmp)  # .prepared.swap-*/pip-tmp, beside dest
        self.assertTrue(Path(pip_tmp).parent.name.startswith(f'.prepared.swap-{process.pid}-'), pip_tmp)
        self.assertTrue((Path(pip_tmp) / 'pip-build-env').exists())
        process.send_signal(signum)
        stdout, stderr = process.communicate(timeout=TIMEOUT)
        self.assertEqual(process.returncode, 130, stderr)
        self.assertNotIn('Traceback', stderr)
        self.assertEqual(stderr.splitlines()[-1],
                         f'prepare.py: interrupted; {self.dest} is as it was and no temporary files are left')
        self.assertEqual(stdout, '')
        self.assertFalse(self.dest.exists())  # it did not exist before, and the run takes back what it made
        self.assertFalse(Path(pip_tmp).parent.exists())
        self.assertEqual(os.listdir(system_tmp), [])
        self.assertEqual([pid for pid in map(int, pids) if running(pid)], [])


class KilledRunTest(DestFolderTest):
    def test_the_download_of_a_run_killed_outright_is_removed_by_the_next_run(self) -> None:
        # As after set-up: prepared/ is complete (links to the lab's own), and --counter all downloads the archive.
        self.dest.mkdir()
        for path in PREPARED.iterdir():
            (self.dest / path.name).symlink_to(path)
        self.assertEqual(check_prepared(self.dest, *read_manifest())[1], '')  # so no run asks the Hub
        marker = self.tmp / 'marker'
        command = [sys.executable, 'prepare.py', '--counter', 'all']
        env = hub_env(self.tmp, f'http://127.0.0.1:{closed_port()}', WAITING_PIP) | {'FAKE_PIP_MARKER': str(marker)}
        process = subprocess.Popen(command, cwd=HERE, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                   stderr=subprocess.DEVNULL)
        self.addCleanup(process.kill)
        deadline = time.monotonic() + TIMEOUT
        while not marker.exists() or marker.read_text(encoding='utf-8').count('\n') < 3:
            self.assertLess(time.monotonic(), deadline, 'the fake pip never started')
            time.sleep(0.1)
        pip_tmp, *pids = marker.read_text(encoding='utf-8').split()
        process.kill()  # SIGKILL: no clean-up runs
        process.wait()
        for pid in map(int, pids):  # pip, in a session of its own, outlives it; stopped here before the next run
            self.addCleanup(lambda pid=pid: running(pid) and os.kill(pid, signal.SIGKILL))
            os.kill(pid, signal.SIGKILL)
        left, built = Path(pip_tmp).parent, list(REAL_MANIFEST['counters'])[1]  # the first counter after the default
        self.assertEqual(sorted(self.tmp.glob('.prepared*.swap-*')), [left])  # its swap folder, pip's download in it
        self.assertTrue(left.name.startswith(f'.prepared-{built}.swap-{process.pid}-'), left)
        env['PYTHONPATH'] = str(fake_pip(self.tmp / 'failing', FAILING_PIP))
        result = subprocess.run(command, cwd=HERE, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                                timeout=TIMEOUT)
        self.assertEqual(result.returncode, 2, result.stderr)  # the stand-in pip fails; the leftover goes all the same
        self.assertIn(f'prepare.py: removed {left.name}, left in {self.tmp} by an earlier run that was stopped\n',
                      result.stderr)
        self.assertEqual([name for name in os.listdir(self.tmp) if name.startswith('.prepared')], [])


if __name__ == '__main__':
    unittest.main()
