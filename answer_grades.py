"""Grading a recording of answers, for answer_check.py and memory_answers.py alike: a recording complete for the plan,
each answer joined to the fact-recall row of the very request it answered, graded by the regex keys (answer_keys.py)
or by F1 against gold answers (answer_keys.py), and the report of the grades; and what a stop while recording leaves.

    check_complete(recorded, plan, path, cases_path, cases_sha256, hint, redo)   # refuses a gap or a repeat
    grades = grade_recording(recorded, keys, plan)     # the grades file's content
    print(grades_report(grades))                       # the grader's tables, then the checks kept apart

It calls no model and writes nothing: the scripts save the grades.
"""
from collections import Counter
import contextlib
from pathlib import Path

import answer_keys
from answer_model import PARTIAL_SUFFIX, api, each_answer, model_name, pin_counter, undercounts_cached_prompt
from common import LabError
from text import counted
import tokenizer
from views import counter_note

GRADES_SUFFIX = '.grades.json'  # where the grades of an --output recording go
CUT_OFF = 'length'  # the done_reason of an answer that reached num_predict: listed, its verdict stands
NO_REQUEST = 'no request recorded'  # an answer in the original's format: it names no request
MISMATCH_CAUSES = {  # why a prompt_tokens differs from the lab's count, as grading says it (docs/answer-check.md)
    'cache accounting': 'probably the accounting of Ollama {}, which leaves cached prompt tokens out',
    'truncation': 'truncated: the server read fewer tokens than the request holds, so it dropped part of it, as Ollama '
    'drops the oldest messages once a prompt exceeds num_ctx, or a server cuts what exceeds the context it loaded',
    NO_REQUEST: "the original's format names no request; the server read another text than today's, as "
    "the original's 120 answered its own cases.json (sha256 30d77344...) of other histories (docs/counter.md)",
    'unexplained': 'unexplained: the server read another prompt than the lab counted for the very request sent'}


def check_complete(recorded: dict, plan: list[dict], path: Path, cases_path: Path, cases_sha256: str, hint: str,
                   redo: str) -> None:
    """Refuse a recording that lacks a planned answer, or holds one twice or unplanned (its counts would lie), naming
    them and the advice: redo for one held twice; else --cases where it names other cases by their sha256, or hint."""
    held = Counter((strategy, case_id, answer['seed']) for strategy, case_id, answer in each_answer(recorded))
    planned = dict.fromkeys((item['strategy'], item['case'], item['seed']) for item in plan)  # ordered, and a set
    if (chosen := recorded.get('chosen')) and chosen['cases_sha256'] != cases_sha256:
        hint = (f'it was recorded from a case file with sha256 {chosen["cases_sha256"][:12]}, not {cases_path}: give '
                'that one with --cases')
    for problem, found, advice in (('missing', [key for key in planned if key not in held], hint),
                                   ('that this run does not plan', [key for key in held if key not in planned], hint),
                                   ('recorded more than once', [key for key, n in held.items() if n > 1], redo)):
        if found:
            named = ', '.join(f'{s} {c} seed {seed}' + (f' ({held[s, c, seed]} times)' if held[s, c, seed] > 1 else '')
                              for s, c, seed in found[:answer_keys.NAMED])
            raise LabError(f'{path}: {counted(len(found), "answer")} {problem}, such as {named}; {advice}')


