"""Record the pinned model's answers to each strategy's held-out requests, and grade them offline.

    .venv/bin/python answer_check.py record           # needs Ollama serving gemma4:e2b at the pinned digest
                                                      # and a prepared counter (.venv/bin/python prepare.py)
    .venv/bin/python answer_check.py record --fresh   # the same, discarding the answers a stopped run kept
    .venv/bin/python answer_check.py                  # offline: re-grades answer-result.json; calls no model

record builds every strategy's request for the six held-out cases and sends
each one with the five seeds of answer-model.json: 4 x 6 x 5 = 120 calls, with
num_ctx the case's context limit and num_predict its answer allowance (the
server loads the model with a larger context of its own; see answer_record.py).
No development case is sent: the strategies were written with those cases in
view, so answers to them would test the strategies less than fresh cases do.
The calls themselves are answer_record.py's step: progress on stderr, each
finished answer kept in answer-result.partial.json so that a stopped run can
be resumed, and answer-result.json replaced only when all 120 answers are
present, so an interrupted or failed run leaves the previous recording as it
was. Each answer keeps the sha256 of the exact /api/chat body sent, the input
tokens the lab counted for it and the server's done_reason; the model block
keeps the server's version and, where the server reports it, the context it
loaded the model with.

Grading uses answer-keys.json, whose patterns were fixed from the facts each
held-out case marks as required or stale before the first answer was recorded:
    incomplete  nothing but whitespace came back
    fail        a sentence names a stale pattern with nothing in it marking the decision as
                superseded, or some must pattern matches nowhere in the answer
    pass        all must patterns match, and no sentence offers a stale pattern as the current decision
Fails that admit the conversation lacks the fact get their own count
(said_missing): owning up to a gap is a safer way to fail than making an
answer up. Grading writes answer-grades.json (the summary and every verdict)
and prints a table and that JSON. Apart from the grades it lists every answer
whose reported prompt_tokens differ from the counted input tokens (the model
did not see the request that was counted; from a server version known to
leave cached prompt tokens out of that count, a shortfall is marked as
probably the server's accounting), every answer cut off at num_predict
(done_reason "length", listed and counted per strategy so that a truncated
answer is not read as the model not knowing; its verdict stands as graded),
every recorded answer whose request the current strategies, cases and
answer-model.json would no longer send, and, as answers_to_read, every
sentence that names both a stale and a must pattern of its case. The rule
reads such a sentence as a correction (it is the original grader's, and the
original's verdicts depend on it), so for held-correction "The job queue uses
RabbitMQ, not Redis streams." passes although it keeps the replaced decision;
only a person can tell which decision such a sentence offers as current, and
the table says how many answers need that reading. A recording whose model block is not
the build answer-model.json pins (any field but what the server reports,
ollama_version and loaded_context_length, differs) is refused, not graded.

It does not grade development cases, retry a failed call, or judge anything
the keys do not name. Five trials of one small model on six cases show what
each strategy's request tends to produce; they are too few to say which
strategy is better.

Exit status: 0 after grading; 2 with one line on stderr for anything the user
can fix (a bad or missing file, no server, the wrong digest, an unprepared
counter, a recording from another build) and for a usage error; 130 on Ctrl-C.
"""
import argparse
import json
from pathlib import Path
import re
import sys

import cli

cli.require_packages(__name__)  # one clear line, not a traceback, if a locked package is missing

from answer_model import (MODEL_PATH, AnswerModel, AnswerModelError, chat_body, load_model,
                          request_sha256, undercounts_cached_prompt)
from answer_record import AnswerCheckError, check_answer, is_count, partial_path, record_answers, shown, write_json
from case_set import CaseError, load_cases
from lab_files import read_json
from strategies import STRATEGIES
from tokenizer import CounterError, count_request

HERE = Path(__file__).parent
CASES_PATH = HERE / 'cases.json'
KEYS_PATH = HERE / 'answer-keys.json'
RESULT_PATH = HERE / 'answer-result.json'
GRADES_PATH = HERE / 'answer-grades.json'

SPLIT = 'held_out'  # the only split sent to the model
TOOLS: list[dict] = []  # the requests offer the model no tools
REDO = (f'record again with `{cli.python_command()} answer_check.py record`, '  # pasteable: the venv's python
        'or restore it from version control')
