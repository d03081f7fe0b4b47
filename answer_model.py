"""The pinned answer model: its pin, the shape of a recording of its answers, and the lab's Ollama client.

    .venv/bin/python answer_model.py    # does the server hold the pinned build? sends no chat request

Before its first chat the client checks that the server is Ollama and holds the pinned digest; a reply must name
the pinned tag and hold what a recording accepts, within a deadline for the whole reply. Each failure is one
AnswerModelError line naming the host. It writes nothing, pulls nothing, and uses no stream, retry or proxy.
"""
import argparse
from datetime import date
import hashlib
import ipaddress
import json
import os
from pathlib import Path
import re
import shutil
import threading
from urllib.parse import urlsplit

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
WIRE_NAMES = {'answer': 'message.content', 'tool_calls': 'message.tool_calls', 'done_reason': 'done_reason',
              'prompt_tokens': 'prompt_eval_count', 'answer_tokens': 'eval_count'}  # each field in an /api/chat reply
DEFAULT_HOST = 'http://127.0.0.1:11434'  # the address ollama serve listens on by default
DEFAULT_PORT = 11434
SCHEME_PORTS = {'http': 80, 'https': 443}  # an OLLAMA_HOST with a scheme and no port means the scheme's port
LOOPBACK = {4: '127.0.0.1', 6: '::1'}  # what an unspecified bind address (0.0.0.0, ::) means to a client
VERSION_PATH = '/api/version'  # every Ollama server answers it with {"version": "..."}; others are not Ollama
CHAT_PATH = '/api/chat'  # its 404 with an error means the tag is not pulled
# Each is a deadline for the whole reply, not for each read, so a server that trickles is stopped too.
CHECK_TIMEOUT = 10.0  # seconds; /api/version, /api/tags, /api/show and /api/ps answer at once on a live server
CHAT_TIMEOUT = 600.0  # seconds; the first chat loads the weights, which can take minutes on a CPU
BODY_QUOTED = 80  # characters of an unexpected reply body quoted in a message
DETAILS = {'publisher_model': 'family', 'quantization': 'quantization_level', 'parameters': 'parameter_size'}  # pin
UNSTATED = 'not stated by the server'  # a pin's field where /api/show says nothing
# Ollama versions whose prompt_eval_count leaves out prompt tokens served from the cache, so the second and later
# seeds read as shorter prompts: up to 0.1.48 the runner subtracted cached tokens (fixed by #5371 in 0.1.49), and
# 0.30.0 with its release candidates counted only what llama-server newly processed (fixed by #16428 in 0.30.1).
CACHE_UNCOUNTED_BEFORE = (0, 1, 49)
CACHE_UNCOUNTED_RELEASES = {(0, 30, 0)}


class AnswerModelError(LabError):
    """The server, or what it holds or answered, is not what the pinned model needs; the message says what to do."""


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


def shown(value) -> str:
    """A value as JSON, cut short, for an error message."""
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= 40 else text[:37] + '...'


def check_answer(where: str, answer, advice: str) -> None:
    if not isinstance(answer, dict):
        raise LabError(f'{where}: must be an object with fields {ANSWER_FIELDS}, got {shown(answer)}; {advice}')
    missing, extra = [field for field in ANSWER_FIELDS if field not in answer], sorted(set(answer) - set(ANSWER_FIELDS))
    if missing or extra:
        raise LabError(f'{where}: fields must be exactly {ANSWER_FIELDS}; missing {missing}, unexpected {extra}; '
                       f'{advice}')
    for field, (valid, wanted) in ANSWER_CHECKS.items():
        if not valid(answer[field]):
            raise LabError(f'{where}.{field}: must be {wanted}, got {shown(answer[field])}; {advice}')


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
        raise LabError(f'{path}: model.loaded_context_length must be a positive integer, got {shown(length)}; {advice}')
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
                raise LabError(f'{where} must be a non-empty list, got {shown(listed)}; {advice}')
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


def ip_address(text: str):
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return None


