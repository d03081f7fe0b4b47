"""Ask the pinned model for every planned answer, keeping each finished answer as it arrives.

    .venv/bin/python answer_check.py record           # resumes: reuses the answers a stopped run left behind
    .venv/bin/python answer_check.py record --fresh   # discards those first and asks for every answer

This is the recording step of the answer check: answer_check.py plans the
requests (every strategy's request for each held-out case, once per seed of
answer-model.json, 120 in all) and grades what this step writes. Before any
chat request the client checks the server's version and the tag's digest, and
another digest is refused. Another server version is noted in one line and
recording goes on; a version known to leave cached prompt tokens out of its
counts is named in one line more, because every repeated request will then
show as a prompt-token mismatch.

Each finished answer is kept at once in answer-result.partial.json, beside
the recording and git-ignored, keyed by the sha256 of the exact request body
(which includes the seed) under its strategy and case, and stored with the
server's digest and version. The strategy and case are part of the key
because different strategies often build the same request (30 of the 120 are
byte-identical to another strategy's), and each is still asked for.
The partial file is rewritten whole through a temporary file after every
answer, so Ctrl-C at any moment leaves the previous or the new version of it,
never half of one. A later run reuses every stored answer whose key is in
today's plan, when the digest and the server version are the same, says how
many it reused and how many it asks for, and asks only for the rest.
answer-result.json is written, in one step, only once every planned answer is
present; then the partial file is removed. Written this way the recording is
the same whether it took one run or several.

Each request's num_ctx is the case's context limit (384). The server does not
load the model with that: it raises the context to at least 2048 tokens for a
vision-capable model such as gemma4:e2b, and num_ctx only decides which old
messages it would drop to fit. Every request fits the lab's own allowance, so
nothing is dropped. After the first answer of a run this step reads the
context the server did load from /api/ps and keeps it in the recording's
model block as loaded_context_length, where the server reports one.

Progress goes to stderr: one line per call with its seconds and an estimate
of the time left. It does not retry a failed call, and it does not reuse an
answer from another build or another server version.
"""
import json
from pathlib import Path
import sys
import time

import cli

cli.require_packages(__name__)  # one clear line, not a traceback, if a locked package is missing

from answer_model import (HEX64, AnswerModel, AnswerModelError, request_sha256,
                          undercounts_cached_prompt)
from lab_files import read_json, write_atomically

PARTIAL_SUFFIX = '.partial.json'  # answer-result.json keeps its answers so far in answer-result.partial.json
FRESH = f'discard it with `{cli.python_command()} answer_check.py record --fresh`'
# What identifies the server behind a stored answer; an answer is reused only when all of it matches.
SERVER_FIELDS = ('ollama_digest', 'ollama_version')
PARTIAL_FIELDS = (*SERVER_FIELDS, 'loaded_context_length', 'answers')


class AnswerCheckError(Exception):
    """A problem with a file of the answer check that the user can fix; the message says which and how."""


def shown(value) -> str:
    """A value as JSON, cut short, for an error message."""
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= 40 else text[:37] + '...'


def is_count(value) -> bool:
    return type(value) is int and value >= 0


# What each recorded answer holds, and what each field must be: the client's
# reply (parse_answer always writes tool_calls as a list, empty when the model
# called no tool, so null is refused), then what the lab knew about the request.
ANSWER_CHECKS = {
    'seed': (lambda v: type(v) is int, 'an integer'),
    'answer': (lambda v: isinstance(v, str), 'a string'),
    'tool_calls': (lambda v: isinstance(v, list) and all(isinstance(c, dict) for c in v), 'a list of objects'),
    'done_reason': (lambda v: v is None or isinstance(v, str), 'a string or null'),
    'prompt_tokens': (is_count, 'a non-negative integer'),
    'answer_tokens': (is_count, 'a non-negative integer'),
    'request_sha256': (lambda v: isinstance(v, str) and HEX64.fullmatch(v) is not None, '64 lowercase hex digits'),
    'input_tokens': (is_count, 'a non-negative integer'),
}
ANSWER_FIELDS = tuple(ANSWER_CHECKS)