def grade_recording(recorded: dict, keys: dict, plan: list[dict], f1: tuple[dict, float] | None = None) -> dict:
    """The grades file's content; a planned request's fact-recall row joins an answer given that very request. With f1
    ({case_id: kind}, threshold), keys are gold answers scored by F1."""
    model, current = recorded['model'], {(item['strategy'], item['case'], item['seed']): item for item in plan}
    undercounts = api(model) == 'ollama' and undercounts_cached_prompt(model['ollama_version'])
    compared = pin_counter(model)[1]
    mismatches, cut_off, outdated, joined = [], [], [], []
    for strategy, case_id, answer in each_answer(recorded):
        where = {'strategy': strategy, 'case': case_id, 'seed': answer['seed']}
        today = current.get((strategy, case_id, answer['seed']))
        sent = answer.get('request_sha256')  # None in the original's format: today's request stands in
        same = today is not None and today['request_sha256'] == sent
        joined.append((strategy, case_id, answer, today['row'] if same else None))
        count, read = answer['input_tokens'] if sent else today['input_tokens'], answer['prompt_tokens']
        if compared and read != count:  # prompt_tokens are held only to the served model's own counter
            cause = ('cache accounting' if undercounts and read < count else NO_REQUEST if not sent else
                     'truncation' if read < count else 'unexplained')
            mismatches.append({**where, 'prompt_tokens': read, 'input_tokens': count, 'cause': cause})
        if answer['done_reason'] == CUT_OFF:
            cut_off.append(where)
        if not same:
            outdated.append({**where, 'reason': 'request changed' if sent else NO_REQUEST})
    graded = {strategy: {case_id: [] for case_id in by_case} for strategy, by_case in recorded['answers'].items()}
    before, after = (answer_keys.f1_grades(joined, keys, *f1, graded) if f1 else
                     answer_keys.key_grades(joined, keys, graded))
    return {'model': model, 'answers_recorded': len(joined), **before,
            'prompt_token_mismatches': mismatches, 'cut_off_answers': cut_off,
            'cut_off_per_strategy': {name: sum(c['strategy'] == name for c in cut_off) for name in graded},
            'outdated_requests': outdated, **after}


def grades_report(grades: dict) -> str:
    """The grader's tables and lists, then the checks kept apart."""
    cut_off = 'Cut off at num_predict (graded as they stand): ' + ', '.join(
        f'{k} {v}' for k, v in grades['cut_off_per_strategy'].items())
    (name, own), tag = pin_counter(grades['model']), model_name(grades['model'])
    # A report leaves the default counter unnamed; a counter that is not the served model's own is named too.
    note = counter_note({'counter': {} if own and name == tokenizer.DEFAULT else {'name': name}})
    lines = [*([f'Answers of {tag}{note}{", not its own counter" * (not own)}:'] if note else []),
             *(answer_keys.f1_tables if 'f1' in grades else answer_keys.key_tables)(grades, cut_off), '']
    for cause, meaning in MISMATCH_CAUSES.items():
        if found := [m for m in grades['prompt_token_mismatches'] if m['cause'] == cause]:
            lines.append(f'{counted(len(found), "answer")} whose prompt_tokens differ from the lab\'s count ('
                         f'{meaning.format(grades["model"].get("ollama_version"))}):')
            lines += [f'  {m["strategy"]} {m["case"]} seed {m["seed"]}: server read {m["prompt_tokens"]} tokens, '
                      f'the lab counted {m["input_tokens"]}' for m in found]
    if not grades['prompt_token_mismatches']:
        lines.append("Every answer's prompt_tokens equal the counted input tokens." if own else
                     f'prompt_tokens are not compared: {name} is not the counter of {tag}.')
    if unnamed := sum(o['reason'] == NO_REQUEST for o in grades['outdated_requests']):
        lines.append(f"{counted(unnamed, 'answer')} name no request (the original's format): none joins fact recall.")
    if outdated := [o for o in grades['outdated_requests'] if o['reason'] != NO_REQUEST]:
        lines.append(f'{counted(len(outdated), "answer")} recorded for requests that the current '
                     'strategies, cases and pin no longer send; record again:')
        lines += [f'  {o["strategy"]} {o["case"]} seed {o["seed"]}: {o["reason"]}' for o in outdated]
    elif not unnamed:
        lines.append('Every recorded request is what the current strategies and cases send.')
    return '\n'.join(lines)


@contextlib.contextmanager
def stops_told(result_path: Path, command: str | None):
    """Every stop inside says what it leaves on disk; the caller sets state['recorded'] once the recording is whole."""
    state = {'recorded': False}
    try:
        yield state
    except (KeyboardInterrupt, LabError) as stop:
        whole = f'{result_path.name} holds every answer: grade it with the same command without `record`'
        if isinstance(stop, LabError):
            raise LabError(f'{stop}; {whole}') if state['recorded'] else stop
        partial = result_path.with_suffix(PARTIAL_SUFFIX)
        kept = f'; the answers so far are kept in {partial.name} for the next `record`' if partial.exists() else ''
        raise KeyboardInterrupt(whole if state['recorded'] else f'{result_path.name} ' + (
            f'is replaced only once every answer has arrived{kept}' if command else 'is unchanged')) from None
