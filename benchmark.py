"""Time the rules (docs/speed.md explains each part and figure).

    .venv/bin/python benchmark.py                                          # both parts (about a minute on 2 cores)
    .venv/bin/python benchmark.py --generated 10 --turns 30 --sweep-cases 10   # a quick look
    .venv/bin/python benchmark.py --sweep                                  # only the sweep
    .venv/bin/python benchmark.py --no-sweep                               # only the first part
    .venv/bin/python benchmark.py --cases locomo-cases.json --rules field_rules.py   # each rule's CPU, twice

First part: the four rules on seeded synthetic cases, counting each request whole and with the lab's
counter, which must select identically. Sweep: chat-shaped cases through the whole evaluation at several
contexts and history lengths. Both compare their CPU seconds with the encode-once bound. It prints Markdown
tables, then one JSON line with every figure; progress goes to stderr. --cases FILE times each rule instead,
one at a time, twice (the first pass pays for what the rule builds on first use), and grades nothing.

It writes nothing and needs the prepared counter. No test checks its timings, which depend on the machine.
"""
import argparse
import json
from pathlib import Path
import resource
import time

from case_set import check_fits, load_cases
from common import LabError, add_input_options, progress, run, tell
from rule_files import CHILDREN, add_timeout_option, load_rule_files
from runner import run_rules
from scorer import graded_row, totals
from shapes import at_limit
from strategies import RULES
from synthetic_cases import as_agent, chat_case, generated_cases, synthetic_case
from text import markdown_table
from tokenizer import CounterError, add_counter_option, choose_counter, counter
from tool_formats import frame_span

# First part: the default size (synthetic_cases.py sets the budget).
SEED = 20261130  # fixed, so every run times the same case set
GENERATED_CASES = 100
TURNS = 60
MAX_TURNS = 200_000  # turns in all of the first part (--generated x --turns): about 0.2 GB of text

# Sweep: chat-shaped histories at real budgets.
SWEEP_SEED = 20261201  # its own seed: the sweep's cases share nothing with the first part's
SWEEP_CASES = 100  # cases per setting; every setting of one history length uses the same cases
MAX_SWEEP_CASES = 2_000  # --sweep-cases: 1,200 turns each, about 0.5 GB of text
SWEEP = ((4096, 300), (16384, 300), (65536, 300), (4096, 1200))  # (context_limit, turns per case)
PASSES = ('first pass', 'second pass')  # --cases: a rule's calls over every case, twice
# What issues 30 and 43 ask of a run on the 2-core machine: figure -> ('at least' or 'at most', threshold). The
# speedup over the full count has none: the full count got faster, the cached one sits at its bound (issue 43).
TARGETS = {'fast_over_bound': ('at most', 1.5), 'agent_over_pair': ('at most', 2), 'worst_over_bound': ('at most', 2),
           'budget_growth': ('at most', 2), 'turns_growth': ('at most', 5)}

# The tables' names of the figures, as in docs/speed.md (a sweep setting's: its keys in order); JSON keeps the keys.
SWEEP_HEADER = ('Context', 'Turns', 'Cases', 'Evaluation seconds', 'Encode-once bound seconds', 'Over bound')
MEASURES = {
    'cases': 'cases in the first part',
    'turns_per_case': 'turns per case in the first part',
    'seed': "the first part's seed",
    'distinct_pieces': 'distinct messages the rules measured',
    'naive_seconds': 'full render-and-encode count, seconds',
    'fast_seconds': 'cached piece count, seconds',
    'speedup': 'speedup, full count over cached count',
    'bound_seconds': 'encode-once bound, seconds',
    'fast_over_bound': 'cached count over its encode-once bound',
    'identical_selections': 'identical selections and counts',
    'agent_seconds': 'cached count, the same cases as agent turns, seconds',
    'agent_over_pair': 'agent turns over pair turns, cached count',
    'sweep_seed': "the sweep's seed",
    'worst_over_bound': 'worst sweep setting over its encode-once bound',
    'budget_growth': 'evaluation seconds, 65,536 over 4,096 context at 300 turns',
    'turns_growth': 'evaluation seconds, 1,200 over 300 turns at 4,096 context',
    'peak_rss_mb': 'peak resident memory of the whole run, MB',
}


def timed_run(cases: list[dict], count, what: str) -> tuple[float, list]:
    # CPU time: other programs disturb it far less than wall-clock time, and the tokenizer encodes on this thread.
    start = time.process_time()
    results = []
    for case in cases:
        results.append({name: rule(case, count) for name, rule in RULES.items()})
        progress(f'benchmark.py: {what}', len(results), len(cases), steps=5)
    return time.process_time() - start, results


