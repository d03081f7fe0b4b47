"""The pinned answer model: its pin (answer-model.json), the request sent for an answer, and a recording's shape.

    .venv/bin/python answer_model.py    # does the server hold the pinned build? sends no chat request

Every file is checked field by field, each fault one LabError line. The check command asks the server through
ollama_client.py; it writes nothing and pulls nothing.
"""
import argparse
import hashlib
import json
from pathlib import Path
import re

import common
from common import LabError
from lab_files import read_json

MODEL_PATH = common.HERE / 'answer-model.json'
# The fields answer-model.json must have; a recording copies them into its model block.
MODEL_FIELDS = ('checked_on', 'publisher_model', 'license', 'ollama_tag', 'ollama_digest', 'ollama_version',
                'quantization', 'parameters', 'options', 'think', 'trials', 'seeds')
SAMPLING_OPTIONS = ('temperature', 'top_k', 'top_p')
HEX64 = re.compile(r'[0-9a-f]{64}')  # a sha256 as Ollama and hashlib print it
# What a recording's model block adds to answer-model.json's from the server; no other field may differ.
SERVER_REPORTED = ('ollama_version', 'loaded_context_length')
COUNT = (lambda v: type(v) is int and v >= 0, 'a non-negative integer')  # a token count's check
# Each recorded answer's fields and what each must be: answer()'s reply (its tool_calls is always a list), then
# what the lab knew about the request.
ANSWER_CHECKS = {
    'seed': (lambda v: type(v) is int, 'an integer'), 'answer': (lambda v: isinstance(v, str), 'a string'),
    'tool_calls': (lambda v: isinstance(v, list) and all(isinstance(c, dict) for c in v), 'a list of objects'),
    'done_reason': (lambda v: v is None or isinstance(v, str), 'a string or null'),
    'prompt_tokens': COUNT, 'answer_tokens': COUNT,
    'request_sha256': (lambda v: isinstance(v, str) and HEX64.fullmatch(v) is not None, '64 lowercase hex digits'),
    'input_tokens': COUNT}
ANSWER_FIELDS = list(ANSWER_CHECKS)
# Ollama versions whose prompt_eval_count leaves out prompt tokens served from the cache, so the second and later
# seeds read as shorter prompts: up to 0.1.48 the runner subtracted cached tokens (fixed by #5371 in 0.1.49), and
# 0.30.0 with its release candidates counted only what llama-server newly processed (fixed by #16428 in 0.30.1).
CACHE_UNCOUNTED_BEFORE = (0, 1, 49)
CACHE_UNCOUNTED_RELEASES = {(0, 30, 0)}


def load_model(path: Path = MODEL_PATH) -> dict:
    """answer-model.json, or a pin file like it, checked field by field."""
    return check_model(path, read_json(path, 'answer model pin', 'restore it from version control, or '
                                              'write it again with `answer_check.py pin TAG --output FILE`'))


def check_model(path: Path, model) -> dict:
    if not isinstance(model, dict) or set(model) != set(MODEL_FIELDS):
        raise LabError(f'{path}: fields must be exactly {sorted(MODEL_FIELDS)}')
    for field in ('ollama_tag', 'ollama_version'):
        if not isinstance(model[field], str) or not model[field]:
            raise LabError(f'{path}: {field} must be a non-empty string')
    if not isinstance(model['ollama_digest'], str) or not HEX64.fullmatch(model['ollama_digest']):
        raise LabError(f'{path}: ollama_digest must be 64 lowercase hex digits, as /api/tags reports them')
    if not isinstance(model['options'], dict) or set(model['options']) != set(SAMPLING_OPTIONS):
        raise LabError(f'{path}: options must be exactly {sorted(SAMPLING_OPTIONS)}')
    for option, value in model['options'].items():
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            raise LabError(f'{path}: options.{option} must be a number')
    trials, seeds = model['trials'], model['seeds']
    if type(trials) is not int or trials < 1:
        raise LabError(f'{path}: trials must be a positive integer')
    if (not isinstance(seeds, list) or not all(type(s) is int for s in seeds)
            or len(set(seeds)) != len(seeds) or len(seeds) != trials):
        raise LabError(f'{path}: seeds must be {trials} distinct integers, one per trial')
    if model['think'] is not False:
        raise LabError(f'{path}: think must be false; the recording asks for answers without thinking')
    return model


def excerpt(value) -> str:
    """A value as JSON, cut short, for an error message."""
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= 40 else text[:37] + '...'


def check_answer(where: str, answer, advice: str) -> None:
    if not isinstance(answer, dict):
        raise LabError(f'{where}: must be an object with fields {ANSWER_FIELDS}, got {excerpt(answer)}; {advice}')
    missing, extra = [field for field in ANSWER_FIELDS if field not in answer], sorted(set(answer) - set(ANSWER_FIELDS))
    if missing or extra:
        raise LabError(f'{where}: fields must be exactly {ANSWER_FIELDS}; missing {missing}, unexpected {extra}; '
                       f'{advice}')
    for field, (valid, wanted) in ANSWER_CHECKS.items():
        if not valid(answer[field]):
            raise LabError(f'{where}.{field}: must be {wanted}, got {excerpt(answer[field])}; {advice}')


