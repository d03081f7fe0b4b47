"""Record a pinned model's answers to each rule's requests through Ollama, and grade them offline.

    .venv/bin/python answer_check.py record           # needs Ollama with the pinned build, and prepare.py run
    .venv/bin/python answer_check.py record --fresh   # the same, discarding the answers a stopped run kept
    .venv/bin/python answer_check.py                  # offline: re-grades answer-result.json; calls no model
    .venv/bin/python answer_check.py pin TAG --output my-model.json       # pin a model Ollama holds
    .venv/bin/python answer_check.py record --model my-model.json --cases my-cases.json --rules my_rules.py

By default record asks for 4 rules x 6 held-out cases x 5 seeds = 120 answers, appending each to
answer-result.partial.json to resume from, and writes answer-result.json once all are in. Grading writes
answer-grades.json (NAME.grades.json beside --output) and prints its tables and JSON (docs/answer-check.md). It
retries no call, and reuses or grades no answer of another build, nor a recording missing an answer or twice.
"""
import argparse
from collections import Counter
import json
from pathlib import Path
import random
import sys
import time

import answer_f1
import answer_keys
from answer_model import (MODEL_PATH, SAMPLING_OPTIONS, chat_body, check_answer, check_model, check_pinned, load_model,
                          load_recording, request_sha256, undercounts_cached_prompt)
import case_set
import common
from common import LabError
import lab_files
from ollama_client import OllamaClient, OllamaError
from scorer import graded_row
from rule_files import load_rule_files
from strategies import RULES
from text import counted
from tokenizer import count_request

KEYS_PATH, RESULT_PATH, GRADES_PATH = (common.HERE / name  # the shipped keys, recording and grades
                                      for name in ('answer-keys.json', 'answer-result.json', 'answer-grades.json'))
PARTIAL_SUFFIX = '.partial.json'  # answer-result.json keeps its answers so far in answer-result.partial.json
GRADES_SUFFIX = '.grades.json'  # where the grades of an --output recording go
JSON_INDENT = 1  # how the answer files are indented
DEFAULT_SPLIT = 'held_out'  # the split sent by default: the rules were written while looking at the others
SAMPLE_SEED = 0  # --sample N draws with this seed, so that record and grading draw the same cases
ASK_ABOVE = 500  # record makes more calls than this only with --yes
# What identifies the server behind a kept answer; an answer is reused only when all of it matches.
SERVER_FIELDS = ('ollama_digest', 'ollama_version')
ANSWER_LINE = {'strategy', 'case', 'answer'}  # a kept answer's line in the partial file
CUT_OFF = 'length'  # the done_reason of an answer that reached num_predict: listed, its verdict stands
PYTHON = common.python_command()  # advice pasteable into a new terminal: the venv's python when that runs
REDO = f'record again with `{PYTHON} answer_check.py record`, or restore it from version control'
FRESH = f'discard it with `{PYTHON} answer_check.py record --fresh`'


def encoded(path: Path, text: str) -> bytes:
    try:
        return text.encode('utf-8')
    except UnicodeEncodeError as error:  # a lone surrogate in a server's answer cannot be stored as UTF-8
        raise LabError(f'{path}: not written: the data holds text that is not valid Unicode '
                       f'({error.reason} at {error.start})') from None


def save(path: Path, data, what: str) -> None:
    lab_files.write_output(path, encoded(path, lab_files.to_json(data, JSON_INDENT)), what)


def append(path: Path, entry: dict | None) -> None:
    """A line at the end of the partial file (None ends a line cut off); what it holds is never rewritten."""
    data = encoded(path, '\n' if entry is None else json.dumps(entry, ensure_ascii=False) + '\n')
    try:
        with open(path, 'ab') as file:
            file.write(data)
    except OSError as error:
        raise LabError(f'{path}: cannot write the partial recording: {error.strerror}') from None


