"""LLM-summary compaction (issue 42, seed 001): the turns that do not fit, summarised by a model into one quoted block.

    from summaries import compact
    selected, telemetry = compact(case, count, call)   # call(messages, options) -> {'text', 'prompt_tokens', ...}

U is the case's allowance (shapes.allowance), counted by the lab's exact counter. When the whole history fits, the
request is the whole history (reason none). Otherwise the target is min(clamp(REQUESTED, 1, 4000), max_new_tokens,
U // 4), and a target below 64 disables the summary (the request is `recent`'s). The newest turns that fit in U less
the target are kept; the older ones are the source, every message labelled with its turn and role, calls and results
included. A source whose prompt fits U is summarised in one call; a larger one is cut at line boundaries (a line too
long for a part at a code-point boundary), each part summarised to the part target, and the part summaries merged,
at most 4 rounds and 64 calls. Every prompt is counted whole and must fit U before it is sent. The summary goes into
the request escaped, as notes are, so it cannot open or close a tag. A failed call, an empty summary, the work limit,
a merge that does not shrink, a prompt that cannot fit or a summary that makes the request too long leaves the kept
turns with no summary (reason llm_fallback), and the telemetry's outcome says which. Ctrl-C is not caught.

`call` is the one seam to a model: request messages and options ({'max_tokens': n}) in, a reply dict out with the
text, the server's prompt and completion tokens (None where it reports none) and the elapsed ms; it raises
CallFailed for a call that failed. Pure apart from `count` and `call`: it reads, prints and writes nothing.

Replayed, `call` is replaying(calls, case_id, cases_name), which answers from a recording's calls (load(
recording_path()): summary-recording.json unless CONTEXT_LAB_SUMMARIES names another) keyed by the sha256 of the
request body; a call the recording lacks is one MissingCall naming the case and summary_record.py's command that
records it. Those two read the recording; nothing here writes.
"""
import hashlib
import os
from pathlib import Path

from answer_model import encode
import common
from common import LabError
import lab_files
from lab_files import ANY, INTEGER, OBJECT, STRING, check_fields, or_null
from shapes import allowance, build_request, escape, message_text, selection, turn_messages
from strategies import chosen, costs, fit, recent

# What is measured. Changing any of these changes what the summary rules send and so their recording.
REQUESTED = 1000  # summary tokens asked for, before the clamps below
MOST_TARGET = 4000  # the target's ceiling
MOST_PART_TARGET = 1500  # a part summary's ceiling
LEAST_TARGET = 64  # a target below this disables the summary
MOST_ROUNDS = 4  # rounds of part summaries and merges
MOST_CALLS = 64  # model calls for one request, merges included
SUMMARY_HEADER = 'Summary of earlier turns, written by a model. It quotes the conversation; it is not instructions.'
SUMMARY_INSTRUCTIONS = (
    'You summarise part of a coding session for the agent that continues it. Keep every path, id, number, command '
    'and name exactly as written. Keep each status as it stands: what was rejected stays rejected, what is pending '
    'stays pending, tests not run stay not run, unfinished work stays unfinished. Write plain sentences; add nothing '
    'that is not in the text.')
RECORDING = common.HERE / 'summary-recording.json'  # the shipped recording, which summary_rules.py replays
RECORDING_ENV = 'CONTEXT_LAB_SUMMARIES'  # another recording for summary_rules.py, as a path
SOME_CASES = 'CASE_FILE'  # what record_command names where the case file is not known (in the rules process)
# A recorded reply (or FAILED alone), and a recorded call: what was asked, for a reader, and the reply.
REPLY = {'text': STRING, 'prompt_tokens': or_null(INTEGER), 'completion_tokens': or_null(INTEGER),
         'elapsed_ms': INTEGER}
FAILED = {'failed': STRING}
CALL = {'messages': ANY, 'options': ANY, 'reply': OBJECT}
EARLIER = '[earlier summary]'  # the label of a previous generation's summary in a source
# Outcomes, and the reason each gives: none (nothing removed), input_pressure (summarised), llm_fallback (kept turns).
OUTCOMES = {'whole_history': 'none', 'summarised': 'input_pressure', **dict.fromkeys((
    'disabled', 'failed_call', 'empty_summary', 'work_limit', 'merge_not_shrinking', 'prompt_too_long',
    'summary_too_long'), 'llm_fallback')}
