"""Seeded synthetic case sets for benchmark.py: long chat and log histories with a replaced limit planted in them.

    from synthetic_cases import as_agent, chat_case, generated_cases, synthetic_case
    generated_cases(synthetic_case, 100, 60, seed=20261130)   # the first part's 100 cases of 60 turns
    as_agent(case)   # the same texts as agent turns: each reply a tool result

Each case holds a stale limit, its correction and an owner at random depths, so the rules have something to find;
the same seed gives the same cases on every machine. It reads, prints and writes nothing.
"""
import random

# The shape of the generated histories.
SYNTHETIC_BUDGET = {'context_limit': 8192, 'max_new_tokens': 512, 'margin': 64}  # the sweep sets its own context limits
LOG_EVERY = 9  # about one turn in nine of a synthetic case is a long log
PASTE_EVERY = 100  # about one turn in a hundred of a chat case is a pasted log
PASTE_LINES = (39, 71)  # lines of a pasted log: 1,000 to 2,000 tokens
TOPICS = ['billing', 'search', 'exports', 'uploads', 'sessions', 'gateway', 'queue', 'reports', 'backups', 'alerts']
FILLER = ('the team reviewed progress on the dashboard and agreed to revisit the layout after the demo while '
          'keeping an eye on latency numbers from staging and the notes from the design review last week').split()
# Chat turns also use the question's words and, now and then, a cue word, as real conversations do.
CHAT = FILLER + TOPICS + ('ok sure thanks maybe later tomorrow sounds good lunch meeting call ticket fix deploy '
                          'limit owns must always never instead').split()
SYNTHETIC_INSTRUCTIONS = 'Answer only from the conversation. If a fact is missing, say so.'


def sentence(rng: random.Random, length: int, vocabulary: list[str] = FILLER) -> str:
    return ' '.join(rng.choice(vocabulary) for _ in range(length)).capitalize() + '.'


def chat_turn(rng: random.Random, topic: str) -> dict:
    """About 150 tokens: a user paragraph and a shorter reply."""
    return {'user': f'About {topic}: ' + ' '.join(sentence(rng, rng.randint(14, 20)) for _ in range(6)),
            'assistant': ' '.join(sentence(rng, rng.randint(10, 14)) for _ in range(3))}


def log_turn(rng: random.Random, index: int, length: int = 60) -> dict:
    """A pasted log of `length` lines, about 26 tokens each, and a one-line reply."""
    lines = [f'{index:02d}:{m:02d} worker-{rng.randint(0, 9)} batch {rng.randint(100, 999)} '
             f'took {rng.randint(1, 900)} ms queue depth {rng.randint(0, 40)}.' for m in range(length)]
    return {'user': 'Log follows: ' + ' '.join(lines), 'assistant': 'That log shows routine batches.'}


def short_turn(rng: random.Random) -> dict:
    """20 to 80 tokens: one or two short chat sentences and a short reply."""
    return {'user': ' '.join(sentence(rng, rng.randint(5, 14), CHAT) for _ in range(rng.randint(1, 2))),
            'assistant': sentence(rng, rng.randint(5, 18), CHAT)}


def plant_facts(rng: random.Random, number: int, topic: str, history: list[dict], kind: str) -> dict:
    """A case around a history: a replaced limit, its correction and an owner, planted at varied depths."""
    value = rng.randint(2, 500)
    required = f'{topic} limit is {value} per minute'
    stale = f'{topic} limit is {value + 7} per hour'
    first, second, third = sorted(rng.sample(range(len(history)), 3))
    history[first]['user'] += f' We decided the {stale}.'
    history[second]['user'] += f' Actually the {required} instead.'
    owner = f'{topic} is owned by team {rng.choice("ABCDEFGH")}'
    history[third]['assistant'] += f' Noted: {owner}.'
    return {'id': f'{kind}-{number:04d}', 'split': 'dev' if number % 2 else 'held_out', 'kind': kind,
            'instructions': SYNTHETIC_INSTRUCTIONS, 'current': f'What is the {topic} limit, and who owns {topic}?',
            'history': history, 'budget': dict(SYNTHETIC_BUDGET), 'required': [required, owner], 'stale': [stale]}


def synthetic_case(rng: random.Random, number: int, turns: int) -> dict:
    topic = rng.choice(TOPICS)
    history = [log_turn(rng, i) if i % LOG_EVERY == LOG_EVERY - 1 else chat_turn(rng, rng.choice(TOPICS))
               for i in range(turns)]
    return plant_facts(rng, number, topic, history, 'synthetic')


def chat_case(rng: random.Random, number: int, turns: int) -> dict:
    """Many short turns with a few pasted logs among them."""
    topic = rng.choice(TOPICS)
    history = [log_turn(rng, i, rng.randint(*PASTE_LINES)) if rng.randrange(PASTE_EVERY) == 0 else short_turn(rng)
               for i in range(turns)]
    return plant_facts(rng, number, topic, history, 'chat')


def generated_cases(make, count: int, turns: int, seed: int) -> list[dict]:
    rng = random.Random(seed)
    return [make(rng, n, turns) for n in range(count)]


def as_agent(case: dict) -> dict:
    """The case with each turn an agent turn of the same texts (docs/agents.md), the reply a call's result:
    {'user': 'Hi', 'assistant': 'Yes'} -> [user 'Hi', an assistant message calling recall, the tool's 'Yes']."""
    calls = [{'id': f'call_{index}', 'type': 'function', 'function': {'name': 'recall', 'arguments': {}}}
             for index in range(len(case['history']))]
    return dict(case, tools=[], history=[
        [{'role': 'user', 'content': pair['user']}, {'role': 'assistant', 'content': '', 'tool_calls': [call]},
         {'role': 'tool', 'tool_call_id': call['id'], 'content': pair['assistant']}]
        for pair, call in zip(case['history'], calls)])