def load_recording(path: Path, strategies, case_ids: list[str], what: str, advice: str) -> dict:
    """{"model": a model block, "answers": {strategy: {case_id: [answer, ...]}}}, checked field by field."""
    recorded = read_json(path, what, advice)
    if not isinstance(recorded, dict) or set(recorded) != {'model', 'answers'}:
        raise LabError(f'{path}: expected exactly "model" and "answers"; {advice}')
    model, answers = recorded['model'], recorded['answers']
    if not isinstance(model, dict) or not isinstance(answers, dict):
        raise LabError(f'{path}: "model" and "answers" must be objects; {advice}')
    if not isinstance(model.get('ollama_version'), str) or not model['ollama_version']:
        raise LabError(f'{path}: model.ollama_version must name the server that answered; {advice}')
    length = model.get('loaded_context_length')
    if 'loaded_context_length' in model and not (type(length) is int and length > 0):
        raise LabError(f'{path}: model.loaded_context_length must be a positive integer, got {excerpt(length)}; '
                       f'{advice}')
    for strategy, by_case in answers.items():
        if strategy not in strategies:
            raise LabError(f'{path}: answers.{strategy}: not a rule of this run ({", ".join(strategies)}); {advice}')
        if not isinstance(by_case, dict):
            raise LabError(f'{path}: answers.{strategy} must map case ids to answer lists; {advice}')
        for case_id, listed in by_case.items():
            where = f'{path}: answers.{strategy}.{case_id}'
            if case_id not in case_ids:
                raise LabError(f'{where}: not one of the chosen case ids ({", ".join(case_ids)}); {advice}')
            if not isinstance(listed, list) or not listed:
                raise LabError(f'{where} must be a non-empty list, got {excerpt(listed)}; {advice}')
            for index, answer in enumerate(listed):
                check_answer(f'{where}[{index}]', answer, advice)
    return recorded


def check_pinned(recorded: dict, pinned: dict, result_path: Path, model_path: Path, advice: str) -> None:
    """Refuse a recording whose model block is not the pinned build; only what the server reports may differ."""
    def as_json(model: dict, field: str) -> str | None:
        return json.dumps(model[field], sort_keys=True) if field in model else None  # 1 != 1.0, false != 0
    differ = [field for field in sorted(set(recorded['model']) | set(pinned))
              if field not in SERVER_REPORTED and as_json(recorded['model'], field) != as_json(pinned, field)]
    if differ:
        raise LabError(f'{result_path}: recorded with a build other than the one {model_path} pins '
                       f'({", ".join(differ)} differ), so its answers are not graded; {advice}')


def undercounts_cached_prompt(version: str) -> bool:
    """Whether this Ollama version leaves cached prompt tokens out of prompt_eval_count: '0.30.0-rc5' -> True."""
    match = re.match(r'(\d+)\.(\d+)\.(\d+)', version)
    release = tuple(int(part) for part in match.groups()) if match else (0, 0, 0)
    # A build from source without a version says 0.0.0, which tells nothing about its accounting.
    return release in CACHE_UNCOUNTED_RELEASES or (0, 0, 0) < release < CACHE_UNCOUNTED_BEFORE


def chat_body(model: dict, messages: list[dict], num_ctx: int, num_predict: int, seed: int) -> dict:
    """The /api/chat body for one answer: pinned tag and sampling, one seed, the case's budget, and no tools."""
    # Ollama streams unless told not to, and turns thinking on for Gemma 4 by default.
    return {'model': model['ollama_tag'], 'messages': messages, 'stream': False, 'think': model['think'],
            'options': {**model['options'], 'seed': seed, 'num_ctx': num_ctx, 'num_predict': num_predict}}


def encode(body: dict) -> bytes:
    """The one serialisation of a body: the bytes sent and the bytes hashed."""
    return json.dumps(body, sort_keys=True, ensure_ascii=False, separators=(',', ':')).encode('utf-8')


def request_sha256(body: dict) -> str:
    return hashlib.sha256(encode(body)).hexdigest()


def main(argv: list[str]) -> int:
    argparse.ArgumentParser(prog='answer_model.py', description='Check that the Ollama server at OLLAMA_HOST '
                            '(default 127.0.0.1:11434) holds the pinned build of answer-model.json. Sends no chat '
                            'request and writes nothing.').parse_args(argv)
    from ollama_client import OllamaClient  # here: the client imports this module's recording format
    client = OllamaClient(load_model())
    print(f'Ollama {client.verify()} at {client.host} has {client.model["ollama_tag"]} '
          f'with the pinned digest {client.model["ollama_digest"]}')
    return 0


if __name__ == '__main__':
    common.run(main)