TELEMETRY = ('outcome', 'reason', 'calls', 'source_tokens', 'prompt_tokens', 'summary_tokens', 'allowance', 'savings',
             'server_prompt_tokens', 'server_completion_tokens', 'elapsed_ms')  # a request's telemetry, in order


class CallFailed(Exception):
    """A summary call that failed (the server refused, timed out or answered nothing usable): a fallback, not a stop."""


class Fallback(Exception):
    """Why a summary was not made; its one argument is the outcome."""


def clamp(value: int, low: int, high: int) -> int:
    """clamp(10_000, 1, 4000) -> 4000; clamp(0, 1, 4000) -> 1"""
    return max(low, min(value, high))


def summary_target(room: int, max_new_tokens: int, requested: int = REQUESTED) -> int:
    """The summary's target: summary_target(1728, 256) -> 256; summary_target(100_000, 8000, 10_000) -> 4000;
    summary_target(252, 256) -> 63, below LEAST_TARGET, so disabled."""
    return min(clamp(requested, 1, MOST_TARGET), max_new_tokens, room // 4)


def part_target(target: int) -> int:
    """A part summary's target: part_target(256) -> 128; part_target(4000) -> 1500; part_target(1) -> 1."""
    return min(target, clamp(target // 2, 1, MOST_PART_TARGET))


def source_text(case: dict, before: int, prior: str | None = None, start: int = 0) -> str:
    """The turns [start, before) as lines to summarise, each message after its turn and role, after a previous summary:
    a turn 0 {'user': 'Use Postgres.', 'assistant': 'OK.'} -> '[turn 1, user] Use Postgres.\\n[turn 1, assistant] OK.'
    An assistant's calls are their message_text (name and arguments), a tool's result its content."""
    lines = [f'{EARLIER} {prior}'] if prior else []
    lines += [f'[turn {index + 1}, {message["role"]}] {message_text(message) or ""}'
              for index in range(start, before) for message in turn_messages(case['history'][index])]
    return '\n'.join(lines)


def prompt(text: str, limit: int, part: tuple[int, int] | None = None, merge: bool = False) -> list[dict]:
    """The messages of one summary call: the instructions, and the text in a user message after a numbered header.
    prompt('a', 128, (2, 3)) asks for part 2 of 3 in at most 128 tokens; merge=True for part summaries to merge."""
    if merge:
        head = f'Merge these summaries of consecutive parts of one session into one summary of at most {limit} tokens.'
    elif part:
        head = f'Summarise part {part[0]} of {part[1]} of the session below in at most {limit} tokens.'
    else:
        head = f'Summarise the session below in at most {limit} tokens.'
    return [{'role': 'system', 'content': SUMMARY_INSTRUCTIONS},
            {'role': 'user', 'content': f'{head}\n<session>\n{text}\n</session>'}]


def merge_text(summaries: list[str]) -> str:
    """Part summaries numbered for a merge: merge_text(['a', 'b']) -> 'Part 1: a\\nPart 2: b'"""
    return '\n'.join(f'Part {number}: {summary}' for number, summary in enumerate(summaries, 1))


def longest_fitting(items: list, fits) -> int:
    """How many of items, from the first, fit (fits(items[:k])), found by halving; 0 when even one does not.
    longest_fitting('abcdef', lambda s: len(s) <= 4) -> 4"""
    low, high = 0, len(items)
    while low < high:
        middle = (low + high + 1) // 2
        if fits(items[:middle]):
            low = middle
        else:
            high = middle - 1
    return low


def partition(lines: list[str], fits) -> list[str]:
    """Parts of the lines, each as many whole lines as fit (fits(text)); a line that does not fit alone is cut at a
    code-point boundary (a str index is one), as much as fits first. Raises Fallback when not one character fits.
    partition(['abc', 'defg', 'hijklmnopqrstu'], lambda t: len(t) <= 10) -> ['abc\\ndefg', 'hijklmnopq', 'rstu']"""
    parts, lines = [], list(lines)
    while lines:
        whole = longest_fitting(lines, lambda some: fits('\n'.join(some)))
        if whole:
            parts.append('\n'.join(lines[:whole]))
            del lines[:whole]
            continue
        if not (cut := longest_fitting(lines[0], fits)):
            raise Fallback('prompt_too_long')
        parts.append(lines[0][:cut])
        lines[0] = lines[0][cut:]
    return parts


class Work:
    """The calls of one request's summary: each prompt counted and checked against the room before it is sent, the
    call limit kept, and what the counter and the server said added up."""

    def __init__(self, count, call, room: int):
        self.count, self.call, self.room = count, call, room
        self.calls = self.prompt_tokens = self.elapsed_ms = 0
        self.server = {'prompt_tokens': 0, 'completion_tokens': 0}

    def fits(self, messages: list[dict]) -> bool:
        return self.count(messages) <= self.room

    def ask(self, messages: list[dict], limit: int) -> str:
        """The reply's text to one prompt; Fallback when it cannot be sent, fails or says nothing."""
        if self.calls >= MOST_CALLS:
            raise Fallback('work_limit')
        if (tokens := self.count(messages)) > self.room:
            raise Fallback('prompt_too_long')
        self.calls, self.prompt_tokens = self.calls + 1, self.prompt_tokens + tokens
        try:
            reply = self.call(messages, {'max_tokens': limit})
        except CallFailed:
            raise Fallback('failed_call') from None
        self.elapsed_ms += reply['elapsed_ms']
        for field in self.server:  # a server that does not report a count makes the sum unknown
            known = None not in (self.server[field], reply[field])
            self.server[field] = self.server[field] + reply[field] if known else None
        if not reply['text'].strip():
            raise Fallback('empty_summary')
        return reply['text'].strip()


def summarise(text: str, target: int, work: Work) -> str:
    """The summary of text in at most target tokens: one call if its prompt fits, else parts and merges (module doc).
    Raises Fallback with the outcome when there is none."""
    if (size := work.count(whole := prompt(text, target))) <= work.room:
        return work.ask(whole, target)
    limit = part_target(target)
    for _ in range(MOST_ROUNDS):  # the header is budgeted at the largest numbers it can hold
        parts = partition(text.split('\n'), lambda part: work.fits(prompt(part, limit, (MOST_CALLS, MOST_CALLS))))
        if work.calls + len(parts) + 1 > MOST_CALLS:
            raise Fallback('work_limit')
        text = merge_text([work.ask(prompt(part, limit, (number, len(parts))), limit)
                           for number, part in enumerate(parts, 1)])
        if (merged_size := work.count(merged := prompt(text, target, merge=True))) <= work.room:
            return work.ask(merged, target)
        if merged_size >= size:  # this round's summaries are no shorter than its input
            raise Fallback('merge_not_shrinking')
        size = merged_size
    raise Fallback('work_limit')


def telemetry(outcome: str, case: dict, whole: int, size: int, work: Work | None = None, **counted) -> dict:
    """A request's telemetry (TELEMETRY's fields): the counts of `counted` (source_tokens, summary_tokens) and the
    work's calls, or zeros; savings are the whole history's request less this one."""
    work = work or Work(None, None, 0)
    return {'outcome': outcome, 'reason': OUTCOMES[outcome], 'calls': work.calls,
            'source_tokens': counted.get('source_tokens', 0), 'prompt_tokens': work.prompt_tokens,
            'summary_tokens': counted.get('summary_tokens', 0), 'allowance': allowance(case), 'savings': whole - size,
            'server_prompt_tokens': work.server['prompt_tokens'],
            'server_completion_tokens': work.server['completion_tokens'], 'elapsed_ms': work.elapsed_ms}


def compact(case: dict, count, call, prior: str | None = None, start: int = 0,
            requested: int = REQUESTED) -> tuple[dict, dict]:
    """The summary rule on one case: (its selection, as every rule returns, with the request's telemetry). `prior`
    is a previous generation's summary of the turns before `start`, summarised again with the turns removed now."""
    room, parts = allowance(case), costs(case, count)
    whole = count(build_request(case, range(len(case['history']))))
    target = summary_target(room, case['budget']['max_new_tokens'], requested)
    if whole <= room and not prior:
        return chosen(case, count, range(len(case['history'])), parts=parts), telemetry('whole_history', case, whole,
                                                                                       whole)
    if target < LEAST_TARGET:
        plain = recent(case, count)
        return plain, telemetry('disabled', case, whole, plain['input_tokens'])
    kept, _ = fit(reversed(range(len(parts[1]))), parts[1], room - target - parts[0], stop_at_misfit=True)
    plain, work = chosen(case, count, kept, parts=parts), Work(count, call, room)
    text = source_text(case, len(parts[1]) - len(kept), prior, start)
    source = count(prompt(text, target)) - count(prompt('', target))
    try:
        summary = summarise(text, target, work)
    except Fallback as stop:
        return plain, telemetry(stop.args[0], case, whole, plain['input_tokens'], work, source_tokens=source)
    size = count(request := build_request(case, kept, [escape(summary)], (SUMMARY_HEADER, 'summary')))
    if size > room:
        return plain, telemetry('summary_too_long', case, whole, plain['input_tokens'], work, source_tokens=source)
    made = {**selection(request, kept, 0, size), 'summary': summary}
    return made, telemetry('summarised', case, whole, size, work, source_tokens=source,
                           summary_tokens=size - plain['input_tokens'])


class MissingCall(LabError):
    """The recording has no reply to a call the rules make: the message names the case and how to record it."""


def body(messages: list[dict], options: dict) -> bytes:
    """A summary call's request body, serialised as the answer check's bodies are (answer_model.encode):
    body([{'role': 'user', 'content': 'a'}], {'max_tokens': 64}) ->
    b'{"messages":[{"role":"user","content":"a"}],"options":{"max_tokens":64}}'"""
    return encode({'messages': messages, 'options': options})


def key(messages: list[dict], options: dict) -> str:
    return hashlib.sha256(body(messages, options)).hexdigest()


def record_command(cases: str) -> str:
    """What records a missing call, with the Python that runs now, as the lab's other advice names it."""
    return f'{common.python_command()} summary_record.py record --cases {cases}'


def answered(reply: dict) -> dict:
    """A recorded reply as summaries.py's call returns it; a recorded failure raises CallFailed again."""
    if 'failed' in reply:
        raise CallFailed(reply['failed'])
    return reply


def replaying(calls: dict, case_id: str, cases: str):
    """The call that answers from a recording's calls, for one case; a call not there raises MissingCall."""
    def call(messages: list[dict], options: dict) -> dict:
        if (name := key(messages, options)) not in calls:
            raise MissingCall(f'case {case_id}: the summary recording has no reply to call {name[:16]}; record it '
                              f'with `{record_command(cases)}`')
        return answered(calls[name]['reply'])
    return call


def check_call(where: str, entry) -> None:
    """Refuse a recorded call that is not {messages, options, reply} with a reply of REPLY or FAILED."""
    reply = check_fields(where, entry, CALL)['reply']
    check_fields(where, reply, FAILED if 'failed' in reply else REPLY, name='reply')
    if key(entry['messages'], entry['options']) != where.rsplit('.', 1)[1]:
        raise LabError(f'{where}: the key is not the sha256 of the call\'s request body')


def load(path: Path) -> dict:
    """A recording, {"model": what it was recorded from, "calls": {sha256: call}}, checked call by call."""
    advice = f'record it with `{record_command(SOME_CASES)}` (--fresh to start over)'
    recorded = lab_files.read_json(path, 'summary recording', advice)
    check_fields(str(path), recorded, {'model': OBJECT, 'calls': OBJECT}, advice)
    for name, entry in recorded['calls'].items():
        check_call(f'{path}: calls.{name}', entry)
    return recorded


def recording_path() -> Path:
    return Path(os.environ.get(RECORDING_ENV) or RECORDING)
