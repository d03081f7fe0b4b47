"""Turn LoCoMo's long two-person conversations into a case set that evaluate.py runs unchanged.

    .venv/bin/python locomo_cases.py locomo10.json --output locomo-cases.json
    .venv/bin/python locomo_cases.py locomo10.json --output locomo-16k.json --context-limit 16384
    .venv/bin/python evaluate.py --cases locomo-cases.json --format table --group kind

The input is `data/locomo10.json` of snap-research/LoCoMo (CC BY-NC 4.0), which the user downloads; nothing of it is
kept here. Every usable question of the chosen categories becomes one case: the whole conversation as history,
LoCoMo's own request for a short answer as instructions, each evidence utterance's text as a required fact, no stale
facts (docs/locomo.md gives the conversion in full). One case a line, ASCII only: the same input gives the same bytes;
stderr ends with one summary line counting skipped questions by reason. Input not in LoCoMo's shape is one line naming
sample and field, exit 2, nothing written. It calls no model and counts no tokens; LoCoMo's answers are read only for
--answers, which writes each case's gold answer for `answer_check.py --grader f1`.
"""
import argparse
from collections import Counter
from itertools import zip_longest
import json
from pathlib import Path
import re

from answer_keys import CATEGORIES  # LoCoMo's question categories, as its F1 scores them
from case_set import CaseError, check_budget, check_case
from common import run, tell  # standard library only, as are the others here
from lab_files import (OBJECT, STRING, TEXT, check_fields, check_outputs, list_of, one_of, output_help, read_json,
                       to_json, write_output)
from shapes import SPLITS, make_turn

# What a case looks like. Changing any of these changes every case written.
CHOSEN = '1,2,3,4'  # category 5 asks about things the conversation never says, so it has nothing to find
LOCOMO_ASK = ('write a short answer for the following question in a few words. Do not write complete and lengthy '
              'sentences. Answer with exact words from the conversations whenever possible.')
DATE_ASK = ' Use DATE of CONVERSATION to answer with an approximate date.'  # LoCoMo adds it to temporal questions
INSTRUCTIONS = {category: 'The conversation below is between two people, the user and the assistant, over several '
                f'dated sessions. Based on it, {LOCOMO_ASK}' + DATE_ASK * (category == 2) for category in CATEGORIES}
SESSION_HEADER = 'Session {number}, {date_time}'  # the first line of each session's first user message
IMAGE_NOTE = '{text} [shared an image: {blip_caption}]'  # an utterance that shared an image, as a message
BUDGET = {'context_limit': 4096, 'max_new_tokens': 512, 'margin': 64}  # defaults of the options
CASE_SPLIT = 'held_out'  # of every case unless --split: nobody tuned the rules on LoCoMo

# At most 9 digits a number: int() refuses past 4,300 with a traceback, and LoCoMo's are below 100.
SESSION_KEY = re.compile(r'session_(\d{1,9})')
UTTERANCE_ID = re.compile(r'D(\d{1,9}):(\d{1,9})')  # the dia_id of an utterance
EVIDENCE_ID = re.compile(r'D:?(\d{1,9}):(\d{1,9})')  # an evidence id, allowing LoCoMo's stray colon ('D:11:26')
EVIDENCE_SEPARATOR = re.compile(r'[\s;,]+')  # between several ids in one evidence string
# The fields read of LoCoMo's records (lab_files' kinds; any other field is left alone), checked in this order.
SAMPLE = {'conversation': OBJECT, 'qa': (lambda v: isinstance(v, list), 'a list of questions')}
SPEAKERS = {'speaker_a': STRING, 'speaker_b': STRING}
UTTERANCES = (lambda v: isinstance(v, list) and v != [], 'a non-empty list of utterances')
UTTERANCE = {'text': TEXT, 'blip_caption': TEXT,  # and the speaker, one of the sample's two
             'dia_id': (lambda v: isinstance(v, str) and UTTERANCE_ID.fullmatch(v) is not None, 'an id like D1:3')}
QA_ITEM = {'question': TEXT, 'category': one_of(tuple(CATEGORIES)),
            'evidence': list_of(STRING, 'a list of utterance ids (strings)')}
GOLD = (lambda v: type(v) in (str, int) and str(v).strip() != '', 'a non-empty string or an integer')
# Why a question gives no case, in the order the summary line lists them.
SKIP_REASONS = ('category not chosen', 'no evidence id', 'evidence names no utterance', 'evidence not an id')


