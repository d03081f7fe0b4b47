"""The pinned answer model and its recording: the pin (answer-model.json, for Ollama or an OpenAI-compatible server),
the request sent for an answer, the recording loop, its partial file and the recording's format. No command of its own:
answer_check.py and memory_answers.py record through record_answers with a client (ollama_client.py or
openai_client.py), which this module never imports.

Every file is checked field by field, each fault one LabError line.
"""
from collections import deque
import hashlib
import json
from pathlib import Path
import re
import time

import common
from common import LabError, tell
import lab_files
from lab_files import (COUNT, INTEGER, NUMBER, OBJECT, POSITIVE, SHA256, STRING, TEXT, check_fields, list_of, one_of,
                       or_null)
from prepared_folder import DEFAULT
from text import counted as counted_text, excerpt

MODEL_PATH = common.HERE / 'answer-model.json'
PIN_AGAIN = 'write it again with `answer_check.py pin TAG --output FILE`'
SAMPLING_OPTIONS = ('temperature', 'top_k', 'top_p')
SERVER_OPTIONS = ('top_k', 'repeat_penalty')  # sent to an OpenAI-compatible server only if it documents them
PARTIAL_SUFFIX = '.partial.json'  # answer-result.json keeps its answers so far in answer-result.partial.json
RECENT_CALLS = 10  # the time left is estimated from these last calls, where a server or machine slowing down shows
# The fields answer-model.json must have, in order; a recording copies them into its model block.
MODEL_CHECKS = {**dict.fromkeys(('checked_on', 'publisher_model', 'license', 'ollama_tag'), TEXT), 'ollama_digest': (
    SHA256[0], f'{SHA256[1]}, as /api/tags reports them'), 'ollama_version': TEXT, 'quantization': TEXT,
    'parameters': TEXT, 'options': (lambda v: isinstance(v, dict) and set(v) == set(SAMPLING_OPTIONS) and all(
        NUMBER[0](n) for n in v.values()), f'a number for each of {", ".join(SAMPLING_OPTIONS)}, and nothing else'),
    'think': one_of((False,), 'false: the recording asks for answers without thinking'), 'trials': POSITIVE,
    'seeds': list_of(INTEGER, 'distinct integers, one per trial', distinct=True)}
# What a recording's model block adds to answer-model.json's from the server; no other field may differ.
SERVER_REPORTED = ('ollama_version', 'loaded_context_length')
# A recorded answer's fields: answer()'s reply (its tool_calls always a list), then what the lab knew of the request.
ANSWER_CHECKS = {
    'seed': INTEGER, 'answer': STRING, 'tool_calls': list_of(OBJECT, 'a list of objects'),
    'done_reason': or_null(STRING), 'prompt_tokens': COUNT, 'answer_tokens': COUNT, 'request_sha256': SHA256,
    'input_tokens': COUNT}
ORIGINAL_CHECKS = dict(list(ANSWER_CHECKS.items())[:6])  # the original's answers: the reply, no request named
# The lab's counter of what Ollama serves under a tag, with the family /api/show must report (a copy: pin --counter).
SERVED = {'gemma-4-e2b': ('gemma4', r'gemma4:e2b(-.+)?'), 'llama-3.1': ('llama', r'llama3\.1(:.+)?'),
          'llama-3.2': ('llama', r'llama3\.2(:.+)?'), 'llama-3.3': ('llama', r'llama3\.3(:.+)?'),
          'qwen-2.5': ('qwen2', r'qwen2\.5(:.+)?'), 'phi-3.5': ('phi3', r'phi3\.5(:.+)?')}
CLOSEST = 'closest'  # pin --counter closest: the first counter of the served model's family
# A pin's counter, which pins made before it lack; the context the server loaded, which a recording adds.
OPTIONAL_CHECKS = {'counter': one_of(tuple(SERVED), f'one of {", ".join(SERVED)}'),
                   'loaded_context_length': POSITIVE}
# The fields of a pin for an OpenAI-compatible server (api "openai"), in order: what its server revealed of the model
# (/v1/models, and /props where it is llama.cpp's), which record finds again before any chat, and its own counter.
OPENAI_CHECKS = {'checked_on': TEXT, 'api': one_of(('openai',), '"openai"'), 'base_url': TEXT, 'model_id': TEXT,
                 'server': OBJECT, 'options': (lambda v: isinstance(v, dict) and {'temperature', 'top_p'} <= set(v) <= {
                     'temperature', 'top_p', *SERVER_OPTIONS} and all(NUMBER[0](n) for n in v.values()),
                     f'a number for temperature and top_p, and for any of {", ".join(SERVER_OPTIONS)}'),
                 'trials': POSITIVE, 'seeds': MODEL_CHECKS['seeds'], 'counter': OPTIONAL_CHECKS['counter']}