# What record() adds to answer-model.json's block from the server: the only fields a recording's model block
# may have that the pin does not, or may hold differently.
SERVER_REPORTED = ('ollama_version', 'loaded_context_length')
CUT_OFF = 'length'  # the done_reason of an answer that reached num_predict

# The grader. A stale key only counts in a sentence that does not also say the
# decision was replaced and does not also give the required fact.
SENTENCE = re.compile(r'(?<=[.!?])\s+|\n+')
REPLACED = re.compile(r'replac|instead|not |no longer|switch|changed|actually|previous|originally|earlier', re.I)
SAYS_MISSING = re.compile(
    r"(do not|don't|does not|doesn't) (have|say|mention|state|specify|contain)"
    r"|not (mention|state|specif|provide|includ|contain)|no information|not enough information|missing"
    r"|not in the conversation|cannot (find|determine)|provide (more |the )?(context|conversation)", re.I)

# Verdict reasons, as answer-grades.json spells them.
NO_ANSWER = 'no answer'
STALE_AS_CURRENT = 'presents a replaced decision as current'
SAID_MISSING = 'says the fact is missing'
FACT_ABSENT = 'required fact absent'
EVERY_FACT = 'every required fact'
VERDICTS = ('pass', 'fail', 'incomplete')
# Two reasons get a column of their own in the summary.
COUNTED_REASONS = {SAID_MISSING: 'said_missing', STALE_AS_CURRENT: 'stale_as_current'}


TABLE_HEADER = ('| Strategy | Pass | Fail | Of which said missing | Replaced decision as current '
                '| Cases passed in every trial |\n|---|---|---|---|---|---|')


def held_out_cases(cases_path: Path = CASES_PATH) -> list[dict]:
    return [case for case in load_cases(Path(cases_path)) if case['split'] == SPLIT]


def held_out_ids(cases_path: Path = CASES_PATH) -> list[str]:
    return [case['id'] for case in held_out_cases(cases_path)]


def load_keys(path: Path = KEYS_PATH, case_ids: list[str] | None = None) -> dict:
    """{case_id: {'must': [pattern, ...], 'stale': [pattern, ...]}} for exactly the held-out case ids.

    case_ids defaults to the held-out ids of cases.json. Every pattern must compile.
    """
    case_ids = held_out_ids() if case_ids is None else case_ids
    document = read_json(path, 'answer keys', AnswerCheckError, 'restore it from version control')
    keys = document.get('keys') if isinstance(document, dict) else None
    if not isinstance(keys, dict):
        raise AnswerCheckError(f'{path}: expected {{"keys": {{case_id: {{"must": [...], "stale": [...]}}}}}}')
    missing, extra = sorted(set(case_ids) - set(keys)), sorted(set(keys) - set(case_ids))
    if missing or extra:
        raise AnswerCheckError(f'{path}: keys must be exactly the held-out case ids {sorted(case_ids)}; '
                               f'missing {missing}, not held-out {extra}')
    for case_id, key in keys.items():
        if not isinstance(key, dict) or set(key) != {'must', 'stale'}:
            raise AnswerCheckError(f'{path}: keys.{case_id} must have exactly "must" and "stale"')
        for kind, wanted in (('must', 'a non-empty list of strings'), ('stale', 'a list of strings')):
            patterns = key[kind]
            if (not isinstance(patterns, list) or not all(isinstance(p, str) for p in patterns)
                    or (kind == 'must' and not patterns)):
                raise AnswerCheckError(f'{path}: keys.{case_id}.{kind} must be {wanted}, got {shown(patterns)}')
            for index, pattern in enumerate(patterns):
                try:
                    re.compile(pattern, re.I)
                except re.error as error:
                    raise AnswerCheckError(f'{path}: keys.{case_id}.{kind}[{index}] {pattern!r} is not a valid '
                                           f'regular expression ({error})') from None
    return keys


def matches_any(patterns: list[str], text: str) -> bool:
    return any(re.search(pattern, text, re.I) for pattern in patterns)


def offers_stale_as_current(text: str, key: dict) -> bool:
    """Whether some sentence names a stale pattern with nothing beside it marking the decision as superseded.

    A sentence that matches REPLACED, or that also states a must pattern, reads as giving the correction.
    """
    uncorrected = (sentence for sentence in SENTENCE.split(text)
                   if not REPLACED.search(sentence) and not matches_any(key['must'], sentence))
    return any(matches_any(key['stale'], sentence) for sentence in uncorrected)