def count_whole(messages: list[dict]) -> int:
    """A plain count function: render the whole prompt and encode it, every time (no turn_costs)."""
    return len(counter().encode(counter().prompt(messages)))


def cold_start():
    """The counter with every cache empty, as in a fresh process (forget; a warm BPE model encodes short texts about
    twice as fast), but its once-per-process vocabulary check done (`lines_apart` reads the whole vocabulary on first
    use), so that no timed run pays for loading."""
    counter().lines_apart
    counter().forget()
    return counter()


def bound_seconds() -> float:
    """Encode once, from a cold start, every distinct message (and notes line) the counter measured: no exact counter
    does less. It leaves the counter cold."""
    encode = counter().encode
    texts = [frame_span(counter().form, role, content) for role, content in counter().sizes] + list(counter().lines)
    cold_start()
    start = time.process_time()
    for text in texts:
        encode(text)
    return time.process_time() - start


def benchmark(cases_count: int, turns: int, seed: int) -> tuple[dict, dict[str, dict]]:
    """The first part: full against cached counting on the synthetic case set."""
    cases = generated_cases(synthetic_case, cases_count, turns, seed)
    exact = cold_start()
    naive, slow = timed_run(cases, count_whole, 'full count')
    cold_start()  # the fast path starts cold, like a fresh process
    fast, quick = timed_run(cases, exact, 'cached count')
    pieces, bound = len(exact.sizes), bound_seconds()
    figures = {'cases': cases_count, 'turns_per_case': turns, 'seed': seed, 'distinct_pieces': pieces,
               'naive_seconds': round(naive, 3), 'fast_seconds': round(fast, 3), 'speedup': round(naive / fast, 1),
               'bound_seconds': round(bound, 3), 'fast_over_bound': round(fast / bound, 2),
               'identical_selections': slow == quick}
    try:  # from cold, the same texts, each reply a tool result (docs/agents.md): what tool rendering costs
        agent = timed_run(list(map(as_agent, cases)), exact, 'agent turns')[0]
        figures |= {'agent_seconds': round(agent, 3), 'agent_over_pair': round(agent / fast, 1)}
    except CounterError:  # phi-3.5 counts no tool message: its template drops them
        figures |= {'agent_seconds': None, 'agent_over_pair': None}
    exact.forget()  # nothing after this needs these sizes
    rows = {name: totals([graded_row(case, chosen[name]) for case, chosen in zip(cases, quick)]) for name in RULES}
    return figures, rows


def speed_sweep(cases_count: int) -> dict:
    """The whole evaluation's seconds at each setting, against the encode-once bound for the same cases."""
    histories, settings, at = {}, [], {}
    for context_limit, turns in SWEEP:
        if turns not in histories:  # one history length in memory at a time
            histories = {turns: generated_cases(chat_case, cases_count, turns, SWEEP_SEED)}
        cases = at_limit(histories[turns], context_limit)
        exact = cold_start()  # the cache then never holds more than one setting's distinct messages
        start = time.process_time()
        run_rules(cases, RULES, exact, f'benchmark.py: sweep {context_limit} context, {turns} turns')
        seconds = time.process_time() - start
        bound = bound_seconds()
        settings.append({'context_limit': context_limit, 'turns': turns, 'cases': cases_count,
                         'seconds': round(seconds, 3), 'bound_seconds': round(bound, 3),
                         'over_bound': round(seconds / bound, 2)})
        at[context_limit, turns] = seconds
    return {'sweep': settings, 'sweep_seed': SWEEP_SEED,
            'worst_over_bound': max(s['over_bound'] for s in settings),
            'budget_growth': round(at[65536, 300] / at[4096, 300], 2),
            'turns_growth': round(at[4096, 1200] / at[4096, 300], 2)}


