"""Record the pinned model's answers to each strategy's held-out requests, and grade them offline.

    .venv/bin/python answer_check.py record           # needs Ollama with the pinned build, and prepare.py run
    .venv/bin/python answer_check.py record --fresh   # the same, discarding the answers a stopped run kept
    .venv/bin/python answer_check.py                  # offline: re-grades answer-result.json; calls no model

record asks for 4 strategies x 6 held-out cases x 5 seeds = 120 answers, keeps each at once in
answer-result.partial.json for a later run to resume from, and writes answer-result.json once all are in.
Grading writes answer-grades.json and prints a table and that JSON; docs/answer-check.md gives the rules.
It sends no development case, retries no failed call, reuses no answer from another build or server version,
and grades no recording from another build. Five trials of one small model on six cases cannot say which
strategy is best.
"""
import argparse
from pathlib import Path
import re
import sys
import time

from answer_model import (MODEL_PATH, AnswerModel, AnswerModelError, chat_body, check_pinned, load_model,
                          load_recording, request_sha256, shown, undercounts_cached_prompt)
from case_set import load_cases
import common
from common import LabError
from strategies import RULES
from tokenizer import count_request

KEYS_PATH = common.HERE / 'answer-keys.json'
RESULT_PATH = common.HERE / 'answer-result.json'
GRADES_PATH = common.HERE / 'answer-grades.json'
PARTIAL_SUFFIX = '.partial.json'  # answer-result.json keeps its answers so far in answer-result.partial.json
INDENT = 1  # how the answer files are indented
SPLIT = 'held_out'  # the only split sent to the model
# What identifies the server behind a kept answer; an answer is reused only when all of it matches.
SERVER_FIELDS = ('ollama_digest', 'ollama_version')
# The grader's sentence split, and the words that mark a correction or a missing fact (see grade).
SENTENCE = re.compile(r'(?<=[.!?])\s+|\n+')
REPLACED = re.compile(r'replac|instead|not |no longer|switch|changed|actually|previous|originally|earlier', re.I)
SAYS_MISSING = re.compile(
    r"(do not|don't|does not|doesn't) (have|say|mention|state|specify|contain)"
    r"|not (mention|state|specif|provide|includ|contain)|no information|not enough information|missing"
    r"|not in the conversation|cannot (find|determine)|provide (more |the )?(context|conversation)", re.I)
# Verdict reasons, as answer-grades.json spells them; two get a column of their own in the summary.
STALE_AS_CURRENT, SAID_MISSING = 'presents a replaced decision as current', 'says the fact is missing'
VERDICTS = ('pass', 'fail', 'incomplete')
COUNTED_REASONS = {SAID_MISSING: 'said_missing', STALE_AS_CURRENT: 'stale_as_current'}
CUT_OFF = 'length'  # the done_reason of an answer that reached num_predict: listed, its verdict stands
TABLE_HEADER = ['Strategy', 'Pass', 'Fail', 'Of which said missing', 'Replaced decision as current',
                'Cases passed in every trial']
PYTHON = common.python_command()  # advice pasteable into a new terminal: the venv's python when that runs
REDO = f'record again with `{PYTHON} answer_check.py record`, or restore it from version control'
FRESH = f'discard it with `{PYTHON} answer_check.py record --fresh`'


def save(path: Path, data, what: str) -> None:
    try:
        encoded = common.to_json(data, INDENT).encode('utf-8')
    except UnicodeEncodeError as error:  # a lone surrogate in a server's answer cannot be stored as UTF-8
        raise LabError(f'{path}: not written: the data holds text that is not valid Unicode '
                       f'({error.reason} at {error.start})') from None
    common.write_output(path, encoded, what)


def held_out(cases_path: Path, keys_path: Path) -> tuple[list[dict], dict]:
    cases = [case for case in load_cases(cases_path) if case['split'] == SPLIT]
    return cases, load_keys(keys_path, [case['id'] for case in cases])


