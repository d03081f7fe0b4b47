"""Tests for real_server.py, and the real server end to end: each test is named after the failure it pins.

Run: .venv/bin/python -m unittest -v test_real_server.py

The end-to-end tests are opt-in: they run only with CONTEXT_LAB_REAL_SERVER=1 and where `real_server.py build` has
built llama.cpp's server and the pinned models (12 to 17 minutes, once per machine), and are skipped otherwise with
that command in the reason; CI sets neither, even on a machine where the server is built.

    CONTEXT_LAB_REAL_SERVER=1 .venv/bin/python -m unittest -v test_real_server.py
 They start the server on 127.0.0.1 and count every request the four rules build on cases.json and
agent-cases.json twice, with the lab's counter for the served GGUF and with the server's own
/v1/chat/completions/input_tokens (through the lab's client); they pin it, record a sample through
`answer_check.py record`, kill the recording part-way, resume it and grade it; and they stop the server whatever
happens. The other tests run a stand-in `llama-server` (a small Python script) from a temp folder.
"""
import contextlib
import hashlib
import json
import os
from pathlib import Path
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time
import unittest
from unittest import mock

import requests

from answer_model import PARTIAL_SUFFIX, chat_body, each_answer
from case_set import load_cases
from common import HERE, LabError, python_command
import gguf_counter
from lab_files import PREPARED_JSON, to_json
from openai_client import OpenAIClient
from prepared_folder import TOKENIZER_JSON, counter_folder, read_manifest
import real_server
from strategies import RULES
from test_support import closed_port
from tokenizer import TokenCounter

CASE_SETS = ('cases.json', 'agent-cases.json')
QWEN, SMOLLM2 = 'qwen2.5-coder-0.5b-instruct', 'smollm2-135m-instruct'
# qwen-answer-model.json's counter and options (docs/answer-check.md), with two seeds: record --sample 1 then asks
# for SAMPLE answers, 4 rules x 1 case x 2 seeds.
PIN_OPTIONS = ('--counter', 'qwen-2.5', '--temperature', '0.7', '--top-p', '0.8', '--top-k', '20',
               '--repeat-penalty', '1.1', '--seeds', '1', '2')
SAMPLE = 8
RECORD_SECONDS = 900  # the longest a pin, a record or a grading may take on a loaded 2-core machine
OPT_IN = 'CONTEXT_LAB_REAL_SERVER'  # 1 runs the end-to-end tests, which start the real server for minutes
# A stand-in server: answers /health, starts a child of its own (the real one has none, but a group must stop
# whole), writes its pid and the child's, then serves until stopped.
FAKE_SERVER = """#!{python}
import http.server, subprocess, sys
argv = sys.argv
child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)'])
open(argv[0] + '.pids', 'w').write(f'{{child.pid}}\\n')
class Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200 if self.path == '/health' else 404); self.end_headers()
    def log_message(self, *args): pass
http.server.HTTPServer((argv[argv.index('--host') + 1], int(argv[argv.index('--port') + 1])), Health).serve_forever()
"""


def count_mismatches(base: str, count) -> tuple[int, list[tuple]]:
    """(requests counted, [(case set, case, rule, lab's count, server's count)] where the two differ), the server's
    count asked for by the lab's own client."""
    client = OpenAIClient(model := {'api': 'openai', 'base_url': base + '/v1', 'model_id': None, 'options': {}})
    counted, differ = 0, []
    for case_set in CASE_SETS:
        for case in load_cases(HERE / case_set):
            for rule, choose in RULES.items():
                messages = choose(case, count)['messages']
                counted, lab, server = counted + 1, count(messages), client.count(chat_body(model, messages, 0, 0, 0))
                if lab != server:
                    differ.append((case_set, case['id'], rule, lab, server))
    return counted, differ


def answer_check(*argv: str) -> subprocess.CompletedProcess:
    """`answer_check.py ARGV` in a process of its own, as a user runs it."""
    return subprocess.run([sys.executable, 'answer_check.py', *argv], cwd=HERE, capture_output=True, text=True,
                          timeout=RECORD_SECONDS)


def answers_in(partial: Path) -> list[dict]:
    """The answers a partial recording keeps; a line a kill cut off is none."""
    kept = []
    for line in partial.read_text(encoding='utf-8').splitlines()[1:] if partial.exists() else []:
        with contextlib.suppress(ValueError):
            kept += [entry['answer'] for entry in [json.loads(line)] if 'answer' in entry]
    return kept


