"""Test support: a small file in LoCoMo's shape and a run of locomo_cases.py on it, for the conversion's tests.

Imported by test files, never run on its own. LoCoMo's data is not in this repository (CC BY-NC 4.0), so the
conversion is tested on two conversations written here with every awkward form the real file has.
"""
import json
from pathlib import Path
import subprocess
import sys

from test_support_fixtures import HERE

PAGE = HERE / 'docs' / 'locomo.md'  # the conversion in detail and the full tables
EXPECTED_SUMMARY = ('locomo_cases.py: 2 conversations, 12 questions read, 7 cases written; skipped: '
                    '1 category not chosen, 2 no evidence id, 1 evidence names no utterance, 1 evidence not an id\n')


def prose(path: Path) -> str:
    """A page's text with every run of whitespace one space: figures in running text, whatever the line breaks."""
    return ' '.join(path.read_text(encoding='utf-8').split())


def utterance(speaker: str, dia_id: str, text: str, **image) -> dict:
    return {'speaker': speaker, 'dia_id': dia_id, 'text': text, **image}


def locomo_question(text: str, category: int, evidence: list[str]) -> dict:
    if category == 5:
        return {'question': text, 'adversarial_answer': 'never said', 'evidence': evidence, 'category': category}
    return {'question': text, 'answer': f'gold: {text}', 'evidence': evidence, 'category': category}


def locomo_sample() -> list[dict]:
    """Two conversations in LoCoMo's shape, with every awkward form the real file has."""
    first = {
        'speaker_a': 'Ann', 'speaker_b': 'Ben',
        'session_1_date_time': '9:00 am on 1 May, 2023',
        'session_1': [utterance('Ann', 'D1:1', 'Hi Ben, I adopted a cat.'),
                      utterance('Ben', 'D1:2', 'Nice! What is her name?', img_url=['https://example.org/cat.jpg'],
                                blip_caption='a photo of a cat on a sofa', query='cat sofa'),
                      utterance('Ann', 'D1:3', 'Her name is Miso.')],  # ends on Ann: the turn has no reply
        'session_2_date_time': '2:00 pm on 3 May, 2023',
        'session_2': [utterance('Ben', 'D2:1', 'How is Miso settling in?'),  # Ben opens the session
                      utterance('Ann', 'D2:2', 'She sleeps all day.'),
                      utterance('Ben', 'D2:3', 'Cats do that.')],
        'session_3_date_time': '1:00 pm on 9 May, 2023',  # a date with no session, as in conv-26
    }
    second = {
        'speaker_a': 'Cy', 'speaker_b': 'Di',
        'session_1_date_time': '8:15 pm on 2 June, 2023',
        'session_1': [utterance('Cy', 'D1:1', 'I ran my first marathon on Sunday.'),
                      utterance('Di', 'D1:2', 'Congratulations! How long did it take?'),
                      utterance('Cy', 'D1:3', 'Four hours and ten minutes.'),
                      utterance('Di', 'D1:4', 'That is a great time.')],
    }
    return [
        {'sample_id': 'one', 'conversation': first, 'event_summary': {}, 'observation': {}, 'session_summary': {},
         'qa': [locomo_question('What is the cat called?', 4, ['D1:3']),
                locomo_question('When did Ann adopt the cat?', 2, ['D1:1; D2:2']),
                locomo_question('What does the cat do?', 1, ['D2:1 D1:2 D2:3']),
                locomo_question('What is the dog called?', 5, ['D1:1']),
                locomo_question('How does the cat spend its days?', 3, ['D:2:2']),
                locomo_question('What pet did Ann adopt?', 4, ['D', 'D1:1']),
                locomo_question('Where does the cat sleep?', 4, ['D9:9']),
                locomo_question('Who is Ann?', 4, []),
                locomo_question('When did Ben ask about Miso?', 2, ['D2:01']),
                locomo_question('What colour is the cat?', 4, ['D']),
                locomo_question('What breed is the cat?', 4, ['see D1:1'])]},
        {'sample_id': 'two', 'conversation': second, 'event_summary': {}, 'observation': {}, 'session_summary': {},
         'qa': [locomo_question('How long did the marathon take?', 4, ['D1:3', 'D1:3'])]},
    ]


def convert(folder: str, data, *options: str) -> tuple[Path, subprocess.CompletedProcess]:
    """Write `data` (JSON, or text as it is) and run locomo_cases.py on it; returns the output path and the run."""
    source, output = Path(folder) / 'locomo10.json', Path(folder) / 'locomo-cases.json'
    source.write_text(data if isinstance(data, str) else json.dumps(data), encoding='utf-8')
    result = subprocess.run([sys.executable, 'locomo_cases.py', str(source), '--output', str(output), *options],
                            cwd=HERE, capture_output=True, text=True, timeout=120)
    return output, result