def load_keys(path: Path, case_ids: list[str]) -> dict:
    """{case_id: {'must': [pattern, ...], 'stale': [pattern, ...]}} for exactly case_ids; every pattern compiles."""
    document = common.read_json(path, 'answer keys', 'restore it from version control')
    keys = document.get('keys') if isinstance(document, dict) else None
    if not isinstance(keys, dict):
        raise LabError(f'{path}: expected {{"keys": {{case_id: {{"must": [...], "stale": [...]}}}}}}')
    missing, extra = sorted(set(case_ids) - set(keys)), sorted(set(keys) - set(case_ids))
    if missing or extra:
        raise LabError(f'{path}: keys must be exactly the held-out case ids {sorted(case_ids)}; '
                       f'missing {missing}, not held-out {extra}')
    for case_id, key in keys.items():
        if not isinstance(key, dict) or set(key) != {'must', 'stale'}:
            raise LabError(f'{path}: keys.{case_id} must have exactly "must" and "stale"')
        for kind, wanted in (('must', 'a non-empty list of strings'), ('stale', 'a list of strings')):
            patterns = key[kind]
            if not isinstance(patterns, list) or not all(isinstance(p, str) for p in patterns) or (
                    kind == 'must' and not patterns):
                raise LabError(f'{path}: keys.{case_id}.{kind} must be {wanted}, got {shown(patterns)}')
            for index, pattern in enumerate(patterns):
                try:
                    re.compile(pattern, re.I)
                except re.error as error:
                    raise LabError(f'{path}: keys.{case_id}.{kind}[{index}] {pattern!r} is not a valid '
                                   f'regular expression ({error})') from None
    return keys


def say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def planned_requests(cases: list[dict], model: dict) -> list[dict]:
    """Every request record sends, in order: strategy, case, seed. A key joins strategy and case to the body's
    sha256 (which holds the seed), as 30 of the 120 bodies repeat another strategy's and each is still sent."""
    plan = []
    for name, strategy in RULES.items():
        for case in cases:
            selected, budget = strategy(case, count_request), case['budget']
            for seed in model['seeds']:
                body = chat_body(model, selected['messages'], budget['context_limit'], budget['max_new_tokens'], seed)
                sha256 = request_sha256(body)
                plan.append({'strategy': name, 'case': case['id'], 'seed': seed, 'body': body, 'request_sha256': sha256,
                             'key': (name, case['id'], sha256), 'input_tokens': selected['input_tokens']})
    return plan


def kept_answers(path: Path, model: dict, plan: list[dict]) -> tuple[dict, int | None]:
    """({key: answer} for the planned answers kept from model's digest and server version, its loaded context)."""
    if not path.exists():
        return {}, None
    case_ids = list(dict.fromkeys(item['case'] for item in plan))
    kept = load_recording(path, RULES, case_ids, 'partial recording', FRESH)
    if any(kept['model'].get(field) != model[field] for field in SERVER_FIELDS):
        say(f'{path.name} holds answers from digest {str(kept["model"].get("ollama_digest"))[:12]} on Ollama '
            f'{kept["model"]["ollama_version"]}, not from this server; none is reused')
        return {}, None
    stored = {(strategy, case_id, answer['request_sha256']): answer for strategy, case_id, answer in each_answer(kept)}
    answers = {item['key']: stored[item['key']] for item in plan if item['key'] in stored}
    return answers, kept['model'].get('loaded_context_length')


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


def loaded_context(client: AnswerModel, num_ctx: int) -> int | None:
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