def sentences_naming_both(text: str, key: dict) -> list[str]:
    """The sentences of text that name a stale pattern and a must pattern of the key (stripped).

    The grader reads such a sentence as a correction, but cannot tell which decision it offers as current:
    with must ['redis'] and stale ['rabbitmq'], 'The job queue uses RabbitMQ, not Redis streams. It is fast.'
    -> ['The job queue uses RabbitMQ, not Redis streams.'], which passes although it keeps the old decision.
    """
    return [sentence.strip() for sentence in SENTENCE.split(text)
            if matches_any(key['stale'], sentence) and matches_any(key['must'], sentence)]


def answers_to_read(recorded: dict, keys: dict) -> list[dict]:
    """{strategy, case, seed, sentence} for every sentence a person must read to know what the answer offers;
    the verdicts stay as the grader gives them."""
    return [{'strategy': strategy, 'case': case_id, 'seed': answer['seed'], 'sentence': sentence}
            for strategy, case_id, answer in each_answer(recorded)
            for sentence in sentences_naming_both(answer['answer'], keys[case_id])]


def grade(case_id: str, answer: dict, keys: dict | None = None) -> tuple[str, str]:
    """(verdict, reason) for one recorded answer to one held-out case."""
    keys = keys if keys is not None else load_keys()
    if case_id not in keys:
        raise AnswerCheckError(f'no answer key for case {case_id} in answer-keys.json')
    key, text = keys[case_id], answer['answer']
    if text.isspace() or text == '':  # nothing to grade; the text itself is matched unstripped
        return 'incomplete', NO_ANSWER
    if offers_stale_as_current(text, key):
        return 'fail', STALE_AS_CURRENT
    if all(re.search(must, text, re.I) for must in key['must']):
        return 'pass', EVERY_FACT
    return 'fail', (SAID_MISSING if SAYS_MISSING.search(text) else FACT_ABSENT)


def each_answer(recorded: dict):
    """(strategy, case_id, answer) for every recorded answer, in recording order."""
    for strategy, by_case in recorded['answers'].items():
        for case_id, answers in by_case.items():
            for answer in answers:
                yield strategy, case_id, answer


def every_verdict(recorded: dict, keys: dict) -> dict:
    """{strategy: {case_id: [{seed, verdict, reason}, ...]}}, in recording order."""
    verdicts = {strategy: {case_id: [] for case_id in by_case} for strategy, by_case in recorded['answers'].items()}
    for strategy, case_id, answer in each_answer(recorded):
        verdict, reason = grade(case_id, answer, keys)
        verdicts[strategy][case_id].append({'seed': answer['seed'], 'verdict': verdict, 'reason': reason})
    return verdicts


def tally(by_case: dict) -> dict:
    """One strategy's summary row from its {case_id: [verdict entry, ...]}."""
    row = dict.fromkeys((*VERDICTS, *COUNTED_REASONS.values()), 0)
    for entries in by_case.values():
        for entry in entries:
            row[entry['verdict']] += 1
            if entry['reason'] in COUNTED_REASONS:
                row[COUNTED_REASONS[entry['reason']]] += 1
    row['cases_passed_every_trial'] = len([case_id for case_id, entries in by_case.items()
                                           if all(entry['verdict'] == 'pass' for entry in entries)])
    return row


def summarize(recorded: dict, keys: dict | None = None) -> dict:
    """Per strategy: pass, fail, incomplete, said_missing, stale_as_current, cases_passed_every_trial."""
    verdicts = every_verdict(recorded, keys if keys is not None else load_keys())
    return {strategy: tally(by_case) for strategy, by_case in verdicts.items()}