def tell(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def sampled(cases: list[dict], size: int | None) -> list[dict]:
    """size of the cases, drawn with SAMPLE_SEED and kept in file order; all of them for None."""
    if size is not None and not 0 < size <= len(cases):
        raise LabError(f'--sample {size}: expected 1 to {len(cases)}, the number of chosen cases')
    drawn = range(len(cases)) if size is None else set(random.Random(SAMPLE_SEED).sample(range(len(cases)), size))
    return [case for index, case in enumerate(cases) if index in drawn]


def planned_requests(cases: list[dict], rules: dict, model: dict) -> list[dict]:
    """Every request record sends, in order: rule, case, seed, with its fact-recall row. A key joins rule and case to
    the body's sha256 (which holds the seed): 30 of the default 120 bodies repeat another rule's, each still sent."""
    plan = []
    for name, rule in rules.items():
        for case in cases:
            selected, budget = rule(case, count_request), case['budget']
            row = graded_row(case, selected)
            for seed in model['seeds']:
                body = chat_body(model, selected['messages'], budget['context_limit'], budget['max_new_tokens'], seed)
                sha256 = request_sha256(body)
                plan.append({'strategy': name, 'case': case['id'], 'seed': seed, 'body': body, 'request_sha256': sha256,
                             'key': (name, case['id'], sha256), 'input_tokens': selected['input_tokens'], 'row': row})
    return plan


def kept_answers(path: Path, model: dict, plan: list[dict]) -> tuple[dict, int | None] | None:
    """({key: answer} kept in path from this digest and server for the plan, the loaded context), or None if path
    holds none to append to. A line that is no kept answer (a kill mid-write) costs that answer, with one line."""
    if not path.exists():
        return None
    try:
        lines = path.read_bytes().decode('utf-8').split('\n')
        header = json.loads(lines[0])
    except (OSError, ValueError, RecursionError) as error:  # UnicodeDecodeError and JSONDecodeError: ValueErrors
        raise LabError(f'{path}: cannot be read as a partial recording ({error}); {FRESH}') from None
    if not isinstance(header, dict) or set(header) != {'model'} or not isinstance(header['model'], dict):
        raise LabError(f'{path}: line 1 is not the model block a partial recording starts with; {FRESH}')
    if any(header['model'].get(field) != model[field] for field in SERVER_FIELDS):
        tell(f'{path.name} holds answers from digest {str(header["model"].get("ollama_digest"))[:12]} on Ollama '
            f'{header["model"].get("ollama_version")}, not from this server; none is reused')
        return None
    stored, context_length = {}, None
    for number, line in enumerate(lines[1:], 2):
        try:
            entry = json.loads(line) if line else None
            if isinstance(entry, dict) and set(entry) == {'loaded_context_length'}:
                if type(entry['loaded_context_length']) is not int or entry['loaded_context_length'] < 1:
                    raise LabError('loaded_context_length must be a positive integer')
                context_length = entry['loaded_context_length']
            elif entry is not None and (not isinstance(entry, dict) or set(entry) != ANSWER_LINE):
                raise LabError(f'expected {sorted(ANSWER_LINE)}')
            elif entry is not None:
                check_answer('answer', entry['answer'], 'asked for again')
                stored[(entry['strategy'], entry['case'], entry['answer']['request_sha256'])] = entry['answer']
        except (ValueError, RecursionError, LabError) as error:
            tell(f'{path.name}: line {number} is not a kept answer ({error}); it is asked for again')
    if lines[-1]:  # cut off mid-line: the next answer starts a line of its own
        append(path, None)
    return {item['key']: stored[item['key']] for item in plan if item['key'] in stored}, context_length


def recording(model: dict, context_length: int | None, plan: list[dict], answers: dict) -> dict:
    """What answer-result.json holds for the planned answers present in answers, in plan order."""
    by_strategy: dict = {}
    for item in plan:
        if item['key'] in answers:
            # Today's count, as an uninterrupted run records it, also for an answer an earlier run kept.
            answer = {**answers[item['key']], 'input_tokens': item['input_tokens']}
            by_strategy.setdefault(item['strategy'], {}).setdefault(item['case'], []).append(answer)
    block = {**model, 'loaded_context_length': context_length} if context_length is not None else model
    return {'model': block, 'answers': by_strategy}


def open_partial(partial: Path, client: OllamaClient, plan: list[dict], fresh: bool) -> tuple[dict, dict, int | None]:
    """(this server's model block, the answers partial keeps for the plan, the loaded context), the server checked."""
    if partial.exists() and not partial.is_file():
        raise LabError(f'{partial}: not a file, so it cannot keep the answers so far; move it away, then run again')
    if fresh and partial.exists():
        partial.unlink()
        tell(f'discarded {partial.name}')
    version, pinned = client.verify(), client.model['ollama_version']
    if version != pinned:
        tell(f'note: the server is Ollama {version}; the pinned recording used {pinned}. '
             'The digest matches; the version is recorded with the answers.')
    if undercounts_cached_prompt(version):
        tell(f'note: Ollama {version} leaves cached prompt tokens out of prompt_eval_count, so the second '
             'and later seeds of each request will show as prompt-token mismatches; grading marks them so.')
    model = {**client.model, 'ollama_version': version}
    kept = kept_answers(partial, model, plan)
    if kept is None:
        lab_files.write_output(partial, encoded(partial, json.dumps({'model': model}) + '\n'), 'partial recording')
    return model, *(kept or ({}, None))


def note_loaded_context(client: OllamaClient, partial: Path, num_ctx: int) -> int | None:
    """The context /api/ps says the model is loaded with, kept in partial; None where it says none, or fails."""
    try:
        length = client.loaded_context_length()
    except OllamaError as error:  # it costs only the note
        tell(f'the server did not say what context it loaded the model with ({error}); recording goes on')
        return None
    if length:
        tell(f'the server loaded {client.model["ollama_tag"]} with a context of {length} tokens; '
             f'num_ctx {num_ctx} only decides which old messages it would drop')
        append(partial, {'loaded_context_length': length})
    return length


def record_answers(plan: list[dict], client: OllamaClient, result_path: Path, fresh: bool) -> None:
    """Ask for every planned answer not kept; write result_path once all are in."""
    partial = result_path.with_suffix(PARTIAL_SUFFIX)
    model, answers, context_length = open_partial(partial, client, plan, fresh)
    asking = len(plan) - len(answers)
    tell(f'reusing {len(answers)} answers from {partial.name}; asking for {asking} of {len(plan)}' if answers
         else f'asking for {asking} answers; the first call may also load the model')
    started = time.monotonic()
    for number, item in enumerate(plan, 1):
        if item['key'] in answers:
            continue
        call_started, options = time.monotonic(), item['body']['options']
        label = f'{item["strategy"]} {item["case"]} seed {item["seed"]}'
        try:
            reply = client.answer(item['body']['messages'], options['num_ctx'], options['num_predict'], item['seed'])
        except OllamaError as error:
            kept = f'the {len(answers)} answers so far are kept in {partial.name}' if answers else 'no answer is kept'
            raise OllamaError(f'call {number} of {len(plan)} ({label}): {error}; {kept}') from None
        answer = answers[item['key']] = {**reply, 'request_sha256': item['request_sha256'],
                                         'input_tokens': item['input_tokens']}
        # Kept before anything else is asked, so no later failure can lose this answer.
        append(partial, {'strategy': item['strategy'], 'case': item['case'], 'answer': answer})
        asked = len(answers) - (len(plan) - asking)
        if asked == 1:  # the model is loaded now, so /api/ps can say with what context
            context_length = note_loaded_context(client, partial, options['num_ctx']) or context_length
        # Time left from every second the run has taken so far, writing included.
        minutes, rest = divmod(round((time.monotonic() - started) / asked * (asking - asked)), 60)
        left = f'{minutes} min {rest} s' if minutes else f'{rest} s'
        tell(f'call {number} of {len(plan)}: {label}: {time.monotonic() - call_started:.1f} s, about {left} left')
    save(result_path, recording(model, context_length, plan, answers), 'recording')
    partial.unlink(missing_ok=True)


def each_answer(recorded: dict):
    return ((strategy, case_id, answer) for strategy, by_case in recorded['answers'].items()
            for case_id, answers in by_case.items() for answer in answers)


def check_complete(recorded: dict, plan: list[dict], path: Path) -> None:
    """Refuse a recording that lacks a planned answer, or holds one twice, naming them: its counts would lie."""
    held = Counter((strategy, case_id, answer['seed']) for strategy, case_id, answer in each_answer(recorded))
    planned = [(item['strategy'], item['case'], item['seed']) for item in plan]
    for problem, found in (('missing', [key for key in planned if key not in held]),
                           ('recorded more than once', [key for key, times in held.items() if times > 1])):
        if found:
            named = ', '.join(f'{s} {c} seed {seed}' + (f' ({held[s, c, seed]} times)' if held[s, c, seed] > 1 else '')
                              for s, c, seed in found[:answer_keys.NAMED])
            raise LabError(f'{path}: {counted(len(found), "answer")} {problem}, such as {named}; {REDO}')


def grade_recording(recorded: dict, keys: dict, current: dict, kinds: dict | None = None) -> dict:
    """The grades file's content; current maps (strategy, case, seed) to today's request, whose fact-recall row joins
    an answer given that very request. With kinds ({case_id: kind}), keys are gold answers graded by token F1."""
    mismatches, cut_off, outdated, joined = [], [], [], []
    undercounts = undercounts_cached_prompt(recorded['model']['ollama_version'])
    for strategy, case_id, answer in each_answer(recorded):
        where = {'strategy': strategy, 'case': case_id, 'seed': answer['seed']}
        today = current.get((strategy, case_id, answer['seed']))
        same = today is not None and today['request_sha256'] == answer['request_sha256']
        joined.append((strategy, case_id, answer, today['row'] if same else None))
        counted, read = answer['input_tokens'], answer['prompt_tokens']
        if read != counted:  # the model did not see the request counted, unless the server's cache hid some
            mismatches.append({**where, 'prompt_tokens': read, 'input_tokens': counted,
                               'probably_cache_accounting': undercounts and read < counted})
        if answer['done_reason'] == CUT_OFF:
            cut_off.append(where)
        if not same:
            outdated.append({**where, 'reason': 'no longer sent' if today is None else 'request changed'})
    graded = {strategy: {case_id: [] for case_id in by_case} for strategy, by_case in recorded['answers'].items()}
    before, after = (answer_f1.f1_grades(joined, keys, kinds, graded) if kinds is not None
                     else answer_keys.key_grades(joined, keys, graded))
    return {'model': recorded['model'], 'answers_recorded': len(joined), **before,
            'prompt_token_mismatches': mismatches, 'cut_off_answers': cut_off,
            'cut_off_per_strategy': {name: sum(c['strategy'] == name for c in cut_off) for name in graded},
            'outdated_requests': outdated, **after}


def grades_report(grades: dict) -> str:
    """The grader's tables and lists, then the checks kept apart."""
    cut_off = 'Cut off at num_predict (graded as they stand): ' + ', '.join(
        f'{k} {v}' for k, v in grades['cut_off_per_strategy'].items())
    lines = [*(answer_f1.f1_tables if 'f1' in grades else answer_keys.key_tables)(grades, cut_off), '']
    if mismatches := grades['prompt_token_mismatches']:
        lines.append(f'{counted(len(mismatches), "answer")} where the server read a different prompt '
                     'than the one counted:')
        lines += [f'  {m["strategy"]} {m["case"]} seed {m["seed"]}: server read {m["prompt_tokens"]} tokens, '
                  f'the lab counted {m["input_tokens"]}'
                  + (f' (probably the accounting of Ollama {grades["model"]["ollama_version"]}, which leaves '
                     'cached prompt tokens out)' if m['probably_cache_accounting'] else '') for m in mismatches]
    else:
        lines.append("Every answer's prompt_tokens equal the counted input tokens.")
    if outdated := grades['outdated_requests']:
        lines.append(f'{counted(len(outdated), "answer")} recorded for requests that the current '
                     'strategies, cases and answer-model.json no longer send; record again:')
        lines += [f'  {o["strategy"]} {o["case"]} seed {o["seed"]}: {o["reason"]}' for o in outdated]
    else:
        lines.append('Every recorded request is what the current strategies and cases send.')
    return '\n'.join(lines)


def parse_args(argv: list[str], model_path: Path, cases_path: Path) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog='answer_check.py', description='Grade the recorded answers offline, or '
                                     'record them from the pinned model through Ollama first, or pin a model.')
    parser.add_argument('command', nargs='?', choices=['record', 'pin'], help='record, then grade; or pin TAG')
    parser.add_argument('tag', nargs='?', help='with pin: the Ollama tag to pin, such as llama3.2:1b')
    parser.add_argument('--model', type=Path, default=model_path, help='the pin (default answer-model.json)')
    parser.add_argument('--cases', type=Path, default=cases_path, help='case set (default cases.json)')
    parser.add_argument('--split', choices=['dev', 'held_out', 'all'], default=DEFAULT_SPLIT,
                        help=f'default {DEFAULT_SPLIT}')
    parser.add_argument('--rules', type=Path, action='append', default=[], help='rules beside the four (repeatable)')
    parser.add_argument('--keys', type=Path, help='answer-keys.json by default; gold answers with --grader f1')
    parser.add_argument('--grader', choices=['keys', 'f1'], default='keys', help="f1: LoCoMo's token F1")
    parser.add_argument('--output', type=Path, help='the recording (default answer-result.json); with pin: the pin')
    parser.add_argument('--sample', type=int, help='a seeded sample of N of the chosen cases')
    parser.add_argument('--yes', action='store_true', help=f'with record: make more than {ASK_ABOVE} calls')
    parser.add_argument('--fresh', action='store_true', help='with record: discard the partial file first')
    for option in SAMPLING_OPTIONS:
        parser.add_argument(f'--{option.replace("_", "-")}', type=int if option == 'top_k' else float,
                            help=f'with pin: {option} (default: that of --model)')
    parser.add_argument('--seeds', type=int, nargs='+', help='with pin: seeds such as 1 2 3, one trial each')
    args = parser.parse_args(argv)  # a usage error exits 2
    sampling = args.seeds or any(getattr(args, option) is not None for option in SAMPLING_OPTIONS)
    for wrong, message in (((args.command == 'pin') != (args.tag is not None), 'pin takes one TAG; only pin does'),
                           (args.command == 'pin' and args.output is None, 'pin needs --output FILE'),
                           ((args.fresh or args.yes) and args.command != 'record', '--fresh and --yes go with record'),
                           (sampling and args.command != 'pin', '--seeds and the sampling options go with pin'),
                           (args.grader == 'f1' and args.keys is None, '--grader f1 needs --keys GOLD.json')):
        if wrong:
            parser.error(message)
    return args