def record_answers(plan: list[dict], client: AnswerModel, result_path: Path, fresh: bool) -> None:
    """Ask for every planned answer not already kept; write result_path only when all of them are present."""
    partial = result_path.with_suffix(PARTIAL_SUFFIX)
    if fresh and partial.exists():
        partial.unlink()
        say(f'discarded {partial.name}')
    version, pinned = client.verify(), client.model['ollama_version']
    if version != pinned:
        say(f'note: the server is Ollama {version}; the pinned recording used {pinned}. '
            'The digest matches; the version is recorded with the answers.')
    if undercounts_cached_prompt(version):
        say(f'note: Ollama {version} leaves cached prompt tokens out of prompt_eval_count, so the second '
            'and later seeds of each request will show as prompt-token mismatches; grading marks them so.')
    model = {**client.model, 'ollama_version': version}
    answers, context_length = kept_answers(partial, model, plan)
    asking = len(plan) - len(answers)
    say(f'reusing {len(answers)} answers from {partial.name}; asking for {asking} of {len(plan)}' if answers
        else f'asking for {asking} answers; the first call may also load the model')
    seconds: list[float] = []
    for number, item in enumerate(plan, 1):
        if item['key'] in answers:
            continue
        started, options = time.monotonic(), item['body']['options']
        label = f'{item["strategy"]} {item["case"]} seed {item["seed"]}'
        try:
            reply = client.answer(item['body']['messages'], options['num_ctx'], options['num_predict'], item['seed'])
        except AnswerModelError as error:
            kept = f'the {len(answers)} answers so far are kept in {partial.name}' if answers else 'no answer is kept'
            raise AnswerModelError(f'call {number} of {len(plan)} ({label}): {error}; {kept}') from None
        seconds.append(time.monotonic() - started)
        answers[item['key']] = {**reply, 'request_sha256': item['request_sha256'], 'input_tokens': item['input_tokens']}
        # Kept before anything else is asked, so no later failure can lose this answer.
        save(partial, recording(model, context_length, plan, answers), 'partial recording')
        if len(seconds) == 1:  # the model is loaded now, so the server can say with what context
            context_length = loaded_context(client, options['num_ctx']) or context_length
        minutes, rest = divmod(round(sum(seconds) / len(seconds) * (asking - len(seconds))), 60)  # time left
        left = f'{minutes} min {rest} s' if minutes else f'{rest} s'
        say(f'call {number} of {len(plan)}: {label}: {seconds[-1]:.1f} s, about {left} left')
    save(result_path, recording(model, context_length, plan, answers), 'recording')
    partial.unlink(missing_ok=True)


def matches_any(patterns: list[str], text: str) -> bool:
    return any(re.search(pattern, text, re.I) for pattern in patterns)


def grade(text: str, key: dict) -> tuple[str, str]:
    """(verdict, reason) for one answer to the case of key. A sentence naming a stale pattern reads as a
    correction when it matches REPLACED or also states a must pattern; else it offers the old decision."""
    if not text.strip():  # nothing to grade; the text itself is matched unstripped
        return 'incomplete', 'no answer'
    if any(matches_any(key['stale'], sentence) for sentence in SENTENCE.split(text)
           if not REPLACED.search(sentence) and not matches_any(key['must'], sentence)):
        return 'fail', STALE_AS_CURRENT
    if all(re.search(must, text, re.I) for must in key['must']):
        return 'pass', 'every required fact'
    return 'fail', (SAID_MISSING if SAYS_MISSING.search(text) else 'required fact absent')


def each_answer(recorded: dict):
    return ((strategy, case_id, answer) for strategy, by_case in recorded['answers'].items()
            for case_id, answers in by_case.items() for answer in answers)


def tally(by_case: dict) -> dict:
    """One strategy's summary row from its {case_id: [verdict entry, ...]}."""
    every = [entry for entries in by_case.values() for entry in entries]
    return {**{verdict: sum(entry['verdict'] == verdict for entry in every) for verdict in VERDICTS},
            **{column: sum(entry['reason'] == reason for entry in every) for reason, column in COUNTED_REASONS.items()},
            'cases_passed_every_trial': sum(all(entry['verdict'] == 'pass' for entry in entries)
                                            for entries in by_case.values())}