def killed_part_way(argv: tuple, partial: Path) -> tuple[int, list[dict]]:
    """Run `answer_check.py ARGV` and SIGKILL it once partial keeps an answer: (its exit status, the answers kept)."""
    with tempfile.TemporaryFile() as log:
        process = subprocess.Popen([sys.executable, 'answer_check.py', *argv], cwd=HERE, stdout=log, stderr=log,
                                   start_new_session=True)
        try:
            deadline = time.monotonic() + RECORD_SECONDS
            while not answers_in(partial) and process.poll() is None and time.monotonic() < deadline:
                time.sleep(0.05)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    return process.returncode, answers_in(partial)


def real_server_skip() -> str | None:
    """Why the end-to-end tests do not run here (not asked for, or no server built), or None."""
    build = f'`{real_server.BUILD_COMMAND}` (12 to 17 minutes, once per machine)'
    if os.environ.get(OPT_IN) != '1':
        return f'opt-in: set {OPT_IN}=1 once {build} has built the real server'
    return f'the real server is not built ({why}): run {build}' if (why := real_server.check_server()) else None


def served_counter(test: unittest.TestCase, model: str) -> TokenCounter:
    """The lab's counter for the served GGUF, recognised and checked as prepare.py --counter-from does; the test is
    skipped, naming the command, where that counter is not prepared (prepare.py --counter all leaves a GGUF's out)."""
    path = real_server.SERVER / real_server.MODELS[model]['file']
    fields, manifest = gguf_counter.read_gguf(path), read_manifest()[0]
    name = gguf_counter.counter_for(path, fields, manifest)
    if not (counter_folder(name) / TOKENIZER_JSON).is_file():
        test.skipTest(f'the {name} counter is not prepared: run `{python_command()} prepare.py --counter-from {path}`')
    gguf_counter.check_vocab(path, fields, counter_folder(name) / TOKENIZER_JSON, name, manifest['counters'][name])
    return TokenCounter(name=name)


@unittest.skipIf(not_run := real_server_skip(), not_run)
class RealServerTest(unittest.TestCase):
    def serve(self, model: str):
        log = tempfile.TemporaryFile()
        self.addCleanup(log.close)
        return real_server.serving(model, output=log)

    def test_qwen_gguf_counter_and_the_server_differ_on_no_rule_request_of_either_case_set(self) -> None:
        count = served_counter(self, QWEN)
        with self.serve(QWEN) as (base, _):
            self.assertEqual(count_mismatches(base, count), (96, []))

    def test_a_sample_recorded_through_answer_check_resumes_after_a_kill_and_is_graded_offline(self) -> None:
        folder = Path(self.enterContext(tempfile.TemporaryDirectory()))
        pin, result = folder / 'pin.json', folder / 'result.json'
        partial, record = result.with_suffix(PARTIAL_SUFFIX), ('record', '--model', str(pin), '--sample', '1',
                                                               '--output', str(result))
        with self.serve(QWEN) as (base, _):
            pinned = answer_check('pin', QWEN, '--api', 'openai', '--base-url', base + '/v1', *PIN_OPTIONS,
                                  '--output', str(pin))
            self.assertEqual(pinned.returncode, 0, pinned.stderr)
            status, kept = killed_part_way(record, partial)
            self.assertEqual((status, result.exists()), (-signal.SIGKILL, False))
            self.assertTrue(0 < len(kept) < SAMPLE, kept)
            resumed = answer_check(*record)
        self.assertEqual(resumed.returncode, 0, resumed.stderr)
        self.assertIn(f'reusing {len(kept)} answers from {partial.name}; asking for {SAMPLE - len(kept)} of '
                      f'{SAMPLE}', resumed.stderr)
        answers = [answer for *_, answer in each_answer(json.loads(result.read_text(encoding='utf-8')))]
        self.assertEqual((len(answers), [answer for answer in kept if answer not in answers]), (SAMPLE, []))
        graded = answer_check('--output', str(result), '--format', 'json')  # the server is stopped: offline
        self.assertEqual(graded.returncode, 0, graded.stderr)
        grades = json.loads(graded.stdout)
        self.assertEqual((grades['answers_recorded'], grades['prompt_token_mismatches']), (SAMPLE, []))
        self.assertFalse(partial.exists())

    def test_smollm2_gguf_counter_and_the_server_differ_on_no_rule_request_of_either_case_set(self) -> None:
        count = served_counter(self, SMOLLM2)
        with self.serve(SMOLLM2) as (base, _):
            self.assertEqual(count_mismatches(base, count), (96, []))

    def test_the_real_server_is_stopped_when_the_block_fails(self) -> None:
        with self.assertRaises(ZeroDivisionError), self.serve(SMOLLM2) as (base, process):
            self.assertEqual(requests.get(base + '/health', timeout=5).status_code, 200)
            1 / 0
        self.assertIsNotNone(process.poll())