def pin(args: argparse.Namespace) -> int:
    defaults = load_model(args.model)
    options = {**defaults['options'], **{o: v for o in SAMPLING_OPTIONS if (v := getattr(args, o)) is not None}}
    lab_files.check_outputs([('--output', args.output)], [('--model', args.model)])
    client = OllamaClient({**defaults, 'ollama_tag': args.tag, 'ollama_digest': None})
    pinned = check_model(args.output, client.pin(options, args.seeds or defaults['seeds']))
    save(args.output, pinned, 'answer model pin')
    print(f'{args.output}: pins {args.tag} at digest {pinned["ollama_digest"]} on Ollama {pinned["ollama_version"]}')
    return 0


def load_inputs(args: argparse.Namespace, keys_path: Path) -> tuple[dict, dict, list[dict], dict]:
    """The pin, rules, chosen cases and their keys (or gold answers), checked before any call is wasted."""
    model = load_model(args.model)
    rules = {**RULES, **load_rule_files(args.rules)[0]} if args.rules else RULES
    every = case_set.load_cases(args.cases)
    cases = [case for case in every if args.split in ('all', case['split'])]
    if not cases:
        raise LabError(f'{args.cases}: holds no {args.split} case')
    cases = sampled(cases, args.sample)
    load_keys = answer_f1.load_gold_answers if args.grader == 'f1' else answer_keys.load_answer_keys
    return model, rules, cases, load_keys(keys_path, cases, every)