def load_recording(path: Path = RESULT_PATH, strategy_names=tuple(STRATEGIES),
                   case_ids: list[str] | None = None) -> dict:
    """answer-result.json, checked field by field so grading never meets a half-formed answer.

    Strategies must be names in strategy_names and cases ids in case_ids (default: the held-out
    ids of cases.json).
    """
    case_ids = held_out_ids() if case_ids is None else case_ids
    recorded = read_json(path, 'recording', AnswerCheckError, REDO)
    if not isinstance(recorded, dict) or set(recorded) != {'model', 'answers'}:
        raise AnswerCheckError(f'{path}: expected exactly "model" and "answers"; {REDO}')
    model, answers = recorded['model'], recorded['answers']
    if not isinstance(model, dict) or not isinstance(answers, dict):
        raise AnswerCheckError(f'{path}: "model" and "answers" must be objects; {REDO}')
    if not isinstance(model.get('ollama_version'), str) or not model['ollama_version']:
        raise AnswerCheckError(f'{path}: model.ollama_version must name the server that answered; {REDO}')
    if 'loaded_context_length' in model and not (is_count(model['loaded_context_length'])
                                                 and model['loaded_context_length'] > 0):
        raise AnswerCheckError(f'{path}: model.loaded_context_length must be a positive integer, got '
                               f'{shown(model["loaded_context_length"])}; {REDO}')
    for strategy, by_case in answers.items():
        if strategy not in strategy_names:
            raise AnswerCheckError(f'{path}: answers.{strategy}: not a strategy in strategies.py '
                                   f'({", ".join(strategy_names)}); {REDO}')
        if not isinstance(by_case, dict):
            raise AnswerCheckError(f'{path}: answers.{strategy} must map case ids to answer lists; {REDO}')
        for case_id, answer_list in by_case.items():
            where = f'{path}: answers.{strategy}.{case_id}'
            if case_id not in case_ids:
                raise AnswerCheckError(f'{where}: not a held-out case id ({", ".join(case_ids)}); {REDO}')
            if not isinstance(answer_list, list) or not answer_list:
                raise AnswerCheckError(f'{where} must be a non-empty list, got {shown(answer_list)}; {REDO}')
            for index, answer in enumerate(answer_list):
                check_answer(f'{where}[{index}]', answer, REDO)
    return recorded


def check_pinned(recorded: dict, pinned: dict, result_path: Path, model_path: Path) -> None:
    """Refuse a recording whose model block is not the pinned build; only what the server reports may differ."""
    def as_json(model: dict, field: str) -> str | None:
        return json.dumps(model[field], sort_keys=True) if field in model else None  # 1 != 1.0, false != 0
    block = recorded['model']
    differ = [field for field in sorted(set(block) | set(pinned))
              if field not in SERVER_REPORTED and as_json(block, field) != as_json(pinned, field)]
    if differ:
        raise AnswerCheckError(f'{result_path}: recorded with a build other than the one {model_path} pins '
                               f'({", ".join(differ)} differ), so its answers are not graded; {REDO}')


def planned_requests(cases: list[dict], model: dict, strategies: dict, count) -> list[dict]:
    """Every request record() sends, in order: strategy, then case, then seed."""
    plan = []
    for name, strategy in strategies.items():
        for case in cases:
            selected = strategy(case, count)
            budget = case['budget']
            for seed in model['seeds']:
                body = chat_body(model, selected['messages'], TOOLS, budget['context_limit'],
                                 budget['max_new_tokens'], seed)
                plan.append({'strategy': name, 'case': case['id'], 'seed': seed, 'body': body,
                             'input_tokens': selected['input_tokens']})
    return plan


def record(cases_path: Path = CASES_PATH, result_path: Path = RESULT_PATH, *, model_path: Path = MODEL_PATH,
           keys_path: Path = KEYS_PATH, client: AnswerModel | None = None, strategies: dict = STRATEGIES,
           count=count_request, fresh: bool = False, progress=None) -> dict:
    """Ask the pinned model for every planned request (answer_record.py); write result_path once all are in."""
    cases = held_out_cases(cases_path)
    # Checked before any call: a recording that cannot be graded is 120 wasted calls.
    load_keys(keys_path, [case['id'] for case in cases])
    client = client if client is not None else AnswerModel(load_model(model_path))
    plan = planned_requests(cases, client.model, strategies, count)
    return record_answers(plan, client, result_path, fresh=fresh, progress=progress)


def token_mismatches(recorded: dict) -> list[dict]:
    """Answers for which the server read a different number of prompt tokens than the lab counted.

    From a server version that leaves cached prompt tokens out of its count, a shortfall is marked
    probably_cache_accounting: the prompt was most likely whole and partly served from the cache.
    """
    undercounts = undercounts_cached_prompt(recorded['model']['ollama_version'])
    return [{'strategy': strategy, 'case': case_id, 'seed': answer['seed'],
             'prompt_tokens': answer['prompt_tokens'], 'input_tokens': answer['input_tokens'],
             'probably_cache_accounting': undercounts and answer['prompt_tokens'] < answer['input_tokens']}
            for strategy, case_id, answer in each_answer(recorded)
            if answer['prompt_tokens'] != answer['input_tokens']]


