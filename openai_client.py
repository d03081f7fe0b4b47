"""The lab's client for an OpenAI-compatible server (llama.cpp's llama-server, vLLM, LM Studio), at the pin's base_url:
OpenAIClient(model).answer(answer_model.chat_body(model, messages, ...)). answer_check.py pins, checks and records with
it; it has no command of its own. client_for(model) is the client of the API a pin names, this one or Ollama's.

It checks that the server still serves the model its pin names as the server revealed it when pinned (/v1/models, and
llama.cpp's /props: the model file, the chat template's sha256, the build), before the first chat and after every
answer. A reply must name the pinned model and hold what a recording accepts, within a deadline for the whole reply.
Where the server counts a chat request without answering it (llama.cpp's POST /v1/chat/completions/input_tokens),
count() gives that count. A key, where the server needs one, is read only from AI_CONTEXT_EVAL_API_KEY and sent only
in the Authorization header: never written, never in a message. Each failure is one OpenAIError line naming the server.
It writes nothing, and uses no stream, retry, redirect or proxy.
"""
from datetime import date
import hashlib
import os
from urllib.parse import urlsplit

from answer_model import CLOSEST, SERVER_OPTIONS, api, encode
from common import LabError
import ollama_client
from ollama_client import OllamaClient, ServerClient, pull_advice, reply_detail
from text import clipped, excerpt

BASE_URL = 'http://127.0.0.1:8080/v1'  # where llama-server listens by default, in the form the seed's evaluation uses
BASE_URL_VARIABLE = 'AI_CONTEXT_EVAL_BASE_URL'  # pin's default base URL, as the sibling evaluation names it
KEY_VARIABLE = 'AI_CONTEXT_EVAL_API_KEY'  # the key, where a server needs one: read from the environment only
COUNT_PATH = '/chat/completions/input_tokens'  # llama.cpp's count of a chat request, made without answering it
NO_COUNT = (404, 405, 501)  # a server without COUNT_PATH: grading compares usage.prompt_tokens instead
# What /v1/models reveals of a model that stays put while the same server serves it (no creation time, no random id).
MODEL_FIELDS = ('id', 'owned_by', 'root', 'max_model_len', 'meta')
WIRE_NAMES = {'answer': 'choices[0].message.content', 'tool_calls': 'choices[0].message.tool_calls',
              'done_reason': 'choices[0].finish_reason', 'prompt_tokens': 'usage.prompt_tokens',
              'answer_tokens': 'usage.completion_tokens'}  # each field of a recorded answer in a chat completion


class OpenAIError(LabError):
    """The server, or what it serves or answered, is not what the pin needs; the message says what to do."""


def split_base_url(value: str) -> tuple[str, str]:
    """(origin, path prefix) of a base URL: 'http://127.0.0.1:8080/v1' -> ('http://127.0.0.1:8080', '/v1')."""
    try:
        parts = urlsplit(value.strip())
        port = parts.port
    except ValueError as error:  # a port that is not a number, or a bracket left open
        parts, port = None, error
    if parts is None or parts.scheme not in ('http', 'https') or not parts.hostname or parts.query:
        raise OpenAIError(f'base URL {value!r} cannot be read as a server address ({port or "no http(s) host"}): '
                          f'give it like {BASE_URL}')
    host = f'[{parts.hostname}]' if ':' in parts.hostname else parts.hostname
    return f'{parts.scheme}://{host}' + (f':{port}' if port else ''), parts.path.rstrip('/')


def described(server: dict) -> str:
    """What a message says of what a server revealed: ' (file F, build B)' for llama.cpp's, else nothing."""
    return f' (file {server["model_file"]}, build {server["build"]})' if 'build' in server else ''