def summary_table(figures: dict, rows: dict[str, dict]) -> str:
    """The first part's selections, the sweep's settings, then every figure by name (docs/speed.md explains each)."""
    parts = [] if not rows else [markdown_table(  # no first part with --sweep
        ['Strategy', 'Facts found', 'Cases with stale facts', 'Mean input tokens'],
        [[name, f"{t['facts_found']} of {t['facts_total']}", str(t['cases_with_stale_facts']),
          f"{t['mean_input_tokens']:g}"] for name, t in rows.items()])]
    if 'sweep' in figures:
        parts.append(markdown_table(list(SWEEP_HEADER), [list(map(str, s.values())) for s in figures['sweep']]))
    met = figures.get('targets_met', {})
    parts.append(markdown_table(['Measure', 'Value'], [
        [f'{MEASURES[key]} (`{key}`)', f"{value}" + (f" (target {' '.join(map(str, TARGETS[key]))}: "
                                                      f"{'met' if met[key] else 'MISSED'})" if key in met else '')]
        for key, value in figures.items() if key not in ('sweep', 'targets_met')]))
    return '\n'.join(parts).rstrip('\n')


def time_rules(cases: list[dict], rules: dict, count, clock=time.process_time) -> dict:
    """rule -> (CPU seconds of its first pass over the cases, of its second), rules in the order given.

    With a clock that advances by 1 per call and one case, every pass takes 1 second:
    time_rules([case], {'recent': recent}, count, clock=ticks) -> {'recent': (1, 1)}
    """
    def one_pass(rule) -> float:
        start = clock()
        for case in cases:
            rule(case, count)
        return clock() - start

    return {name: tuple(one_pass(rule) for _ in PASSES) for name, rule in rules.items()}


def timing_table(seconds: dict) -> str:
    """The timings as a Markdown table: {'recent': (1.234, 0.5)} -> '| Rule | First pass, CPU s | ...'."""
    return markdown_table(['Rule', *(f'{name.capitalize()}, CPU s' for name in PASSES)],
                          [[name, *(f'{value:.2f}' for value in passes)] for name, passes in seconds.items()])


def rule_timing(path: Path, rule_paths: list, rule_timeout: float) -> str:
    """--cases: each rule's two passes over a case set, after loading the cases, the counter and the rules."""
    cases = load_cases(path)
    check_fits(path, cases, exact := cold_start())  # no rule's first pass pays for loading
    rules = {**RULES, **load_rule_files(rule_paths, rule_timeout)[0]}
    tell(f'timing {len(rules)} rules on {len(cases)} cases', 'benchmark.py')
    # A rules file's rules run in a process of their own: its CPU counts too.
    return timing_table(time_rules(cases, rules, exact, lambda: time.process_time() + sum(c.cpu for c in CHILDREN)))


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--generated', type=int, default=GENERATED_CASES,
                        help=f'cases in the first part (default {GENERATED_CASES})')
    add_input_options(parser, None, 'time each rule on this case set instead')
    add_timeout_option(parser)
    parser.add_argument('--turns', type=int, default=TURNS, help=f'turns per case in the first part (default {TURNS})')
    parser.add_argument('--seed', type=int, default=SEED, help='seed of the first part')
    parser.add_argument('--sweep-cases', type=int, default=SWEEP_CASES,
                        help=f'cases per sweep setting (default {SWEEP_CASES})')
    only = parser.add_mutually_exclusive_group()
    only.add_argument('--sweep', action='store_true', help='run only the sweep')
    only.add_argument('--no-sweep', action='store_true', help='run only the first part')
    add_counter_option(parser)
    args = parser.parse_args(argv)
    if args.generated < 1 or args.turns < 3 or args.sweep_cases < 1:  # one line, as every refusal of a size
        raise LabError('--generated and --sweep-cases must be at least 1, and --turns at least 3')
    if args.generated * args.turns > MAX_TURNS or args.sweep_cases > MAX_SWEEP_CASES:
        raise LabError(f'--generated times --turns may be at most {MAX_TURNS:,} turns, and --sweep-cases at most '
                       f'{MAX_SWEEP_CASES:,}: larger case sets would not fit in memory')
    if args.rules and not args.cases:
        parser.error('--rules goes with --cases FILE')
    return args


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    choose_counter(args.counter)
    if args.cases:
        print(rule_timing(args.cases, args.rules, args.rule_timeout), end='')
        return 0
    figures, rows = ({}, {}) if args.sweep else benchmark(args.generated, args.turns, args.seed)
    if not args.no_sweep:
        figures.update(speed_sweep(args.sweep_cases))
    figures['peak_rss_mb'] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)  # whole run, KiB
    figures['targets_met'] = {name: (figures[name] >= limit if bound == 'at least' else figures[name] <= limit)
                              for name, (bound, limit) in TARGETS.items() if figures.get(name) is not None}
    print(summary_table(figures, rows))
    print(json.dumps(figures))
    return 0 if figures.get('identical_selections', True) else 1


if __name__ == '__main__':
    run(main)