def cut_off_answers(recorded: dict) -> list[dict]:
    """Answers that stopped at num_predict: their verdict may say the model did not know what it had no room to say."""
    return [{'strategy': strategy, 'case': case_id, 'seed': answer['seed']}
            for strategy, case_id, answer in each_answer(recorded) if answer['done_reason'] == CUT_OFF]


def outdated_requests(recorded: dict, current: dict) -> list[dict]:
    """Recorded answers whose request is not what the current code would send.

    current maps (strategy, case, seed) to the sha256 of today's request body.
    """
    outdated = []
    for strategy, case_id, answer in each_answer(recorded):
        today = current.get((strategy, case_id, answer['seed']))
        if today != answer['request_sha256']:
            outdated.append({'strategy': strategy, 'case': case_id, 'seed': answer['seed'],
                             'reason': 'no longer sent' if today is None else 'request changed'})
    return outdated


def current_requests(cases: list[dict], model: dict, strategies: dict, count) -> dict:
    """(strategy, case, seed) -> sha256 of the body record() would send today."""
    plan = planned_requests(cases, model, strategies, count)
    return {(p['strategy'], p['case'], p['seed']): request_sha256(p['body']) for p in plan}


def grade_recording(recorded: dict, keys: dict, current: dict) -> dict:
    """The content of answer-grades.json."""
    verdicts = every_verdict(recorded, keys)
    cut_off = cut_off_answers(recorded)
    return {
        'model': recorded['model'],
        'answers_recorded': sum(1 for _ in each_answer(recorded)),
        'summary': {strategy: tally(by_case) for strategy, by_case in verdicts.items()},
        'prompt_token_mismatches': token_mismatches(recorded),
        'cut_off_answers': cut_off,
        'cut_off_per_strategy': {strategy: sum(1 for c in cut_off if c['strategy'] == strategy)
                                 for strategy in verdicts},
        'outdated_requests': outdated_requests(recorded, current),
        'answers_to_read': answers_to_read(recorded, keys),
        'graded': verdicts,
    }


def table(grades: dict) -> str:
    """The summary as a Markdown table, in the original's layout."""
    rows = [TABLE_HEADER]
    for strategy, s in grades['summary'].items():
        answers = s['pass'] + s['fail'] + s['incomplete']
        cases = len(grades['graded'][strategy])
        rows.append(f'| {strategy} | {s["pass"]} of {answers} | {s["fail"]} | {s["said_missing"]} '
                    f'| {s["stale_as_current"]} | {s["cases_passed_every_trial"]} of {cases} |')
    incomplete = {strategy: s['incomplete'] for strategy, s in grades['summary'].items() if s['incomplete']}
    if incomplete:
        rows.append('Incomplete (empty answers): ' + ', '.join(f'{k} {v}' for k, v in incomplete.items()))
    rows.append('Cut off at num_predict (graded as they stand): '
                + ', '.join(f'{k} {v}' for k, v in grades['cut_off_per_strategy'].items()))
    to_read = grades['answers_to_read']
    answers = len({(a['strategy'], a['case'], a['seed']) for a in to_read})
    rows.append(f'To read (a sentence names both the replaced and the current decision, so the grader cannot tell '
                f'which it offers as current; verdicts stand as graded): {plural(answers, "answer")}'
                + ''.join(f'\n  {a["strategy"]} {a["case"]} seed {a["seed"]}: {a["sentence"]}' for a in to_read))
    return '\n'.join(rows)


def plural(number: int, noun: str) -> str:
    return f'{number} {noun}' + ('' if number == 1 else 's')