class OpenAIClient(ServerClient):
    SERVER, ADDRESS, EXAMPLE, ERROR = 'the server', "the pin's base_url", BASE_URL, OpenAIError

    def __init__(self, model: dict):
        origin, self.prefix = split_base_url(model['base_url'])
        super().__init__(model, origin)
        self.counts, self.context = True, None  # whether COUNT_PATH answers; the context the server reveals

    def headers(self) -> dict:
        key = os.environ.get(KEY_VARIABLE)
        if key and not (key.isascii() and key.isprintable() and ' ' not in key):  # the header would quote it
            raise OpenAIError(f'{KEY_VARIABLE} holds a character a key has not (a space, a line end, a control or '
                              'non-ASCII character), so it was not sent: set it to the key alone')
        return {'Authorization': f'Bearer {key}'} if key else {}

    def reveal(self) -> dict:
        """What the server says of the pinned model id: its /v1/models entry, and llama.cpp's /props if it has one."""
        listed = self._call(f'{self.prefix}/models').get('data')
        entries = [entry for entry in listed if isinstance(entry, dict)] if isinstance(listed, list) else []
        entry = next((e for e in entries if e.get('id') == self.model['model_id']), None)
        if entry is None:
            ids = ', '.join(excerpt(e.get('id')) for e in entries[:5]) or 'none'
            raise OpenAIError(f'the server at {self.host} serves no model {self.model["model_id"]!r} ({self.prefix}'
                              f'/models lists {ids}): pin one of those, or start the server with that model')
        revealed = {'model': {field: entry[field] for field in MODEL_FIELDS if field in entry}}
        meta = entry.get('meta') if isinstance(entry.get('meta'), dict) else {}
        status, body, props = self._send('/props', None, ollama_client.CHECK_TIMEOUT)
        if status == 200 and props is not None and isinstance(props.get('build_info'), str):  # llama.cpp's server
            template = props.get('chat_template') if isinstance(props.get('chat_template'), str) else ''
            revealed.update({'model_file': os.path.basename(str(props.get('model_path'))),
                             'chat_template_sha256': hashlib.sha256(template.encode('utf-8')).hexdigest(),
                             'build': props['build_info']})
            settings = props.get('default_generation_settings')
            meta = {'n_ctx': settings.get('n_ctx') if isinstance(settings, dict) else None, **meta}
        self.context = meta.get('n_ctx') or entry.get('max_model_len')
        return revealed

    def checked_model(self, moved: str = 'no chat request was sent') -> dict:
        """The pin, once the server revealed the pinned model as it did when pinned (moved: what another means)."""
        if self.checked is None:
            now, pinned = self.reveal(), self.model['server']
            if differ := [field for field in sorted(set(now) | set(pinned)) if now.get(field) != pinned.get(field)]:
                field = differ[0]
                raise OpenAIError(f'the server at {self.host} no longer serves the pinned model: its {field} is '
                                  f'{excerpt(now.get(field))}, the pin has {excerpt(pinned.get(field))}; answers '
                                  f'from another model need a new pin and a new recording; {moved}')
            self.checked = self.model
        return self.checked

    def holds(self) -> str:
        """What check prints once the server serves the pinned model."""
        self.checked_model()
        return f'the server at {self.host} serves {self.model["model_id"]} as pinned{described(self.model["server"])}'

    def loaded_context_length(self) -> int | None:
        return self.context if type(self.context) is int and self.context > 0 else None

    def count(self, body: dict) -> int | None:
        """The server's count of the request's prompt, made without answering it; None where it cannot count."""
        if not self.counts:
            return None
        path = self.prefix + COUNT_PATH
        status, text, payload = self._send(path, encode(body), ollama_client.CHECK_TIMEOUT)
        if status in NO_COUNT:
            self.counts = False
            return None
        count = self._checked(path, status, text, payload).get('input_tokens')
        if type(count) is not int or count < 0:
            raise OpenAIError(f'the server at {self.host} answered {path} with input_tokens {excerpt(count)}, where '
                              'a count needs a non-negative integer: read the server log')
        return count

    def answer(self, body: dict) -> dict:
        """The pinned model's answer to a chat_body, checked; the model revealed again after it."""
        self.checked_model()
        path = f'{self.prefix}/chat/completions'
        payload = self._call(path, encode(body), ollama_client.CHAT_TIMEOUT)
        choices = payload.get('choices')
        choice = choices[0] if isinstance(choices, list) and choices and isinstance(choices[0], dict) else {}
        message = choice['message'] if isinstance(choice.get('message'), dict) else {}
        usage = payload['usage'] if isinstance(payload.get('usage'), dict) else {}
        calls = message.get('tool_calls') or []
        reply = {'seed': body['seed'], 'answer': '' if message.get('content') is None and calls else
                 message.get('content'), 'tool_calls': calls, 'done_reason': choice.get('finish_reason'),
                 'prompt_tokens': usage.get('prompt_tokens'), 'answer_tokens': usage.get('completion_tokens')}
        self.checked_reply(path, payload.get('model'), body, reply, WIRE_NAMES)
        self.checked = None  # revealed again, so that each answer lies between two reveals of the pinned model
        self.checked_model('it changed while this answer was made, so the answer is not kept')
        return reply

    def pin(self, options: dict, asked: dict, seeds: list[int], counter: str | None) -> dict:
        """A pin of the model id as the server reveals it now, with these options (asked: those given), seeds and
        counter. top_k and repeat_penalty are pinned only for llama.cpp's server, which documents them."""
        if counter in (None, CLOSEST):
            raise OpenAIError('pin --api openai needs --counter NAME, the lab\'s counter of the model the server '
                              'serves: record holds it to the server\'s own count where the server can count')
        server = self.reveal()
        if 'build' not in server and (extra := [option for option in SERVER_OPTIONS if option in asked]):
            raise OpenAIError(f'the server at {self.host} is not llama.cpp\'s (it has no /props), so it documents no '
                              f'{", ".join(extra)}: pin without them')
        kept = ('temperature', 'top_p', *(SERVER_OPTIONS if 'build' in server else ()))
        return {'checked_on': date.today().isoformat(), 'api': 'openai', 'base_url': self.model['base_url'],
                'model_id': self.model['model_id'], 'server': server,
                'options': {option: options[option] for option in kept if option in options}, 'trials': len(seeds),
                'seeds': seeds, 'counter': counter}

    def _checked(self, path: str, status: int, body: str, payload: dict | None) -> dict:
        """payload, unless the reply is an error or not a JSON object; each is one OpenAIError."""
        detail, where = reply_detail(body, payload), f'the server at {self.host}'
        if status in (401, 403):  # the key itself is never quoted
            raise OpenAIError(f'{where} refused {path} ({status}: {detail}): set {KEY_VARIABLE} to its key')
        if status == 404:
            raise OpenAIError(f'{where} has no {path} ({detail}): give the base URL where it serves /chat/completions, '
                              f'such as {BASE_URL}')
        if status == 503:
            raise OpenAIError(f'{where} is busy or still loading the model (503: {detail}): wait, then run again')
        if status == 400:
            raise OpenAIError(f'{where} rejected {path} as a bad request ({detail})')
        if status != 200 or (payload is not None and 'error' in payload):
            raise OpenAIError(f'{where} answered HTTP {status} to {path} ({detail}): read the server log')
        if payload is None:
            raise OpenAIError(f'{where} did not answer {path} with a JSON object ({clipped(body, 80)!r}): check that '
                              'the base URL is an OpenAI-compatible server')
        return payload


def client_for(model: dict):
    """The client of the API the pin names: both answer chat_body's requests, checked, in the same shape."""
    return OpenAIClient(model) if api(model) == 'openai' else OllamaClient(model)


def server_advice(model: dict) -> str:
    """What to start before a recording: the pinned server and model, or Ollama with the pinned build."""
    if api(model) == 'openai':
        return f'the server at {model["base_url"]} with {model["model_id"]}'
    return f'Ollama, {pull_advice(model["ollama_tag"], model["ollama_digest"])}'