def grade_recording(recorded: dict, keys: dict, current: dict) -> dict:
    """The content of answer-grades.json; current maps (strategy, case, seed) to the sha256 of today's body."""
    verdicts = {strategy: {case_id: [] for case_id in by_case} for strategy, by_case in recorded['answers'].items()}
    mismatches, cut_off, outdated, to_read = [], [], [], []
    undercounts = undercounts_cached_prompt(recorded['model']['ollama_version'])
    for strategy, case_id, answer in each_answer(recorded):
        where, key = {'strategy': strategy, 'case': case_id, 'seed': answer['seed']}, keys[case_id]
        verdict, reason = grade(answer['answer'], key)
        verdicts[strategy][case_id].append({'seed': answer['seed'], 'verdict': verdict, 'reason': reason})
        counted, read = answer['input_tokens'], answer['prompt_tokens']
        if read != counted:  # the model did not see the request counted, unless the server's cache hid some
            mismatches.append({**where, 'prompt_tokens': read, 'input_tokens': counted,
                               'probably_cache_accounting': undercounts and read < counted})
        if answer['done_reason'] == CUT_OFF:
            cut_off.append(where)
        today = current.get((strategy, case_id, answer['seed']))
        if today != answer['request_sha256']:
            outdated.append({**where, 'reason': 'no longer sent' if today is None else 'request changed'})
        # A sentence naming a stale and a must pattern reads as a correction, whichever decision it offers.
        to_read += [{**where, 'sentence': sentence.strip()} for sentence in SENTENCE.split(answer['answer'])
                    if matches_any(key['stale'], sentence) and matches_any(key['must'], sentence)]
    return {'model': recorded['model'], 'answers_recorded': sum(1 for _ in each_answer(recorded)),
            'summary': {strategy: tally(by_case) for strategy, by_case in verdicts.items()},
            'prompt_token_mismatches': mismatches, 'cut_off_answers': cut_off,
            'cut_off_per_strategy': {name: sum(c['strategy'] == name for c in cut_off) for name in verdicts},
            'outdated_requests': outdated, 'answers_to_read': to_read, 'graded': verdicts}


def grade_files(cases_path: Path, keys_path: Path, model_path: Path, result_path: Path, grades_path: Path) -> dict:
    """Grade result_path, write grades_path, return what was written; another build's recording writes nothing."""
    cases, keys = held_out(cases_path, keys_path)
    case_ids, pinned = [case['id'] for case in cases], load_model(model_path)
    recorded = load_recording(result_path, RULES, case_ids, 'recording', REDO)
    check_pinned(recorded, pinned, result_path, model_path, REDO)
    # Today's requests need the prepared counter; an empty recording needs nothing.
    current = {(p['strategy'], p['case'], p['seed']): p['request_sha256']
               for p in planned_requests(cases, pinned)} if recorded['answers'] else {}
    grades = grade_recording(recorded, keys, current)
    save(grades_path, grades, 'answer grades')
    return grades