def ollama_host(value: str | None) -> str:
    """OLLAMA_HOST's base URL, read as the official ollama Python client reads it, and 0.0.0.0 or :: as loopback:
    ':56789' -> 'http://127.0.0.1:56789'; '0.0.0.0' -> 'http://127.0.0.1:11434'."""
    value = value or ''
    scheme, _, hostport = value.partition('://')
    port = SCHEME_PORTS.get(scheme, DEFAULT_PORT)
    if not hostport:
        scheme, hostport, port = 'http', value, DEFAULT_PORT
    address, slash, path = hostport.partition('/')
    if (bare := ip_address(address)) is not None and bare.version == 6:  # such as ::, as the server accepts it
        hostport = f'[{address}]{slash}{path}'
    try:
        parts = urlsplit(f'{scheme}://{hostport}')
        port = parts.port or port
    except ValueError as error:  # a port that is not a number, or a bracket left open
        raise AnswerModelError(f'OLLAMA_HOST={value!r} cannot be read as an address ({error}): '
                               f'set it like {DEFAULT_HOST}') from None
    host = parts.hostname or '127.0.0.1'
    if (ip := ip_address(host)) is not None:
        host = LOOPBACK[ip.version] if ip.is_unspecified else host
        host = f'[{host}]' if ip.version == 6 else host  # urlsplit drops the brackets IPv6 needs in a URL
    path = parts.path.strip('/')
    return f'{scheme}://{host}:{port}' + (f'/{path}' if path else '')


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


def reply_detail(response, payload: dict | None) -> str:
    """What a reply said, for a message: its error, else its body quoted and cut short, or 'an empty body'."""
    if payload is not None and isinstance(payload.get('error'), str):
        return payload['error']
    text = ' '.join(response.text.split())
    shortened = text if len(text) <= BODY_QUOTED else text[:BODY_QUOTED] + '...'
    return f'the body "{shortened}"' if text else 'an empty body'


def find_tag(listed, tag: str) -> dict | None:
    """The entry for tag in a model list of /api/tags or /api/ps, which name it under name or model."""
    entries = listed if isinstance(listed, list) else []
    return next((m for m in entries if isinstance(m, dict) and tag in (m.get('name'), m.get('model'))), None)


