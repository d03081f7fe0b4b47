"""Ask the pinned Gemma 4 E2B build for one answer through a local Ollama server.

    .venv/bin/python answer_model.py    # checks the server and the pinned build; sends no chat request

answer-model.json pins the build: the Ollama tag gemma4:e2b, the sha256 digest
of its manifest, and the sampling options. AnswerModel checks, before its first
chat request, that the server answers /api/version and that /api/tags lists the
tag with exactly the pinned digest. A server with another build is refused, so
no answer can come from weights other than the pinned ones.

The server address comes from OLLAMA_HOST, read as the official ollama Python
client reads it (default http://127.0.0.1:11434), except that an unspecified
bind address (0.0.0.0, ::), which the server's own FAQ suggests setting, means
this machine. Every failure a user can cause or fix, such as a server that is
down (or Ollama not installed), a server at that address that is not Ollama
(it does not answer /api/version with a version), a model that is not pulled, a busy queue, a timeout or a reply the
server did not finish, raises AnswerModelError with one line naming the host
and what to do. A reply counts as an answer only when the server says it is
done; its done_reason ("stop", or "length" when the answer hit num_predict) is
kept. num_ctx only decides which old messages the server would drop to fit;
the server loads the model with a context of its own choosing (at least 2048
tokens for a vision-capable model such as gemma4:e2b), which
loaded_context_length() reads back from /api/ps.

It writes nothing. It does not pull or delete models, does not stream, does
not retry, and does not use a proxy: the server is meant to be on this machine.
Each request body is serialised once by encode(), and exactly those bytes are
sent, so answer_check.py can record the sha256 of the request the model saw.

Exit status: 0 when the server holds the pinned build; 2 with one line on
stderr for anything the user can fix (a bad answer-model.json, no server, the
wrong digest) or for a usage error; 130 on Ctrl-C.
"""
import argparse
import hashlib
import ipaddress
import json
import os
from pathlib import Path
import re
import shutil
import sys
from urllib.parse import urlsplit

import cli

cli.require_packages(__name__)  # one clear line, not a traceback, if a locked package is missing

import requests

from lab_files import read_json

HERE = Path(__file__).parent
MODEL_PATH = HERE / 'answer-model.json'

DEFAULT_HOST = 'http://127.0.0.1:11434'  # the address ollama serve listens on by default
DEFAULT_PORT = 11434
SCHEME_PORTS = {'http': 80, 'https': 443}  # an OLLAMA_HOST with a scheme and no port means the scheme's port
# Ollama versions whose prompt_eval_count leaves out prompt tokens served from the cache, so every repeated
# request (the second and later seeds) reads as a shorter prompt than it was. From ollama/ollama's history:
# up to 0.1.48 the runner subtracted the cached tokens (fixed by #5371, first released in 0.1.49), and 0.30.0,
# with its release candidates, counted only the tokens llama-server newly processed (fixed by #16428 in 0.30.1).
CACHE_UNCOUNTED_BEFORE = (0, 1, 49)
CACHE_UNCOUNTED_RELEASES = {(0, 30, 0)}
VERSION_PATH = '/api/version'  # every Ollama server answers it with {"version": "..."}; others are not Ollama
CHAT_PATH = '/api/chat'  # its 404 with an error means the tag is not pulled
BODY_QUOTED = 80  # characters of an unexpected reply body quoted in a message
CHECK_TIMEOUT = 10.0   # seconds; /api/version and /api/tags answer at once on a live server
CHAT_TIMEOUT = 600.0   # seconds; the first chat loads the weights, which can take minutes on a CPU

# The fields answer-model.json must have; a recording copies them into its model block.
MODEL_FIELDS = ('checked_on', 'publisher_model', 'license', 'ollama_tag', 'ollama_digest', 'ollama_version',
                'quantization', 'parameters', 'options', 'think', 'trials', 'seeds')
SAMPLING_OPTIONS = ('temperature', 'top_k', 'top_p')


class AnswerModelError(Exception):
    """A problem the user can fix: the message says where and what to do."""


class PinError(AnswerModelError):
    """The server does not hold the pinned build under the pinned tag."""


HEX64 = re.compile(r'[0-9a-f]{64}')  # a sha256 as Ollama and hashlib print it