IDENTITY = {'ollama': ('ollama_digest', 'ollama_version'), 'openai': ('model_id', 'server')}  # answers reused only here
# What a recording carries of the cases it asked about, so that grading needs no option repeated.
CHOSEN_CHECKS = {'split': one_of(('dev', 'held_out', 'all'), 'dev, held_out or all'), 'cases_sha256': SHA256,
                 'sample': or_null(POSITIVE)}
JSON_INDENT = 1  # how the answer files are indented
ANSWER_LIST = (lambda v: isinstance(v, list) and v != [], 'a non-empty list')  # a case's answers in a recording
ANSWER_LINE = {'strategy': TEXT, 'case': TEXT, 'answer': OBJECT}  # a kept answer's line in the partial file


def load_model(path: Path = MODEL_PATH) -> dict:
    """answer-model.json, or a pin file like it, checked field by field."""
    advice = f'restore it from version control, or {PIN_AGAIN}'
    return check_model(f'{path}: pin', lab_files.read_json(path, 'answer model pin', advice))


def check_model(where: str, model, advice: str = PIN_AGAIN) -> dict:
    """A pin, or a recording's model block (which may add the context the server loaded), checked field by field."""
    checks = OPENAI_CHECKS if api(model) == 'openai' else MODEL_CHECKS
    check_fields(where, model, {**checks, **OPTIONAL_CHECKS}, advice,
                 optional=[field for field in OPTIONAL_CHECKS if field not in checks])
    if len(model['seeds']) != model['trials']:
        raise LabError(f'{where}.seeds: must be {model["trials"]} distinct integers, one per trial; {advice}')
    return model


def api(model) -> str:
    """The API a pin's server speaks: 'openai', or 'ollama' (every pin made before there was a choice)."""
    return 'openai' if isinstance(model, dict) and model.get('api') == 'openai' else 'ollama'


def model_name(model: dict) -> str:
    """What a pin asks its server for: an OpenAI-compatible model id, or an Ollama tag."""
    return model['model_id'] if api(model) == 'openai' else model['ollama_tag']


def load_recording(path: Path, advice: str) -> dict:
    """{"model": the pin it was made with, as the server reported it, "answers": {strategy: {case_id: [answer, ...]}},
    and "chosen": its split, sample and the case file's sha256}, checked. The original's recordings have no "chosen",
    and their answers six fields that name no request."""
    recorded = lab_files.read_json(path, 'recording', advice)
    check_fields(f'{path}: recording', recorded, dict.fromkeys(('model', 'answers', 'chosen'), OBJECT), advice,
                 optional=['chosen'])
    check_model(f'{path}: model', recorded['model'], advice)
    if 'chosen' in recorded:
        check_fields(f'{path}: chosen', recorded['chosen'], CHOSEN_CHECKS, advice)
    checks, answers = None, recorded['answers']  # checks: the lab's answers, or all in the original's six fields
    check_fields(f'{path}: recording', answers, dict.fromkeys(answers, OBJECT), advice, name='answers')
    for strategy, by_case in answers.items():
        check_fields(f'{path}: recording', by_case, dict.fromkeys(by_case, ANSWER_LIST), advice, f'answers.{strategy}')
        for case_id, listed in by_case.items():
            where = f'{path}: answers.{strategy}.{case_id}'
            for index, answer in enumerate(listed):
                checks = checks or (ORIGINAL_CHECKS if isinstance(answer, dict) and set(answer) == set(
                    ORIGINAL_CHECKS) else ANSWER_CHECKS)
                check_fields(f'{where}[{index}]', answer, checks, advice)
    return recorded


def check_pinned(recorded: dict, pinned: dict, result_path: Path, model_path: Path) -> None:
    """Refuse a recording whose model block is not the pinned build; only what the server reports may differ. Fields
    compare as JSON, where 1 != 1.0 and false != 0."""
    differ = [f for f in sorted(set(recorded['model']) | set(pinned)) if f not in SERVER_REPORTED
              and json.dumps(recorded['model'].get(f), sort_keys=True) != json.dumps(pinned.get(f), sort_keys=True)]
    if differ:
        raise LabError(f'{result_path}: recorded with a build other than the one {model_path} pins '
                       f'({", ".join(differ)} differ), so its answers are not graded: leave out --model to grade '
                       'them under the build the recording names, or record again')


