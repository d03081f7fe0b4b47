"""Record a pinned model's answers to each rule's requests through Ollama or an OpenAI-compatible server, and grade
them offline.

    .venv/bin/python answer_check.py record           # needs Ollama with the pinned build, and prepare.py run
    .venv/bin/python answer_check.py record --fresh   # the same, discarding the answers a stopped run kept
    .venv/bin/python answer_check.py                  # offline: re-grades answer-result.json; calls no model
    .venv/bin/python answer_check.py pin TAG --output my-model.json       # pin a model Ollama holds
    .venv/bin/python answer_check.py pin ID --api openai --base-url http://127.0.0.1:8080/v1 --counter qwen-2.5 \
        --output my-model.json                                            # pin the model such a server serves
    .venv/bin/python answer_check.py check --model my-model.json          # does the server hold it? sends no chat
    .venv/bin/python answer_check.py record --model my-model.json --cases my-cases.json --rules my_rules.py

By default record asks for 4 rules x 6 held-out cases x 5 seeds = 120 answers, kept one by one in
answer-result.partial.json to resume from, and writes answer-result.json once all are in. Grading writes
answer-grades.json (NAME.grades.json beside --output) and prints its tables (docs/answer-check.md). It retries no
call, and reuses or grades no answer of another build, nor a recording missing an answer or holding one twice.
"""
import argparse
import os
from pathlib import Path
import random

from answer_grades import GRADES_SUFFIX, check_complete, grade_recording, grades_report, stops_told
import answer_keys
from answer_model import (CLOSEST, JSON_INDENT, MODEL_PATH, PARTIAL_SUFFIX, SAMPLING_OPTIONS, check_model,
                          check_pinned, each_answer, load_model, load_recording, pin_counter, ready_partial,
                          record_answers, save, seeded_requests)
import case_set
import common
from common import LabError
import lab_files
from ollama_client import OllamaClient
from openai_client import BASE_URL, BASE_URL_VARIABLE, OpenAIClient, client_for, described, server_advice
from rule_files import add_timeout_option, load_rule_files
from runner import case_selections
from strategies import RULES
import tokenizer

KEYS_PATH = common.HERE / 'answer-keys.json'
RESULT_PATH = common.HERE / 'answer-result.json'
GRADES_PATH = common.HERE / 'answer-grades.json'
DEFAULT_SPLIT = 'held_out'  # the split sent by default: the rules were written while looking at the others
F1_RIGHT = 0.5  # --grader f1 counts an answer right at this F1 or above (--f1-threshold)
SAMPLE_SEED = 0  # --sample N draws with this seed, so that record and grading draw the same cases
ASK_ABOVE = 500  # record makes more calls than this only with --yes


def planned_requests(cases: list[dict], rules: dict, model: dict) -> list[dict]:
    """Every request record sends, sized by the pin's counter and selected as every report selects, in order: rule,
    case, seed."""
    count = tokenizer.counter(pin_counter(model)[0])
    selections = [case_selections(case, rules, count) for case in cases]  # (rule -> selection, rule -> graded row)
    return [item for name in rules for case, (chosen, rows) in zip(cases, selections)
            for item in seeded_requests(model, name, case, chosen[name]['messages'], rows[name])]


def parse_args(argv: list[str], cases_path: Path) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog='answer_check.py', description='Grade recorded answers offline, record them '
                                     'from the pinned model first (through Ollama or an OpenAI-compatible server), '
                                     'or pin a model.')
    parser.add_argument('command', nargs='?', choices=['record', 'pin', 'check'],
                        help='record, then grade; pin TAG; or check that the server holds the pinned model (no chat)')
    parser.add_argument('tag', nargs='?', help='with pin: the Ollama tag to pin, such as llama3.2:1b, or the model id')
    parser.add_argument('--api', choices=['ollama', 'openai'], default='ollama',
                        help='with pin: openai for a server of /v1/chat/completions (llama.cpp, vLLM, LM Studio)')
    parser.add_argument('--base-url', help=f'with pin --api openai: its base URL (default ${BASE_URL_VARIABLE}, '
                        f'else {BASE_URL})')
    parser.add_argument('--model', type=Path, help="the pin (default answer-model.json; grading: the recording's)")
    common.add_input_options(parser, cases_path)
    add_timeout_option(parser)
    parser.add_argument('--split', choices=['dev', 'held_out', 'all'], help=f'default {DEFAULT_SPLIT}, or as recorded')
    parser.add_argument('--keys', type=Path, help='answer-keys.json by default; gold answers with --grader f1')
    parser.add_argument('--grader', choices=['keys', 'f1'], default='keys', help="f1: LoCoMo's token F1")
    parser.add_argument('--f1-threshold', type=float, default=F1_RIGHT, help='with f1: a right answer\'s least F1')
    parser.add_argument('--output', type=Path, help='the recording (default answer-result.json); with pin: the pin')
    parser.add_argument('--sample', type=int, help='a seeded sample of N of the chosen cases, or as recorded')
    parser.add_argument('--format', choices=['table', 'json'], default='table', help='json: the grades on stdout')
    parser.add_argument('--yes', action='store_true', help=f'with record: make more than {ASK_ABOVE} calls')
    parser.add_argument('--fresh', action='store_true', help='with record: discard the partial file first')
    for option in (*SAMPLING_OPTIONS, 'repeat_penalty'):
        parser.add_argument(f'--{option.replace("_", "-")}', type=int if option == 'top_k' else float,
                            help=f'with pin: {option} (default: that of --model)')
    parser.add_argument('--seeds', type=int, nargs='+', help='with pin: seeds such as 1 2 3, one trial each')
    parser.add_argument('--counter', type=lambda text: text if text == CLOSEST else tokenizer.counter_choice(text),
                        help=f"with pin: the counter, if not the model's own ({CLOSEST}: the nearest of its family)")
    args = parser.parse_args(argv)  # a usage error exits 2
    refuse_combinations(parser, args)
    return args