def is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def load_model(path: Path = MODEL_PATH) -> dict:
    """Read and check the pinned model block."""
    model = read_json(path, 'answer model pin', AnswerModelError,
                          'it pins the answer model and ships with the lab: restore it from version control')
    if not isinstance(model, dict) or set(model) != set(MODEL_FIELDS):
        raise AnswerModelError(f'{path}: fields must be exactly {sorted(MODEL_FIELDS)}')
    for field in ('ollama_tag', 'ollama_version'):
        if not isinstance(model[field], str) or not model[field]:
            raise AnswerModelError(f'{path}: {field} must be a non-empty string')
    if not isinstance(model['ollama_digest'], str) or not HEX64.fullmatch(model['ollama_digest']):
        raise AnswerModelError(f'{path}: ollama_digest must be 64 lowercase hex digits, as /api/tags reports them')
    if not isinstance(model['options'], dict) or set(model['options']) != set(SAMPLING_OPTIONS):
        raise AnswerModelError(f'{path}: options must be exactly {sorted(SAMPLING_OPTIONS)}')
    for option, value in model['options'].items():
        if not is_number(value):
            raise AnswerModelError(f'{path}: options.{option} must be a number')
    trials, seeds = model['trials'], model['seeds']
    if type(trials) is not int or trials < 1:
        raise AnswerModelError(f'{path}: trials must be a positive integer')
    if (not isinstance(seeds, list) or not all(type(s) is int for s in seeds)
            or len(set(seeds)) != len(seeds) or len(seeds) != trials):
        raise AnswerModelError(f'{path}: seeds must be {trials} distinct integers, one per trial')
    if model['think'] is not False:
        raise AnswerModelError(f'{path}: think must be false; the recording asks for answers without thinking')
    return model


def ollama_host(value: str | None) -> str:
    """The base URL for OLLAMA_HOST's value, read as the official ollama Python client reads it.

    ':56789' -> 'http://127.0.0.1:56789'; 'https://example.com' -> 'https://example.com:443';
    '0.0.0.0:8080' -> 'http://127.0.0.1:8080' (an unspecified bind address means this machine).
    """
    value = value or ''
    scheme, _, hostport = value.partition('://')
    port = SCHEME_PORTS.get(scheme, DEFAULT_PORT)
    if not hostport:
        scheme, hostport, port = 'http', value, DEFAULT_PORT
    address, slash, path = hostport.partition('/')
    if is_ip(address) and ':' in address:  # a bare IPv6 address such as ::, as the server itself accepts it
        hostport = f'[{address}]{slash}{path}'
    try:
        parts = urlsplit(f'{scheme}://{hostport}')
        port = parts.port or port
    except ValueError as error:  # a port that is not a number, or a bracket left open
        raise AnswerModelError(f'OLLAMA_HOST={value!r} cannot be read as an address ({error}): '
                               f'set it like {DEFAULT_HOST}') from None
    host = parts.hostname or '127.0.0.1'
    if is_ip(host) and ipaddress.ip_address(host).is_unspecified:
        host = '127.0.0.1' if ipaddress.ip_address(host).version == 4 else '::1'
    if is_ip(host) and ':' in host:
        host = f'[{host}]'  # urlsplit drops the brackets an IPv6 address needs in a URL
    path = parts.path.strip('/')
    return f'{scheme}://{host}:{port}' + (f'/{path}' if path else '')


def is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


def undercounts_cached_prompt(version: str) -> bool:
    """Whether this Ollama version leaves prompt tokens served from its cache out of prompt_eval_count.

    '0.30.0' -> True; '0.30.0-rc5' -> True; '0.1.48' -> True; '0.32.14' -> False; '0.0.0' -> False.
    """
    match = re.match(r'(\d+)\.(\d+)\.(\d+)', version)
    if match is None:
        return False
    release = tuple(int(part) for part in match.groups())
    # A build from source without a version says 0.0.0, which tells nothing about its accounting.
    return release in CACHE_UNCOUNTED_RELEASES or (0, 0, 0) < release < CACHE_UNCOUNTED_BEFORE


def chat_body(model: dict, messages: list[dict], tools: list[dict], num_ctx: int, num_predict: int,
              seed: int) -> dict:
    """The /api/chat body for one answer: pinned tag and sampling, one seed, the case's budget."""
    body = {
        'model': model['ollama_tag'],
        'messages': messages,
        # Ollama streams unless told not to, and turns thinking on for Gemma 4 by default.
        'stream': False,
        'think': model['think'],
        'options': {**model['options'], 'seed': seed, 'num_ctx': num_ctx, 'num_predict': num_predict},
    }
    if tools:
        body['tools'] = tools
    return body


def encode(body: dict) -> bytes:
    """The one serialisation of a body: the bytes sent and the bytes hashed."""
    return json.dumps(body, sort_keys=True, ensure_ascii=False, separators=(',', ':')).encode('utf-8')


def request_sha256(body: dict) -> str:
    return hashlib.sha256(encode(body)).hexdigest()