def encoded(path: Path, text: str) -> bytes:
    try:
        return text.encode('utf-8')
    except UnicodeEncodeError as error:  # a lone surrogate in a server's answer cannot be stored as UTF-8
        raise LabError(f'{path}: not written: the data holds text that is not valid Unicode '
                       f'({error.reason} at {error.start})') from None


def save(path: Path, data, what: str, indent: int = JSON_INDENT) -> None:
    lab_files.write_output(path, encoded(path, lab_files.to_json(data, indent)), what)


def append(path: Path, entry: dict | None) -> None:
    """A line at the end of the partial file (None ends a line cut off); what it holds is never rewritten."""
    data = encoded(path, '\n' if entry is None else lab_files.to_json(entry, None))
    try:
        with open(path, 'ab') as file:
            file.write(data)
    except OSError as error:
        raise LabError(f'{path}: cannot write the partial recording: {error.strerror}') from None


def kept_answers(path: Path, model: dict, plan: list[dict], discard: str) -> tuple[dict, int | None] | None:
    """({key: answer} kept in path from this digest and server for the plan, the loaded context), or None if path
    holds none to append to. A line that is no kept answer (a kill mid-write) costs that answer, with one line."""
    if not path.exists():
        return None
    try:
        lines = path.read_bytes().decode('utf-8').split('\n')
        header = json.loads(lines[0])
    except (OSError, ValueError, RecursionError) as error:  # UnicodeDecodeError and JSONDecodeError: ValueErrors
        raise LabError(f'{path}: cannot be read as a partial recording ({error}); {discard}') from None
    check_fields(f'{path}: line 1', header, {'model': OBJECT}, discard)  # the model block
    if any(header['model'].get(field) != model[field] for field in IDENTITY[api(model)]):  # the server
        kept = (f'the model {excerpt(header["model"].get("model_id"))} as its server revealed it then'
                if api(model) == 'openai' else f'digest {str(header["model"].get("ollama_digest"))[:12]} on Ollama '
                f'{header["model"].get("ollama_version")}')
        tell(f'{path.name} holds answers from {kept}, not from this server; none is reused')
        return None
    stored, context_length = {}, None
    for number, line in enumerate(lines[1:], 2):
        try:
            entry = json.loads(line) if line else None
            if isinstance(entry, dict) and set(entry) == {'loaded_context_length'}:
                check_fields('line', entry, {'loaded_context_length': POSITIVE}, 'asked for again')
                context_length = entry['loaded_context_length']
            elif entry is not None:
                check_fields('line', entry, ANSWER_LINE, 'asked for again')
                check_fields('answer', entry['answer'], ANSWER_CHECKS, 'asked for again')
                stored[(entry['strategy'], entry['case'], entry['answer']['request_sha256'])] = entry['answer']
        except (ValueError, RecursionError, LabError) as error:
            tell(f'{path.name}: line {number} is not a kept answer ({error}); it is asked for again')
    if lines[-1]:  # cut off mid-line: the next answer starts a line of its own
        append(path, None)
    return {item['key']: stored[item['key']] for item in plan if item['key'] in stored}, context_length


def recording(model: dict, context_length: int | None, chosen: dict, plan: list[dict], answers: dict) -> dict:
    """What answer-result.json holds for the plan, once answers has the answer to each of its requests."""
    by_strategy: dict = {}
    for item in plan:
        # Today's count, as an uninterrupted run records it, also for an answer an earlier run kept.
        answer = {**answers[item['key']], 'input_tokens': item['input_tokens']}
        by_strategy.setdefault(item['strategy'], {}).setdefault(item['case'], []).append(answer)
    block = {**model, 'loaded_context_length': context_length} if context_length is not None else model
    return {'model': block, 'chosen': chosen, 'answers': by_strategy}


def each_answer(recorded: dict):
    return ((strategy, case_id, answer) for strategy, by_case in recorded['answers'].items()
            for case_id, answers in by_case.items() for answer in answers)


def undercounts_cached_prompt(version: str) -> bool:
    """Whether this Ollama version leaves cached prompt tokens out of prompt_eval_count: '0.30.0-rc5' -> True."""
    match = re.match(r'(\d+)\.(\d+)\.(\d+)', version)
    release = tuple(int(part) for part in match.groups()) if match else (0, 0, 0)
    # So the second and later seeds read as shorter prompts: up to 0.1.48 the runner subtracted cached tokens (fixed
    # by #5371 in 0.1.49), and 0.30.0 with its release candidates counted only what llama-server newly processed
    # (fixed by #16428 in 0.30.1). A build from source says 0.0.0, which tells nothing about its accounting.
    return release == (0, 30, 0) or (0, 0, 0) < release < (0, 1, 49)