def grade_files(cases_path: Path, keys_path: Path, model_path: Path, result_path: Path, grades_path: Path,
                args: argparse.Namespace | None = None, inputs: tuple | None = None, plan: list | None = None) -> dict:
    """Grade result_path into grades_path and return it: by default, or as args say with inputs and plan in hand."""
    args = args or parse_args([], model_path, cases_path)
    model, rules, cases, keys = inputs or load_inputs(args, keys_path)
    recorded = load_recording(result_path, rules, [case['id'] for case in cases], 'recording', REDO)
    check_pinned(recorded, model, result_path, args.model, REDO)
    if recorded['answers']:  # today's requests need the prepared counter; an empty recording needs nothing
        plan = plan or planned_requests(cases, rules, model)
        check_complete(recorded, plan, result_path)
    kinds = {case['id']: case['kind'] for case in cases} if args.grader == 'f1' else None
    grades = grade_recording(recorded, keys, {(p['strategy'], p['case'], p['seed']): p for p in plan or []}, kinds)
    save(grades_path, grades, 'answer grades')
    return grades


def main(argv: list[str], *, cases_path: Path = common.DEFAULT_CASES, keys_path: Path = KEYS_PATH,
         model_path: Path = MODEL_PATH, result_path: Path = RESULT_PATH, grades_path: Path = GRADES_PATH,
         client: OllamaClient | None = None) -> int:
    args = parse_args(argv, model_path, cases_path)
    if args.command == 'pin':
        return pin(args)
    result_path, keys_path = args.output or result_path, args.keys or keys_path
    grades_path = grades_path if args.output is None else result_path.with_suffix(GRADES_SUFFIX)
    partial, recording_run = result_path.with_suffix(PARTIAL_SUFFIX), args.command == 'record'
    recording = [('--output', result_path), ('its partial file', partial)]
    lab_files.check_outputs([('the grades', grades_path), *(recording if recording_run else [])],
                         [('--model', args.model), ('--cases', args.cases), ('--keys', keys_path),
                          *(('--rules', path) for path in args.rules), *([] if recording_run else recording[:1])])
    recorded = False  # whether this run has written the recording whole
    try:
        model, rules, cases, keys = inputs = load_inputs(args, keys_path)
        plan = planned_requests(cases, rules, model) if recording_run else None
        if plan is not None and len(plan) > ASK_ABOVE and not args.yes:
            raise LabError(f'record would make {len(plan):,} calls ({len(rules)} rules x {len(cases)} cases x '
                           f'{len(model["seeds"])} seeds); add --yes to make them, or choose fewer with --sample N')
        if plan is not None:
            record_answers(plan, client if client is not None else OllamaClient(model), result_path, args.fresh)
            recorded = True
        grades = grade_files(args.cases, keys_path, args.model, result_path, grades_path, args, inputs, plan)
    except (KeyboardInterrupt, LabError) as stop:  # each message says what is on disk
        whole = f'{result_path.name} holds every answer: grade it with the same command without `record`'
        if isinstance(stop, LabError):
            raise LabError(f'{stop}; {whole}') if recorded else stop
        kept = f'; the answers so far are kept in {partial.name} for the next `record`' if partial.exists() else ''
        raise KeyboardInterrupt(whole if recorded else f'{result_path.name} ' + (
            f'is replaced only once every answer has arrived{kept}' if recording_run else 'is unchanged')) from None
    print(grades_report(grades) if grades['answers_recorded'] else
          f'Nothing is recorded: {result_path.name} holds the pinned model block and no answers.\n'
          f'To record, start Ollama, run `ollama pull {model["ollama_tag"]}`, check that the ID column of '
          f'`ollama list` starts with {model["ollama_digest"][:12]}, then run `{PYTHON} answer_check.py record` '
          f'({len(rules) * len(cases) * len(model["seeds"])} calls).')
    print(f'\n{grades_path.name}:\n{lab_files.to_json(grades, JSON_INDENT)}', end='')
    return 0


if __name__ == '__main__':
    common.run(main)
