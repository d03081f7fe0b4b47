"""Tests for summary_record.py and summary_rules.py: calls recorded once and replayed byte for byte, resume, a
recorded failure, a missing call refused in one line (exit 2), and a recording checked call by call.

    .venv/bin/python -m unittest -v test_summary_record

The live model is a pure fake (a function of the prompt): no socket is opened. Recordings go to temporary folders.
"""
import json
import os
from pathlib import Path
import subprocess
import sys
import tempfile
import unittest

from case_set import load_cases
from common import LabError
import lab_files
import summaries
from summaries import CallFailed, MissingCall, body, compact, key, load, replaying
import summary_record
from summary_record import record, recording
from test_support import FakeLlamaServer, LLAMA_MODEL, llama_count, only_loopback as setUpModule
from test_support_fixtures import HERE
from test_support_runs import run_answer_check, run_command
from tokenizer import counter


CASES = load_cases(HERE / 'agent-cases.json')[:3]


def echo(asked: list):
    """A fake live model: the last 40 characters of what it is asked to summarise, noting each call in asked."""
    def live(messages, options):
        asked.append(messages)
        return {'text': 'Kept: ' + messages[-1]['content'][-52:-12], 'prompt_tokens': 9, 'completion_tokens': 4,
                'elapsed_ms': 3}
    return live


def recorded_calls(cases=CASES) -> tuple[dict, list]:
    asked, recorded = [], {'model': {}, 'calls': {}}
    record(cases, counter(), echo(asked), recorded, lambda value: None)
    return recorded, asked


class Keys(unittest.TestCase):
    def test_a_calls_key_is_the_sha256_of_its_compact_json_body_worked_by_hand(self):
        messages, options = [{'role': 'user', 'content': 'é'}], {'max_tokens': 64}
        self.assertEqual(body(messages, options), '{"messages":[{"role":"user","content":"é"}],'
                                                  '"options":{"max_tokens":64}}'.encode())
        # printf '{"messages":[{"role":"user","content":"é"}],"options":{"max_tokens":64}}' | sha256sum
        self.assertEqual(key(messages, options), '01ff80e9d88aa9993dcde83ec349b13c14c855a96d47cd9a03f8be4b58d6e447')


class Replay(unittest.TestCase):
    def test_replay_sends_the_bytes_it_recorded_merges_included_and_chooses_the_same(self):
        recorded, asked = recorded_calls()
        self.assertGreater(len(asked), len(CASES))  # these cases need parts and a merge
        self.assertTrue(any(m[-1]['content'].startswith('Merge these') for m in asked))
        for case in CASES:
            live = compact(case, counter(), recording(echo([]), {}))
            self.assertEqual(compact(case, counter(), replaying(recorded['calls'], case['id'], 'c.json')), live)

    def test_record_again_resumes_and_asks_the_model_nothing_it_has(self):
        recorded, _ = recorded_calls()
        again = []
        record(CASES, counter(), echo(again), recorded, lambda value: None)
        self.assertEqual(again, [])

    def test_a_failed_call_is_recorded_as_one_and_replays_as_the_same_fallback(self):
        def refusing(messages, options):
            raise CallFailed('HTTP 503 from the server')
        calls = {}
        made = compact(CASES[0], counter(), recording(refusing, calls))
        self.assertEqual(made[1]['outcome'], 'failed_call')
        self.assertEqual([entry['reply'] for entry in calls.values()], [{'failed': 'HTTP 503 from the server'}])
        self.assertEqual(compact(CASES[0], counter(), replaying(calls, CASES[0]['id'], 'c.json')), made)

    def test_a_missing_call_names_the_case_and_the_command_that_records_it(self):
        with self.assertRaises(MissingCall) as refused:
            compact(CASES[0], counter(), replaying({}, CASES[0]['id'], 'my-cases.json'))
        self.assertRegex(str(refused.exception), r'^case dev-agent-latest: the summary recording has no reply to '
                         r'call [0-9a-f]{16}; record it with `\.venv/bin/python summary_record\.py record --cases '
                         r'my-cases\.json`$')

    def test_ctrl_c_leaves_the_finished_calls_saved_and_no_reply_for_the_interrupted_one(self):
        saved, asked = [], []
        def stopping(messages, options):
            if len(asked) == 2:
                raise KeyboardInterrupt
            return echo(asked)(messages, options)
        recorded = {'model': {}, 'calls': {}}
        with self.assertRaises(KeyboardInterrupt):
            record(CASES, counter(), stopping, recorded, lambda value: saved.append(json.dumps(value)))
        self.assertEqual(len(json.loads(saved[-1])['calls']), 2)