def evidence_ids(entries: list[str]) -> list[tuple[int, int]] | None:
    """The (session, index) pairs an evidence list names, in order; None if an entry is not ids at all.

    evidence_ids(['D8:6; D9:17', 'D', 'D:11:26', 'D30:05']) -> [(8, 6), (9, 17), (11, 26), (30, 5)]
    evidence_ids(['page 3']) -> None
    """
    matches = [EVIDENCE_ID.fullmatch(token) for token in EVIDENCE_SEPARATOR.split(' '.join(entries))
               if token not in ('', 'D')]  # a lone 'D' is a stray with no id in it
    return [(int(match[1]), int(match[2])) for match in matches] if all(matches) else None


def session_turns(number: int, date_time: str, utterances: list[dict], speaker_a: str) -> list[dict]:
    """One session as history turns; speaker_a speaks on the user side, and an utterance that shared an image
    ends with its caption: {'text': 'Look!', 'blip_caption': 'a dog'} is 'Look! [shared an image: a dog]'.

    Session 2 at '9 am on 1 May, 2023' with B 'Hi', A 'Hey', B 'Bye' gives
    [{'user': 'Session 2, 9 am on 1 May, 2023', 'assistant': 'Hi'},
     {'user': 'Hey', 'assistant': 'Bye'}]
    """
    messages = [IMAGE_NOTE.format_map(utterance) if 'blip_caption' in utterance else utterance['text']
                for utterance in utterances]
    header = SESSION_HEADER.format(number=number, date_time=date_time)
    if utterances[0]['speaker'] == speaker_a:
        messages[0] = f'{header}\n{messages[0]}'
    else:
        messages.insert(0, header)
    # A session that ends on the user side ends its last turn with '': the next session starts a new turn.
    return list(map(make_turn, zip_longest(messages[::2], messages[1::2], fillvalue='')))


class Sample:
    """One conversation, checked for LoCoMo's shape: its history and its utterance texts by id."""

    def __init__(self, path: Path, index: int, sample):
        self.where = f'{path}: sample at index {index}'
        if not isinstance(sample, dict):
            raise CaseError(f'{self.where}: expected an object, got {type(sample).__name__}')
        self.sample_id = self.field(sample, {'sample_id': TEXT})['sample_id']
        self.where = f'{path}: sample {self.sample_id}'
        conversation, self.qa = self.field(sample, SAMPLE).values()
        speakers = list(self.field(conversation, SPEAKERS, 'conversation').values())
        if speakers[0] == speakers[1]:
            raise self.error('conversation.speaker_b', 'must differ from speaker_a')
        numbers = sorted(int(match[1]) for key in conversation if (match := SESSION_KEY.fullmatch(key)))
        if not numbers:
            raise self.error('conversation', 'holds no session_N list')
        self.history, self.texts = [], {}
        for number in numbers:  # a session_N_date_time without a session_N (conv-26 has some) holds nothing
            self.read_session(conversation, number, speakers)

    def error(self, field: str, expected: str) -> CaseError:
        return CaseError(f'{self.where}: field {field} {expected}')

    def field(self, holder, spec: dict, name: str = '', optional=()) -> dict:
        """The fields of spec that holder (the record at `name`) holds, each checked, in spec's order."""
        check_fields(self.where, holder, spec, '', name, optional, exact=False, error=CaseError)
        return {field: holder[field] for field in spec if field in holder}

    def read_session(self, conversation: dict, number: int, speakers: list[str]) -> None:
        name = f'session_{number}'
        utterances, date_time = self.field(conversation, {name: UTTERANCES, f'{name}_date_time': TEXT},
                                           'conversation').values()
        for index, utterance in enumerate(utterances):
            where = f'conversation.{name}[{index}]'
            self.field(utterance, {'speaker': one_of(speakers), **UTTERANCE}, where, ['blip_caption'])
            speaker, text = utterance['speaker'], utterance['text']
            if index and utterances[index - 1]['speaker'] == speaker:
                raise self.error(f'{where}.speaker', 'repeats the previous speaker; LoCoMo alternates speakers')
            match = UTTERANCE_ID.fullmatch(utterance['dia_id'])
            key = (int(match[1]), int(match[2]))
            if key in self.texts:
                raise self.error(f'{where}.dia_id', f'repeats {utterance["dia_id"]!r}')
            self.texts[key] = text
        self.history += session_turns(number, date_time, utterances, speakers[0])


