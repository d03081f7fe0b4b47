"""Time the strategies on an application-sized synthetic case set, both ways of counting.

    python benchmark.py                         # 100 cases of 60 turns (about half a minute on 2 cores)
    python benchmark.py --cases 10 --turns 30   # a quick look

It generates a case set from a fixed seed (about 150 tokens a turn, some long
log turns, facts and replaced facts planted at varied depths, a budget of
8192 - 512 - 64 tokens that binds partway through each history), then runs all
four strategies twice: with the full render-and-encode count and with the
cached piece-by-piece count. It checks that both give identical selections and
counts, and measures the lower bound for any exact counter: encoding every
distinct message once. It prints a table, then one JSON line with the figures.

It writes nothing to disk and needs the prepared counter (`python prepare.py`).
It is not part of the test suite: timings depend on the machine.
"""
import argparse
import json
import random
import resource
import sys
import time

import cli

cli.require_packages(__name__)  # one clear line, not a traceback, if a locked package is missing

from evaluate import check_case, grade
from strategies import STRATEGIES
from tokenizer import CounterError, counter, piece

# The default size, and what the budget looks like in an application.
SEED = 20261130  # fixed, so every run times the same case set
CASES = 100
TURNS = 60
BUDGET = {'context_limit': 8192, 'max_new_tokens': 512, 'margin': 64}
LOG_EVERY = 9  # about one turn in nine is a long log

TOPICS = ['billing', 'search', 'exports', 'uploads', 'sessions', 'gateway', 'queue', 'reports', 'backups', 'alerts']
FILLER = ('the team reviewed progress on the dashboard and agreed to revisit the layout after the demo while '
          'keeping an eye on latency numbers from staging and the notes from the design review last week').split()


def sentence(rng: random.Random, length: int) -> str:
    words = [rng.choice(FILLER) for _ in range(length)]
    return ' '.join(words).capitalize() + '.'


def chat_turn(rng: random.Random, topic: str) -> dict:
    """About 150 tokens: a user paragraph and a shorter reply."""
    user = f'About {topic}: ' + ' '.join(sentence(rng, rng.randint(14, 20)) for _ in range(6))
    assistant = ' '.join(sentence(rng, rng.randint(10, 14)) for _ in range(3))
    return {'user': user, 'assistant': assistant}


def log_turn(rng: random.Random, index: int) -> dict:
    lines = [f'{index:02d}:{m:02d} worker-{rng.randint(0, 9)} batch {rng.randint(100, 999)} '
             f'took {rng.randint(1, 900)} ms queue depth {rng.randint(0, 40)}.' for m in range(60)]
    return {'user': 'Log follows: ' + ' '.join(lines), 'assistant': 'That log shows routine batches.'}


def synthetic_case(rng: random.Random, number: int, turns: int) -> dict:
    topic = rng.choice(TOPICS)
    history = [log_turn(rng, i) if i % LOG_EVERY == LOG_EVERY - 1 else chat_turn(rng, rng.choice(TOPICS))
               for i in range(turns)]
    value = rng.randint(2, 500)
    required = f'{topic} limit is {value} per minute'
    stale = f'{topic} limit is {value + 7} per hour'
    # Plant the replaced decision early, its correction and a second fact at varied depths.
    first, second, third = sorted(rng.sample(range(turns), 3))
    history[first]['user'] += f' We decided the {stale}.'
    history[second]['user'] += f' Actually the {required} instead.'
    owner = f'{topic} is owned by team {rng.choice("ABCDEFGH")}'
    history[third]['assistant'] += f' Noted: {owner}.'
    return {'id': f'synthetic-{number:04d}', 'split': 'dev' if number % 2 else 'held_out', 'kind': 'synthetic',
            'instructions': 'Answer only from the conversation. If a fact is missing, say so.',
            'current': f'What is the {topic} limit, and who owns {topic}?', 'history': history,
            'budget': dict(BUDGET), 'required': [required, owner], 'stale': [stale]}


def synthetic_cases(count: int, turns: int, seed: int = SEED) -> list[dict]:
    rng = random.Random(seed)
    cases = [synthetic_case(rng, n, turns) for n in range(count)]
    for case in cases:
        check_case(f'synthetic case {case["id"]}', case)
    return cases


def timed_run(cases: list[dict], count) -> tuple[float, list]:
    start = time.perf_counter()
    results = [[strategy(case, count) for strategy in STRATEGIES.values()] for case in cases]
    return time.perf_counter() - start, results


def bound_seconds(texts: list[str]) -> float:
    """Encode every distinct piece once: no exact counter can do less tokenizer work."""
    encode = counter().encode
    start = time.perf_counter()
    for text in texts:
        encode(text)
    return time.perf_counter() - start


def peak_rss_mb() -> float:
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)  # Linux reports KiB


def summary_table(figures: dict, rows: list[tuple]) -> str:
    lines = ['| Strategy | Facts found | Cases with stale facts | Mean input tokens |', '|---|---|---|---|']
    lines += [f'| {name} | {found} of {total} | {stale} | {mean:g} |' for name, found, total, stale, mean in rows]
    lines += ['', '| Measure | Value |', '|---|---|']
    lines += [f'| {key} | {value} |' for key, value in figures.items()]
    return '\n'.join(lines)


def benchmark(cases_count: int, turns: int, seed: int) -> tuple[dict, list[tuple]]:
    cases = synthetic_cases(cases_count, turns, seed)
    exact = counter()
    naive, slow = timed_run(cases, exact.count_rendered)
    exact.pieces.clear()  # the fast path starts cold, like a fresh process
    fast, quick = timed_run(cases, exact.count)
    bound = bound_seconds([piece(role, content) for role, content in exact.pieces])
    rows = []
    for position, name in enumerate(STRATEGIES):
        graded = [grade(case, quick[i][position]) for i, case in enumerate(cases)]
        rows.append((name, sum(g['required_found'] for g in graded), sum(g['required_total'] for g in graded),
                     sum(bool(g['stale_included']) for g in graded),
                     round(sum(g['input_tokens'] for g in graded) / len(graded), 1)))
    figures = {
        'cases': cases_count,
        'turns_per_case': turns,
        'seed': seed,
        'distinct_pieces': len(exact.pieces),
        'naive_seconds': round(naive, 3),
        'fast_seconds': round(fast, 3),
        'speedup': round(naive / fast, 1),
        'bound_seconds': round(bound, 3),
        'fast_over_bound': round(fast / bound, 2),
        'identical_selections': slow == quick,
        'peak_rss_mb': peak_rss_mb(),
    }
    return figures, rows


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description='Time full and cached counting on a synthetic case set.')
    parser.add_argument('--cases', type=int, default=CASES, help=f'number of cases (default {CASES})')
    parser.add_argument('--turns', type=int, default=TURNS, help=f'turns per case (default {TURNS})')
    parser.add_argument('--seed', type=int, default=SEED, help='seed of the generated case set')
    args = parser.parse_args(argv)
    if args.cases < 1 or args.turns < 3:
        parser.error('--cases must be at least 1 and --turns at least 3')
    try:
        figures, rows = benchmark(args.cases, args.turns, args.seed)
    except CounterError as error:
        print(f'benchmark.py: {error}', file=sys.stderr)
        return 2
    print(summary_table(figures, rows))
    print(json.dumps(figures))
    return 0 if figures['identical_selections'] else 1


if __name__ == '__main__':
    cli.run(main)
