"""The summary calls of summaries.py recorded once from a model and replayed offline, each keyed by its request body.

    .venv/bin/python summary_record.py record --cases agent-cases.json [--model PIN] [--output FILE] [--fresh]
    .venv/bin/python summary_record.py record --cases continuation-cases.json --keys continuation-keys.json
    .venv/bin/python summary_record.py show --cases agent-cases.json      # each case's telemetry, from the recording

A call's request body is its messages and options as compact JSON (summaries.body); the recording maps the body's
sha256 to the reply. Replay (summaries.replaying, which continuation.py, summary_table.py and summary_rules.py use)
looks each call up: a merge's prompt is built from the part summaries the recording returned, so
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
from pathlib import Path
import time

from answer_model import MODEL_PATH, chat_body, load_model
import common
from common import LabError
from case_set import check_encodable, load_cases
import continuation
import lab_files
from summaries import REPLY, TELEMETRY, CallFailed, answered, compact, key, load, recording_path, replaying


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
    from tokenizer import counter
    options = parse_args(argv)
    path = options.output or recording_path()
    lab_files.check_outputs([('--output', path)] if options.command == 'record' else [],
                            [('--cases', options.cases), ('--model', options.model), ('--keys', options.keys)])
    cases = load_cases(options.cases)
    if options.command == 'show':
        rows = telemetry_rows(cases, counter(), load(path)['calls'], str(options.cases))
        print('\t'.join(('case', *TELEMETRY)))
        print('\n'.join('\t'.join(map(str, row)) for row in rows))
        return 0
    model = load_model(options.model)
    recorded = {'model': model, 'calls': {}} if options.fresh or not path.exists() else load(path)
    if differ := sorted(f for f in set(recorded['model']) | set(model) if recorded['model'].get(f) != model.get(f)):
        raise LabError(f'{path}: recorded with another pin than {options.model} ({", ".join(differ)} differ), so '
                       'its calls are not resumed: record with --fresh, or name its pin with --model')
    if live is None:
        from openai_client import client_for  # the client of the pin's API
        (client := client_for(model)).checked_model()  # a server that is not there says so before anything is written
        live = live_call(model, client, max(case['budget']['context_limit'] for case in cases))
    import langchain_summary
    keys = continuation.load_keys(options.keys, cases) if options.keys else {}

    def runs(case: dict, call) -> None:  # the generations of a continuation case, else the rule; LangChain's
        if keys:
            continuation.generations(case, keys[case['id']]['segments'], counter(), call)
        else:
            compact(case, counter(), call)
        langchain_summary.summarised(case, counter(), call)
    record(cases, counter(), live, recorded,
           lambda value: lab_files.write_output(path, lab_files.to_json(value, 1), 'summary recording'), runs)
    return 0


if __name__ == '__main__':
    common.run(main)
