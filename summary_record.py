"""The summary calls of summaries.py recorded once from a model and replayed offline, each keyed by its request body.

    .venv/bin/python summary_record.py record --cases agent-cases.json [--model PIN] [--output FILE] [--fresh]
    .venv/bin/python summary_record.py record --cases continuation-cases.json --keys continuation-keys.json
    .venv/bin/python summary_record.py show --cases agent-cases.json      # each case's telemetry, from the recording

A call's request body is its messages and options as compact JSON (`body`); the recording maps the body's sha256 to
the reply. Replay looks each call up: a merge's prompt is built from the part summaries the recording returned, so
replay sends the same bytes it recorded. A call the recording lacks is one LabError naming the case and this
command (exit 2); no summary is invented. A failed call is recorded as one, so that its fallback replays too.

`record` asks the model a pin names (answer-model.json, or --model: `answer_check.py pin`, Ollama or an
OpenAI-compatible server such as real_server.py's) through the answer check's client, with the pin's options and its
first seed, max_tokens the call's target; the client's refusals (a moved model, a reply that is no answer) stop it
in one line, and no failure is recorded. It keeps every call the file already holds (resume) unless --fresh, and
refuses to resume a recording made with another pin; it writes the file after each case, whole, and Ctrl-C leaves
the calls finished before it and no summary. It writes only --output (summary-recording.json); `show` writes
nothing.
"""
import argparse
import hashlib
import json
import os
from pathlib import Path
import time

from answer_model import MODEL_PATH, chat_body, load_model
import common
from common import LabError
from case_set import check_encodable, load_cases
import lab_files
from lab_files import ANY, INTEGER, OBJECT, STRING, check_fields, or_null
from summaries import TELEMETRY, CallFailed, compact

RECORDING = common.HERE / 'summary-recording.json'  # the shipped recording, which summary_rules.py replays
RECORDING_ENV = 'CONTEXT_LAB_SUMMARIES'  # another recording for summary_rules.py, as a path
SOME_CASES = 'CASE_FILE'  # what record_command names where the case file is not known (in the rules process)
# A recorded reply (or FAILED alone), and a recorded call: what was asked, for a reader, and the reply.
REPLY = {'text': STRING, 'prompt_tokens': or_null(INTEGER), 'completion_tokens': or_null(INTEGER),
         'elapsed_ms': INTEGER}
FAILED = {'failed': STRING}
CALL = {'messages': ANY, 'options': ANY, 'reply': OBJECT}


class MissingCall(LabError):
    """The recording has no reply to a call the rules make: the message names the case and how to record it."""


def body(messages: list[dict], options: dict) -> bytes:
    """A summary call's request body: body([{'role': 'user', 'content': 'a'}], {'max_tokens': 64}) ->
    b'{"messages":[{"role":"user","content":"a"}],"options":{"max_tokens":64}}'"""
    return json.dumps({'messages': messages, 'options': options}, ensure_ascii=False, separators=(',', ':')).encode()


def key(messages: list[dict], options: dict) -> str:
    return hashlib.sha256(body(messages, options)).hexdigest()


def record_command(cases: str) -> str:
    """What records a missing call, with the Python that runs now, as the lab's other advice names it."""
    return f'{common.python_command()} summary_record.py record --cases {cases}'


def answered(reply: dict) -> dict:
    """A recorded reply as summaries.py's call returns it; a recorded failure raises CallFailed again."""
    if 'failed' in reply:
        raise CallFailed(reply['failed'])
    return reply


def replaying(calls: dict, case_id: str, cases: str):
    """The call that answers from a recording's calls, for one case; a call not there raises MissingCall."""
    def call(messages: list[dict], options: dict) -> dict:
        if (name := key(messages, options)) not in calls:
            raise MissingCall(f'case {case_id}: the summary recording has no reply to call {name[:16]}; record it '
                              f'with `{record_command(cases)}`')
        return answered(calls[name]['reply'])
    return call


def recording(live, calls: dict):
    """The call that answers from calls where it can (resume) and asks `live` otherwise, adding its reply."""
    def call(messages: list[dict], options: dict) -> dict:
        if (name := key(messages, options)) not in calls:
            try:
                reply = live(messages, options)
                reply = {field: reply[field] for field in REPLY}
            except CallFailed as failure:
                reply = {'failed': str(failure)}
            calls[name] = {'messages': messages, 'options': options, 'reply': reply}
        return answered(calls[name]['reply'])
    return call


def check_call(where: str, entry) -> None:
    """Refuse a recorded call that is not {messages, options, reply} with a reply of REPLY or FAILED."""
    reply = check_fields(where, entry, CALL)['reply']
    check_fields(where, reply, FAILED if 'failed' in reply else REPLY, name='reply')
    if key(entry['messages'], entry['options']) != where.rsplit('.', 1)[1]:
        raise LabError(f'{where}: the key is not the sha256 of the call\'s request body')


