"""Tests for prepare.py's Hub source: each test is named after the failure it pins.

Run: .venv/bin/python -m unittest -v test_prepare_hub.py   (no network: the "Hub" is a local fake server)

The Hub tests run prepare.py in a subprocess, because huggingface_hub reads HF_ENDPOINT when it is imported;
the fake Hub speaks the wire format hf_hub_download uses (HEAD then GET on /{repo}/resolve/{revision}/{file},
X-Repo-Commit, ETag, Content-Length, and for LFS-style files a redirect to a CDN on another origin with
X-Linked-Etag / X-Linked-Size). Both the Hub and its CDN listen on 127.0.0.1 only, each on its own port. Where
pip would run, a stand-in found first through PYTHONPATH runs instead. Every file lives in a temp folder.
"""
import contextlib
import hashlib
import io
import json
import os
import subprocess
import threading
import time
import unittest
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from unittest import mock
from urllib.parse import urlsplit

import httpx2
import huggingface_hub

import prepare
from prepared_folder import check_prepared
from test_support import closed_port
from test_support_fixtures import sha256
from test_support_prepare import GOOD_HUB_FILES, HubTest, REPO, REVISION, snapshot, write_prepared_dest


LFS_FILES = {'tokenizer.json'}  # on the real Hub this one is an LFS file served through a CDN redirect
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


def error_line(test: unittest.TestCase, result: subprocess.CompletedProcess) -> str:
    """The one error line of a failed run: the last line of stderr, after any progress, and no traceback."""
    test.assertNotIn('Traceback', result.stderr)
    lines = result.stderr.splitlines()
    test.assertEqual([line for line in lines if line.startswith('prepare.py: error:')], lines[-1:], result.stderr)
    return lines[-1]


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
        self.assertIn(f'prepare.py: preparing {self.dest}: {record_path}: invalid JSON at line 1 column ',
                      result.stderr)
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


if __name__ == '__main__':
    unittest.main()