def refuse_combinations(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Exit 2 with argparse's usage line for options given to a command they do not go with."""
    pin_only = args.seeds or args.counter or args.base_url or args.api != 'ollama' or any(
        getattr(args, option) is not None for option in (*SAMPLING_OPTIONS, 'repeat_penalty'))
    for wrong, message in (((args.command == 'pin') != (args.tag is not None), 'pin takes one TAG; only pin does'),
                           (args.command == 'pin' and args.output is None, 'pin needs --output FILE'),
                           ((args.fresh or args.yes) and args.command != 'record', '--fresh and --yes go with record'),
                           (pin_only and args.command != 'pin',
                            '--api, --base-url, --seeds, --counter and sampling options go with pin'),
                           ((args.base_url or args.repeat_penalty is not None) and args.api != 'openai',
                            '--base-url and --repeat-penalty go with --api openai'),
                           (args.grader == 'f1' and args.keys is None, '--grader f1 needs --keys GOLD.json'),
                           (args.grader != 'f1' and args.f1_threshold != F1_RIGHT, '--f1-threshold goes with f1')):
        if wrong:
            parser.error(message)


def pin(args: argparse.Namespace) -> int:
    defaults = load_model(args.model)
    asked = {o: v for o in (*SAMPLING_OPTIONS, 'repeat_penalty') if (v := getattr(args, o)) is not None}
    lab_files.check_outputs([('--output', args.output)], [('--model', args.model)])
    options, seeds = {**defaults['options'], **asked}, args.seeds or defaults['seeds']
    if args.api == 'openai':
        base_url = args.base_url or os.environ.get(BASE_URL_VARIABLE) or BASE_URL
        client = OpenAIClient({'api': 'openai', 'base_url': base_url, 'model_id': args.tag})
        pinned = check_model(f'{args.output}: pin', client.pin(options, asked, seeds, args.counter))
        where = f'at {base_url}{described(pinned["server"])}'
    else:
        client = OllamaClient({**defaults, 'ollama_tag': args.tag, 'ollama_digest': None})
        pinned = check_model(f'{args.output}: pin', client.pin(options, seeds, args.counter))
        where = f'at digest {pinned["ollama_digest"]} on Ollama {pinned["ollama_version"]}'
    save(args.output, pinned, 'answer model pin')
    note = '' if pin_counter(pinned)[1] else ', not its own counter, so prompt_tokens will not be compared'
    print(f'{args.output}: pins {args.tag} {where}, counted by {pinned["counter"]}{note}')
    return 0


def check(args: argparse.Namespace) -> int:
    """Whether the server holds the pinned model, as record checks it first; no chat, nothing written."""
    client = client_for(load_model(args.model))
    print(client.holds())
    return 0


def load_inputs(args: argparse.Namespace, keys_path: Path, recorded: dict | None, path: Path) -> tuple:
    """(pin, rules, chosen cases, their keys or gold answers), checked before any call; grading takes the recording's
    pin unless --model names one, and its split and sample (an option that differs is refused)."""
    chosen = recorded.get('chosen') if recorded else None
    if chosen and (args.split, args.sample) not in ((None, None), (chosen['split'], chosen['sample'])):
        raise LabError(f'{path}: recorded with --split {chosen["split"]}' + (f' --sample {chosen["sample"]}' if
                       chosen['sample'] else '') + ', which it carries: grade it without --split and --sample')
    args.split, args.sample = (chosen['split'], chosen['sample']) if chosen else (args.split or DEFAULT_SPLIT,
                                                                                  args.sample)
    model = recorded['model'] if recorded and args.model is None else load_model(args.model)
    rules = {**RULES, **load_rule_files(args.rules, args.rule_timeout)[0]} if args.rules else RULES
    every, args.cases_sha256 = case_set.load_case_set(args.cases)  # the hash of the bytes the cases came from
    cases = [case for case in every if args.split in ('all', case['split'])]
    if not cases:
        raise LabError(f'{args.cases}: holds no {args.split} case')
    if (size := args.sample) is not None:  # drawn with SAMPLE_SEED and kept in file order
        if not 0 < size <= len(cases):
            raise LabError(f'--sample {size}: expected 1 to {len(cases)}, the number of chosen cases')
        cases = [cases[index] for index in sorted(random.Random(SAMPLE_SEED).sample(range(len(cases)), size))]
    load_keys = answer_keys.load_gold_answers if args.grader == 'f1' else answer_keys.load_answer_keys
    return model, rules, cases, load_keys(keys_path, cases, every)


def run_check(args: argparse.Namespace, keys_path: Path, result_path: Path, grades_path: Path, client) -> tuple:
    """(grades, inputs): record first if args say so, then grade; every stop says what it leaves on disk."""
    record = f'{common.python_command()} answer_check.py record'
    redo = f'record again with `{record}`, or restore it from version control'
    with stops_told(result_path, args.command) as state:
        recorded = None if args.command == 'record' else load_recording(result_path, redo)
        model, rules, cases, keys = inputs = load_inputs(args, keys_path, recorded, result_path)
        plan = []
        if args.command == 'record':
            if (calls := len(rules) * len(cases) * len(model['seeds'])) > ASK_ABOVE and not args.yes:
                raise LabError(f'record would make {calls:,} calls ({len(rules)} rules x {len(cases)} cases x '
                               f'{len(model["seeds"])} seeds); add --yes to make them, or choose fewer with --sample N')
            ready_partial(result_path.with_suffix(PARTIAL_SUFFIX), args.fresh)
            client = client or client_for(model)
            client.checked_model()  # a server that is not there says so before the requests are counted (seconds)
            plan = planned_requests(cases, rules, model)
            chosen = {'split': args.split, 'sample': args.sample, 'cases_sha256': args.cases_sha256}
            record_answers(plan, client, result_path, args.fresh, chosen, record)
            state['recorded'] = True
            recorded = load_recording(result_path, redo)
        if args.model is not None:
            check_pinned(recorded, model, result_path, args.model)
        if recorded['answers']:  # today's requests need the prepared counter; an empty recording needs nothing
            plan = plan or planned_requests(cases, rules, model)
            options = 'the --rules' + ('' if recorded.get('chosen') else ', --cases, --split and --sample')
            check_complete(recorded, plan, result_path, args.cases, args.cases_sha256,
                           f'give {options} it was recorded with, or {redo}', redo)
        f1 = ({case['id']: case['kind'] for case in cases}, args.f1_threshold) if args.grader == 'f1' else None
        grades = grade_recording(recorded, keys, plan, f1)
        original = f1 is None and any('request_sha256' not in answer for *_, answer in each_answer(recorded))
        # The original's recording gets the original's grades file: summary and verdicts, indented by two as it printed.
        save(grades_path, {'summary': grades['summary'], 'graded': {s: {c: [g['verdict'] for g in listed] for c, listed
             in by_case.items()} for s, by_case in grades['graded'].items()}} if original else grades, 'answer grades',
             2 if original else JSON_INDENT)
    return grades, inputs


def main(argv: list[str], *, cases_path: Path = common.DEFAULT_CASES, keys_path: Path = KEYS_PATH,
         model_path: Path = MODEL_PATH, result_path: Path = RESULT_PATH, grades_path: Path = GRADES_PATH,
         client=None) -> int:
    args = parse_args(argv, cases_path)
    args.model = args.model or (model_path if args.command else None)  # grading takes the recording's own pin
    if args.command in ('pin', 'check'):
        return pin(args) if args.command == 'pin' else check(args)
    result_path, keys_path = args.output or result_path, args.keys or keys_path
    grades_path = grades_path if args.output is None else result_path.with_suffix(GRADES_SUFFIX)
    recording = [('--output', result_path), ('its partial file', result_path.with_suffix(PARTIAL_SUFFIX))]
    lab_files.check_outputs([('the grades', grades_path), *(recording if args.command else [])],
                            [('--model', args.model), ('--cases', args.cases), ('--keys', keys_path),
                             *(('--rules', path) for path in args.rules), *([] if args.command else recording[:1])])
    grades, (model, rules, cases, _) = run_check(args, keys_path, result_path, grades_path, client)
    print(grades_path.read_text(encoding='utf-8').rstrip('\n') if args.format == 'json'  # else the tables; file: both
          else grades_report(grades) if grades['answers_recorded'] else
          f'Nothing is recorded: {result_path.name} holds the pinned model block and no answers.\nTo record, start '
          f'{server_advice(model)}; then run `{common.python_command()} answer_check.py record` '
          f'({len(rules) * len(cases) * len(model["seeds"])} calls).')
    return 0


if __name__ == '__main__':
    common.run(main)