def load(path: Path) -> dict:
    """A recording, {"model": what it was recorded from, "calls": {sha256: call}}, checked call by call."""
    advice = f'record it with `{record_command(SOME_CASES)}` (--fresh to start over)'
    recorded = lab_files.read_json(path, 'summary recording', advice)
    check_fields(str(path), recorded, {'model': OBJECT, 'calls': OBJECT}, advice)
    for name, entry in recorded['calls'].items():
        check_call(f'{path}: calls.{name}', entry)
    return recorded


def recording_path() -> Path:
    return Path(os.environ.get(RECORDING_ENV) or RECORDING)


def live_call(model: dict, client, num_ctx: int):
    """The seam to a pinned model: a summary call as the answer check's chat body (first seed, max_tokens the
    call's limit), answered by its client, with the elapsed time."""
    def call(messages: list[dict], options: dict) -> dict:
        started = time.monotonic()
        reply = client.answer(chat_body(model, messages, num_ctx, options['max_tokens'], model['seeds'][0]))
        check_encodable('a summary call\'s reply', [('answer', reply['answer'])])  # else no recording can hold it
        return {'text': reply['answer'], 'prompt_tokens': reply['prompt_tokens'],
                'completion_tokens': reply['answer_tokens'], 'elapsed_ms': round((time.monotonic() - started) * 1000)}
    return call


def record(cases: list[dict], count, live, recorded: dict, save, runs=None) -> None:
    """Every summary call `runs(case, call)` makes (by default the summary rule's on the case), asked of `live`
    unless recorded; save(recorded) after each case."""
    try:
        for case in cases:
            (runs or (lambda case, call: compact(case, count, call)))(case, recording(live, recorded['calls']))
            save(recorded)
    finally:
        save(recorded)  # a call finished before Ctrl-C is a real reply; an interrupted one left nothing


def telemetry_rows(cases: list[dict], count, calls: dict, cases_name: str) -> list[list]:
    """Each case's telemetry (summaries.TELEMETRY) replayed from the calls, after its id."""
    return [[case['id'], *compact(case, count, replaying(calls, case['id'], cases_name))[1].values()]
            for case in cases]


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('command', choices=('record', 'show'))
    parser.add_argument('--cases', type=Path, default=common.DEFAULT_CASES)
    parser.add_argument('--output', type=Path, default=None, help='the recording (default summary-recording.json)')
    parser.add_argument('--fresh', action='store_true', help='record every call again, keeping none')
    parser.add_argument('--model', type=Path, default=MODEL_PATH, help='the pin to record from (answer-model.json)')
    parser.add_argument('--keys', type=Path, help="continuation keys: record the cases' summary generations too")
    return parser.parse_args(argv)


def main(argv: list[str], live=None) -> int:
    from tokenizer import count_request
    options = parse_args(argv)
    path = options.output or recording_path()
    lab_files.check_outputs([('--output', path)] if options.command == 'record' else [],
                            [('--cases', options.cases), ('--model', options.model), ('--keys', options.keys)])
    cases = load_cases(options.cases)
    if options.command == 'show':
        rows = telemetry_rows(cases, count_request, load(path)['calls'], str(options.cases))
        print('\t'.join(('case', *TELEMETRY)))
        print('\n'.join('\t'.join(map(str, row)) for row in rows))
        return 0
    model = load_model(options.model)
    recorded = {'model': model, 'calls': {}} if options.fresh or not path.exists() else load(path)
    if differ := sorted(f for f in set(recorded['model']) | set(model) if recorded['model'].get(f) != model.get(f)):
        raise LabError(f'{path}: recorded with another pin than {options.model} ({", ".join(differ)} differ), so '
                       'its calls are not resumed: record with --fresh, or name its pin with --model')
    if live is None:
        from answer_check import client_for  # the client of the pin's API
        (client := client_for(model)).checked_model()  # a server that is not there says so before anything is written
        live = live_call(model, client, max(case['budget']['context_limit'] for case in cases))
    import continuation  # it imports this module
    import langchain_summary
    keys = continuation.load_keys(options.keys, cases) if options.keys else {}

    def runs(case: dict, call) -> None:  # the generations of a continuation case, else the rule; LangChain's
        if keys:
            continuation.generations(case, keys[case['id']]['segments'], count_request, call)
        else:
            compact(case, count_request, call)
        langchain_summary.summarised(case, count_request, call)
    record(cases, count_request, live, recorded,
           lambda value: lab_files.write_output(path, lab_files.to_json(value, 1), 'summary recording'), runs)
    return 0


if __name__ == '__main__':
    common.run(main)