def parse_answer(payload: dict, seed: int) -> dict:
    """The parts of a finished /api/chat response that a recording keeps.

    Only message.content is the answer; a thinking field, should the server send one, is not kept.
    """
    message = payload.get('message')
    if not isinstance(message, dict) or not isinstance(message.get('content'), str):
        raise ValueError('the response has no message.content')
    return {
        'seed': seed,
        'answer': message['content'],
        'tool_calls': message.get('tool_calls') or [],
        'done_reason': payload.get('done_reason'),
        # Ollama leaves both counts out when they are zero.
        'prompt_tokens': payload.get('prompt_eval_count', 0),
        'answer_tokens': payload.get('eval_count', 0),
    }


def json_object(response: requests.Response) -> dict | None:
    """The reply's body as a JSON object, or None when it is anything else."""
    try:
        payload = response.json()
    except ValueError:
        return None
    return payload if isinstance(payload, dict) else None


def reply_detail(response: requests.Response, payload: dict | None) -> str:
    """What a reply said, for a message: its JSON error, else the start of its body.

    {"error": "model not found"} -> 'model not found'; '404 page not found\\n' -> 'the body "404 page not found"';
    '' -> 'an empty body'; {"version": "0.32.14"} -> 'the body "{"version": "0.32.14"}"'
    """
    if payload is not None and isinstance(payload.get('error'), str):
        return payload['error']
    text = ' '.join(response.text.split())
    if not text:
        return 'an empty body'
    return f'the body "{text[:BODY_QUOTED]}' + ('..."' if len(text) > BODY_QUOTED else '"')