class Files(unittest.TestCase):
    def setUp(self):
        self.folder = Path(tempfile.mkdtemp())
        self.addCleanup(lambda: [p.unlink() for p in self.folder.iterdir()] and self.folder.rmdir())

    def write(self, value) -> Path:
        (path := self.folder / 'rec.json').write_text(json.dumps(value))
        return path

    def test_a_recording_round_trips_through_its_file(self):
        recorded, _ = recorded_calls(CASES[:1])
        self.assertEqual(load(self.write(recorded)), recorded)

    def test_a_call_filed_under_another_key_is_refused(self):
        recorded, _ = recorded_calls(CASES[:1])
        name = next(iter(recorded['calls']))
        recorded['calls']['0' * 64] = recorded['calls'].pop(name)
        with self.assertRaisesRegex(LabError, r"calls\.0{64}: the key is not the sha256 of the call's request body"):
            load(self.write(recorded))

    def test_a_reply_without_its_counts_is_refused(self):
        recorded, _ = recorded_calls(CASES[:1])
        del next(iter(recorded['calls'].values()))['reply']['elapsed_ms']
        with self.assertRaisesRegex(LabError, r": field reply must be an object with exactly the fields \['text', "
                                              r"'prompt_tokens', 'completion_tokens', 'elapsed_ms'\]; missing "
                                              r"\['elapsed_ms'\], unexpected \[\]$"):
            load(self.write(recorded))

    def test_a_failed_reply_that_also_holds_text_is_refused(self):
        recorded, _ = recorded_calls(CASES[:1])
        next(iter(recorded['calls'].values()))['reply']['failed'] = 'timed out'
        with self.assertRaisesRegex(LabError, r": field reply must be an object with exactly the fields \['failed'\]; "
                                              r"missing \[\], unexpected \['completion_tokens', 'elapsed_ms', "
                                              r"'prompt_tokens', 'text'\]$"):
            load(self.write(recorded))

    def test_a_recording_whose_model_is_not_an_object_is_refused_in_one_line(self):
        # record compared it key by key with the pin: AttributeError on a string
        with self.assertRaisesRegex(LabError, r'rec\.json: field model must be an object, got "a pin"; record it'):
            load(self.write({'model': 'a pin', 'calls': {}}))

    def test_record_refuses_an_output_that_is_its_own_case_file_and_leaves_it_as_it_was(self):
        cases = self.folder / 'cases.json'
        cases.write_bytes(original := (HERE / 'agent-cases.json').read_bytes())
        with self.assertRaisesRegex(LabError, r'--output .*cases\.json: the same file as --cases'):
            summary_record.main(['record', '--fresh', '--cases', str(cases), '--output', str(cases)], echo([]))
        self.assertEqual(cases.read_bytes(), original)

    def test_evaluate_with_an_empty_recording_stops_in_one_line_with_exit_2(self):
        path = self.write({'model': {}, 'calls': {}})
        run = subprocess.run([sys.executable, 'evaluate.py', '--cases', 'agent-cases.json', '--rules',
                              'summary_rules.py'], cwd=HERE, capture_output=True, text=True,
                             env={**os.environ, summaries.RECORDING_ENV: str(path)})
        self.assertEqual((run.returncode, run.stdout, len(run.stderr.splitlines())), (2, '', 1))
        self.assertIn('case dev-agent-latest: the summary recording has no reply to call', run.stderr)
        self.assertIn('record it with `.venv/bin/python summary_record.py record --cases CASE_FILE`', run.stderr)

    def test_evaluate_replays_a_recording_the_same_twice(self):
        recorded, _ = recorded_calls(load_cases(HERE / 'agent-cases.json'))
        path = self.write(recorded)
        runs = [subprocess.run([sys.executable, 'evaluate.py', '--cases', 'agent-cases.json', '--rules',
                                'summary_rules.py'], cwd=HERE, capture_output=True, text=True,
                               env={**os.environ, summaries.RECORDING_ENV: str(path)}) for _ in range(2)]
        self.assertEqual([run.returncode for run in runs], [0, 0], runs[0].stderr)
        self.assertEqual(runs[0].stdout, runs[1].stdout)
        self.assertIn('"llm-summary"', runs[0].stdout)

    def test_show_prints_each_cases_telemetry_as_the_replay_gives_it(self):
        cases = load_cases(HERE / 'agent-cases.json')
        recorded, _ = recorded_calls(cases)
        path = self.write(recorded)
        code, out, err = run_command(summary_record.main, ['show', '--cases', 'agent-cases.json', '--output',
                                                           str(path)], 'summary_record.py')
        self.assertEqual((code, err), (0, ''))
        lines = out.splitlines()
        self.assertEqual(lines[0].split('\t'), ['case', *summary_record.TELEMETRY])
        told = compact(cases[0], counter(), replaying(recorded['calls'], cases[0]['id'], 'c.json'))[1]
        self.assertEqual(lines[1].split('\t'), [cases[0]['id'], *map(str, told.values())])
        self.assertEqual(len(lines), 1 + len(cases))

    def pinned(self, fake) -> Path:
        code, _, err = run_answer_check(['pin', LLAMA_MODEL, '--api', 'openai', '--base-url', fake.base_url,
                                         '--counter', 'gemma-4-e2b', '--output', str(self.folder / 'pin.json'),
                                         '--seeds', '7'])
        self.assertEqual((code, err), (0, ''))
        return self.folder / 'pin.json'

    def test_record_asks_an_openai_compatible_server_through_the_answer_checks_client_and_keeps_its_counts(self):
        output = self.folder / 'rec.json'
        with FakeLlamaServer() as fake:
            pin = self.pinned(fake)
            code, out, err = run_command(summary_record.main, ['record', '--cases', 'agent-cases.json', '--model',
                                                               str(pin), '--output', str(output)], 'summary_record.py')
        self.assertEqual((code, out, err), (0, '', ''))
        recorded = load(output)
        self.assertEqual(recorded['model'], json.loads(pin.read_text()))
        bodies = [json.loads(raw) for method, path, raw, _ in fake.requests if path == '/v1/chat/completions']
        self.assertEqual(len(bodies), len(recorded['calls']))
        self.assertEqual({(body['seed'], body['model']) for body in bodies}, {(7, LLAMA_MODEL)})
        first = next(iter(recorded['calls'].values()))
        self.assertEqual(bodies[0]['messages'], first['messages'])
        self.assertEqual(bodies[0]['max_tokens'], first['options']['max_tokens'])
        self.assertEqual(first['reply']['text'], 'answer 1')  # the fake's first answer
        self.assertEqual(first['reply']['prompt_tokens'], llama_count(bodies[0]) or 0)  # what the fake said: 0 where
        # no official template is at hand to count with (a clone without ../shared)

    def test_a_reply_holding_a_lone_surrogate_stops_record_in_one_line_naming_it(self):
        # JSON can carry '\\ud800'; it reached the file's UTF-8 encoding and was reported as a terminal's encoding
        class Client:
            def answer(self, body):
                return {'answer': 'Kept \ud800', 'prompt_tokens': 9, 'answer_tokens': 2}
        live = summary_record.live_call(json.loads((HERE / 'qwen-answer-model.json').read_text()), Client(), 4096)
        with self.assertRaisesRegex(LabError, r"^a summary call's reply: field answer holds a lone surrogate"):
            record(CASES[:1], counter(), live, {'model': {}, 'calls': {}}, lambda value: lab_files.write_output(
                self.folder / 'rec.json', lab_files.to_json(value, 1), 'summary recording'))  # as main saves

    def test_no_server_is_one_line_and_writes_no_recording(self):
        # The server was first asked by the first call, and record's save wrote a recording of no calls meanwhile.
        output = self.folder / 'rec.json'
        code, out, err = run_command(summary_record.main, ['record', '--cases', 'agent-cases.json', '--output',
                                                           str(output)], 'summary_record.py')  # OLLAMA_HOST: closed
        self.assertEqual((code, out), (2, ''))
        self.assertTrue(err.startswith('summary_record.py: no Ollama server answers at http://127.0.0.1:'), err)
        self.assertFalse(output.exists())

    def test_resuming_a_recording_made_with_another_pin_is_refused_in_one_line(self):
        output = self.write({'model': {'api': 'openai', 'model_id': 'other'}, 'calls': {}})
        with FakeLlamaServer() as fake:
            pin = self.pinned(fake)
            code, out, err = run_command(summary_record.main, ['record', '--cases', 'agent-cases.json', '--model',
                                                               str(pin), '--output', str(output)], 'summary_record.py')
        self.assertEqual((code, out), (2, ''))
        self.assertRegex(err, r'^summary_record\.py: .*rec\.json: recorded with another pin than .*pin\.json \(.*'
                              r'model_id.* differ\), so its calls are not resumed: record with --fresh, or name '
                              r'its pin with --model\n$')
        self.assertEqual([p for m, p, *_ in fake.requests if p == '/v1/chat/completions'], [])

if __name__ == '__main__':
    unittest.main()