def report(grades: dict) -> str:
    """The summary as a Markdown table in the original's layout, its counts, then the checks kept apart."""
    summary = grades['summary']
    rows = [[name, f'{s["pass"]} of {s["pass"] + s["fail"] + s["incomplete"]}', str(s['fail']),
             str(s['said_missing']), str(s['stale_as_current']),
             f'{s["cases_passed_every_trial"]} of {len(grades["graded"][name])}'] for name, s in summary.items()]
    incomplete = ', '.join(f'{strategy} {s["incomplete"]}' for strategy, s in summary.items() if s['incomplete'])
    lines = [f'Incomplete (empty answers): {incomplete}'] if incomplete else []
    lines.append('Cut off at num_predict (graded as they stand): '
                 + ', '.join(f'{k} {v}' for k, v in grades['cut_off_per_strategy'].items()))
    to_read = grades['answers_to_read']
    answers = len({(a['strategy'], a['case'], a['seed']) for a in to_read})
    lines.append('To read (a sentence names both the replaced and the current decision, so the grader cannot tell '
                 f'which it offers as current; verdicts stand as graded): {common.counted(answers, "answer")}')
    lines += [f'  {a["strategy"]} {a["case"]} seed {a["seed"]}: {a["sentence"]}' for a in to_read] + ['']
    if mismatches := grades['prompt_token_mismatches']:
        lines.append(f'{common.counted(len(mismatches), "answer")} where the server read a different prompt '
                     'than the one counted:')
        lines += [f'  {m["strategy"]} {m["case"]} seed {m["seed"]}: server read {m["prompt_tokens"]} tokens, '
                  f'the lab counted {m["input_tokens"]}'
                  + (f' (probably the accounting of Ollama {grades["model"]["ollama_version"]}, which leaves '
                     'cached prompt tokens out)' if m['probably_cache_accounting'] else '') for m in mismatches]
    else:
        lines.append("Every answer's prompt_tokens equal the counted input tokens.")
    if outdated := grades['outdated_requests']:
        lines.append(f'{common.counted(len(outdated), "answer")} recorded for requests that the current '
                     'strategies, cases and answer-model.json no longer send; record again:')
        lines += [f'  {o["strategy"]} {o["case"]} seed {o["seed"]}: {o["reason"]}' for o in outdated]
    else:
        lines.append('Every recorded request is what the current strategies and cases send.')
    return common.markdown_table(TABLE_HEADER, rows) + '\n'.join(lines)


def main(argv: list[str], *, cases_path: Path = common.CASES, keys_path: Path = KEYS_PATH,
         model_path: Path = MODEL_PATH, result_path: Path = RESULT_PATH, grades_path: Path = GRADES_PATH,
         client: AnswerModel | None = None) -> int:
    parser = argparse.ArgumentParser(prog='answer_check.py', description='Grade the recorded answers in '
                                     'answer-result.json offline, or record them again from the pinned model '
                                     'through Ollama first. Writes answer-grades.json.')
    parser.add_argument('command', nargs='?', choices=['record'], help='send the 120 held-out requests to the '
                        'pinned model, then grade (needs Ollama); reuses the answers a stopped run kept in '
                        'answer-result.partial.json')
    parser.add_argument('--fresh', action='store_true',
                        help='with record: discard answer-result.partial.json first and ask for all 120 answers')
    args = parser.parse_args(argv)  # a usage error exits 2
    if args.fresh and args.command != 'record':
        parser.error('--fresh goes with record')
    try:
        if args.command == 'record':
            cases, _ = held_out(cases_path, keys_path)  # keys before any call: ungradable is 120 wasted calls
            client = client if client is not None else AnswerModel(load_model(model_path))
            record_answers(planned_requests(cases, client.model), client, result_path, args.fresh)
        grades = grade_files(cases_path, keys_path, model_path, result_path, grades_path)
    except KeyboardInterrupt:
        partial = result_path.with_suffix(PARTIAL_SUFFIX)
        kept = (f'; the answers so far are kept in {partial.name} for the next `record`'
                if args.command == 'record' and partial.exists() else '')
        state = 'is replaced only once every answer has arrived' if args.command == 'record' else 'is unchanged'
        raise KeyboardInterrupt(f'{result_path.name} {state}{kept}') from None
    model = grades['model']
    print(report(grades) if grades['answers_recorded'] else
          f'Nothing is recorded: {result_path.name} holds the pinned model block and no answers.\n'
          f'To record, start Ollama, run `ollama pull {model["ollama_tag"]}`, check that the ID column of '
          f'`ollama list` starts with {model["ollama_digest"][:12]}, then run `{PYTHON} answer_check.py record` '
          '(120 calls).')
    print(f'\n{grades_path.name}:\n{common.to_json(grades, INDENT)}', end='')
    return 0


if __name__ == '__main__':
    common.run(main)