class ServingTest(unittest.TestCase):
    def setUp(self) -> None:
        self.folder = Path(self.enterContext(tempfile.TemporaryDirectory()))
        binary = self.folder / real_server.BINARY
        binary.write_text(FAKE_SERVER.format(python=sys.executable), encoding='utf-8')
        binary.chmod(binary.stat().st_mode | stat.S_IXUSR)
        models = {name: model | {'size': 4, 'sha256': hashlib.sha256(b'GGUF').hexdigest()}  # stand-in models
                  for name, model in real_server.MODELS.items()}
        self.enterContext(mock.patch.object(real_server, 'MODELS', models))
        for model in models.values():
            (self.folder / model['file']).write_bytes(b'GGUF')
        files = {path.name: {'size': path.stat().st_size, 'sha256': real_server.sha256_file(path)}
                 for path in self.folder.iterdir()}
        self.record = real_server.expected_record() | {'files': files}
        (self.folder / PREPARED_JSON).write_text(to_json(self.record), encoding='utf-8')

    def test_a_finished_build_is_recognised_and_a_changed_file_is_not(self) -> None:
        self.assertEqual(real_server.check_server(self.folder), '')
        (self.folder / 'smollm2-135m-instruct.gguf').write_bytes(b'GGUF, changed')
        self.assertIn('smollm2-135m-instruct.gguf is missing or no longer matches',
                      real_server.check_server(self.folder))

    def test_a_build_of_other_pinned_inputs_is_not_reused(self) -> None:
        (self.folder / PREPARED_JSON).write_text(to_json(self.record | {'cmake_flags': []}), encoding='utf-8')
        self.assertIn('was made from other pinned inputs', real_server.check_server(self.folder))

    def test_the_server_binds_loopback_only_with_the_pinned_options_whatever_the_environment_says(self) -> None:
        command = real_server.server_command(self.folder, 'qwen2.5-coder-0.5b-instruct', 18080)
        self.assertEqual(command[command.index('--host') + 1], '127.0.0.1')
        self.assertEqual(command[command.index('--temp') + 1:command.index('--temp') + 6:2], ['0.7', '0.8', '1.1'])
        with mock.patch.dict('os.environ', {'LLAMA_ARG_HOST': '0.0.0.0', 'LLAMA_ARG_TEMP': '0'}):
            self.assertFalse([name for name in real_server.clean_environment() if name.startswith('LLAMA_')])

    def test_the_server_and_what_it_started_are_stopped_when_the_block_fails(self) -> None:
        with self.assertRaises(ZeroDivisionError), real_server.serving(folder=self.folder) as (base, process):
            self.assertEqual(requests.get(base + '/health', timeout=5).status_code, 200)
            1 / 0
        self.assertIsNotNone(process.poll())
        child, deadline = int((self.folder / f'{real_server.BINARY}.pids').read_text()), time.monotonic() + 5
        while status_of(child) not in ('gone', 'Z') and time.monotonic() < deadline:
            time.sleep(0.05)  # the signal reached the child with its parent; it may take a moment to end
        self.assertIn(status_of(child), ('gone', 'Z'))
        with self.assertRaises(OSError):
            socket.create_connection(('127.0.0.1', int(base.rsplit(':', 1)[1])), timeout=2).close()

    def test_readiness_is_asked_of_the_server_itself_whatever_proxy_the_environment_names(self) -> None:
        # requests.get took http_proxy from the environment, so /health went to the proxy and the server never
        # read as ready (a proxy that answers 200 would have read as the server)
        proxy = f'http://127.0.0.1:{closed_port()}'
        with mock.patch.dict('os.environ', {'http_proxy': proxy, 'HTTP_PROXY': proxy, 'no_proxy': '',
                                            'NO_PROXY': ''}), mock.patch.object(real_server, 'READY_SECONDS', 5):
            with real_server.serving(folder=self.folder) as (_, process):
                self.assertIsNone(process.poll())

    def test_an_unbuilt_folder_names_the_build_command(self) -> None:
        (self.folder / PREPARED_JSON).unlink()
        with self.assertRaisesRegex(LabError, r'the real server is not built in .*: run `.*real_server.py build`'):
            with real_server.serving(folder=self.folder):
                pass


def status_of(pid: int) -> str:
    """The state letter of a process (Z: a zombie, ended but not yet reaped by its parent)."""
    try:
        return Path(f'/proc/{pid}/stat').read_text().rsplit(')', 1)[1].split()[0]
    except OSError:
        return 'gone'


if __name__ == '__main__':
    unittest.main()