def check_answer(where: str, answer, what_to_do: str) -> None:
    """Raise AnswerCheckError naming where and the field when a stored answer is malformed."""
    if not isinstance(answer, dict):
        raise AnswerCheckError(f'{where}: must be an object with fields {list(ANSWER_FIELDS)}, '
                               f'got {shown(answer)}; {what_to_do}')
    missing = [field for field in ANSWER_FIELDS if field not in answer]
    extra = sorted(set(answer) - set(ANSWER_FIELDS))
    if missing or extra:
        raise AnswerCheckError(f'{where}: fields must be exactly {list(ANSWER_FIELDS)}; '
                               f'missing {missing}, unexpected {extra}; {what_to_do}')
    for field, (valid, wanted) in ANSWER_CHECKS.items():
        if not valid(answer[field]):
            raise AnswerCheckError(f'{where}.{field}: must be {wanted}, got {shown(answer[field])}; {what_to_do}')


def write_json(path: Path, data) -> None:
    """Replace path with data as JSON in one step, so a reader never sees a half-written file."""
    try:
        write_atomically(Path(path), json.dumps(data, indent=1, ensure_ascii=False) + '\n')
    except OSError as error:
        raise AnswerCheckError(f'{path}: cannot be written ({error.strerror}); check the folder exists and '
                               'is writable') from None
    except UnicodeEncodeError as error:  # a lone surrogate in a server's answer cannot be stored as UTF-8
        raise AnswerCheckError(f'{path}: not written: the data holds text that is not valid Unicode '
                               f'({error.reason} at {error.start})') from None


def partial_path(result_path: Path) -> Path:
    """Where the answers so far wait: answer-result.json -> answer-result.partial.json, in the same folder."""
    result_path = Path(result_path)
    return result_path.with_name(result_path.stem + PARTIAL_SUFFIX)


def load_partial(path: Path) -> dict | None:
    """The partial file, checked field by field; None when there is none.

    Its answers have the shape of a recording's: {strategy: {case: [answer, ...]}}.
    """
    if not path.exists():
        return None
    partial = read_json(path, 'partial recording', AnswerCheckError, FRESH)
    if not isinstance(partial, dict) or set(partial) != set(PARTIAL_FIELDS):
        raise AnswerCheckError(f'{path}: fields must be exactly {list(PARTIAL_FIELDS)}; {FRESH}')
    length = partial['loaded_context_length']
    if not all(isinstance(partial[field], str) for field in SERVER_FIELDS) or not (
            length is None or (is_count(length) and length > 0)):
        raise AnswerCheckError(f'{path}: {" and ".join(SERVER_FIELDS)} must be strings and loaded_context_length '
                               f'a positive integer or null; {FRESH}')
    answers = partial['answers']
    if not isinstance(answers, dict) or not all(
            isinstance(by_case, dict) and all(isinstance(listed, list) for listed in by_case.values())
            for by_case in answers.values()):
        raise AnswerCheckError(f'{path}: answers must map strategies to cases to answer lists; {FRESH}')
    for strategy, by_case in answers.items():
        for case_id, listed in by_case.items():
            for index, answer in enumerate(listed):
                check_answer(f'{path}: answers.{strategy}.{case_id}[{index}]', answer, FRESH)
    return partial


def duration(seconds: float) -> str:
    """A time left, rounded for reading: 42.4 -> '42 s'; 500 -> '8 min 20 s'."""
    minutes, rest = divmod(round(seconds), 60)
    return f'{minutes} min {rest} s' if minutes else f'{rest} s'


def label(item: dict) -> str:
    return f'{item["strategy"]} {item["case"]} seed {item["seed"]}'


def server_notes(model: dict, version: str) -> list[str]:
    """What a user should know about this server before the first call, one line each."""
    notes = []
    if version != model['ollama_version']:
        notes.append(f'note: the server is Ollama {version}; the pinned recording used {model["ollama_version"]}. '
                     'The digest matches; the version is recorded with the answers.')
    if undercounts_cached_prompt(version):
        notes.append(f'note: Ollama {version} leaves cached prompt tokens out of prompt_eval_count, so the second '
                     'and later seeds of each request will show as prompt-token mismatches; grading marks them so.')
    return notes


def plan_key(item: dict) -> tuple[str, str, str]:
    """What identifies one planned answer: its strategy, its case and the sha256 of its exact request body."""
    return item['strategy'], item['case'], request_sha256(item['body'])