def sample_cases(sample: Sample, categories: set[int], budget: dict, split: str, skipped: Counter, golds) -> list[dict]:
    """The cases of one conversation, in qa order; skipped questions counted by reason, gold answers in golds."""
    cases, conversations = [], {}  # check_case's record: the history all the cases share is checked once
    for index, item in enumerate(sample.qa):
        where = f'qa[{index}]'
        current, category, evidence = sample.field(item, QA_ITEM, where).values()  # a category not True, not 4.0
        ids = evidence_ids(evidence)
        reason = ('category not chosen' if category not in categories else
                  'evidence not an id' if ids is None else
                  'no evidence id' if not ids else
                  'evidence names no utterance' if any(key not in sample.texts for key in ids) else None)
        if reason:
            skipped[reason] += 1
            continue
        case = {'id': f'{sample.sample_id}-q{index}', 'split': split, 'kind': CATEGORIES[category],
                'instructions': INSTRUCTIONS[category], 'current': current, 'history': sample.history,
                'budget': budget, 'required': list(dict.fromkeys(sample.texts[key] for key in ids)), 'stale': []}
        check_case(f'{sample.where}: question {where} as case {case["id"]}', case,  # what load_cases will demand
                   conversations)
        if golds is not None:  # LoCoMo's scoring reads an answer as str() of it; a few are years, as integers
            golds[case['id']] = str(sample.field(item, {'answer': GOLD}, where)['answer'])
        cases.append(case)
    return cases


def convert(path: Path, categories: set[int], budget: dict, split: str, golds=None) -> tuple[list[dict], str]:
    """All cases of a LoCoMo file, and the summary line; CaseError names the sample and field of bad input."""
    samples = read_json(path, 'LoCoMo file')
    if not isinstance(samples, list) or not samples:
        raise CaseError(f'{path}: expected LoCoMo\'s shape, a non-empty list of samples')
    cases, skipped, seen, questions = [], Counter(), set(), 0
    for index, raw in enumerate(samples):
        sample = Sample(path, index, raw)
        if sample.sample_id in seen:
            raise sample.error('sample_id', 'repeats an earlier sample')
        seen.add(sample.sample_id)
        cases += sample_cases(sample, categories, budget, split, skipped, golds)
        questions += len(sample.qa)
    if not cases:
        raise CaseError(f'{path}: no question of categories {sorted(categories)} has usable evidence; nothing written')
    reasons = ', '.join(f'{skipped[reason]} {reason}' for reason in SKIP_REASONS if skipped[reason]) or 'none'
    return cases, (f'{len(samples)} conversations, {questions} questions read, {len(cases)} cases written; '
                   f'skipped: {reasons}')


def category_set(text: str) -> set[int]:
    """'1,2,4' -> {1, 2, 4}; anything but LoCoMo's category numbers is refused."""
    chosen = {int(part) if part.strip().isdecimal() else 0 for part in text.split(',')}  # 0 is no category
    if not chosen <= set(CATEGORIES):
        raise argparse.ArgumentTypeError(f'expected category numbers from {list(CATEGORIES)} separated by commas, '
                                         f'got {text!r}')
    return chosen


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description='Convert LoCoMo (locomo10.json) into a case set for evaluate.py.')
    parser.add_argument('locomo', type=Path, help="LoCoMo's data/locomo10.json, downloaded by you")
    parser.add_argument('--output', type=Path, required=True, help=output_help('case set to write', 'the LoCoMo file'))
    for name, value in BUDGET.items():
        parser.add_argument(f'--{name.replace("_", "-")}', type=int, default=value,
                            help=f'budget.{name} of every case (default {value})')
    parser.add_argument('--categories', type=category_set, default=category_set(CHOSEN),
                        help=f'categories to convert, of {CATEGORIES} (default {CHOSEN})')
    parser.add_argument('--split', choices=SPLITS, default=CASE_SPLIT, help='split of every case (default %(default)s)')
    parser.add_argument('--answers', type=Path, help="also write each case's gold answer here (for --grader f1)")
    return parser.parse_args(argv)


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    budget = {name: getattr(args, name) for name in BUDGET}
    check_budget('the budget options', budget)
    check_outputs([('--output', args.output), ('--answers', args.answers)], [('the LoCoMo file', args.locomo)])
    cases, summary = convert(args.locomo, args.categories, budget, args.split, golds := {} if args.answers else None)
    # One case a line; ASCII keeps even the 146 MB of LoCoMo at one byte a character.
    text = '[\n' + ',\n'.join(json.dumps(case, ensure_ascii=True) for case in cases) + '\n]\n'
    write_output(args.output, text, 'case set',
                 *([(args.answers, to_json({'answers': golds}), 'gold answers')] if args.answers else []))
    try:
        tell(summary, 'locomo_cases.py')
    except KeyboardInterrupt:
        raise KeyboardInterrupt(f'the case set was written to {args.output}') from None
    return 0


if __name__ == '__main__':
    run(main, 'nothing was written', packages=False)