class AnswerModel:
    """A client for the Ollama server at OLLAMA_HOST that talks only to the pinned build."""

    def __init__(self, model: dict):
        import requests  # here, not at the top: a missing package is then common.run's one line
        self.model, self.host = model, ollama_host(os.environ.get('OLLAMA_HOST'))
        self.session = requests.Session()
        self.session.trust_env = False  # the server is local: a proxy from the environment must not carry requests
        self.version: str | None = None  # set once verify() has passed

    def verify(self) -> str:
        """Check the server and the pinned digest once; return the server's version."""
        if self.version is None:
            version, digest = self.server_version(), self.tag_digest()
            tag, expected = self.model['ollama_tag'], self.model['ollama_digest']
            if digest != expected:
                raise AnswerModelError(
                    f'Ollama at {self.host} has {tag} with digest {digest}, but the pinned build is {expected}: the '
                    f'tag has moved (`ollama pull {tag}` fetches whatever it points to today), and answers from a new '
                    'build need a deliberate change of the pin file and a new recording; no chat request was sent')
            self.version = version
        return self.version

    def server_version(self) -> str:
        response, payload = self._send('GET', VERSION_PATH, None, CHECK_TIMEOUT)
        version = payload.get('version') if payload is not None else None
        if response.status_code != 200 or not isinstance(version, str) or not version:
            raise AnswerModelError(
                f'the server at {self.host} is not Ollama: it answered {VERSION_PATH} with HTTP '
                f'{response.status_code} ({reply_detail(response, payload)}), where Ollama gives its version; '
                f'set OLLAMA_HOST to the address `ollama serve` listens on (by default {DEFAULT_HOST})')
        return version

    def tag_digest(self) -> str | None:
        """The digest /api/tags gives for the tag; a tag the server lacks is one AnswerModelError."""
        tag, expected = self.model['ollama_tag'], self.model.get('ollama_digest')
        entry = find_tag(self._call('GET', '/api/tags', None, CHECK_TIMEOUT).get('models'), tag)
        if entry is None:
            raise AnswerModelError(f'Ollama at {self.host} has no {tag}: run `ollama pull {tag}`' + (
                f', then check that the ID column of `ollama list` starts with {expected[:12]}, the pinned build'
                if expected else ''))
        return entry.get('digest')

    def answer(self, messages: list[dict], num_ctx: int, num_predict: int, seed: int) -> dict:
        """One answer from the pinned build, checked as a recording checks it: message.content, not thinking."""
        self.verify()
        body = chat_body(self.model, messages, num_ctx, num_predict, seed)
        payload = self._call('POST', CHAT_PATH, encode(body), CHAT_TIMEOUT)
        if payload.get('done') is not True:
            # Even with stream false the server answers 200 with what it has when generation ends
            # without a final response (it does so after one token repeats many times): no counts.
            raise AnswerModelError(f'Ollama at {self.host} stopped before finishing the reply (done is '
                                   f'{json.dumps(payload.get("done"))}), so nothing from it is kept: run again, '
                                   'and read the server log if it happens again')
        if payload.get('model') != body['model']:  # Ollama names the tag it was asked for in every reply
            raise AnswerModelError(f'Ollama at {self.host} answered for the model {shown(payload.get("model"))}, '
                                   f'not the pinned {body["model"]}, so nothing from it is kept: check what serves '
                                   'at OLLAMA_HOST')
        message = payload['message'] if isinstance(payload.get('message'), dict) else {}
        reply = {'seed': seed, 'answer': message.get('content'), 'tool_calls': message.get('tool_calls') or [],
                 'done_reason': payload.get('done_reason'),  # Ollama leaves both counts out when they are zero
                 'prompt_tokens': payload.get('prompt_eval_count', 0), 'answer_tokens': payload.get('eval_count', 0)}
        for field, wire in WIRE_NAMES.items():
            if not ANSWER_CHECKS[field][0](reply[field]):
                raise AnswerModelError(f'Ollama at {self.host} answered {CHAT_PATH} with {wire} {shown(reply[field])}, '
                                       f'where an answer needs {ANSWER_CHECKS[field][1]}, so nothing from it is kept: '
                                       'upgrade Ollama or read its log')
        return reply

    def pin(self, options: dict, seeds: list[int]) -> dict:
        """A pin for the client's tag as the server describes it now (/api/show), with these options and seeds."""
        version, digest, tag = self.server_version(), self.tag_digest(), self.model['ollama_tag']
        about = self._call('POST', '/api/show', encode({'model': tag}), CHECK_TIMEOUT)
        details = about['details'] if isinstance(about.get('details'), dict) else {}
        text = about['license'] if isinstance(about.get('license'), str) and about['license'].strip() else UNSTATED
        pinned = {'checked_on': date.today().isoformat(), 'license': text.strip().splitlines()[0][:BODY_QUOTED],
                  **{field: str(details.get(name) or UNSTATED)[:BODY_QUOTED] for field, name in DETAILS.items()},
                  'ollama_tag': tag, 'ollama_digest': digest, 'ollama_version': version, 'options': options,
                  'think': False, 'trials': len(seeds), 'seeds': seeds}
        return {field: pinned[field] for field in MODEL_FIELDS}  # in answer-model.json's order

    def loaded_context_length(self) -> int | None:
        """The context /api/ps says the tag was loaded with; None where it says none (0, or before 0.9.7)."""
        entry = find_tag(self._call('GET', '/api/ps', None, CHECK_TIMEOUT).get('models'), self.model['ollama_tag'])
        length = entry.get('context_length') if entry is not None else None
        return length if type(length) is int and length > 0 else None

    def _send(self, method: str, path: str, data: bytes | None, timeout: float) -> tuple:
        """(response, its body if a JSON object, else None) within timeout seconds in all, or one AnswerModelError."""
        import requests
        from urllib3.exceptions import ProtocolError
        done: dict = {}

        def send() -> None:  # in a thread of its own, so that a reply trickling in cannot outlast the deadline
            try:
                done['response'] = self.session.request(method, self.host + path, data=data, timeout=timeout,
                                                        headers={'Content-Type': 'application/json'} if data else {})
            except BaseException as error:  # raised below, in the caller's thread
                done['error'] = error
        worker = threading.Thread(target=send, daemon=True)
        worker.start()
        worker.join(timeout)
        error = requests.Timeout() if worker.is_alive() else done.get('error')
        cause = error.args[0] if isinstance(error, requests.RequestException) and error.args else None
        if isinstance(error, requests.Timeout):
            raise AnswerModelError(f'Ollama at {self.host} did not answer {path} within {timeout:g} s: '
                                   'check that the server is not stuck or overloaded, then run again')
        if isinstance(cause, ProtocolError):  # it accepted the connection, then closed it before the reply ended
            raise AnswerModelError(f'Ollama at {self.host} broke off its reply to {path} ({cause.args[0]}): '
                                   'run again, and read the server log if it happens again')
        if isinstance(error, requests.ConnectionError):
            # Without the ollama command there is nothing to start: say so before the start advice.
            install = ('' if shutil.which('ollama') else
                       ', and no `ollama` command is on PATH: install Ollama (from its download page), then')
            raise AnswerModelError(f'no Ollama server answers at {self.host}{install or ":"} start it with '
                                   '`ollama serve`, or set OLLAMA_HOST to the address it listens on')
        if isinstance(error, requests.RequestException):
            raise AnswerModelError(f'cannot send a request to {self.host} ({error}): '
                                   f'set OLLAMA_HOST like {DEFAULT_HOST}')
        if error is not None:
            raise error
        try:
            payload = done['response'].json()
        except ValueError:  # not JSON at all
            payload = None
        return done['response'], payload if isinstance(payload, dict) else None

    def _call(self, method: str, path: str, data: bytes | None, timeout: float) -> dict:
        """One request whose answer must be a JSON object; every way it can fail is one AnswerModelError."""
        response, payload = self._send(method, path, data, timeout)
        error = payload.get('error') if payload is not None else None
        detail, status = reply_detail(response, payload), response.status_code
        if status == 404 and path == CHAT_PATH and error is not None:
            raise AnswerModelError(f'Ollama at {self.host} answered 404 to {path} ({error}): run `ollama pull '
                                   f'{self.model["ollama_tag"]}` and check that the ID column of `ollama list` '
                                   f'starts with {self.model["ollama_digest"][:12]}')
        if status == 503:
            raise AnswerModelError(f'Ollama at {self.host} is busy (503: {detail}): '
                                   'wait for its other requests to finish, then run again')
        if status == 400:
            raise AnswerModelError(f'Ollama at {self.host} rejected {path} as a bad request ({detail}): '
                                   f'upgrade Ollama; the pinned recording used {self.model["ollama_version"]}')
        if status != 200 or error is not None:
            raise AnswerModelError(f'Ollama at {self.host} answered HTTP {status} to {path} '
                                   f'({detail}): read the server log, then run again')
        if payload is None:
            raise AnswerModelError(f'{self.host}{path} did not answer with a JSON object: '
                                   'check that OLLAMA_HOST points at an Ollama server')
        return payload


def main(argv: list[str]) -> int:
    argparse.ArgumentParser(prog='answer_model.py', description='Check that the Ollama server at OLLAMA_HOST '
                            '(default 127.0.0.1:11434) holds the pinned build of answer-model.json. Sends no chat '
                            'request and writes nothing.').parse_args(argv)
    client = AnswerModel(load_model())
    print(f'Ollama {client.verify()} at {client.host} has {client.model["ollama_tag"]} '
          f'with the pinned digest {client.model["ollama_digest"]}')
    return 0


if __name__ == '__main__':
    common.run(main)