def reusable_answers(partial: dict | None, server: dict, keys: list[tuple], path: Path,
                     say) -> tuple[dict, int | None]:
    """({plan key: answer} for every planned answer the partial file holds, the context length it noted)."""
    if partial is None:
        return {}, None
    if any(partial[field] != server[field] for field in SERVER_FIELDS):
        say(f'{path.name} holds answers from digest {partial["ollama_digest"][:12]} on Ollama '
            f'{partial["ollama_version"]}, not from this server; none is reused')
        return {}, None
    stored = {(strategy, case_id, answer['request_sha256']): answer
              for strategy, by_case in partial['answers'].items()
              for case_id, listed in by_case.items() for answer in listed}
    return {key: stored[key] for key in keys if key in stored}, partial['loaded_context_length']


def nested(plan: list[dict], keys: list[tuple], answers: dict) -> dict:
    """{strategy: {case: [answer, ...]}} in plan order, for the planned answers present in answers."""
    by_strategy: dict = {}
    for item, key in zip(plan, keys):
        if key in answers:
            # Today's count, as an uninterrupted run records it, also for an answer an earlier run kept.
            answer = {**answers[key], 'input_tokens': item['input_tokens']}
            by_strategy.setdefault(item['strategy'], {}).setdefault(item['case'], []).append(answer)
    return by_strategy


def loaded_context(client: AnswerModel, num_ctx: int, say) -> int | None:
    """The context length /api/ps reports for the loaded tag, or None; a failing /api/ps only costs the note."""
    try:
        length = client.loaded_context_length()
    except AnswerModelError as error:
        say(f'the server did not say what context it loaded the model with ({error}); recording goes on')
        return None
    if length:
        say(f'the server loaded {client.model["ollama_tag"]} with a context of {length} tokens; '
            f'num_ctx {num_ctx} only decides which old messages it would drop')
    return length


def record_answers(plan: list[dict], client: AnswerModel, result_path: Path, *, fresh: bool = False,
                   progress=None) -> dict:
    """Ask for every planned answer not already kept; write result_path only when all of them are present.

    plan holds {strategy, case, seed, body, input_tokens} per request, in recording order.
    """
    progress = progress if progress is not None else sys.stderr

    def say(line: str) -> None:
        print(line, file=progress, flush=True)

    partial = partial_path(result_path)
    if fresh and partial.exists():
        partial.unlink()
        say(f'discarded {partial.name}')
    version = client.verify()
    model = client.model
    for note in server_notes(model, version):
        say(note)
    server = {'ollama_digest': model['ollama_digest'], 'ollama_version': version}
    keys = [plan_key(item) for item in plan]
    answers, context_length = reusable_answers(load_partial(partial), server, keys, partial, say)
    asking = len(plan) - len(answers)
    say(f'reusing {len(answers)} answers from {partial.name}; asking for {asking} of {len(plan)}' if answers
        else f'asking for {asking} answers; the first call may also load the model')
    seconds: list[float] = []
    for number, (item, key) in enumerate(zip(plan, keys), 1):
        if key in answers:
            continue
        started = time.monotonic()
        body = item['body']
        try:
            reply = client.answer(body['messages'], body.get('tools', []), body['options']['num_ctx'],
                                  body['options']['num_predict'], item['seed'])
        except AnswerModelError as error:
            kept = f'the {len(answers)} answers so far are kept in {partial.name}' if answers else 'no answer is kept'
            raise AnswerModelError(f'call {number} of {len(plan)} ({label(item)}): {error}; {kept}') from None
        seconds.append(time.monotonic() - started)
        answers[key] = {**reply, 'request_sha256': key[2], 'input_tokens': item['input_tokens']}
        # Kept before anything else is asked, so no later failure can lose this answer.
        write_json(partial, {**server, 'loaded_context_length': context_length,
                             'answers': nested(plan, keys, answers)})
        if len(seconds) == 1:  # the model is loaded now, so the server can say with what context
            context_length = loaded_context(client, body['options']['num_ctx'], say) or context_length
        left = sum(seconds) / len(seconds) * (asking - len(seconds))
        say(f'call {number} of {len(plan)}: {label(item)}: {seconds[-1]:.1f} s, about {duration(left)} left')
    model_block = {**model, 'ollama_version': version}
    if context_length is not None:
        model_block['loaded_context_length'] = context_length
    result = {'model': model_block, 'answers': nested(plan, keys, answers)}
    write_json(result_path, result)
    partial.unlink(missing_ok=True)
    return result


if __name__ == '__main__':
    cli.run(cli.module_main("Record the pinned model's answers to the held-out requests, resuming a stopped recording.",
                            '.venv/bin/python answer_check.py record'))