class AnswerModel:
    """A client for one Ollama server that talks only to the pinned build."""

    def __init__(self, model: dict | None = None, host: str | None = None,
                 timeout: float = CHAT_TIMEOUT, check_timeout: float = CHECK_TIMEOUT):
        self.model = model if model is not None else load_model()
        self.host = ollama_host(host if host is not None else os.environ.get('OLLAMA_HOST'))
        self.timeout = timeout
        self.check_timeout = check_timeout
        self.session = requests.Session()
        # The server is local: a proxy from the environment must not carry requests elsewhere.
        self.session.trust_env = False
        self.version: str | None = None  # set once verify() has passed

    def verify(self) -> str:
        """Check the server and the pinned digest once; return the server's version."""
        if self.version is not None:
            return self.version
        version = self._server_version()
        tag, expected = self.model['ollama_tag'], self.model['ollama_digest']
        listed = self._call('GET', '/api/tags', None, self.check_timeout).get('models')
        if not isinstance(listed, list):
            raise AnswerModelError(f'{self.host}/api/tags gave no model list: '
                                   'check that OLLAMA_HOST points at an Ollama server')
        entry = next((m for m in listed if isinstance(m, dict) and tag in (m.get('name'), m.get('model'))), None)
        if entry is None:
            raise PinError(f'Ollama at {self.host} has no {tag}: run `ollama pull {tag}`, then check that the ID '
                           f'column of `ollama list` starts with {expected[:12]}, the pinned build')
        if entry.get('digest') != expected:
            raise PinError(f'Ollama at {self.host} has {tag} with digest {entry.get("digest")}, but the pinned build '
                           f'is {expected}: the tag has moved (`ollama pull {tag}` fetches whatever it points to '
                           'today), and answers from a new build need a deliberate change of answer-model.json and '
                           'a new recording; no chat request was sent')
        self.version = version
        return version

    def answer(self, messages: list[dict], tools: list[dict], num_ctx: int, num_predict: int,
               seed: int) -> dict:
        """One answer from the pinned build: {seed, answer, tool_calls, done_reason, prompt_tokens, answer_tokens}."""
        self.verify()
        body = chat_body(self.model, messages, tools, num_ctx, num_predict, seed)
        payload = self._call('POST', CHAT_PATH, encode(body), self.timeout)
        if payload.get('done') is not True:
            # Even with stream false the server answers 200 with what it has when generation ends
            # without a final response (it does so after one token repeats many times): no counts.
            raise AnswerModelError(f'Ollama at {self.host} stopped before finishing the reply (done is '
                                   f'{json.dumps(payload.get("done"))}), so nothing from it is kept: run again, '
                                   'and read the server log if it happens again')
        try:
            return parse_answer(payload, seed)
        except ValueError as error:
            raise AnswerModelError(f'Ollama at {self.host} answered /api/chat oddly ({error}): '
                                   'upgrade Ollama or check its log') from None

    def loaded_context_length(self) -> int | None:
        """The context the server loaded the pinned tag with, from /api/ps; None where it reports none.

        Servers before 0.9.7 have no context_length field, and one that reports 0 knows no value.
        """
        listed = self._call('GET', '/api/ps', None, self.check_timeout).get('models')
        tag = self.model['ollama_tag']
        entry = next((m for m in listed if isinstance(m, dict) and tag in (m.get('name'), m.get('model'))),
                     None) if isinstance(listed, list) else None
        length = entry.get('context_length') if entry is not None else None
        return length if type(length) is int and length > 0 else None

    def _server_version(self) -> str:
        """The version from /api/version; any other answer means the server at the host is not Ollama."""
        response = self._send('GET', VERSION_PATH, None, self.check_timeout)
        payload = json_object(response)
        version = payload.get('version') if payload is not None else None
        if response.status_code != 200 or not isinstance(version, str) or not version:
            raise AnswerModelError(
                f'the server at {self.host} is not Ollama: it answered {VERSION_PATH} with HTTP '
                f'{response.status_code} ({reply_detail(response, payload)}), where Ollama gives its version; '
                f'set OLLAMA_HOST to the address `ollama serve` listens on (by default {DEFAULT_HOST})')
        return version

    def _send(self, method: str, path: str, data: bytes | None, timeout: float) -> requests.Response:
        """One request; a server that cannot be reached becomes one AnswerModelError naming the host."""
        url = self.host + path
        headers = {'Content-Type': 'application/json'} if data is not None else {}
        try:
            response = self.session.request(method, url, data=data, headers=headers, timeout=timeout)
        except requests.Timeout:
            raise AnswerModelError(f'Ollama at {self.host} did not answer {path} within {timeout:g} s: '
                                   'check that the server is not stuck or overloaded, then run again') from None
        except requests.ConnectionError:
            # Without the ollama command there is nothing to start: say so before the start advice.
            install = ('' if shutil.which('ollama') else
                       ', and no `ollama` command is on PATH: install Ollama (from its download page), then')
            raise AnswerModelError(f'no Ollama server answers at {self.host}{install or ":"} start it with '
                                   '`ollama serve`, or set OLLAMA_HOST to the address it listens on') from None
        except requests.RequestException as error:
            raise AnswerModelError(f'cannot send a request to {self.host} ({error}): '
                                   f'set OLLAMA_HOST like {DEFAULT_HOST}') from None
        return response

    def _call(self, method: str, path: str, data: bytes | None, timeout: float) -> dict:
        """One request; every way it can fail becomes one AnswerModelError naming the host."""
        response = self._send(method, path, data, timeout)
        payload = json_object(response)
        error = payload.get('error') if payload is not None else None
        detail = reply_detail(response, payload)
        if response.status_code == 404 and path == CHAT_PATH and error is not None:
            tag = self.model['ollama_tag']
            raise AnswerModelError(f'Ollama at {self.host} answered 404 to {path} ({error}): '
                                   f'run `ollama pull {tag}` and check that the ID column of `ollama list` starts with '
                                   f'{self.model["ollama_digest"][:12]}')
        if response.status_code == 503:
            raise AnswerModelError(f'Ollama at {self.host} is busy (503: {detail}): '
                                   'wait for its other requests to finish, then run again')
        if response.status_code == 400:
            raise AnswerModelError(f'Ollama at {self.host} rejected {path} as a bad request ({detail}): '
                                   f'upgrade Ollama; the pinned recording used {self.model["ollama_version"]}')
        if response.status_code != 200 or error is not None:
            raise AnswerModelError(f'Ollama at {self.host} answered HTTP {response.status_code} to {path} '
                                   f'({detail}): read the server log, then run again')
        if not isinstance(payload, dict):
            raise AnswerModelError(f'{self.host}{path} did not answer with a JSON object: '
                                   'check that OLLAMA_HOST points at an Ollama server')
        return payload


def main(argv: list[str] | None = None) -> int:
    argparse.ArgumentParser(
        prog='answer_model.py',
        description='Check that the Ollama server at OLLAMA_HOST (default 127.0.0.1:11434) holds the pinned '
                    'build of answer-model.json. Sends no chat request and writes nothing.').parse_args(argv)
    try:
        client = AnswerModel()
        version = client.verify()
    except AnswerModelError as error:
        print(f'answer_model.py: {error}', file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print('answer_model.py: interrupted', file=sys.stderr)
        return 130
    print(f'Ollama {version} at {client.host} has {client.model["ollama_tag"]} '
          f'with the pinned digest {client.model["ollama_digest"]}')
    return 0


if __name__ == '__main__':
    cli.run(main)