def served_counter(tag: str, family: str | None = None) -> str | None:
    """The lab's counter of what Ollama serves as tag (of family, if given): 'llama3.1:8b' -> 'llama-3.1'."""
    return next((n for n, (kin, tags) in SERVED.items() if re.fullmatch(tags, tag) and family in (None, kin)), None)


def closest_counter(tag: str, family: str) -> str | None:
    """The counter nearest tag: its own, else one whose name starts the tag's ('qwen2.5-coder:0.5b' -> 'qwen-2.5'),
    else its family's only counter. Ollama reports the family llama for Llama 3.1, 3.2, 3.3 and Mistral alike, so a
    family of several counters names none."""
    name, kin = tag.split(':')[0], [n for n, (k, _) in SERVED.items() if k == family]
    return served_counter(tag, family) or next((n for n in kin if name.startswith(
        re.split(r'[:(]', SERVED[n][1])[0].replace('\\', ''))), None) or (kin[0] if len(kin) == 1 else None)


def new_pin_counter(tag: str, family: str, asked: str | None) -> str:
    """The counter a new pin of tag names: asked (a counter, or CLOSEST), else the tag's own."""
    name = closest_counter(tag, family) if asked == CLOSEST else asked or served_counter(tag, family)
    if name is None:  # another model's counter only when asked for
        kin = [n for n, (k, _) in SERVED.items() if k == family]
        raise LabError(f'the lab has no counter for {tag} (Ollama family {family}), so it cannot size its requests; '
                       'pin it with --counter NAME to count as another model does' + (
                           f' (--counter {CLOSEST}: the nearest of its family, if any)' if asked != CLOSEST else
                           f'; {CLOSEST} finds none: the family {family} holds {", ".join(kin)}, and Ollama reports it '
                           'for other models too' if kin else f'; {CLOSEST} finds none: the lab counts no {family}'))
    return name


def pin_counter(model: dict) -> tuple[str, bool]:
    """(a pin's counter, whether it is the served model's own): its `counter`, else its tag's, else the default. An
    OpenAI-compatible pin names its counter, held to the server's own count (record's count check)."""
    if api(model) == 'openai':
        return model['counter'], True
    own = served_counter(model['ollama_tag'])
    return (name := model.get('counter') or own or DEFAULT), name == own


def chat_body(model: dict, messages: list[dict], num_ctx: int, num_predict: int, seed: int) -> dict:
    """The chat body for one answer: pinned model and sampling, one seed, the case's budget. An agent case's tools,
    which the lab keeps on its system message, go at the top level, where both APIs read them."""
    tools = messages[0].get('tools') if messages else None
    if tools is not None:
        messages = [{key: value for key, value in messages[0].items() if key != 'tools'}, *messages[1:]]
    if api(model) == 'openai':  # the server's context is fixed when it starts: num_ctx has no field here
        body = {'model': model['model_id'], 'messages': messages, 'stream': False, **model['options'], 'seed': seed,
                'max_tokens': num_predict}
    else:  # Ollama streams unless told not to, and turns thinking on for Gemma 4 by default.
        body = {'model': model['ollama_tag'], 'messages': messages, 'stream': False, 'think': model['think'],
                'options': {**model['options'], 'seed': seed, 'num_ctx': num_ctx, 'num_predict': num_predict}}
    return {**body, 'tools': tools} if tools else body


def encode(body: dict) -> bytes:
    """The one serialisation of a body: the bytes sent and the bytes hashed. Keys keep their order: a server's template
    writes the tools' JSON in the order it reads it, so sorted keys would change the prompt the lab counted (measured
    on llama.cpp's server with Qwen2.5-Coder: 252 tokens for 254)."""
    return json.dumps(body, ensure_ascii=False, separators=(',', ':')).encode('utf-8')


def request_sha256(body: dict) -> str:
    return hashlib.sha256(encode(body)).hexdigest()


def seeded_requests(model: dict, strategy: str, case: dict, messages: list[dict], row: dict) -> list[dict]:
    """The request for each of the pin's seeds, with its fact-recall row (scorer.graded_row's shape). A key joins rule
    and case to the body's sha256 (with the seed): 30 of the default 120 repeat another rule's."""
    budget, requests = case['budget'], []
    for seed in model['seeds']:
        body = chat_body(model, messages, budget['context_limit'], budget['max_new_tokens'], seed)
        sha256 = request_sha256(body)
        requests.append({'strategy': strategy, 'case': case['id'], 'seed': seed, 'body': body, 'request_sha256': sha256,
                         'key': (strategy, case['id'], sha256), 'input_tokens': row['input_tokens'], 'row': row})
    return requests


def label(item: dict) -> str:
    return f'{item["strategy"]} {item["case"]} seed {item["seed"]}'