def checks(grades: dict) -> str:
    """The two reports kept apart from the grades, as plain lines."""
    lines = []
    mismatches = grades['prompt_token_mismatches']
    if mismatches:
        lines.append(f'{plural(len(mismatches), "answer")} where the server read a different prompt '
                     'than the one counted:')
        lines += [f'  {m["strategy"]} {m["case"]} seed {m["seed"]}: server read {m["prompt_tokens"]} tokens, '
                  f'the lab counted {m["input_tokens"]}'
                  + (f' (probably the accounting of Ollama {grades["model"]["ollama_version"]}, which leaves '
                     'cached prompt tokens out)' if m['probably_cache_accounting'] else '')
                  for m in mismatches]
    else:
        lines.append("Every answer's prompt_tokens equal the counted input tokens.")
    outdated = grades['outdated_requests']
    if outdated:
        lines.append(f'{plural(len(outdated), "answer")} recorded for requests that the current strategies, '
                     'cases and answer-model.json no longer send; record again:')
        lines += [f'  {o["strategy"]} {o["case"]} seed {o["seed"]}: {o["reason"]}' for o in outdated]
    else:
        lines.append('Every recorded request is what the current strategies and cases send.')
    return '\n'.join(lines)


def grade_files(cases_path: Path, keys_path: Path, model_path: Path, result_path: Path, grades_path: Path,
                strategies: dict = STRATEGIES, count=count_request) -> dict:
    """Grade result_path, write grades_path, return what was written.

    A recording from a build other than the pinned one raises AnswerCheckError and writes nothing.
    """
    cases = held_out_cases(cases_path)
    case_ids = [case['id'] for case in cases]
    keys = load_keys(keys_path, case_ids)
    pinned = load_model(model_path)
    recorded = load_recording(result_path, tuple(strategies), case_ids)
    check_pinned(recorded, pinned, result_path, model_path)
    # Recomputing today's requests needs the prepared counter; an empty recording needs nothing.
    current = current_requests(cases, pinned, strategies, count) if recorded['answers'] else {}
    grades = grade_recording(recorded, keys, current)
    write_json(grades_path, grades)
    return grades


def main(argv: list[str] | None = None, *, cases_path: Path = CASES_PATH, keys_path: Path = KEYS_PATH,
         model_path: Path = MODEL_PATH, result_path: Path = RESULT_PATH, grades_path: Path = GRADES_PATH,
         client: AnswerModel | None = None, out=None, err=None) -> int:
    parser = argparse.ArgumentParser(
        prog='answer_check.py',
        description='Grade the recorded answers in answer-result.json offline, or record them again from the '
                    'pinned model through Ollama first. Writes answer-grades.json.')
    parser.add_argument('command', nargs='?', choices=['record'],
                        help='send the 120 held-out requests to the pinned model, then grade (needs Ollama); '
                             'reuses the answers a stopped run kept in answer-result.partial.json')
    parser.add_argument('--fresh', action='store_true',
                        help='with record: discard answer-result.partial.json first and ask for all 120 answers')
    args = parser.parse_args(argv)  # a usage error exits 2
    if args.fresh and args.command != 'record':
        parser.error('--fresh goes with record')
    out = out if out is not None else sys.stdout
    err = err if err is not None else sys.stderr
    try:
        if args.command == 'record':
            record(cases_path, result_path, model_path=model_path, keys_path=keys_path, client=client,
                   fresh=args.fresh, progress=err)
        grades = grade_files(cases_path, keys_path, model_path, result_path, grades_path)
    except (AnswerCheckError, AnswerModelError, CaseError, CounterError) as error:
        print(f'answer_check.py: {error}', file=err)
        return 2
    except KeyboardInterrupt:
        partial = partial_path(result_path)
        kept = (f'; the answers so far are kept in {partial.name} for the next `record`'
                if args.command == 'record' and partial.exists() else '')
        # During record, the recording is replaced only in its last step, after every answer arrived.
        state = 'is replaced only once every answer has arrived' if args.command == 'record' else 'is unchanged'
        print(f'answer_check.py: interrupted; {Path(result_path).name} {state}{kept}', file=err)
        return 130
    if grades['answers_recorded']:
        print(table(grades), checks(grades), sep='\n\n', file=out)
    else:
        print(f'Nothing is recorded: {Path(result_path).name} holds the pinned model block and no answers.\n'
              f'To record, start Ollama, run `ollama pull {grades["model"]["ollama_tag"]}`, check that the ID '
              f'column of `ollama list` starts with {grades["model"]["ollama_digest"][:12]}, then run '
              f'`{cli.python_command()} answer_check.py record` (120 calls).', file=out)
    print(f'\n{Path(grades_path).name}:\n{json.dumps(grades, indent=1, ensure_ascii=False)}', file=out)
    return 0


if __name__ == '__main__':
    cli.run(main)
