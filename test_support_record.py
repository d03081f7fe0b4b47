"""Test support for the recording run's tests, no tests: answer_check.py record run in this process against the
fake Ollama server of test_support.py, and the partial file it keeps.

The tests: test_answer_record_run (what a whole run sends, records and reports), test_answer_record_resume (a run
stopped by a failing call, Ctrl-C or a kill, and the next run that resumes it) and test_answer_record_partial (the
partial file itself).

They run the real requests-based client and the real recording, with the real strategies, cases and prepared
counter (so `.venv/bin/python prepare.py` must have run), against the fake Ollama server of test_support.py, which
their tests start on 127.0.0.1, through common.run as a user's command runs; no model is called. Every file a test
writes goes to a temporary directory; the shipped files are only read. Every HTTP request the client makes in
those tests is checked to go to 127.0.0.1, and OLLAMA_HOST points at a closed loopback port, so no test can reach
a real server.
"""
import contextlib
import hashlib
import json
import os
from pathlib import Path
from unittest import mock

from ollama_client import OllamaClient
from strategies import RULES
from test_support import FakeOllama, reply, server_count
from test_support_fixtures import AnswerFilesTest, HERE, held_out_cases
from test_support_runs import run_answer_check
from tokenizer import counter


def steady_reply(body: dict, number: int) -> tuple[int, dict]:
    """An answer that depends only on the request, as a resumed run must be able to reproduce it."""
    sha = hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()
    return 200, reply(f'answer to {sha[:16]}', server_count(body['messages']) or 0, 3)


class AnswerRecordTest(AnswerFilesTest):
    """AnswerFilesTest, and answer_check.py's recording run in this process, writing into the test's folder."""

    def run_main(self, argv: list[str], host: str | None = None, cases: Path = HERE / 'cases.json',
                 folder: Path | None = None, client: OllamaClient | None = None):
        """answer_check.py writing into folder (default: this test's folder); (exit code, stdout, stderr)."""
        folder = folder if folder is not None else self.folder
        with mock.patch.dict(os.environ, {'OLLAMA_HOST': host} if host else {}):  # as a user's command finds it
            return run_answer_check(argv, cases_path=cases, result_path=folder / 'answer-result.json',
                                    grades_path=folder / 'answer-grades.json', client=client)

    def partial(self) -> list[dict]:
        """The lines of the partial recording: its model block, then one kept answer a line."""
        return [json.loads(line) for line in (self.folder / 'answer-result.partial.json').read_text().splitlines()]

    def kept(self) -> int:
        """How many whole answers the partial recording holds; 0 when there is none."""
        path, count = self.folder / 'answer-result.partial.json', 0
        for line in path.read_text().splitlines() if path.exists() else []:
            with contextlib.suppress(ValueError):  # a line cut off is no answer
                count += 'answer' in json.loads(line)
        return count

    def expected_chats(self) -> list[dict]:
        """Every body record must send, in order, from the real strategies, cases and counter."""
        bodies = []
        for strategy in RULES.values():
            for case in held_out_cases():
                messages = strategy(case, counter())['messages']
                for seed in (1, 2, 3, 4, 5):
                    bodies.append({'model': 'gemma4:e2b', 'messages': messages, 'stream': False, 'think': False,
                                   'options': {'temperature': 1.0, 'top_k': 64, 'top_p': 0.95, 'seed': seed,
                                               'num_ctx': 384, 'num_predict': 96}})
        return bodies

    def sampled(self, argv: list[str], chat=steady_reply, **options) -> tuple:
        """record argv on one held-out case drawn by --sample 1 (20 calls): (exit status, stdout, stderr, fake)."""
        with FakeOllama(chat=chat, **options) as fake:
            return (*self.run_main(['record', '--sample', '1', *argv], fake.host), fake)

    def uninterrupted_sample(self) -> bytes:
        folder = self.folder / 'uninterrupted'
        folder.mkdir()
        with FakeOllama(chat=steady_reply) as fake:
            self.assertEqual(self.run_main(['record', '--sample', '1'], fake.host, folder=folder)[0], 0)
        return (folder / 'answer-result.json').read_bytes()