def ready_partial(partial: Path, fresh: bool) -> None:
    """Refuse a partial path that is no file, and discard it first with --fresh: both before the server is asked."""
    if partial.exists() and not partial.is_file():
        raise LabError(f'{partial}: not a file, so it cannot keep the answers so far; move it away, then run again')
    if fresh and partial.exists():
        partial.unlink()
        tell(f'discarded {partial.name}')


def open_partial(partial: Path, client, plan: list[dict], fresh: bool,
                 record_command: str) -> tuple[dict, dict, int | None]:
    """(this server's model block, the answers partial keeps for the plan, the loaded context), the server checked."""
    ready_partial(partial, fresh)
    model = client.checked_model()
    kept = kept_answers(partial, model, plan, f'discard it with `{record_command} --fresh`')
    if kept is None:
        save(partial, {'model': model}, 'partial recording', None)  # one line, as append() writes
    return model, *(kept or ({}, None))


def check_server_counts(plan: list[dict], client) -> None:
    """Where the server counts a request without answering it, each request's count against the lab's, before any
    answer token is spent: a mismatch is one line naming the request."""
    counted: dict = {}
    for item in plan:
        same = request_sha256({**item['body'], 'seed': None, 'options': None})  # the seeds' bodies read alike
        if same not in counted and (counted.setdefault(same, client.count(item['body'])) is None):
            return  # this server cannot count without answering: grading compares prompt_tokens instead
        if counted[same] != item['input_tokens']:
            raise LabError(f'{label(item)}: the server counts {counted[same]} prompt tokens, the lab counted '
                           f'{item["input_tokens"]} with {pin_counter(client.model)[0]}, so no answer was asked for: '
                           'pin the counter of the model this server serves (--counter)')
    if counted:
        tell(f'the server counts {counted_text(len(counted), "distinct request")} as the lab does')


def note_loaded_context(client, partial: Path, body: dict) -> int | None:
    """The context the server says it loaded the model with, kept in partial; None where it says none, or fails."""
    try:
        length = client.loaded_context_length()
    except LabError as error:  # it costs only the note
        tell(f'the server did not say what context it loaded the model with ({error}); recording goes on')
        return None
    if length:
        num_ctx = body.get('options', {}).get('num_ctx')
        tell(f'the server loaded {body["model"]} with a context of {length} tokens' + (
            f'; num_ctx {num_ctx} only decides which old messages it would drop' if num_ctx else ''))
        append(partial, {'loaded_context_length': length})
    return length


def record_answers(plan: list[dict], client, result_path: Path, fresh: bool, chosen: dict,
                   record_command: str) -> None:
    """Ask for every planned answer not kept; write result_path, carrying chosen, once all are in."""
    partial = result_path.with_suffix(PARTIAL_SUFFIX)
    model, answers, context_length = open_partial(partial, client, plan, fresh, record_command)
    asking, recent, last = len(plan) - len(answers), deque(maxlen=RECENT_CALLS), time.monotonic()
    check_server_counts([item for item in plan if item['key'] not in answers], client)
    tell(f'reusing {len(answers)} answers from {partial.name}; asking for {asking} of {len(plan)}' if answers
         else f'asking for {asking} answers; the first call may also load the model')
    for number, item in enumerate(plan, 1):
        if item['key'] in answers:
            continue
        try:
            reply = client.answer(item['body'])
        except LabError as error:
            kept = f'the {len(answers)} answers so far are kept in {partial.name}' if answers else 'no answer is kept'
            raise type(error)(f'call {number} of {len(plan)} ({label(item)}): {error}; {kept}') from None
        answer = answers[item['key']] = {**reply, 'request_sha256': item['request_sha256'],
                                         'input_tokens': item['input_tokens']}
        # Kept before anything else is asked, so no later failure can lose this answer.
        append(partial, {'strategy': item['strategy'], 'case': item['case'], 'answer': answer})
        asked = len(answers) - (len(plan) - asking)
        if asked == 1:  # the model is loaded now, so the server can say with what context
            context_length = note_loaded_context(client, partial, item['body']) or context_length
        recent.append(time.monotonic() - last)  # the call's seconds, writing included
        last += recent[-1]
        minutes, rest = divmod(round(sum(recent) / len(recent) * (asking - asked)), 60)
        left = f'{minutes} min {rest} s' if minutes else f'{rest} s'
        tell(f'call {number} of {len(plan)}: {label(item)}: {recent[-1]:.1f} s, about {left} left')
    save(result_path, recording(model, context_length, chosen, plan, answers), 'recording')
    partial.unlink(missing_ok=True)
