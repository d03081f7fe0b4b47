"""The answer check for memory blocks: record the pinned model's answers to every memory question as each fill sends
it, through Ollama or an OpenAI-compatible server as the pin names, and grade them offline with fixed keys
(docs/memory.md).

    .venv/bin/python memory_answers.py record           # needs the pinned server and model, and prepare.py run
    .venv/bin/python memory_answers.py record --fresh   # the same, discarding the answers a stopped run kept
    .venv/bin/python memory_answers.py                  # offline: re-grades memory-answer-result.json
    .venv/bin/python memory_answers.py record --model pin.json --cases mine.json --keys keys.json --output my.json

record sends memory-cases.json's 10 questions x the 3 fills (memory_store.FILLS) x 5 seeds = 150 requests, sized by
the pin's counter, to the build answer-model.json pins (its digest, or what its server revealed, checked), keeping
each answer in memory-answer-result.partial.json to resume from, and writes memory-answer-result.json once all are in.
Grading writes memory-answer-grades.json with memory-answer-keys.json's patterns and prints its tables. --model,
--cases, --keys and --output are answer_check.py's: another pin, case set, keys, or recording (its grades then go
beside it, NAME.grades.json). Recording, resuming and grading are answer_check.py's (answer_model.py,
answer_grades.py): it retries no call, and grades no recording missing an answer or holding one twice.
"""
import argparse
from pathlib import Path

from answer_grades import GRADES_SUFFIX, check_complete, grade_recording, grades_report, stops_told
from answer_keys import load_answer_keys
from answer_model import (MODEL_PATH, PARTIAL_SUFFIX, check_pinned, load_model, load_recording, pin_counter,
                          record_answers, save, seeded_requests)
import common
import lab_files
from openai_client import client_for, server_advice
from memory_cases import MEMORY_CASES, load_memory_cases
from memory_store import FILLS, filled_requests
import tokenizer

MEMORY_KEYS = common.HERE / 'memory-answer-keys.json'
MEMORY_RESULT = common.HERE / 'memory-answer-result.json'
MEMORY_GRADES = common.HERE / 'memory-answer-grades.json'


def planned_answers(cases: dict, model: dict) -> list[dict]:
    """Every request record sends, in order: fill, question, seed, each with its fill's graded row (memory_store)."""
    filled = filled_requests(cases, tokenizer.counter(pin_counter(model)[0]))
    return [item for fill, made in filled.items() for question, messages, row in made
            for item in seeded_requests(model, fill, question, messages, row)]


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog='memory_answers.py', description='Grade recorded answers to the memory '
                                     'questions offline, or record them from the pinned model first (Ollama or an '
                                     'OpenAI-compatible server).')
    parser.add_argument('command', nargs='?', choices=['record'], help='record, then grade')
    parser.add_argument('--cases', type=Path, help='memory case set (default: memory-cases.json)')
    parser.add_argument('--keys', type=Path, help='their keys (default: memory-answer-keys.json)')
    parser.add_argument('--model', type=Path, help="the pin (default answer-model.json; grading: the recording's)")
    parser.add_argument('--output', type=Path, help='the recording (default memory-answer-result.json); its grades go '
                        'beside it as NAME.grades.json')
    parser.add_argument('--format', choices=['table', 'json'], default='table', help='json: the grades on stdout')
    parser.add_argument('--fresh', action='store_true', help='with record: discard the partial file first')
    args = parser.parse_args(argv)  # a usage error exits 2
    if args.fresh and args.command != 'record':
        parser.error('--fresh goes with record')
    return args


def run_answers(args: argparse.Namespace, paths: dict, client) -> str:
    """What to print: the grades, after recording if args say so, or how to record when nothing is recorded."""
    record = f'{common.python_command()} memory_answers.py record'
    redo = f'record again with `{record}`'
    with stops_told(paths['result'], args.command) as state:
        cases, cases_sha256 = load_memory_cases(paths['cases'])
        keys = load_answer_keys(paths['keys'], cases['questions'], cases['questions'])
        if args.command == 'record':
            model = load_model(paths['model'])
            plan = planned_answers(cases, model)
            chosen = {'split': 'all', 'sample': None, 'cases_sha256': cases_sha256}
            record_answers(plan, client or client_for(model), paths['result'], args.fresh, chosen, record)
            state['recorded'] = True
        elif not paths['result'].exists():
            model = load_model(paths['model'])
            return (f'Nothing is recorded: there is no {paths["result"].name}. To record, start '
                    f'{server_advice(model)}; then run `{record}` '
                    f'({len(FILLS) * len(cases["questions"]) * len(model["seeds"])} calls).')
        recorded = load_recording(paths['result'], redo)
        if args.command != 'record':  # else graded with the plan just recorded from, as answer_check does
            if args.model is not None:  # as answer_check grades: a recording of another build is refused
                check_pinned(recorded, load_model(args.model), paths['result'], args.model)
            plan = planned_answers(cases, recorded['model'])  # the recording's own pin
        check_complete(recorded, plan, paths['result'], paths['cases'], cases_sha256, redo, redo)
        grades = grade_recording(recorded, keys, plan)
        save(paths['grades'], grades, 'memory answer grades')
    return paths['grades'].read_text(encoding='utf-8').rstrip('\n') if args.format == 'json' else grades_report(grades)


def main(argv: list[str], *, cases_path: Path = MEMORY_CASES, keys_path: Path = MEMORY_KEYS,
         model_path: Path = MODEL_PATH, result_path: Path = MEMORY_RESULT, grades_path: Path = MEMORY_GRADES,
         client=None) -> int:
    args = parse_args(argv)
    result_path = args.output or result_path
    paths = {'cases': args.cases or cases_path, 'keys': args.keys or keys_path, 'model': args.model or model_path,
             'result': result_path, 'grades': result_path.with_suffix(GRADES_SUFFIX) if args.output else grades_path}
    recording = [('the recording', result_path), ('its partial file', result_path.with_suffix(PARTIAL_SUFFIX))]
    lab_files.check_outputs([('the grades', paths['grades']), *(recording if args.command else [])],
                            [('--cases', paths['cases']), ('--keys', paths['keys']), ('the pin', paths['model']),
                             *([] if args.command else recording[:1])])
    print(run_answers(args, paths, client))
    return 0


if __name__ == '__main__':
    common.run(main)
